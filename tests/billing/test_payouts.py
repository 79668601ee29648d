"""Fleet payouts through Stripe Connect transfers (a loopback fake, over HTTP)."""

from decimal import Decimal

import pytest
from django.db.models import Sum

from billing import tasks
from billing.ledger import balances
from billing.models import (
    BillingFlag,
    FleetPayable,
    FleetPayoutAccount,
    LedgerEntry,
    LedgerTransaction,
    Payout,
)
from billing.services.payables import order_fleet_payables
from billing.services.payouts import PayoutsNotConfigured, payout_run
from marketplace.celery import app as celery_app
from tests.billing.payout_helpers import delivered_order, fleet_with_account
from tests.factories import FleetFactory

pytestmark = pytest.mark.django_db


def owed(fleet) -> Decimal:
    return -balances(fleet=fleet).get(("fleet_payable", fleet.currency), Decimal(0))


def deliver(*jobs):
    order = delivered_order(jobs=list(jobs))
    order_fleet_payables(order_id=order.id)
    return order


def test_payout_run_twice_in_a_row_pays_nothing_the_second_time(connect):
    # given: two fleets owed money, one of them from two orders
    fleet_a = fleet_with_account(payout_rate_per_hour=Decimal("50"))
    fleet_b = fleet_with_account(payout_rate_per_hour=Decimal("40"))
    deliver((fleet_a, "3600"), (fleet_b, "7200"))
    deliver((fleet_a, "1800"))
    # when
    first = payout_run(triggered_by="test")
    second = payout_run(triggered_by="test")
    # then: one transfer per fleet, with the amounts owed, to their connected accounts
    sent = {t["destination"]: t for t in connect.sent()}
    assert len(connect.sent()) == 2
    assert sent[fleet_a.payout_account.stripe_account_id]["amount"] == 7500
    assert sent[fleet_b.payout_account.stripe_account_id]["amount"] == 8000
    assert len(first.report["paid"]) == 2
    # and the second run paid nothing and sent nothing
    assert second.report == {"paid": [], "pending": [], "failed": [], "skipped": []}
    assert len(connect.requests) == 2
    assert not FleetPayable.objects.filter(payout__isnull=True).exists()
    assert set(Payout.objects.values_list("status", flat=True)) == {Payout.Status.PAID}
    # every key derives from our payout id
    assert {r["idempotency_key"] for r in connect.requests} == {
        f"payout:{p.id}" for p in Payout.objects.all()
    }
    # the ledger: nothing owed any more, cash left the Stripe balance
    assert owed(fleet_a) == 0
    assert owed(fleet_b) == 0
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.PAYOUT).count() == 2
    for fleet in (fleet_a, fleet_b):
        assert LedgerEntry.objects.filter(fleet=fleet).aggregate(s=Sum("amount"))["s"] == 0


def test_new_payables_after_a_run_are_paid_by_the_next_run_only(connect):
    # given
    fleet = fleet_with_account()
    deliver((fleet, "3600"))
    payout_run(triggered_by="test")
    # when: more work is delivered, and payouts run twice again
    deliver((fleet, "720"))
    payout_run(triggered_by="test")
    payout_run(triggered_by="test")
    # then
    assert [t["amount"] for t in connect.sent()] == [5000, 1000]
    assert owed(fleet) == 0


@pytest.mark.parametrize("outage", ["5xx", "connection refused"])
def test_stripe_down_during_a_payout_marks_nothing_paid_and_a_later_run_pays_once(
    connect, settings, closed_port_url, outage
):
    # given
    fleet = fleet_with_account()
    deliver((fleet, "3600"))
    if outage == "5xx":
        connect.fail_with(500)
    else:
        settings.STRIPE_API_BASE = closed_port_url
    # when
    run = payout_run(triggered_by="test")
    # then: nothing paid, nothing booked; the payout waits to be re-sent with its key
    payout = Payout.objects.get()
    assert payout.status == Payout.Status.PENDING
    assert payout.stripe_transfer_id is None
    assert payout.failure_message
    assert run.report["pending"] and not run.report["paid"]
    assert connect.sent() == []
    assert owed(fleet) == Decimal("50.00")
    assert not LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.PAYOUT).exists()
    # when: Stripe is back; payouts run twice
    connect.fail_with(None)
    settings.STRIPE_API_BASE = connect.url
    payout_run(triggered_by="test")
    payout_run(triggered_by="test")
    # then: paid once, under the same payout and key
    payout.refresh_from_db()
    assert payout.status == Payout.Status.PAID
    assert Payout.objects.count() == 1
    assert len(connect.sent()) == 1
    assert {r["idempotency_key"] for r in connect.requests} == {f"payout:{payout.id}"}
    assert owed(fleet) == 0


