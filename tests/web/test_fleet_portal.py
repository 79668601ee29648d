"""The fleet portal through Django's test client: forms go through fleets.services with their
errors next to the fields, CSRF is enforced, offers accepted/declined on the page change
exactly what the fleet API changes, and list pages do not grow their queries with rows."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from fleets.models import Assignment, Fleet, Job, JobEvent, Offer, Robot, Site
from marketplace.models import Membership, Organization
from tests.factories import FleetFactory
from tests.web.fleet_helpers import offered_job, operator_fleet

pytestmark = pytest.mark.django_db


def field_error(html: str, field: str) -> str:
    match = re.search(rf'<div class="field-error" id="id_{field}_error">(.*?)</div>', html, re.S)
    assert match, f"no error slot for {field}"
    return re.sub(r"<[^>]+>", " ", match.group(1)).strip()


FLEET = {
    "name": "Bay 4",
    "status": "active",
    "timezone": "Europe/Berlin",
    "weekly_capacity_hours": "60",
    "payout_rate_per_hour": "42.50",
    "currency": "eur",
    "webhook_url": "",
}


# --- Fleets, sites, robots -----------------------------------------------------------------------


def test_an_operator_registers_a_fleet_a_site_and_a_robot(fleet_operator, fleet_client):
    # the empty states lead the way
    overview = fleet_client.get(reverse("fleet-overview-page")).content.decode()
    assert "No fleet registered yet." in overview
    response = fleet_client.post(reverse("fleet-new-page"), FLEET)
    fleet = Fleet.objects.get(organization=fleet_operator.organization)
    assert response.status_code == 302
    assert response.url == reverse("fleet-detail-page", kwargs={"pk": fleet.pk})
    assert (fleet.name, fleet.timezone, fleet.currency) == ("Bay 4", "Europe/Berlin", "EUR")
    assert fleet.weekly_capacity_hours == Decimal("60")
    detail = fleet_client.get(response.url).content.decode()
    assert "No sites yet." in detail and "Add a site first" in detail
    # no site yet: the robot page says so instead of showing an unusable form
    robot_page = fleet_client.get(reverse("robot-new-page", kwargs={"pk": fleet.pk}))
    assert "Add a site first." in robot_page.content.decode()

    fleet_client.post(
        reverse("site-new-page", kwargs={"pk": fleet.pk}),
        {
            "name": "Kitchen A",
            "kind": "kitchen",
            "description": "",
            "objects_available": "mug, sponge\nplate",
            "active": "on",
        },
    )
    site = Site.objects.get(fleet=fleet)
    assert site.objects_available == ["mug", "plate", "sponge"]

    response = fleet_client.post(
        reverse("robot-new-page", kwargs={"pk": fleet.pk}),
        {
            "name": "Arm 1",
            "site": str(site.pk),
            "embodiment": "franka-fr3",
            "end_effector": "parallel_gripper",
            "sensors": ["wrist-camera"],
            "active": "on",
        },
    )
    assert response.status_code == 302
    robot = Robot.objects.get(fleet=fleet)
    assert (robot.site_id, robot.embodiment.slug, robot.sensor_slugs) == (
        site.pk,
        "franka-fr3",
        ["wrist-camera"],
    )
    detail = fleet_client.get(reverse("fleet-detail-page", kwargs={"pk": fleet.pk}))
    html = detail.content.decode()
    assert "Kitchen A" in html and "Arm 1" in html and "mug, plate, sponge" in html


def test_fleet_form_shows_the_services_refusals_next_to_their_fields(fleet_operator, fleet_client):
    response = fleet_client.post(
        reverse("fleet-new-page"),
        {**FLEET, "timezone": "Mars/Olympus", "webhook_url": "http://10.0.0.1/hook"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "Unknown time zone" in field_error(html, "timezone")
    assert 'id="form-errors"' in html
    assert not Fleet.objects.exists()
    response = fleet_client.post(reverse("fleet-new-page"), {**FLEET, "webhook_url": "http://x.io"})
    assert "https" in field_error(response.content.decode(), "webhook_url")
    response = fleet_client.post(
        reverse("fleet-new-page"), {**FLEET, "weekly_capacity_hours": "-1"}
    )
    assert "zero or more" in field_error(response.content.decode(), "weekly_capacity_hours")
    response = fleet_client.post(reverse("fleet-new-page"), {**FLEET, "currency": "U$D"})
    assert "three-letter" in field_error(response.content.decode(), "currency")
    response = fleet_client.post(reverse("fleet-new-page"), {**FLEET, "name": ""})
    html = response.content.decode()
    assert "required" in field_error(html, "name")
    assert 'aria-invalid="true"' in html
    assert not Fleet.objects.exists()


def test_editing_a_fleet_goes_through_fleet_update(fleet_operator, fleet_client):
    fleet, _, _ = operator_fleet(fleet_operator.organization)
    url = reverse("fleet-edit-page", kwargs={"pk": fleet.pk})
    form = fleet_client.get(url).content.decode()
    assert f'value="{fleet.name}"' in form
    response = fleet_client.post(url, {**FLEET, "status": "paused", "timezone": "Nowhere/X"})
    assert "Unknown time zone" in field_error(response.content.decode(), "timezone")
    fleet.refresh_from_db()
    assert fleet.status == "active"
    response = fleet_client.post(url, {**FLEET, "status": "paused"})
    assert response.status_code == 302
    fleet.refresh_from_db()
    assert (fleet.status, fleet.name) == ("paused", "Bay 4")


def test_editing_sites_and_robots(fleet_operator, fleet_client):
    fleet, site, robot = operator_fleet(fleet_operator.organization)
    second = Site.objects.create(fleet=fleet, name="Aisle 2", kind="retail_aisle")
    response = fleet_client.post(
        reverse("site-edit-page", kwargs={"pk": site.pk}),
        {"name": "Bench 9", "kind": "", "objects_available": ""},
    )
    assert "required" in field_error(response.content.decode(), "kind")
    response = fleet_client.post(
        reverse("site-edit-page", kwargs={"pk": site.pk}),
        {"name": "Bench 9", "kind": "lab_bench", "objects_available": "peg"},
    )
    assert response.status_code == 302
    site.refresh_from_db()
    assert (site.name, site.objects_available, site.active) == ("Bench 9", ["peg"], False)

    url = reverse("robot-edit-page", kwargs={"pk": robot.pk})
    robot_form = {
        "name": "Arm 7",
        "site": str(second.pk),
        "embodiment": "franka-fr3",
        "end_effector": "suction",
        "active": "on",
    }
    response = fleet_client.post(url, {**robot_form, "embodiment": "no-such-robot"})
    assert field_error(response.content.decode(), "embodiment")
    # a site of another fleet is not among the choices
    elsewhere = Site.objects.create(
        fleet=FleetFactory(organization=fleet_operator.organization), name="Far", kind="office"
    )
    response = fleet_client.post(url, {**robot_form, "site": str(elsewhere.pk)})
    assert field_error(response.content.decode(), "site")
    response = fleet_client.post(url, robot_form)
    assert response.status_code == 302
    robot.refresh_from_db()
    assert (robot.name, robot.site_id, robot.end_effector) == ("Arm 7", second.pk, "suction")


def test_members_without_a_managing_role_only_read(make_tenant):
    tenant = make_tenant(Organization.Kind.FLEET_OPERATOR, Membership.Role.BILLING)
    fleet, _, _ = operator_fleet(tenant.organization)
    client = Client()
    client.force_login(tenant.user)
    assert client.get(reverse("fleet-detail-page", kwargs={"pk": fleet.pk})).status_code == 200
    assert (
        "Edit fleet"
        not in client.get(reverse("fleet-detail-page", kwargs={"pk": fleet.pk})).content.decode()
    )
    assert client.get(reverse("fleet-new-page")).status_code == 403
    assert client.post(reverse("fleet-new-page"), FLEET).status_code == 403


def test_fleet_forms_need_the_csrf_token(fleet_operator):
    fleet, _site, robot = operator_fleet(fleet_operator.organization)
    client = Client(enforce_csrf_checks=True)
    client.force_login(fleet_operator.user)
    assert client.post(reverse("fleet-new-page"), FLEET).status_code == 403
    edit = reverse("fleet-edit-page", kwargs={"pk": fleet.pk})
    assert client.post(edit, {**FLEET, "name": "Hijacked"}).status_code == 403
    assert client.post(reverse("site-new-page", kwargs={"pk": fleet.pk}), {}).status_code == 403
    assert client.post(reverse("robot-edit-page", kwargs={"pk": robot.pk}), {}).status_code == 403
    fleet.refresh_from_db()
    assert fleet.name != "Hijacked"
    assert Fleet.objects.count() == 1


# --- Offers --------------------------------------------------------------------------------------


def _state(offer_id):
    """What accepting/declining changes: the offer, its job, the assignment, the job's events."""
    offer = Offer.objects.get(pk=offer_id)
    job = Job.objects.get(pk=offer.job_id)
    assignment = Assignment.objects.filter(offer=offer).first()
    last = JobEvent.objects.filter(job=job).last()
    return {
        "offer": (offer.status, offer.responded_at is not None, offer.decline_reason),
        "job": (job.status, job.fleet_id == offer.fleet_id, job.site_id == offer.site_id),
        "assignment": assignment and (assignment.active, assignment.site_id == offer.site_id),
        "event": (last.from_status, last.to_status, last.reason, last.fleet_id == offer.fleet_id),
    }


