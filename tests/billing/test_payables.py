"""Fleet payables: accepted hours x the fleet's rate, once per job, with the platform margin."""

import threading
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Sum

from billing import tasks
from billing.ledger import balances
from billing.models import (
    BillingFlag,
    FleetPayable,
    LedgerEntry,
    LedgerTransaction,
    PayableDeduction,
)
from billing.services.payables import (
    allocate,
    order_earned,
    order_fleet_payables,
    payables_reconcile,
)
from billing.services.refunds import order_trueup, refund_record_success
from billing.services.sweep import billing_sweep
from orders.models import Order
from tests.billing.payout_helpers import delivered_order
from tests.factories import CompletedJobFactory, FleetFactory, rows_from_before_the_pay_rule

pytestmark = pytest.mark.django_db


def ledger_sum(**filters) -> Decimal:
    return LedgerEntry.objects.filter(**filters).aggregate(s=Sum("amount"))["s"] or Decimal(0)


def test_payables_are_accepted_hours_times_rate_with_the_margin_to_the_platform():
    # given: 10 h ordered for 1000.00; fleet A 3 h accepted at 50/h, fleet B 4.5 h and half a
    # second at 41.1111/h (a rate whose product needs rounding)
    fleet_a = FleetFactory(payout_rate_per_hour=Decimal("50"))
    fleet_b = FleetFactory(payout_rate_per_hour=Decimal("41.1111"))
    order = delivered_order(jobs=[(fleet_a, "10800.000"), (fleet_b, "16200.500")])
    assert order.accepted_hours == Decimal("7.50")
    # when
    payables = order_fleet_payables(order_id=order.id)
    # then: amounts rounded half-up to the cent
    by_fleet = {p.fleet_id: p for p in payables}
    assert by_fleet[fleet_a.id].amount == Decimal("150.00")
    # 16200.5 s x 41.1111 / 3600 = 185.0056...
    assert by_fleet[fleet_b.id].amount == Decimal("185.01")
    # the customer keeps paying 750.00 for 7.5 h (the true-up refunds 250.00), split by time
    assert sum(p.customer_amount for p in payables) == Decimal("750.00")
    assert by_fleet[fleet_a.id].customer_amount == Decimal("299.99")  # 750 x 10800/27000.5
    assert by_fleet[fleet_b.id].customer_amount == Decimal("450.01")
    # the ledger: owed to each fleet, the rest is the platform's margin
    assert balances(fleet=fleet_a) == {
        ("customer_funds", "USD"): Decimal("299.99"),
        ("fleet_payable", "USD"): Decimal("-150.00"),
        ("platform_revenue", "USD"): Decimal("-149.99"),
    }
    assert balances(order=order)[("platform_revenue", "USD")] == Decimal("-414.99")
    assert ledger_sum(order=order) == 0
    assert ledger_sum(fleet=fleet_a) == 0
    assert ledger_sum(fleet=fleet_b) == 0


def test_after_the_trueup_refund_the_order_holds_nothing_for_the_customer(
    django_capture_on_commit_callbacks,
):
    # given: a delivered order whose true-up refund has gone through
    fleet = FleetFactory(payout_rate_per_hour=Decimal("60"))
    order = delivered_order(jobs=[(fleet, "21600")])  # 6 h of 10
    refund = order_trueup(order_id=order.id)
    refund_record_success(refund_id=refund.id, stripe_refund_id="re_test_trueup")
    # when
    order_fleet_payables(order_id=order.id)
    # then: customer funds are used up: 600.00 paid for 6 h, 360.00 to the fleet, 240.00 margin
    assert balances(order=order) == {
        ("customer_funds", "USD"): Decimal("0.00"),
        ("stripe_balance", "USD"): Decimal("600.00"),
        ("fleet_payable", "USD"): Decimal("-360.00"),
        ("platform_revenue", "USD"): Decimal("-240.00"),
    }


def test_payables_are_recorded_once_when_delivery_processing_runs_twice(eager_celery):
    # given
    fleet = FleetFactory()
    order = delivered_order(jobs=[(fleet, "3600"), (fleet, "7200")])
    # when: the service, then the task (a redelivered message), then again
    first = order_fleet_payables(order_id=order.id)
    tasks.order_fleet_payables.delay(str(order.id))
    again = order_fleet_payables(order_id=order.id)
    # then
    assert len(first) == 2
    assert again == []
    assert FleetPayable.objects.count() == 2
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.PAYABLE).count() == 2
    assert balances(fleet=fleet)[("fleet_payable", "USD")] == Decimal("-150.00")


def test_the_delivered_signal_records_payables_next_to_the_trueup(
    eager_celery, django_capture_on_commit_callbacks, monkeypatch
):
    # given: an order in review whose jobs have accepted time
    from billing import receivers

    fleet = FleetFactory()
    order = delivered_order(jobs=[(fleet, "3600")], paid=False)
    Order.objects.filter(pk=order.pk).update(status=Order.Status.IN_REVIEW)
    sent = []
    monkeypatch.setattr(tasks.order_trueup, "delay", lambda order_id: sent.append(order_id))
    # when: the order is delivered
    from orders.services import order_transition

    with django_capture_on_commit_callbacks(execute=True):
        order_transition(order_id=order.id, to_status=Order.Status.DELIVERED, actor_label="t")
    # then: the true-up was enqueued and the payable recorded
    assert receivers  # connected in apps.py
    assert sent == [str(order.id)]
    payable = FleetPayable.objects.get()
    assert payable.amount == Decimal("50.00")


