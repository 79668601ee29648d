"""Property: for any sequence of payments and refunds the ledger balances and no refund
exceeds what was charged."""

import uuid
from collections import defaultdict
from decimal import Decimal

import pytest
from django.db.models import Sum
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from billing import stripe_gateway as gateway
from billing.models import LedgerEntry, LedgerTransaction, Refund
from billing.services.payments import payment_record_success
from billing.services.refunds import refund_record_failure, refund_record_success, refund_request
from billing.services.stripe_events import _record_stripe_refund
from marketplace.errors import Conflict
from orders.pricing import quantize_money
from tests.billing.factories import PaymentFactory
from tests.factories import OrderFactory, OrganizationFactory

pytestmark = pytest.mark.django_db

ORDERS = 3
operation = st.one_of(
    st.tuples(st.just("pay"), st.integers(0, ORDERS - 1)),
    # A refund issued in Stripe's dashboard, learnt from charge.refunded.
    # Amounts are per mille of the order's total: up to 1.3x, so some must be refused.
    st.tuples(st.just("external"), st.integers(0, ORDERS - 1), st.integers(1, 1300)),
    st.tuples(
        st.just("refund"),
        st.integers(0, ORDERS - 1),
        st.integers(1, 1300),
        st.sampled_from(["succeed", "fail", "pending"]),
    ),
)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    totals=st.lists(st.integers(100, 120_000), min_size=ORDERS, max_size=ORDERS),
    paid_first=st.lists(st.booleans(), min_size=ORDERS, max_size=ORDERS),
    operations=st.lists(operation, min_size=4, max_size=30),
)
def test_ledger_balances_and_refunds_never_exceed_charges(db, totals, paid_first, operations):
    # given
    organization = OrganizationFactory()
    orders = [
        OrderFactory(organization=organization, total=Decimal(cents) / 100) for cents in totals
    ]
    payments = [PaymentFactory(order=order) for order in orders]
    paid = [False] * ORDERS
    reserved = [Decimal("0")] * ORDERS
    refund_count = 0
    outcomes: list[str] = []
    # when
    for op in [("pay", i) for i, first in enumerate(paid_first) if first] + operations:
        index = op[1]
        payment = payments[index]
        if op[0] == "pay":
            payment_record_success(
                payment_id=payment.id, amount=payment.amount, currency=payment.currency
            )
            paid[index] = True
            continue
        amount = quantize_money(payment.amount * op[2] / 1000, "USD")
        if amount <= 0:
            continue
        if op[0] == "external":
            refund_count += 1
            _record_stripe_refund(
                payment=payment,
                stripe_refund={
                    "id": f"re_{uuid.uuid4().hex}",
                    "amount": gateway.minor_units(amount, "USD"),
                    "currency": "usd",
                },
                event=None,
            )
            if paid[index] and amount <= payment.amount - reserved[index]:
                reserved[index] += amount  # booked; otherwise flagged for staff
            continue
        outcome = op[3]
        refund_count += 1
        allowed = paid[index] and amount <= payment.amount - reserved[index]
        try:
            refund = refund_request(
                payment_id=payment.id,
                amount=amount,
                reason=Refund.Reason.STAFF,
                key=f"prop:{uuid.uuid4()}",
            )
        except Conflict:
            assert not allowed
            outcomes.append("refused")
            continue
        assert allowed
        outcomes.append("accepted")
        reserved[index] += amount
        if outcome == "succeed":
            refund_record_success(refund_id=refund.id, stripe_refund_id=f"re_{refund.id}")
        elif outcome == "fail":
            refund_record_failure(refund_id=refund.id, message="declined")
            reserved[index] -= amount
    event(f"refunds accepted: {outcomes.count('accepted') > 0}")
    event(f"refunds refused: {outcomes.count('refused') > 0}")
    # then: every transaction balances
    entries = LedgerEntry.objects.filter(order__in=orders)
    per_transaction: dict[int, Decimal] = defaultdict(Decimal)
    for txn_id, amount in entries.values_list("transaction_id", "amount"):
        per_transaction[txn_id] += amount
    assert all(total == 0 for total in per_transaction.values())
    for index, (order, payment) in enumerate(zip(orders, payments, strict=True)):
        payment.refresh_from_db()
        order_entries = entries.filter(order=order)
        assert (order_entries.aggregate(s=Sum("amount"))["s"] or 0) == 0
        charged = (
            order_entries.filter(
                transaction__kind=LedgerTransaction.Kind.CHARGE, account="stripe_balance"
            ).aggregate(s=Sum("amount"))["s"]
            or 0
        )
        refunded = (
            Refund.objects.filter(payment=payment, status=Refund.Status.SUCCEEDED).aggregate(
                s=Sum("amount")
            )["s"]
            or 0
        )
        held = -(
            order_entries.filter(account="customer_funds").aggregate(s=Sum("amount"))["s"] or 0
        )
        assert charged == (payment.amount if paid[index] else 0)
        assert 0 <= refunded <= charged
        assert held == charged - refunded >= 0
        assert payment.amount_refunded == reserved[index] <= payment.amount