def test_accepting_on_the_page_does_what_the_api_does(fleet_operator, fleet_client):
    _fleet, site, _ = operator_fleet(fleet_operator.organization)
    _, by_api = offered_job(site)
    job, by_page = offered_job(site)
    inbox = fleet_client.get(reverse("offer-list-page")).content.decode()
    assert inbox.count('data-countdown-for="') == 2
    assert f'data-expires-at="{by_page.expires_at.isoformat()[:19]}' in inbox

    api = fleet_operator.client.post(f"/api/v1/fleet/offers/{by_api.pk}/accept")
    page = fleet_client.post(reverse("offer-accept-page", kwargs={"pk": by_page.pk}))

    assert api.status_code == 200
    assert page.status_code == 302
    assert page.url == reverse("job-detail-page", kwargs={"pk": job.pk})
    assert _state(by_page.pk) == _state(by_api.pk)
    assert _state(by_page.pk)["offer"][0] == Offer.Status.ACCEPTED
    assert _state(by_page.pk)["job"][0] == Job.Status.ASSIGNED
    job_page = fleet_client.get(page.url).content.decode()
    assert "Offer accepted: the job is yours." in job_page
    assert "Offer accepted." in job_page  # the timeline

    # a second accept is the service's conflict, shown as a message; nothing changes
    before = _state(by_page.pk)
    again = fleet_client.post(reverse("offer-accept-page", kwargs={"pk": by_page.pk}), follow=True)
    assert "Could not accept the offer: This offer is accepted." in again.content.decode()
    assert _state(by_page.pk) == before
    assert Assignment.objects.filter(job=job).count() == 1


