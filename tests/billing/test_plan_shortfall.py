"""The collection plan's true-up (issue 30): distinct environments or objects delivered short of
a planned order's plan are credited at delivery, a refund (and a ledger transaction) per
shortfall, once, never above the priced lines; the hours true-up prorates what is left."""

from decimal import Decimal

import pytest

from billing import tasks
from billing.ledger import balances
from billing.models import LedgerTransaction, Refund
from billing.services.payables import order_earned
from billing.services.plan_credits import order_plan_shortfall, shortfall_lines
from orders.models import Order
from orders.services import order_mark_delivered
from tests.billing.test_refunds import move, stripe_refunds

pytestmark = pytest.mark.django_db

# 10 h at 100/h; 8 environments (1 included, 7 x 50.00) and 4 distinct objects (1 included,
# 3 x 20.00): 1,410.00 in all.
LINES = [
    {
        "code": "base",
        "description": "10 h",
        "quantity": "10",
        "unit_amount": "100",
        "amount": "1000.00",
    },
    {
        "code": "extra_environments",
        "description": "7 extra environment(s) beyond the 1 included, 50.00 USD each",
        "quantity": "7",
        "unit_amount": "50.00",
        "amount": "350.00",
    },
    {
        "code": "extra_objects",
        "description": "3 extra object(s) beyond the 1 included, 20.00 USD each",
        "quantity": "3",
        "unit_amount": "20.00",
        "amount": "60.00",
    },
]
PLAN = {
    "hours": Decimal("10.00"),
    "environments": 8,
    "objects_per_environment": 1,
    "distinct_objects": 4,
    "cells_planned": True,
    "lines": LINES,
    "total": Decimal("1410.00"),
}


@pytest.fixture
def deliver(django_capture_on_commit_callbacks):
    """Deliver a paid order as datasets does (order_delivered carries the counts), running
    what it queues (the true-up, its refunds at localstripe, the payables)."""

    def run(order, *, accepted_hours="10.00", plan_delivered=None):
        Order.objects.filter(pk=order.id).update(accepted_hours=Decimal(accepted_hours))
        move(order, Order.Status.IN_COLLECTION, Order.Status.IN_REVIEW)
        with django_capture_on_commit_callbacks(execute=True):
            order_mark_delivered(
                order_id=order.id,
                actor_label="test",
                reason="delivered",
                plan_delivered=plan_delivered,
            )
        order.refresh_from_db()
        return order

    return run


def test_an_object_short_of_the_plan_is_credited_once_in_the_ledger(
    paid_order, deliver, stripe_client, django_capture_on_commit_callbacks
):
    # given: a planned order paid 1,410.00, every hour accepted
    order, _, intent = paid_order(**PLAN)
    # when: delivered with 8 environments and 3 of the 4 distinct objects
    deliver(order, plan_delivered={"environments": 8, "objects": 3})
    # then: one refund, of one object fee, at Stripe and in the ledger with its line
    refund = Refund.objects.get()
    assert (refund.reason, refund.status, refund.amount) == (
        Refund.Reason.PLAN_SHORTFALL,
        Refund.Status.SUCCEEDED,
        Decimal("20.00"),
    )
    assert refund.note == (
        "1 of 4 distinct objects not delivered: 1 x extra object fee (20.00 USD)"
    )
    assert stripe_refunds(stripe_client, intent["id"]) == [2000]
    assert balances(order=order) == {
        ("stripe_balance", "USD"): Decimal("1390.00"),
        ("customer_funds", "USD"): Decimal("-1390.00"),
    }
    memo = LedgerTransaction.objects.get(kind=LedgerTransaction.Kind.REFUND).memo
    assert "1 of 4 distinct objects not delivered" in memo
    # when: the true-up runs again (a repeated message), with the same counts
    with django_capture_on_commit_callbacks(execute=True):
        tasks.order_trueup(str(order.id), 8, 3)
    # then: still one refund
    assert Refund.objects.count() == 1
    assert stripe_refunds(stripe_client, intent["id"]) == [2000]


def test_a_complete_plan_credits_nothing(paid_order, deliver):
    order, _, _ = paid_order(**PLAN)
    deliver(order, plan_delivered={"environments": 8, "objects": 4})
    assert Refund.objects.count() == 0


def test_more_than_planned_credits_nothing_and_an_older_order_is_never_credited(
    paid_order, deliver
):
    planned, _, _ = paid_order(**PLAN)
    deliver(planned, plan_delivered={"environments": 9, "objects": 6})
    older, _, _ = paid_order(**(PLAN | {"cells_planned": False}))
    deliver(older)
    assert order_plan_shortfall(order_id=older.id, delivered={"environments": 0}) == []
    assert Refund.objects.count() == 0


