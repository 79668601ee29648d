"""Issue 7, item 4: the dispatch admin (fleets/admin.py) loads for staff: every fleets model's
list (with the dispatch board filters) and change pages, with data in them."""

import re

import pytest
from django.urls import reverse

from fleets.models import Assignment, Bid, Fleet, Job, JobEvent, Offer, Robot, Site
from tests.web.fleet_helpers import offered_job, operator_fleet

pytestmark = pytest.mark.django_db

MODELS = [Fleet, Site, Robot, Job, Offer, Assignment, Bid]


@pytest.fixture
def dispatch_data(make_tenant, fleet_operator):
    _, site, _ = operator_fleet(fleet_operator.organization)
    job, offer = offered_job(site)
    fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
    offered_job(site, sequence=2)
    return {"job": job, "offer": offer, "site": site}


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_fleets_admin_lists_and_change_pages_load(model, admin_client, dispatch_data):
    meta = model._meta
    changelist = admin_client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
    assert changelist.status_code == 200
    first = model.objects.first()
    if first is not None:
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[first.pk])
        assert admin_client.get(url).status_code == 200


def test_dispatch_board_filters_load(admin_client, dispatch_data):
    url = reverse("admin:fleets_job_changelist")
    page = admin_client.get(url).content.decode()
    boards = sorted(set(re.findall(r'href="(\?[^"]*board=[^"]*)"', page)))
    assert boards  # the dispatch board's choices are offered
    for query in boards:
        assert admin_client.get(url + query.replace("&amp;", "&")).status_code == 200
    job = dispatch_data["job"]
    change = admin_client.get(reverse("admin:fleets_job_change", args=[job.pk])).content.decode()
    assert "Offer accepted." in change  # the job's events inline
    assert JobEvent.objects.filter(job=job).exists()


def test_fleets_admin_is_for_staff_only(fleet_operator):
    from django.test import Client

    client = Client()
    client.force_login(fleet_operator.user)
    response = client.get(reverse("admin:fleets_job_changelist"))
    assert response.status_code == 302
    assert reverse("admin:login") in response.url