def test_declining_on_the_page_does_what_the_api_does(fleet_operator, fleet_client):
    _, site, _ = operator_fleet(fleet_operator.organization)
    _, by_api = offered_job(site)
    _, by_page = offered_job(site)
    fleet_operator.client.post(
        f"/api/v1/fleet/offers/{by_api.pk}/decline", {"reason": "Site busy"}, format="json"
    )
    response = fleet_client.post(
        reverse("offer-decline-page", kwargs={"pk": by_page.pk}), {"reason": "Site busy"}
    )
    assert response.status_code == 302
    assert _state(by_page.pk) == _state(by_api.pk)
    assert _state(by_page.pk)["offer"] == (Offer.Status.DECLINED, True, "Site busy")
    assert _state(by_page.pk)["job"][0] == Job.Status.OPEN
    inbox = fleet_client.get(reverse("offer-list-page")).content.decode()
    assert "Offer declined." in inbox
    assert "No offers waiting." in inbox
    assert "Declined" in inbox  # in the recent answers


def test_accepting_an_expired_offer_shows_the_services_error(fleet_operator, fleet_client):
    _, site, _ = operator_fleet(fleet_operator.organization)
    job, offer = offered_job(site, expires_in=-timedelta(seconds=1))
    response = fleet_client.post(reverse("offer-accept-page", kwargs={"pk": offer.pk}), follow=True)
    assert "Could not accept the offer: This offer has expired." in response.content.decode()
    offer.refresh_from_db()
    assert offer.status == Offer.Status.PENDING  # the sweeper expires it, not the page
    assert not Assignment.objects.filter(job=job).exists()


def test_offer_actions_need_the_csrf_token(fleet_operator):
    _, site, _ = operator_fleet(fleet_operator.organization)
    _, offer = offered_job(site)
    client = Client(enforce_csrf_checks=True)
    client.force_login(fleet_operator.user)
    assert client.post(reverse("offer-accept-page", kwargs={"pk": offer.pk})).status_code == 403
    assert client.post(reverse("offer-decline-page", kwargs={"pk": offer.pk})).status_code == 403
    offer.refresh_from_db()
    assert offer.status == Offer.Status.PENDING


