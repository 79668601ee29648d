"""Coverage and operator figures per order, through the customer API."""

import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from datasets.models import Episode
from orders.models import Order
from tests.factories import FleetFactory, JobFactory, OrderFactory, RobotFactory, SiteFactory

pytestmark = pytest.mark.django_db


def episode(
    job,
    *,
    operator="op-1",
    status=Episode.Status.ACCEPTED,
    seconds="60",
    success=True,
    objects=("cup",),
    failures=(),
):
    robot = job.site.robots.first() or RobotFactory(site=job.site, fleet=job.fleet)
    return Episode.objects.create(
        job=job,
        order=job.order,
        fleet=job.fleet,
        site=job.site,
        robot=robot,
        operator=operator,
        task_instruction="t",
        success=success,
        objects_handled=list(objects),
        fps=30,
        size_bytes=100,
        sha256=uuid.uuid4().hex * 2,  # distinct files (the same file counts once per order)
        upload_key="k",
        status=status,
        frames=int(Decimal(seconds) * 30) if status == Episode.Status.ACCEPTED else None,
        duration_seconds=Decimal(seconds) if status == Episode.Status.ACCEPTED else None,
        qa_failures=[{"code": code, "message": "m"} for code in failures],
        decided_at=timezone.now(),
    )


@pytest.fixture
def order_with_episodes(customer):
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("2"),
        environments=2,
    )
    fleet = FleetFactory()
    kitchen = JobFactory(
        order=order, site=SiteFactory(fleet=fleet, kind="kitchen", name="Kitchen A")
    )
    lab = JobFactory(order=order, site=SiteFactory(fleet=fleet, kind="lab_bench", name="Lab B"))
    episode(kitchen, operator="op-1", seconds="1800", objects=("cup", "plate"))
    episode(kitchen, operator="op-2", seconds="900", success=False, objects=("cup",))
    episode(lab, operator="op-1", seconds="600", objects=("peg",))
    episode(lab, operator="op-2", status=Episode.Status.REJECTED, failures=("timestamp_gap",))
    episode(
        lab,
        operator="op-2",
        status=Episode.Status.REJECTED,
        failures=("non_finite", "timestamp_gap"),
    )
    episode(lab, operator="op-3", status=Episode.Status.UPLOADED)
    order.accepted_seconds = Decimal("3300")
    order.save()
    return order


def test_coverage_reports_environments_operators_and_qa(customer, order_with_episodes):
    body = customer.client.get(f"/api/v1/orders/{order_with_episodes.id}/coverage").json()
    assert body["ordered_hours"] == "2.00" and body["accepted_hours"] == "0.917"
    assert [
        (e["site_name"], e["site_kind"], e["accepted_hours"], e["episodes"])
        for e in body["environments"]
    ] == [
        ("Kitchen A", "kitchen", "0.750", 2),
        ("Lab B", "lab_bench", "0.167", 1),
    ]
    assert [k["site_kind"] for k in body["site_kinds"]] == ["kitchen", "lab_bench"]
    assert body["objects"] == ["cup", "peg", "plate"]
    assert body["episodes"] == {"registered": 0, "uploaded": 1, "accepted": 3, "rejected": 2}
    assert body["qa_rejections"] == {"non_finite": 1, "timestamp_gap": 2}
    assert body["success_rate"] == pytest.approx(2 / 3, abs=1e-4)
    operators = {o["operator"]: o for o in body["operators"]}
    assert set(operators) == {"op-1", "op-2"}  # op-3's episode is not decided yet
    assert (
        operators["op-1"]["acceptance_rate"] == 1.0
        and operators["op-1"]["mean_episode_seconds"] == "1200.0"
    )
    assert operators["op-2"]["acceptance_rate"] == pytest.approx(1 / 3, abs=1e-4)
    assert operators["op-2"]["success_rate"] == 0.0


def test_another_organizations_coverage_is_not_found(
    other_customer, order_with_episodes, fleet_operator
):
    assert (
        other_customer.client.get(f"/api/v1/orders/{order_with_episodes.id}/coverage").status_code
        == 404
    )
    assert (
        fleet_operator.client.get(f"/api/v1/orders/{order_with_episodes.id}/coverage").status_code
        == 403
    )


def test_coverage_costs_the_same_queries_for_few_and_many_episodes(customer, order_with_episodes):
    def count():
        with CaptureQueriesContext(connection) as queries:
            assert (
                customer.client.get(f"/api/v1/orders/{order_with_episodes.id}/coverage").status_code
                == 200
            )
        return len(queries)

    count()  # the key's first use records it (one more query); compare the uses after that
    few = count()
    job = order_with_episodes.jobs.first()
    for index in range(40):
        episode(job, operator=f"op-{index % 7}", seconds="30")
    assert count() == few
