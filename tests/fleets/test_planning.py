from decimal import Decimal
from unittest import mock

import pytest

from fleets.models import Job, JobEvent
from fleets.services.jobs import order_cancel_jobs
from fleets.services.planning import order_plan, order_release_remaining, plan_hours
from orders.models import Order
from orders.services import order_mark_paid
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


def test_plan_hours_splits_over_environments_then_caps_job_size():
    # given 10 h over 2 environments, jobs of at most 4 h
    # when
    plan = plan_hours(
        hours=Decimal("10"), environments=2, pilot_hours=None, max_job_hours=Decimal("4")
    )
    # then each environment gets 5 h, as 2.5 + 2.5
    assert plan == [
        (0, False, Decimal("2.5")),
        (0, False, Decimal("2.5")),
        (1, False, Decimal("2.5")),
        (1, False, Decimal("2.5")),
    ]
    assert sum(hours for _, _, hours in plan) == Decimal("10")


def test_plan_hours_pilot_first_and_total_preserved():
    # given an order with a 1.5 h pilot
    # when
    plan = plan_hours(
        hours=Decimal("7.01"),
        environments=3,
        pilot_hours=Decimal("1.5"),
        max_job_hours=Decimal("4"),
    )
    # then the pilot comes first, and no hundredth of an hour is lost
    assert plan[0] == (0, True, Decimal("1.5"))
    assert all(not pilot for _, pilot, _ in plan[1:])
    assert sum(hours for _, _, hours in plan) == Decimal("7.01")
    assert {env for env, _, _ in plan[1:]} == {0, 1, 2}
    assert all(hours <= 4 for _, _, hours in plan)


def test_paid_signal_only_enqueues_the_plan_task(customer, django_capture_on_commit_callbacks):
    # given an order awaiting payment
    order = OrderFactory(organization=customer.organization)
    # when payment is confirmed
    with (
        mock.patch("fleets.tasks.order_plan.delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        order_mark_paid(order_id=order.id)
    # then the receiver enqueued planning with the order id, and planned nothing itself
    delay.assert_called_once_with(str(order.id))
    assert not Job.objects.exists()


def test_order_plan_creates_jobs_moves_order_to_collection_and_is_idempotent(paid_order):
    # when
    with mock.patch("fleets.tasks.job_dispatch.delay"):
        first = order_plan(order_id=paid_order.id)
        second = order_plan(order_id=paid_order.id)
    # then
    jobs = list(Job.objects.filter(order=paid_order).order_by("sequence"))
    assert len(jobs) == 4  # 10 h, 2 environments, max 4 h per job
    assert sorted(first) == sorted(second) == sorted(str(j.pk) for j in jobs)
    assert all(j.status == Job.Status.OPEN for j in jobs)
    assert jobs[0].embodiment.slug == "franka-fr3"
    assert jobs[0].end_effector == "parallel_gripper"
    assert jobs[0].deadline.date() == paid_order.deadline
    paid_order.refresh_from_db()
    assert paid_order.status == Order.Status.IN_COLLECTION
    assert paid_order.events.filter(to_status=Order.Status.IN_COLLECTION).count() == 1
    assert JobEvent.objects.filter(job__order=paid_order).count() == 4


def test_pilot_jobs_dispatch_first_the_rest_wait_for_release(customer):
    # given a paid order with a 2 h pilot
    order = OrderFactory(
        organization=customer.organization, status=Order.Status.PAID, pilot_hours=Decimal("2")
    )
    with mock.patch("fleets.tasks.job_dispatch.delay"):
        order_plan(order_id=order.id)
    pilot = Job.objects.filter(order=order, is_pilot=True)
    rest = Job.objects.filter(order=order, is_pilot=False)
    assert [j.status for j in pilot] == [Job.Status.OPEN]
    assert {j.status for j in rest} == {Job.Status.HELD}
    # when the customer approves the pilot
    with mock.patch("fleets.tasks.job_dispatch.delay"):
        released = order_release_remaining(order_id=order.id)
    # then the held jobs open, and releasing again changes nothing
    assert {j.status for j in rest.all()} == {Job.Status.OPEN}
    assert sorted(released) == sorted(str(j.pk) for j in rest)
    assert order_release_remaining(order_id=order.id) == []


def test_plan_ignores_orders_that_are_not_paid(customer):
    order = OrderFactory(organization=customer.organization)  # awaiting payment
    assert order_plan(order_id=order.id) == []
    assert not Job.objects.exists()


def test_cancelled_order_cancels_its_jobs(paid_order):
    with mock.patch("fleets.tasks.job_dispatch.delay"):
        order_plan(order_id=paid_order.id)
    # when
    cancelled = order_cancel_jobs(order_id=paid_order.id)
    # then
    assert cancelled == 4
    assert set(Job.objects.values_list("status", flat=True)) == {Job.Status.CANCELLED}
