"""The supply check before sale (issue 30): platforms built with too few matching sites (the
warning in the quote API and on the quote page: the shortfall, no ETA) and with enough (an ETA
and its basis), and the waitlist: 409 without it, held jobs with it, staff release."""

import math
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from fleets.models import Fleet, Job, JobEvent, Offer, Scene, SiteObject
from fleets.services.planning import order_plan
from fleets.services.waitlist import waitlist_release
from fleets.supply import REVIEW_DAYS
from marketplace.errors import Conflict
from marketplace.models import User
from orders.models import Embodiment, Order, OrderEvent
from orders.services import order_mark_paid
from tests.factories import FleetFactory, JobFactory, OrderFactory, RobotFactory, SiteFactory

pytestmark = [pytest.mark.django_db, pytest.mark.supply_check]

# Peg insertion (assembly: lab bench or production line sites) on a bimanual ALOHA.
SPEC = {
    "task_type": "peg-insertion",
    "embodiment": "aloha-bimanual",
    "hours": "20",
    "environments": 8,
    "objects_per_environment": 2,
}


def aloha_sites(count: int, *, objects: int = 2, fleet=None, kind="lab_bench", **robot):
    """`count` sites with an active ALOHA each and `objects` registered objects (mugs)."""
    aloha = Embodiment.objects.get(slug="aloha-bimanual")
    sites = []
    for _ in range(count):
        site = SiteFactory(kind=kind, **({"fleet": fleet} if fleet else {}))
        RobotFactory(site=site, embodiment=aloha, **robot)
        for index in range(objects):
            SiteObject.objects.create(
                fleet=site.fleet, site=site, name=f"mug {index}", category="mug"
            )
        sites.append(site)
    return sites


