from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from fleets.models import Assignment, Bid, Fleet, Job, Offer, Robot, Site
from fleets.services.dispatch import job_dispatch
from fleets.services.planning import order_plan
from marketplace.models import Membership, Organization
from orders.models import Order
from tests.factories import FleetFactory, OrderFactory, RobotFactory, SiteFactory

pytestmark = pytest.mark.django_db

FLEET = {
    "name": "Bay 1",
    "timezone": "Europe/Berlin",
    "weekly_capacity_hours": "120",
    "payout_rate_per_hour": "45.50",
    "webhook_url": "https://fleet.example.com/hooks",
}


def snapshot():
    return (
        Fleet.objects.count(),
        Site.objects.count(),
        Robot.objects.count(),
        list(Offer.objects.values_list("id", "status")),
        list(Job.objects.values_list("id", "status")),
        Assignment.objects.count(),
    )


@pytest.fixture
def fleet(fleet_operator):
    return FleetFactory(organization=fleet_operator.organization)


@pytest.fixture
def site(fleet):
    return SiteFactory(fleet=fleet)


def offered_job(customer, site, *, expires_in=timedelta(hours=1)):
    order = OrderFactory(organization=customer.organization, status=Order.Status.PAID)
    RobotFactory(site=site, fleet=site.fleet)
    order_plan(order_id=order.id)
    job = Job.objects.filter(order=order).order_by("sequence").first()
    job_dispatch(job_id=job.pk)
    offer = Offer.objects.get(job=job)
    Offer.objects.filter(pk=offer.pk).update(expires_at=timezone.now() + expires_in)
    return Offer.objects.get(pk=offer.pk)


# --- Registry ------------------------------------------------------------------------------


def test_create_fleet_returns_the_signing_secret_once(fleet_operator):
    # when
    response = fleet_operator.client.post("/api/v1/fleet/fleets", FLEET, format="json")
    # then
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["webhook_secret"].startswith("whsec_")
    assert body["quality_score"] == "0.500"
    listed = fleet_operator.client.get("/api/v1/fleet/fleets").json()["results"]
    assert [f["id"] for f in listed] == [body["id"]]
    assert "webhook_secret" not in listed[0]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("weekly_capacity_hours", "-1"),
        ("payout_rate_per_hour", "-0.01"),
        ("webhook_url", "not a url"),
        ("webhook_url", "ftp://fleet.example.com/x"),
        ("webhook_url", "http://fleet.example.com/plain-http"),
        ("webhook_url", "https://127.0.0.1/internal"),
        ("timezone", "Mars/Olympus"),
        ("status", "exploding"),
        ("name", ""),
        ("currency", "dollars"),
    ],
)
def test_bad_fleet_fields_are_400_and_nothing_is_created(fleet_operator, field, value):
    # given
    before = snapshot()
    # when
    response = fleet_operator.client.post(
        "/api/v1/fleet/fleets", {**FLEET, field: value}, format="json"
    )
    # then
    assert response.status_code == 400
    body = response.json()
    assert body["code"] in {
        "invalid",
        "invalid_webhook_url",
        "rate_out_of_range",
        "unknown_currency",
    }
    assert field in body["fields"]
    assert snapshot() == before


def test_update_fleet_validates_and_keeps_quality_read_only(fleet_operator, fleet):
    url = f"/api/v1/fleet/fleets/{fleet.pk}"
    bad = fleet_operator.client.patch(url, {"weekly_capacity_hours": "-5"}, format="json")
    assert bad.status_code == 400
    ok = fleet_operator.client.patch(
        url, {"weekly_capacity_hours": "10", "quality_score": "1"}, format="json"
    )
    assert ok.status_code == 200
    fleet.refresh_from_db()
    assert fleet.weekly_capacity_hours == Decimal("10")
    assert fleet.quality_score == Decimal("0.800")