@pytest.mark.parametrize("stripe_forgot_the_key", [False, True])
def test_a_response_lost_after_stripe_transferred_does_not_pay_twice(
    connect, monkeypatch, stripe_forgot_the_key
):
    # given: Stripe makes the transfer but our side crashes before committing
    fleet = fleet_with_account()
    deliver((fleet, "3600"))
    from billing.services import payouts

    original = payouts.post_payout

    def crash(payout):
        raise RuntimeError("worker died")

    monkeypatch.setattr(payouts, "post_payout", crash)
    with pytest.raises(RuntimeError):
        payout_run(triggered_by="test")
    assert Payout.objects.get().status == Payout.Status.PENDING
    assert len(connect.sent()) == 1
    if stripe_forgot_the_key:  # idempotency keys expire after 24 hours at Stripe
        connect.by_key.clear()
    # when: the next run re-sends the pending payout
    monkeypatch.setattr(payouts, "post_payout", original)
    payout_run(triggered_by="test")
    # then: the transfer made for this payout is found (by its transfer group), not redone
    payout = Payout.objects.get()
    assert payout.status == Payout.Status.PAID
    assert len(connect.sent()) == 1
    assert payout.stripe_transfer_id == connect.sent()[0]["id"]
    assert owed(fleet) == 0


def test_a_fleet_without_a_connected_account_is_skipped_and_flagged_others_are_paid(connect):
    # given
    paid_fleet = fleet_with_account()
    unpaid_fleet = FleetFactory()
    deliver((paid_fleet, "3600"), (unpaid_fleet, "3600"))
    # when
    run = payout_run(triggered_by="test")
    # then
    assert len(connect.sent()) == 1
    assert connect.sent()[0]["destination"] == paid_fleet.payout_account.stripe_account_id
    assert run.report["skipped"] == [{"fleet": str(unpaid_fleet.id), "reason": "no payout account"}]
    flag = BillingFlag.objects.get(kind=BillingFlag.Kind.NO_PAYOUT_ACCOUNT)
    assert unpaid_fleet.name in flag.message
    assert owed(unpaid_fleet) == Decimal("50.00")
    # when: staff add the account; the next run pays that fleet only
    FleetPayoutAccount.objects.create(fleet=unpaid_fleet, stripe_account_id="acct_added")
    payout_run(triggered_by="test")
    # then
    assert [t["destination"] for t in connect.sent()][1:] == ["acct_added"]
    assert owed(unpaid_fleet) == 0


def test_a_transfer_stripe_refuses_releases_the_payables_and_flags_staff(connect):
    # given: an account Stripe does not know
    connect.accounts = {"acct_good"}
    fleet = FleetFactory()
    account = FleetPayoutAccount.objects.create(fleet=fleet, stripe_account_id="acct_typo")
    deliver((fleet, "3600"))
    # when
    run = payout_run(triggered_by="test")
    # then
    payout = Payout.objects.get()
    assert payout.status == Payout.Status.FAILED
    assert "No such destination" in payout.failure_message
    assert run.report["failed"]
    assert FleetPayable.objects.get().payout is None
    assert BillingFlag.objects.filter(kind=BillingFlag.Kind.PAYOUT_FAILED).count() == 1
    assert owed(fleet) == Decimal("50.00")
    # when: staff fix the account
    account.stripe_account_id = "acct_good"
    account.save()
    payout_run(triggered_by="test")
    # then
    assert [t["destination"] for t in connect.sent()] == ["acct_good"]
    assert owed(fleet) == 0


def test_payouts_refuse_to_run_without_stripe(settings):
    # given
    settings.STRIPE_API_KEY = ""
    fleet = fleet_with_account()
    deliver((fleet, "3600"))
    # when / then
    with pytest.raises(PayoutsNotConfigured):
        payout_run(triggered_by="test")
    assert tasks.payout_run.run() == {"skipped": "Stripe is not configured"}
    assert not Payout.objects.exists()


def test_the_monthly_beat_task_runs_payouts_on_the_billing_queue(connect, settings):
    # given
    fleet = fleet_with_account()
    deliver((fleet, "3600"))
    entry = settings.CELERY_BEAT_SCHEDULE["billing-payouts"]
    route = celery_app.amqp.router.route({}, entry["task"])
    # when
    result = tasks.payout_run.delay().get()
    # then
    assert entry["task"] == "billing.tasks.payout_run"
    assert entry["schedule"].day_of_month == {1}
    assert route["queue"].name == "billing"
    assert len(result["paid"]) == 1
    assert owed(fleet) == 0