def test_offers_inbox_and_jobs_have_designed_empty_states(fleet_client):
    assert "No offers waiting." in fleet_client.get(reverse("offer-list-page")).content.decode()
    assert "No jobs yet." in fleet_client.get(reverse("job-list-page")).content.decode()


# --- Jobs ----------------------------------------------------------------------------------------


def test_job_pages_show_both_progress_bars_and_the_operators_own_timeline(
    fleet_operator, fleet_client, make_tenant
):
    _, site, _ = operator_fleet(fleet_operator.organization)
    job, offer = offered_job(site)
    rival = FleetFactory(organization=make_tenant(Organization.Kind.FLEET_OPERATOR).organization)
    JobEvent.objects.create(
        job=job,
        from_status="offered",
        to_status="open",
        fleet=rival,
        reason=f"Offer to {rival.name} expired.",
    )
    fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
    Job.objects.filter(pk=job.pk).update(
        progress_hours=Decimal("1.5"), accepted_seconds=Decimal("1800")
    )
    listing = fleet_client.get(reverse("job-list-page")).content.decode()
    assert 'aria-valuenow="75"' in listing  # 1.5 of 2 h reported
    assert 'aria-valuenow="25"' in listing  # 0.5 of 2 h accepted by QA
    detail = fleet_client.get(reverse("job-detail-page", kwargs={"pk": job.pk})).content.decode()
    assert "1.50 / 2 h reported" in detail and "0.50 / 2 h accepted by QA" in detail
    assert "Planned." in detail and "Offer accepted." in detail
    assert rival.name not in detail  # another fleet's part of the story is not shown
    assert "Episodes and QA" in detail and 'id="episodes-empty"' in detail  # none uploaded yet
    filtered = fleet_client.get(reverse("job-list-page"), {"status": "completed"})
    assert "No jobs with this status." in filtered.content.decode()


# --- Query counts --------------------------------------------------------------------------------


@pytest.mark.parametrize("page", ["fleet-overview-page", "offer-list-page", "job-list-page"])
def test_list_pages_do_not_grow_their_queries_with_rows(
    page, fleet_operator, fleet_client, django_assert_max_num_queries
):
    organization = fleet_operator.organization

    def add_rows():
        _fleet, site, _ = operator_fleet(organization)
        _job, offer = offered_job(site)
        fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
        offered_job(site, sequence=2)

    add_rows()
    with django_assert_max_num_queries(12) as one:
        assert fleet_client.get(reverse(page)).status_code == 200
    count = len(one.captured_queries)  # now: the next request resets the query log
    for _ in range(4):
        add_rows()
    with django_assert_max_num_queries(count):
        fleet_client.get(reverse(page))


def test_fleet_detail_queries_do_not_grow_with_sites_and_robots(
    fleet_operator, fleet_client, django_assert_max_num_queries
):
    fleet, _site, _ = operator_fleet(fleet_operator.organization)
    url = reverse("fleet-detail-page", kwargs={"pk": fleet.pk})
    with django_assert_max_num_queries(12) as one:
        fleet_client.get(url)
    from tests.factories import RobotFactory, SiteFactory

    for _ in range(5):
        RobotFactory(site=SiteFactory(fleet=fleet), fleet=fleet)
    with django_assert_max_num_queries(len(one.captured_queries)):
        fleet_client.get(url)


def test_navigation_shows_each_organization_its_own_portal(customer_client, fleet_client):
    fleet_nav = fleet_client.get(reverse("home")).content.decode().split("</nav>")[0]
    customer_nav = customer_client.get(reverse("home")).content.decode().split("</nav>")[0]
    for name in ("fleet-overview-page", "offer-list-page", "job-list-page"):
        assert f'href="{reverse(name)}"' in fleet_nav
        assert f'href="{reverse(name)}"' not in customer_nav
    assert f'href="{reverse("order-list-page")}"' in customer_nav
    assert f'href="{reverse("order-list-page")}"' not in fleet_nav
    offers = fleet_client.get(reverse("offer-list-page")).content.decode()
    assert f'<a href="{reverse("offer-list-page")}" aria-current="page">Offers</a>' in offers