def quote(client, **change):
    response = client.post("/api/v1/quotes", {**SPEC, **change}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_too_few_matching_sites_answer_the_shortfall_and_no_eta(anon_client):
    # given: 2 ALOHA sites on the whole platform, and sites that do not match
    aloha_sites(2)
    RobotFactory(site=SiteFactory(kind="lab_bench"))  # a Franka: another embodiment
    aloha_sites(3, kind="kitchen")  # not a site for assembly
    # when
    supply = quote(anon_client)["supply"]
    # then
    assert supply["coverable"] is False
    assert supply["eta"] is None
    assert supply["shortfalls"][0].startswith("2 matching sites, the plan needs 8")
    assert "aloha-bimanual" in supply["shortfalls"][0]
    assert supply["available_environments"] == 2


def test_enough_sites_answer_an_eta_and_its_basis(anon_client):
    # given: 8 matching sites of one fleet with 40 h a week, nothing else committed
    fleet = FleetFactory(weekly_capacity_hours=Decimal("40"))
    aloha_sites(8, fleet=fleet)
    # when
    supply = quote(anon_client)["supply"]
    # then: 20 h at 40 h a week take 4 days, plus QA and delivery
    assert supply["coverable"] is True and supply["shortfalls"] == []
    today = timezone.localdate()
    assert supply["eta"] == (today + timedelta(days=4 + REVIEW_DAYS)).isoformat()
    assert "8 usable sites of 1 active fleet with 40 h a week" in supply["basis"]
    assert "0 h already committed" in supply["basis"]


def test_hours_already_committed_push_the_eta_back(anon_client):
    fleet = FleetFactory(weekly_capacity_hours=Decimal("40"))
    sites = aloha_sites(8, fleet=fleet)
    aloha = Embodiment.objects.get(slug="aloha-bimanual")
    # 30 h owed on an assigned job of this fleet, 10 h waiting in an open job for this robot
    JobFactory(
        status=Job.Status.ASSIGNED,
        fleet=fleet,
        site=sites[0],
        target_hours=Decimal("35"),
        progress_hours=Decimal("5"),
        embodiment=aloha,
    )
    JobFactory(status=Job.Status.OPEN, site=None, target_hours=Decimal("10"), embodiment=aloha)
    JobFactory(status=Job.Status.OPEN, site=None, target_hours=Decimal("99"))  # another robot's
    # when
    supply = quote(anon_client)["supply"]
    # then: (30 + 10 + 20) h at 40 h a week: 11 days
    days = math.ceil(Decimal(60) * 7 / 40)
    assert supply["eta"] == (timezone.localdate() + timedelta(days=days + REVIEW_DAYS)).isoformat()
    assert "40 h already committed" in supply["basis"]


def test_an_eta_after_the_lead_time_is_a_capacity_shortfall(anon_client):
    aloha_sites(8, fleet=FleetFactory(weekly_capacity_hours=Decimal("2")))
    # when: 20 h at 2 h a week take 70 days; the standard lead time is 28
    supply = quote(anon_client)["supply"]
    # then
    assert supply["coverable"] is False
    assert supply["eta"] == (timezone.localdate() + timedelta(days=70 + REVIEW_DAYS)).isoformat()
    [shortfall] = supply["shortfalls"]
    assert "after the standard lead time of 28 days" in shortfall


def test_sites_without_enough_registered_objects_do_not_count(anon_client):
    aloha_sites(5)
    aloha_sites(3, objects=1)
    # when
    supply = quote(anon_client)["supply"]
    # then
    assert supply["coverable"] is False
    assert supply["shortfalls"][0].startswith(
        "5 matching sites with at least 2 registered active objects, the plan needs 8"
    )


def test_objects_outside_the_categories_do_not_count(anon_client):
    aloha_sites(8)
    # when
    supply = quote(anon_client, object_categories=["tool"])["supply"]
    # then
    assert supply["coverable"] is False
    assert "(tool), the plan needs 8" in supply["shortfalls"][0]


def test_distinct_objects_beyond_those_registered_are_a_shortfall(anon_client):
    # scenes: 2 sites, 4 scenes each, 2 objects each: 8 scenes but only 4 objects
    for site in aloha_sites(2):
        for index in range(4):
            Scene.objects.create(
                fleet=site.fleet, site=site, name=f"scene {index}", arranged_at=timezone.now()
            )
    # when
    by_scene = quote(anon_client, environment_unit="scene")["supply"]
    many = quote(anon_client, environment_unit="scene", distinct_objects=10)["supply"]
    # then
    assert by_scene["coverable"] is True and by_scene["available_environments"] == 8
    assert many["coverable"] is False
    assert many["shortfalls"] == [
        "4 registered objects at the usable sites, the plan needs 10 distinct objects"
    ]


def test_scene_mode_counts_active_scenes(anon_client):
    [site] = aloha_sites(1)
    Scene.objects.create(fleet=site.fleet, site=site, name="a", arranged_at=timezone.now())
    Scene.objects.create(
        fleet=site.fleet, site=site, name="b", arranged_at=timezone.now(), active=False
    )
    supply = quote(anon_client, environment_unit="scene", environments=2)["supply"]
    assert supply["shortfalls"] == [
        "1 active scene at matching sites with at least 2 registered active objects,"
        " the plan needs 2 distinct scenes"
    ]


def test_sensors_inactive_robots_sites_and_paused_fleets_do_not_match(anon_client):
    aloha_sites(2, sensor_slugs=["force-torque", "wrist-camera"])
    aloha_sites(2)  # no sensors
    aloha_sites(1, active=False)
    paused = FleetFactory(status=Fleet.Status.PAUSED)
    aloha_sites(1, fleet=paused)
    for site in aloha_sites(1):
        site.active = False
        site.save()
    # when
    supply = quote(anon_client, sensors=["wrist-camera"])["supply"]
    plain = quote(anon_client)["supply"]
    # then
    assert supply["shortfalls"][0].startswith("2 matching sites, the plan needs 8")
    assert "with wrist-camera" in supply["shortfalls"][0]
    assert plain["shortfalls"][0].startswith("4 matching sites, the plan needs 8")


def test_the_quote_page_warns_with_the_shortfall_and_no_eta(customer):
    aloha_sites(2)
    client = customer.session_client()
    # when
    response = client.post("/orders/new/", {**SPEC, "hours": "20"})
    page = client.get(response["Location"]).content.decode()
    # then
    assert 'data-coverable="no"' in page
    assert "cannot cover this order now" in page
    assert "2 matching sites, the plan needs 8" in page
    assert "No delivery date can be estimated." in page
    assert 'id="supply-eta"' not in page
    assert "Place it on the waitlist" in page


def test_the_quote_page_shows_the_eta_and_its_basis(customer):
    aloha_sites(8, fleet=FleetFactory(weekly_capacity_hours=Decimal("40")))
    client = customer.session_client()
    # when
    response = client.post("/orders/new/", {**SPEC, "hours": "20"})
    page = client.get(response["Location"]).content.decode()
    # then
    eta = (timezone.localdate() + timedelta(days=4 + REVIEW_DAYS)).isoformat()
    assert 'data-coverable="yes"' in page
    assert f'<strong id="supply-eta">{eta}</strong>' in page
    assert "8 usable sites of 1 active fleet" in page


# --- The waitlist -------------------------------------------------------------------------


def test_an_order_from_a_non_coverable_quote_needs_the_waitlist(customer):
    aloha_sites(2)
    quoted = quote(customer.client)
    # when
    refused = customer.client.post("/api/v1/orders", {"quote": quoted["id"]}, format="json")
    placed = customer.client.post(
        "/api/v1/orders", {"quote": quoted["id"], "waitlist": True}, format="json"
    )
    # then
    assert refused.status_code == 409
    body = refused.json()
    assert set(body) == {"code", "message", "fields"}
    assert body["code"] == "not_coverable"
    assert body["fields"]["waitlist"][0].startswith("2 matching sites, the plan needs 8")
    assert "waitlist: true" in body["message"]
    assert placed.status_code == 201, placed.json()
    assert placed.json()["waitlisted"] is True
    order = Order.objects.get(pk=placed.json()["id"])
    assert order.waitlisted and order.supply["coverable"] is False
    assert "Waitlisted" in order.events.get(to_status=Order.Status.AWAITING_PAYMENT).reason


def test_an_order_from_a_specification_is_checked_too(customer):
    aloha_sites(2)
    refused = customer.client.post("/api/v1/orders", SPEC, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "not_coverable"
    assert not Order.objects.exists()
    placed = customer.client.post("/api/v1/orders", {**SPEC, "waitlist": True}, format="json")
    assert placed.status_code == 201 and placed.json()["waitlisted"] is True


def test_a_coverable_order_is_not_waitlisted_even_when_asked(customer):
    aloha_sites(8)
    quoted = quote(customer.client)
    placed = customer.client.post(
        "/api/v1/orders", {"quote": quoted["id"], "waitlist": True}, format="json"
    )
    assert placed.status_code == 201 and placed.json()["waitlisted"] is False


def test_the_order_page_checkbox_places_a_waitlisted_order(customer):
    aloha_sites(2)
    client = customer.session_client()
    step_two = client.post("/orders/new/", {**SPEC, "hours": "20"})["Location"]
    # when: without the checkbox, the refusal is on the page; with it, the order is placed
    refused = client.post(step_two, {"output_format": "lerobot_v3"})
    placed = client.post(step_two, {"output_format": "lerobot_v3", "waitlist": "on"})
    # then
    assert refused.status_code == 200
    assert "2 matching sites, the plan needs 8" in refused.content.decode()
    assert placed.status_code == 302
    order = Order.objects.get(organization=customer.organization)
    assert order.waitlisted
    page = client.get(placed["Location"]).content.decode()
    assert 'id="waitlisted"' in page


def waitlisted_paid_order(customer, **kwargs) -> Order:
    order = OrderFactory(organization=customer.organization, waitlisted=True, **kwargs)
    order_mark_paid(order_id=order.id, actor_label="test")
    order_plan(order_id=order.id)
    return order


def test_planning_holds_every_job_of_a_waitlisted_order(customer):
    order = waitlisted_paid_order(customer)
    # then
    jobs = Job.objects.filter(order=order)
    assert jobs.count() == 4
    assert set(jobs.values_list("status", flat=True)) == {Job.Status.HELD}
    assert all("waitlisted" in event.reason for event in JobEvent.objects.filter(job__order=order))
    order.refresh_from_db()
    assert order.status == Order.Status.IN_COLLECTION


def test_staff_release_opens_and_dispatches_the_held_jobs(
    customer, django_capture_on_commit_callbacks
):
    # given: a waitlisted order for the Franka, and lab bench sites able to take its jobs
    for _ in range(2):
        RobotFactory(site=SiteFactory(kind="lab_bench", fleet=FleetFactory()))
    order = waitlisted_paid_order(customer)
    assert not Offer.objects.exists()
    # when
    with django_capture_on_commit_callbacks(execute=True):
        opened = waitlist_release(order_id=order.id, actor_label="staff:stella")
    # then
    order.refresh_from_db()
    assert not order.waitlisted
    assert len(opened) == 4
    assert not Job.objects.filter(order=order, status=Job.Status.HELD).exists()
    assert Offer.objects.filter(job__order=order).exists()  # dispatched
    event = OrderEvent.objects.filter(order=order).latest("created_at")
    assert event.actor_label == "staff:stella" and "waitlist" in event.reason
    assert (
        JobEvent.objects.filter(
            job__order=order, to_status=Job.Status.OPEN, actor_label="staff:stella"
        ).count()
        == 4
    )
    # and once released, not again
    with pytest.raises(Conflict) as again:
        waitlist_release(order_id=order.id, actor_label="staff:stella")
    assert again.value.code == "not_waitlisted"


def test_a_released_order_with_a_pilot_opens_the_pilot_only(customer):
    order = waitlisted_paid_order(customer, pilot_hours=Decimal("2"))
    opened = waitlist_release(order_id=order.id, actor_label="staff:stella")
    pilot = Job.objects.filter(order=order, is_pilot=True)
    assert sorted(opened) == sorted(str(job.pk) for job in pilot)
    assert set(pilot.values_list("status", flat=True)) == {Job.Status.OPEN}
    assert set(
        Job.objects.filter(order=order, is_pilot=False).values_list("status", flat=True)
    ) == {Job.Status.HELD}


def test_staff_see_and_release_waitlisted_orders_on_the_console(customer, client):
    order = waitlisted_paid_order(customer)
    OrderFactory(organization=customer.organization)  # not waitlisted: not listed
    stella = User.objects.create_user(username="stella", password="x", is_staff=True)
    client.force_login(stella)
    # when
    page = client.get("/staff/").content.decode()
    asked = client.post(f"/staff/orders/{order.pk}/waitlist-release/")
    released = client.post(f"/staff/orders/{order.pk}/waitlist-release/", {"confirmed": "yes"})
    # then
    assert f'id="waitlisted-{order.pk}"' in page
    assert page.count('id="waitlisted-') == 1
    assert asked.status_code == 200 and "Release this order" in asked.content.decode()
    assert released.status_code == 302
    order.refresh_from_db()
    assert not order.waitlisted
    assert not Job.objects.filter(order=order, status=Job.Status.HELD).exists()
    assert f'id="waitlisted-{order.pk}"' not in client.get("/staff/").content.decode()
    assert client.post(f"/staff/orders/{order.pk}/waitlist-release/").status_code == 404


def test_customers_cannot_release(customer):
    order = waitlisted_paid_order(customer)
    response = customer.session_client().post(
        f"/staff/orders/{order.pk}/waitlist-release/", {"confirmed": "yes"}
    )
    assert response.status_code == 403
    order.refresh_from_db()
    assert order.waitlisted
