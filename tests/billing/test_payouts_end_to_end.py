"""Payouts end to end over HTTP: a card payment at localstripe, delivery (true-up refund and
payables), then payout runs through the Connect fake; and two runs at once."""

import threading
from decimal import Decimal

import pytest
from django.db import connection

from billing.ledger import balances
from billing.models import FleetPayable, Payout, Refund
from billing.services.payables import order_fleet_payables
from billing.services.payouts import payout_run
from orders.models import Order
from orders.services import order_transition
from tests.billing.payout_helpers import delivered_order, fleet_with_account
from tests.factories import CompletedJobFactory, SiteFactory


def test_a_paid_order_delivered_pays_its_fleet_once(
    paid_order, connect, django_capture_on_commit_callbacks
):
    # given: 10 h paid by card (1000.00); the fleet's job has 7.5 h accepted at 50/h
    order, _, _ = paid_order()
    fleet = fleet_with_account(payout_rate_per_hour=Decimal("50"))
    CompletedJobFactory(
        order=order,
        site=SiteFactory(fleet=fleet),
        accepted_seconds=Decimal("27000"),
        target_hours=Decimal("7.50"),
    )
    Order.objects.filter(pk=order.pk).update(
        accepted_seconds=Decimal("27000"), accepted_hours=Decimal("7.50")
    )
    # when: delivered (signal -> true-up and payables tasks), then payouts run twice
    with django_capture_on_commit_callbacks(execute=True):
        for status in (Order.Status.IN_COLLECTION, Order.Status.IN_REVIEW, Order.Status.DELIVERED):
            order_transition(order_id=order.id, to_status=status, actor_label="test")
    payout_run(triggered_by="test")
    payout_run(triggered_by="test")
    # then: 250.00 refunded to the card, 375.00 transferred to the fleet, 375.00 margin
    assert Refund.objects.get().status == Refund.Status.SUCCEEDED
    assert FleetPayable.objects.get().amount == Decimal("375.00")
    assert [t["amount"] for t in connect.sent()] == [37500]
    assert balances(order=order) == {
        ("stripe_balance", "USD"): Decimal("750.00"),
        ("customer_funds", "USD"): Decimal("0.00"),
        ("fleet_payable", "USD"): Decimal("-375.00"),
        ("platform_revenue", "USD"): Decimal("-375.00"),
    }
    assert balances(fleet=fleet) == {
        ("customer_funds", "USD"): Decimal("750.00"),
        ("fleet_payable", "USD"): Decimal("0.00"),
        ("platform_revenue", "USD"): Decimal("-375.00"),
        ("stripe_balance", "USD"): Decimal("-375.00"),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_two_payout_runs_at_once_pay_each_payable_once(connect):
    # given
    fleets = [fleet_with_account() for _ in range(3)]
    order = delivered_order(jobs=[(fleet, "3600") for fleet in fleets])
    order_fleet_payables(order_id=order.id)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait(timeout=30)
            payout_run(triggered_by="thread")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    # when
    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=45)
    # then
    assert not errors
    assert len(connect.sent()) == 3
    assert Payout.objects.filter(status=Payout.Status.PAID).count() == 3
    assert not FleetPayable.objects.exclude(payout__status=Payout.Status.PAID).exists()
