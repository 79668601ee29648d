"""Property: excluded episodes (a job's accepted time going down after its payable was
recorded, before or after payout), payables, payout runs and Stripe outages in any order keep
the ledger's invariants: every transaction balances, orders and fleets sum to zero, a fleet is
owed exactly its unpaid payables less its unsettled deductions, each paid payout is its
payables less its deductions, and what a fleet earns in the end is its kept time x its rate
(to the cent per reversal)."""

from collections import defaultdict
from decimal import Decimal

import pytest
from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing import stripe_gateway as gateway
from billing.models import FleetPayable, LedgerEntry, PayableDeduction, Payout
from billing.services.payables import order_fleet_payables, payables_reconcile
from billing.services.payouts import payout_run
from orders.pricing import quantize_money
from tests.billing.payout_helpers import delivered_order, fleet_with_account
from tests.factories import rows_from_before_the_pay_rule

pytestmark = pytest.mark.django_db

FLEETS = 2
job = st.tuples(st.integers(0, FLEETS - 1), st.integers(3_600_000, 20 * 3_600_000))
order = st.tuples(
    st.integers(1, 40), st.integers(10_000, 900_000), st.lists(job, min_size=1, max_size=3)
)
step = st.one_of(
    st.sampled_from(["deliver", "payables", "run", "run-down"]),
    # exclude: which delivered order, which of its jobs, the share of its time lost (per mille)
    st.tuples(st.just("exclude"), st.integers(0, 2), st.integers(0, 2), st.integers(1, 1000)),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rates=st.lists(st.integers(10_000, 2_000_000), min_size=FLEETS, max_size=FLEETS),
    orders=st.lists(order, min_size=1, max_size=3),
    steps=st.lists(step, min_size=2, max_size=12),
)
def test_deductions_keep_the_ledger_invariants(db, settings, monkeypatch, rates, orders, steps):
    # Any rate, whatever the order's price: rows as they could be written before the pay rule
    # (fleets migration 0006); tests/billing/test_pay_rule_property.py keeps to the rule.
    savepoint = transaction.savepoint()
    try:
        with rows_from_before_the_pay_rule():
            check_example(settings, monkeypatch, rates, orders, steps)
    finally:
        transaction.savepoint_rollback(savepoint)


def _stripe(monkeypatch, mode: dict) -> dict:
    transfers: dict[str, gateway.TransferResult] = {}

    def transfer_create(**kwargs):
        if mode["value"] == "down":
            raise gateway.GatewayUnavailable("down")
        key = kwargs["idempotency_key"]
        return transfers.setdefault(
            key,
            gateway.TransferResult(
                id=f"tr_{len(transfers)}",
                amount=kwargs["amount"],
                currency=kwargs["currency"],
                destination=kwargs["destination"],
            ),
        )

    def transfer_find(*, transfer_group):
        if mode["value"] == "down":
            raise gateway.GatewayUnavailable("down")
        return transfers.get(transfer_group)

    monkeypatch.setattr(gateway, "transfer_create", transfer_create)
    monkeypatch.setattr(gateway, "transfer_find", transfer_find)
    return transfers


def check_example(settings, monkeypatch, rates, orders, steps):
    # given
    settings.STRIPE_API_KEY = "sk_test_property"
    fleets = [fleet_with_account(payout_rate_per_hour=Decimal(r) / 10000) for r in rates]
    mode = {"value": "ok"}
    _stripe(monkeypatch, mode)
    pending, delivered = list(orders), []
    # when
    for name in ["deliver", "payables", *steps, "payables", "run"]:
        kind = name if isinstance(name, str) else name[0]
        mode["value"] = "down" if kind == "run-down" else "ok"
        if kind == "deliver" and pending:
            hours, cents, jobs = pending.pop()
            delivered.append(
                delivered_order(
                    hours=str(hours),
                    total=str(Decimal(cents) / 100),
                    jobs=[(fleets[f], str(Decimal(ms) / 1000)) for f, ms in jobs],
                )
            )
        elif kind == "payables":
            for o in delivered:
                order_fleet_payables(order_id=o.id)
        elif kind.startswith("run"):
            payout_run(triggered_by="property")
        elif kind == "exclude" and delivered:
            _, which, job_index, per_mille = name
            o = delivered[which % len(delivered)]
            jobs = list(o.jobs.order_by("sequence"))
            j = jobs[job_index % len(jobs)]
            lost = (j.accepted_seconds * per_mille / 1000).quantize(Decimal("0.001"))
            j.accepted_seconds -= lost  # what datasets' exclusion leaves on the job
            j.save(update_fields=["accepted_seconds"])
            payables_reconcile(order_id=o.id)
            payables_reconcile(order_id=o.id)  # a repeat reverses nothing more
    # then: balanced transactions, orders and fleets
    per_txn: dict[int, Decimal] = defaultdict(Decimal)
    for txn, amount in LedgerEntry.objects.values_list("transaction_id", "amount"):
        per_txn[txn] += amount
    assert all(total == 0 for total in per_txn.values())
    for o in delivered:
        assert (LedgerEntry.objects.filter(order=o).aggregate(s=Sum("amount"))["s"] or 0) == 0
    for fleet in fleets:
        entries = LedgerEntry.objects.filter(fleet=fleet)
        assert (entries.aggregate(s=Sum("amount"))["s"] or 0) == 0
        owed = -(entries.filter(account="fleet_payable").aggregate(s=Sum("amount"))["s"] or 0)
        unpaid = _sum(FleetPayable.objects.filter(fleet=fleet).exclude(payout__status="paid"))
        unsettled = _sum(
            PayableDeduction.objects.filter(fleet=fleet, in_place=False).exclude(
                payout__status="paid"
            )
        )
        assert owed == unpaid - unsettled
    # each paid payout = its payables less the deductions it settled
    for payout in Payout.objects.filter(status=Payout.Status.PAID):
        assert _sum(payout.payables.all()) - _sum(payout.deductions.all()) == payout.amount
    # the fleet earns its kept time x rate, to a cent per reversal
    for o in delivered:
        for payable in FleetPayable.objects.filter(order=o).select_related("job"):
            carried = payable.deductions.filter(in_place=False)
            net = payable.amount - _sum(carried)
            kept = min(payable.job.accepted_seconds, payable.job.target_hours * 3600)
            exact = quantize_money(kept * payable.rate_per_hour / 3600, payable.currency)
            assert abs(net - exact) <= Decimal("0.01") * payable.deductions.count()
            assert payable.amount >= 0 and net >= 0


def _sum(rows) -> Decimal:
    return rows.aggregate(s=Sum("amount"))["s"] or Decimal(0)