def test_payables_wait_for_delivery_and_skip_jobs_without_accepted_time():
    # given
    fleet = FleetFactory()
    order = delivered_order(jobs=[(fleet, "3600"), (fleet, "0")])
    Order.objects.filter(pk=order.pk).update(status=Order.Status.IN_REVIEW)
    # when / then: not delivered yet
    assert order_fleet_payables(order_id=order.id) == []
    # when delivered
    Order.objects.filter(pk=order.pk).update(status=Order.Status.DELIVERED)
    # then: only the job with accepted time
    assert len(order_fleet_payables(order_id=order.id)) == 1


def test_a_job_whose_fleet_is_unknown_or_paid_in_another_currency_is_flagged():
    # given
    euro_fleet = FleetFactory(currency="EUR")
    with rows_from_before_the_pay_rule():  # the database refuses such an assignment now
        order = delivered_order(jobs=[(euro_fleet, "3600")])
    CompletedJobFactory(order=order, sequence=99, fleet=None, accepted_seconds=Decimal("1800"))
    # when
    payables = order_fleet_payables(order_id=order.id)
    # then
    assert payables == []
    assert BillingFlag.objects.filter(kind=BillingFlag.Kind.PAYABLE_UNRECORDED).count() == 2


def test_the_sweeper_records_payables_a_lost_task_left_behind(eager_celery):
    # given: a delivered order whose payables task was lost
    from datetime import timedelta

    from django.utils import timezone

    fleet = FleetFactory()
    order = delivered_order(jobs=[(fleet, "3600")])
    Order.objects.filter(pk=order.pk).update(updated_at=timezone.now() - timedelta(minutes=10))
    # when
    result = billing_sweep()
    # then
    assert result["payables"] == 1
    assert FleetPayable.objects.filter(order=order).count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_concurrent_delivery_processing_records_each_job_once():
    # given
    fleet_a, fleet_b = FleetFactory(), FleetFactory(payout_rate_per_hour=Decimal("33.3333"))
    order = delivered_order(jobs=[(fleet_a, "5400"), (fleet_b, "9000.001")])
    threads_count = 2
    barrier = threading.Barrier(threads_count)
    errors: list[BaseException] = []

    def process() -> None:
        try:
            barrier.wait(timeout=30)
            order_fleet_payables(order_id=order.id)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    # when
    threads = [threading.Thread(target=process) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=45)
    # then
    assert not errors
    assert FleetPayable.objects.count() == 2
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.PAYABLE).count() == 2
    assert FleetPayable.objects.get(fleet=fleet_b).amount == Decimal("83.33")
    assert ledger_sum(order=order) == 0
    assert ledger_sum(fleet=fleet_a) == 0


def test_allocation_always_adds_up():
    # given / when
    parts = allocate(
        total=Decimal("100.00"),
        weights=[Decimal("1"), Decimal("1"), Decimal("1")],
        currency="USD",
    )
    # then
    assert parts == [Decimal("33.34"), Decimal("33.33"), Decimal("33.33")]
    assert allocate(total=Decimal("7"), weights=[Decimal("2")], currency="JPY") == [Decimal("7")]


@pytest.mark.django_db
def test_the_sweep_reverses_a_payable_whose_exclusion_message_was_lost(eager_celery):
    fleet = FleetFactory()
    order = delivered_order(jobs=[(fleet, "3600")])
    (payable,) = order_fleet_payables(order_id=order.id)
    job = order.jobs.get()
    job.accepted_seconds = Decimal("1800")  # episodes excluded; the broker lost the message
    job.save(update_fields=["accepted_seconds"])
    # when
    result = billing_sweep()
    # then
    assert result["payable_reversals"] == 1
    payable.refresh_from_db()
    assert payable.accepted_seconds == Decimal("1800.000")
    assert PayableDeduction.objects.filter(payable=payable, in_place=True).count() == 1
    assert billing_sweep()["payable_reversals"] == 0  # reversed once
    # a second exclusion whose message is lost too: reversed again, by what it lost
    job.accepted_seconds = Decimal("900")
    job.save(update_fields=["accepted_seconds"])
    assert billing_sweep()["payable_reversals"] == 1
    payable.refresh_from_db()
    assert payable.accepted_seconds == Decimal("900.000")
    assert PayableDeduction.objects.filter(payable=payable, in_place=True).count() == 2
    assert billing_sweep()["payable_reversals"] == 0
    assert ledger_sum(order=order) == 0


@pytest.mark.django_db
def test_a_recollection_jobs_customer_share_is_what_the_reversal_took_to_the_cent():
    """100.00 over 100 s and 231 s is 30.21 + 69.79; 50 s of the first are excluded (15.11 of
    its share reversed) and collected again by a new job: that job's share is 15.11, not the
    15.10 a fresh split of 100.00 over 50, 231 and 50 s would give."""
    fleet = FleetFactory()
    order = delivered_order(
        jobs=[(fleet, "100"), (fleet, "231")],
        hours="0.10",
        total="100.00",
        accepted_hours=Decimal("0.10"),
    )
    first, second = order_fleet_payables(order_id=order.id)
    assert (first.customer_amount, second.customer_amount) == (Decimal("30.21"), Decimal("69.79"))
    job = first.job
    job.accepted_seconds = Decimal("50")
    job.save(update_fields=["accepted_seconds"])
    (deduction,) = payables_reconcile(order_id=order.id)
    assert deduction.customer_amount == Decimal("15.11")
    CompletedJobFactory(
        order=order,
        sequence=3,
        environment_index=0,
        site=job.site,
        fleet=fleet,
        accepted_seconds=Decimal("50"),
        target_hours=Decimal("5.00"),
    )
    # when
    (recollected,) = order_fleet_payables(order_id=order.id)
    # then
    assert recollected.customer_amount == Decimal("15.11")
    standing = FleetPayable.objects.filter(order=order).aggregate(s=Sum("customer_amount"))["s"]
    assert standing == order_earned(order) == Decimal("100.00")