def test_nothing_delivered_of_the_plan_credits_only_the_paid_units(paid_order, deliver):
    # given / when: none of the environments or objects counted (the included ones are free)
    order, payment, _ = paid_order(**PLAN)
    deliver(order, plan_delivered={"environments": 0, "objects": 0})
    # then: 7 environment fees (not 8) and 3 object fees (not 4): the priced lines, no more
    refunds = {r.key.split(":")[2]: r for r in Refund.objects.all()}
    assert refunds["environments"].amount == Decimal("350.00")
    assert refunds["objects"].amount == Decimal("60.00")
    assert refunds["environments"].note == (
        "8 of 8 environments not delivered: 7 x extra environment fee (50.00 USD)"
        " (the first 1 are included in the price)"
    )
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("410.00")


def test_the_hours_true_up_prorates_what_is_left_after_the_shortfall(paid_order, deliver):
    # given: half the hours accepted, 2 of 8 environments missing
    order, payment, _ = paid_order(**PLAN)
    # when
    deliver(order, accepted_hours="5.00", plan_delivered={"environments": 6, "objects": 4})
    # then: 2 x 50.00 back, and half of the remaining 1,310.00 for the hours
    by_reason = {r.reason: r.amount for r in Refund.objects.all()}
    assert by_reason == {
        Refund.Reason.PLAN_SHORTFALL: Decimal("100.00"),
        Refund.Reason.TRUE_UP: Decimal("655.00"),
    }
    note = Refund.objects.get(reason=Refund.Reason.PLAN_SHORTFALL).note
    assert note == "2 of 8 environments not delivered: 2 x extra environment fee (50.00 USD)"
    payment.refresh_from_db()
    # what the customer paid for: the hours kept of the plan delivered; what fleets share
    assert payment.amount - payment.amount_refunded == Decimal("655.00")
    assert order_earned(order) == Decimal("655.00")


def test_a_later_shorter_delivery_credits_only_the_difference(paid_order, deliver):
    order, payment, _ = paid_order(**PLAN)
    deliver(order, plan_delivered={"environments": 8, "objects": 3})
    # when: a next delivery (after exclusions) has 2 objects, and is heard twice
    for _ in range(2):
        order_plan_shortfall(order_id=order.id, delivered={"environments": 8, "objects": 2})
    # then: 20.00 more, once; a delivery with more objects again takes nothing back
    order_plan_shortfall(order_id=order.id, delivered={"environments": 8, "objects": 4})
    assert sorted(r.amount for r in Refund.objects.all()) == [Decimal("20.00")] * 2
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("40.00")


def test_an_order_priced_without_an_object_line_credits_no_object(paid_order, deliver):
    lines = [line for line in LINES if line["code"] != "extra_objects"]
    order, _, _ = paid_order(**(PLAN | {"lines": lines, "total": Decimal("1350.00")}))
    deliver(order, plan_delivered={"environments": 7, "objects": 1})
    assert [(r.key.split(":")[2], r.amount) for r in Refund.objects.all()] == [
        ("environments", Decimal("50.00"))
    ]


@pytest.mark.parametrize(
    ("delivered", "expected"),
    [
        ({"environments": 8, "objects": 4}, []),
        ({"environments": 7, "objects": 4}, [("environments", 1, "50.00")]),
        ({"environments": -1, "objects": "3"}, []),  # not counts: nothing
        ({"environments": True, "objects": None}, []),
        ({}, []),
        (
            {"environments": 1, "objects": 2},
            [("environments", 7, "350.00"), ("objects", 2, "40.00")],
        ),
    ],
)
def test_shortfall_lines(delivered, expected):
    lines = shortfall_lines(
        lines=LINES,
        planned={"environments": 8, "objects": 4},
        delivered=delivered,
        currency="USD",
    )
    assert [(line.unit, line.units, str(line.amount)) for line in lines] == expected


def test_a_shortfall_line_is_never_above_its_amount():
    # a line whose amount is below quantity x unit (a hand-edited or discounted line)
    lines = [
        {"code": "extra_environments", "quantity": "3", "unit_amount": "50", "amount": "120.00"}
    ]
    credited = shortfall_lines(
        lines=lines,
        planned={"environments": 4, "objects": 1},
        delivered={"environments": 0},
        currency="USD",
    )
    assert [(c.units, c.amount) for c in credited] == [(3, Decimal("120.00"))]


def test_a_unit_short_after_the_hours_refund_is_credited_only_the_rest(paid_order, deliver):
    # given: half the hours accepted, the plan complete: 705.00 back for the hours
    order, payment, _ = paid_order(**PLAN)
    deliver(order, accepted_hours="5.00", plan_delivered={"environments": 8, "objects": 4})
    assert Refund.objects.get().amount == Decimal("705.00")
    # when: a later delivery is one object short (half of its fee came back with the hours)
    order_plan_shortfall(order_id=order.id, delivered={"environments": 8, "objects": 3})
    # then: the other half; in all, the object's fee and half of the rest of the price
    credit = Refund.objects.get(reason=Refund.Reason.PLAN_SHORTFALL)
    assert credit.amount == Decimal("10.00")
    assert credit.note.endswith("; 10.00 USD of it came back with the hours refund")
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("20.00") + (Decimal("1390.00") / 2)
