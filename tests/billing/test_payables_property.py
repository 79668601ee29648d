"""Property: for any orders, jobs, rates, accepted time, payouts and outages, every ledger
transaction balances, balances per order and per fleet sum to zero, each job's payable is
recorded once and equals accepted hours x rate, and each payable is paid at most once."""

from collections import defaultdict
from decimal import Decimal

import pytest
from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing import stripe_gateway as gateway
from billing.models import BillingFlag, FleetPayable, LedgerEntry, Payout
from billing.services.payables import order_earned, order_fleet_payables, order_net_revenue
from billing.services.payouts import payout_run
from orders.pricing import quantize_money
from tests.billing.payout_helpers import delivered_order, fleet_with_account
from tests.factories import FleetFactory, rows_from_before_the_pay_rule

pytestmark = pytest.mark.django_db

FLEETS = 3
job = st.tuples(
    st.integers(0, FLEETS - 1),
    st.integers(1, 40 * 3_600_000),  # accepted milliseconds
)
order = st.tuples(
    st.integers(1, 40),  # hours ordered
    st.integers(100, 900_000),  # total in cents
    st.lists(job, min_size=1, max_size=4),
    st.booleans(),  # paid by card (else outside Stripe)
)
step = st.sampled_from(["deliver", "payables", "payables", "run", "run-down", "run-refused"])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rates=st.lists(st.integers(0, 2_000_000), min_size=FLEETS, max_size=FLEETS),  # 1/10000
    with_account=st.lists(st.booleans(), min_size=FLEETS, max_size=FLEETS),
    orders=st.lists(order, min_size=1, max_size=3),
    steps=st.lists(step, min_size=1, max_size=10),
)
def test_payables_and_payouts_keep_the_ledger_balanced(
    db, settings, monkeypatch, rates, with_account, orders, steps
):
    # Examples share the test's database transaction: each one runs in a savepoint rolled
    # back afterwards, so payouts left pending by one example do not leak into the next.
    # Any rate, whatever the order's price: rows as they could be written before the pay rule
    # (fleets migration 0006), which billing must still keep in balance and hold.
    savepoint = transaction.savepoint()
    try:
        with rows_from_before_the_pay_rule():
            check_example(settings, monkeypatch, rates, with_account, orders, steps)
    finally:
        transaction.savepoint_rollback(savepoint)


def check_example(settings, monkeypatch, rates, with_account, orders, steps):
    # given
    settings.STRIPE_API_KEY = "sk_test_property"
    fleets = [
        (fleet_with_account if has else FleetFactory)(payout_rate_per_hour=Decimal(rate) / 10000)
        for rate, has in zip(rates, with_account, strict=True)
    ]
    transfers: dict[str, gateway.TransferResult] = {}
    mode = {"value": "ok"}

    def transfer_create(**kwargs):  # Stripe's idempotency, in memory
        if mode["value"] == "down":
            raise gateway.GatewayUnavailable("down")
        if mode["value"] == "refused":
            raise gateway.GatewayError("refused")
        key = kwargs["idempotency_key"]
        transfers.setdefault(
            key,
            gateway.TransferResult(
                id=f"tr_{len(transfers)}",
                amount=kwargs["amount"],
                currency=kwargs["currency"],
                destination=kwargs["destination"],
            ),
        )
        return transfers[key]

    def transfer_find(*, transfer_group):
        if mode["value"] == "down":
            raise gateway.GatewayUnavailable("down")
        return transfers.get(transfer_group)  # keys are "payout:<id>", like the groups

    monkeypatch.setattr(gateway, "transfer_create", transfer_create)
    monkeypatch.setattr(gateway, "transfer_find", transfer_find)
    pending = list(orders)
    delivered = []
    # when
    for name in ["deliver", *steps, "payables", "run"]:
        mode["value"] = {"run-down": "down", "run-refused": "refused"}.get(name, "ok")
        if name == "deliver" and pending:
            hours, cents, jobs, paid = pending.pop()
            delivered.append(
                delivered_order(
                    hours=str(hours),
                    total=str(Decimal(cents) / 100),
                    jobs=[(fleets[f], str(Decimal(ms) / 1000)) for f, ms in jobs],
                    paid=paid,
                )
            )
        elif name == "payables":
            for o in delivered:
                order_fleet_payables(order_id=o.id)
        elif name.startswith("run"):
            payout_run(triggered_by="property")
    # then: every job with accepted time has exactly one payable = accepted hours x rate
    for o in delivered:
        for j in o.jobs.select_related("fleet"):
            payable = FleetPayable.objects.get(job=j)
            expected = quantize_money(
                j.accepted_seconds * j.fleet.payout_rate_per_hour / 3600, "USD"
            )
            assert payable.amount == expected
        shares = FleetPayable.objects.filter(order=o).aggregate(s=Sum("customer_amount"))["s"]
        assert shares == order_earned(o)
    # every transaction balances; so do orders and fleets
    per_txn: dict[int, Decimal] = defaultdict(Decimal)
    for txn, amount in LedgerEntry.objects.values_list("transaction_id", "amount"):
        per_txn[txn] += amount
    assert all(total == 0 for total in per_txn.values())
    for o in delivered:
        assert (LedgerEntry.objects.filter(order=o).aggregate(s=Sum("amount"))["s"] or 0) == 0
    for fleet, has in zip(fleets, with_account, strict=True):
        entries = LedgerEntry.objects.filter(fleet=fleet)
        assert (entries.aggregate(s=Sum("amount"))["s"] or 0) == 0
        owed = -(entries.filter(account="fleet_payable").aggregate(s=Sum("amount"))["s"] or 0)
        unpaid = (
            FleetPayable.objects.filter(fleet=fleet)
            .exclude(payout__status=Payout.Status.PAID)
            .aggregate(s=Sum("amount"))["s"]
            or 0
        )
        assert owed == unpaid
        # the last run had Stripe up: everyone with an account is paid in full, but for
        # payables held because their order's payables exceed its net revenue
        held = (
            FleetPayable.objects.filter(fleet=fleet)
            .exclude(hold_reason="")
            .aggregate(s=Sum("amount"))["s"]
            or 0
        )
        if has:
            assert unpaid == held
    # the ledger invariant: per order, fleet payables never exceed net revenue without a
    # flag, and then none of them was paid out
    for o in delivered:
        payables = FleetPayable.objects.filter(order=o)
        total = payables.aggregate(s=Sum("amount"))["s"] or 0
        if total > order_net_revenue(o):
            assert BillingFlag.objects.filter(
                kind=BillingFlag.Kind.PAYABLES_EXCEED_REVENUE, order=o
            ).exists()
            assert not payables.filter(payout__status=Payout.Status.PAID).exists()
            assert not payables.filter(hold_reason="").exists()
    # each payable paid at most once: one transfer per paid payout, payout = its payables
    for payout in Payout.objects.filter(status=Payout.Status.PAID):
        assert payout.payables.aggregate(s=Sum("amount"))["s"] == payout.amount
        assert transfers[f"payout:{payout.id}"].id == payout.stripe_transfer_id
    assert len(transfers) == Payout.objects.filter(status=Payout.Status.PAID).count()
