"""Content QA on the pages and in the customer API (issue 16): the score, the measurements
and flags behind it, and the content reasons in words, for the customer (order episodes) and
the fleet (job page); the customer API is the order's only."""

import pytest
from django.urls import reverse

from datasets.models import Episode
from marketplace.models import Organization
from orders.models import Order
from tests.datasets.helpers import Collection
from tests.factories import JobFactory, OrderFactory, RobotFactory
from tests.web.conftest import logged_in

pytestmark = pytest.mark.django_db


def episode(job, **fields) -> Episode:
    robot = RobotFactory(site=job.site, fleet=job.site.fleet)
    values = {
        "job": job,
        "order": job.order,
        "fleet": job.site.fleet,
        "site": job.site,
        "robot": robot,
        "operator": "op-9",
        "task_instruction": "t",
        "success": True,
        "fps": 30,
        "size_bytes": 1,
        "sha256": "0" * 64,
        "upload_key": "k",
        "status": "rejected",
        "quality_score": 0.4321,
        "idle_fraction": 0.9,
        "jerk": 1.25,
        "qa_measurements": {
            "idle_fraction": 0.9,
            "action_state_correlation": 0.97,
            "flags": ["idle_head"],
        },
        "qa_failures": [{"code": "idle_episode", "message": "idle for 90 % of the episode"}],
    }
    return Episode.objects.create(**{**values, **fields})


def test_the_customer_sees_score_measurements_and_content_reasons(customer, make_tenant):
    order = OrderFactory(organization=customer.organization, status=Order.Status.IN_COLLECTION)
    job = JobFactory(order=order)
    idle = episode(job)
    page = logged_in(customer).get(reverse("order-episodes-page", args=[order.pk])).content
    text = page.decode()
    assert "0.43" in text and "idle 90 %" in text and "action fit 0.97" in text
    assert "The robot is idle for a while at the start." in text  # the flag, in words
    assert "The robot stands still for too much of the episode." in text  # the reason
    # the API: the order's episodes with the same figures
    body = customer.client.get(f"/api/v1/orders/{order.pk}/episodes").json()
    (row,) = body["results"]
    assert row["id"] == str(idle.id) and row["operator"] == "op-9"
    assert row["quality_score"] == 0.4321 and row["qa_measurements"]["flags"] == ["idle_head"]
    assert "upload_key" not in row and "sha256" not in row
    filtered = customer.client.get(f"/api/v1/orders/{order.pk}/episodes?reason=idle_episode")
    assert len(filtered.json()["results"]) == 1
    # another customer gets a 404, not the episodes
    other = make_tenant(Organization.Kind.CUSTOMER)
    assert other.client.get(f"/api/v1/orders/{order.pk}/episodes").status_code == 404


def test_the_fleet_job_page_shows_the_score(fleet_operator, customer):
    job = Collection(fleet_operator, customer).job
    episode(job, status="accepted", qa_failures=[], quality_score=0.91, idle_fraction=0.02)
    page = logged_in(fleet_operator).get(reverse("job-detail-page", args=[job.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "0.91" in text and "idle 2 %" in text