def test_site_and_robot_crud(fleet_operator, fleet):
    # when
    site = fleet_operator.client.post(
        "/api/v1/fleet/sites",
        {
            "fleet": str(fleet.pk),
            "name": "Kitchen A",
            "kind": "kitchen",
            "objects_available": ["mug"],
        },
        format="json",
    )
    assert site.status_code == 201, site.json()
    robot = fleet_operator.client.post(
        "/api/v1/fleet/robots",
        {
            "site": site.json()["id"],
            "name": "R1",
            "embodiment": "franka-fr3",
            "end_effector": "parallel_gripper",
            "sensors": ["wrist-camera", "tactile"],
        },
        format="json",
    )
    # then
    assert robot.status_code == 201, robot.json()
    assert robot.json()["sensors"] == ["tactile", "wrist-camera"]
    assert robot.json()["fleet"] == str(fleet.pk)
    patched = fleet_operator.client.patch(
        f"/api/v1/fleet/robots/{robot.json()['id']}", {"sensors": ["force-torque"]}, format="json"
    )
    assert patched.status_code == 200
    assert patched.json()["sensors"] == ["force-torque"]
    deleted = fleet_operator.client.delete(f"/api/v1/fleet/sites/{site.json()['id']}")
    assert deleted.status_code == 204
    assert Site.objects.get(pk=site.json()["id"]).active is False


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("embodiment", "t-800", "unknown_embodiment"),
        ("end_effector", "laser", "unknown_end_effector"),
        ("sensors", ["x-ray-vision"], "unknown_sensor"),
    ],
)
def test_unknown_capability_is_400_and_nothing_changes(fleet_operator, site, field, value, code):
    payload = {
        "site": str(site.pk),
        "name": "R1",
        "embodiment": "franka-fr3",
        "end_effector": "parallel_gripper",
        "sensors": [],
        field: value,
    }
    before = snapshot()
    response = fleet_operator.client.post("/api/v1/fleet/robots", payload, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == code
    assert field in response.json()["fields"]
    assert snapshot() == before


def test_unknown_site_kind_is_400(fleet_operator, fleet):
    before = snapshot()
    response = fleet_operator.client.post(
        "/api/v1/fleet/sites", {"fleet": str(fleet.pk), "name": "X", "kind": "moon"}, format="json"
    )
    assert response.status_code == 400
    assert "kind" in response.json()["fields"]
    assert snapshot() == before


def test_foreign_objects_are_404(fleet_operator, make_tenant):
    # given another operator's fleet, site and robot
    other = make_tenant(Organization.Kind.FLEET_OPERATOR)
    foreign_site = SiteFactory(fleet=FleetFactory(organization=other.organization))
    foreign_robot = RobotFactory(site=foreign_site)
    client = fleet_operator.client
    # then
    assert client.get(f"/api/v1/fleet/fleets/{foreign_site.fleet_id}").status_code == 404
    assert client.get(f"/api/v1/fleet/sites/{foreign_site.pk}").status_code == 404
    assert client.get(f"/api/v1/fleet/robots/{foreign_robot.pk}").status_code == 404
    assert client.get("/api/v1/fleet/fleets").json()["results"] == []
    response = client.post(
        "/api/v1/fleet/sites",
        {"fleet": str(foreign_site.fleet_id), "name": "X", "kind": "kitchen"},
        format="json",
    )
    assert response.status_code == 404
    response = client.post(
        "/api/v1/fleet/robots",
        {
            "site": str(foreign_site.pk),
            "name": "X",
            "embodiment": "franka-fr3",
            "end_effector": "parallel_gripper",
        },
        format="json",
    )
    assert response.status_code == 404
    assert Site.objects.count() == 1 and Robot.objects.count() == 1


@pytest.mark.parametrize(
    "path",
    ["fleets", "sites", "robots", "offers", "jobs", "jobs/open"],
)
def test_customer_keys_get_403(customer, path):
    response = customer.client.get(f"/api/v1/fleet/{path}")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


def test_billing_role_reads_but_cannot_take_work(make_tenant):
    billing = make_tenant(Organization.Kind.FLEET_OPERATOR, Membership.Role.BILLING)
    assert billing.client.get("/api/v1/fleet/fleets").status_code == 200
    assert billing.client.post("/api/v1/fleet/fleets", FLEET, format="json").status_code == 403


# --- Offers, bids, jobs ------------------------------------------------------------------------


def test_list_and_accept_an_offer(fleet_operator, customer, site):
    offer = offered_job(customer, site)
    # when
    listed = fleet_operator.client.get("/api/v1/fleet/offers")
    accepted = fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
    # then
    assert [o["id"] for o in listed.json()["results"]] == [str(offer.pk)]
    assert listed.json()["results"][0]["job"]["embodiment"] == "franka-fr3"
    assert accepted.status_code == 200, accepted.json()
    assert accepted.json()["offer"] == str(offer.pk)
    job = Job.objects.get(pk=offer.job_id)
    assert job.status == Job.Status.ASSIGNED
    jobs = fleet_operator.client.get("/api/v1/fleet/jobs").json()["results"]
    assert [j["id"] for j in jobs] == [str(job.pk)]
    # a second accept of the same offer is a clear conflict
    again = fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
    assert again.status_code == 409
    assert again.json()["code"] == "offer_not_pending"


def test_a_job_tells_the_fleet_its_orders_collection_plan(fleet_operator, customer, site):
    offer = offered_job(customer, site)
    Order.objects.filter(pk=offer.job.order_id).update(
        cells_planned=True,
        environment_unit="scene",
        objects_per_environment=3,
        distinct_objects=5,
        object_categories=["mug", "bowl"],
        calibrated_cameras=True,
    )
    # when
    listed = fleet_operator.client.get("/api/v1/fleet/offers").json()["results"]
    # then: what the agent needs to fill the cells and pass the plan's QA
    assert listed[0]["job"]["plan"] == {
        "cells_planned": True,
        "environment_unit": "scene",
        "objects_per_environment": 3,
        "distinct_objects": 5,
        "object_categories": ["mug", "bowl"],
        "calibrated_cameras": True,
        "cell_max_share_percent": "150.00",
        "shortfall": None,
    }


def test_accepting_an_expired_offer_is_409_and_changes_nothing(fleet_operator, customer, site):
    offer = offered_job(customer, site, expires_in=-timedelta(seconds=1))
    before = snapshot()
    # when
    response = fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
    # then
    assert response.status_code == 409
    assert response.json()["code"] == "offer_expired"
    assert snapshot() == before


def test_accepting_a_foreign_offer_is_404_and_changes_nothing(
    fleet_operator, customer, make_tenant
):
    other = make_tenant(Organization.Kind.FLEET_OPERATOR)
    foreign_site = SiteFactory(fleet=FleetFactory(organization=other.organization))
    offer = offered_job(customer, foreign_site)
    before = snapshot()
    # when
    accept = fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
    decline = fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/decline")
    # then
    assert accept.status_code == 404 and decline.status_code == 404
    assert snapshot() == before
    assert fleet_operator.client.get("/api/v1/fleet/offers").json()["results"] == []


def test_decline_an_offer(fleet_operator, customer, site):
    offer = offered_job(customer, site)
    response = fleet_operator.client.post(
        f"/api/v1/fleet/offers/{offer.pk}/decline", {"reason": "robot down"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["status"] == "declined"
    assert Job.objects.get(pk=offer.job_id).status == Job.Status.OPEN


def test_progress_is_a_heartbeat_and_starts_the_job(fleet_operator, customer, site):
    offer = offered_job(customer, site)
    fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
    # when
    response = fleet_operator.client.post(
        f"/api/v1/fleet/jobs/{offer.job_id}/progress", {"progress_hours": "0.5"}, format="json"
    )
    too_much = fleet_operator.client.post(
        f"/api/v1/fleet/jobs/{offer.job_id}/progress", {"progress_hours": "99"}, format="json"
    )
    # then
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "in_progress"
    assert response.json()["progress_hours"] == "0.50"
    assert too_much.status_code == 400
    site.fleet.refresh_from_db()
    assert site.fleet.last_heartbeat_at is not None
    heartbeat = fleet_operator.client.post(f"/api/v1/fleet/fleets/{site.fleet_id}/heartbeat")
    assert heartbeat.status_code == 200


def test_bid_on_an_open_job(fleet_operator, customer, site):
    order = OrderFactory(organization=customer.organization, status=Order.Status.PAID)
    RobotFactory(site=site, fleet=site.fleet)
    order_plan(order_id=order.id)
    job = Job.objects.filter(order=order).first()
    listed = fleet_operator.client.get("/api/v1/fleet/jobs/open").json()["results"]
    assert str(job.pk) in {j["id"] for j in listed}
    assert not {"order", "fleet", "site"} & set(listed[0])  # nothing of the customer's order
    payload = {
        "site": str(site.pk),
        "price_per_hour": "30",
        "earliest_finish": (job.deadline - timedelta(days=2)).isoformat(),
    }
    # when
    response = fleet_operator.client.post(
        f"/api/v1/fleet/jobs/{job.pk}/bids", payload, format="json"
    )
    late = fleet_operator.client.post(
        f"/api/v1/fleet/jobs/{job.pk}/bids",
        {**payload, "earliest_finish": (job.deadline + timedelta(days=1)).isoformat()},
        format="json",
    )
    negative = fleet_operator.client.post(
        f"/api/v1/fleet/jobs/{job.pk}/bids", {**payload, "price_per_hour": "-1"}, format="json"
    )
    # then
    assert response.status_code == 201, response.json()
    assert late.status_code == 400
    assert negative.status_code == 400
    assert Bid.objects.count() == 1


def test_site_update_validates_and_cannot_change_fleet(fleet_operator, site):
    other_fleet = FleetFactory(organization=fleet_operator.organization)
    url = f"/api/v1/fleet/sites/{site.pk}"
    moved = fleet_operator.client.patch(url, {"fleet": str(other_fleet.pk)}, format="json")
    bad_kind = fleet_operator.client.patch(url, {"kind": "volcano"}, format="json")
    ok = fleet_operator.client.patch(url, {"kind": "kitchen", "name": "K2"}, format="json")
    assert moved.status_code == 400 and "fleet" in moved.json()["fields"]
    assert bad_kind.status_code == 400
    assert ok.status_code == 200
    site.refresh_from_db()
    assert (site.fleet_id, site.kind, site.name) == (site.fleet_id, "kitchen", "K2")
    assert site.fleet_id != other_fleet.pk
