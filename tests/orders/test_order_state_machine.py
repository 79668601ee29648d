"""The order state machine: every legal move writes one event, every illegal one leaves no trace."""

from itertools import pairwise, product

import pytest
from django.db import transaction

from marketplace.tenancy import Caller
from orders import signals
from orders.models import ORDER_TRANSITIONS, Order, OrderEvent
from orders.services import InvalidTransition, order_mark_paid, order_transition
from tests.factories import OrderFactory, UserFactory

pytestmark = pytest.mark.django_db

STATUSES = list(Order.Status.values)
LEGAL = [(a, b) for a, b in product(STATUSES, STATUSES) if b in ORDER_TRANSITIONS[a]]
ILLEGAL = [
    (a, b) for a, b in product(STATUSES, STATUSES) if a != b and b not in ORDER_TRANSITIONS[a]
]


def test_the_map_covers_every_status_and_the_lifecycle_of_the_design():
    assert set(ORDER_TRANSITIONS) == set(STATUSES)
    happy = [
        "draft",
        "awaiting_payment",
        "paid",
        "in_collection",
        "in_review",
        "delivered",
        "closed",
    ]
    for current, following in pairwise(happy):
        assert following in ORDER_TRANSITIONS[current]
    assert ORDER_TRANSITIONS["closed"] == ORDER_TRANSITIONS["refunded"] == frozenset()


@pytest.mark.parametrize(("from_status", "to_status"), LEGAL)
def test_every_legal_transition_writes_one_event(from_status, to_status):
    # given
    order = OrderFactory(status=from_status)
    staff = UserFactory(is_staff=True)
    # when
    order_transition(
        order_id=order.id,
        to_status=to_status,
        caller=Caller(None, None, user=staff),
        reason="because",
    )
    # then
    order.refresh_from_db()
    assert order.status == to_status
    event = OrderEvent.objects.get(order=order)
    assert (event.from_status, event.to_status, event.reason) == (from_status, to_status, "because")
    assert event.actor == staff and event.actor_label == f"staff:{staff.username}"


@pytest.mark.parametrize(("from_status", "to_status"), ILLEGAL)
def test_every_illegal_transition_raises_and_leaves_no_trace(from_status, to_status):
    order = OrderFactory(status=from_status)
    updated_at = order.updated_at
    with pytest.raises(InvalidTransition):
        order_transition(order_id=order.id, to_status=to_status)
    order.refresh_from_db()
    assert order.status == from_status
    assert order.updated_at == updated_at
    assert not OrderEvent.objects.filter(order=order).exists()


def test_moving_to_the_current_status_is_a_harmless_no_op():
    order = OrderFactory(status=Order.Status.PAID)
    order_transition(order_id=order.id, to_status=Order.Status.PAID)
    assert not OrderEvent.objects.exists()


def test_an_unknown_status_is_refused():
    order = OrderFactory()
    with pytest.raises(Exception, match="Unknown order status"):
        order_transition(order_id=order.id, to_status="teleported")


def test_events_are_append_only():
    order = OrderFactory()
    order_transition(order_id=order.id, to_status=Order.Status.CANCELLED)
    event = OrderEvent.objects.get()
    event.reason = "rewritten"
    with pytest.raises(ValueError, match="append-only"):
        event.save()
    with pytest.raises(ValueError, match="append-only"):
        event.delete()


def test_order_paid_is_announced_only_after_commit(django_capture_on_commit_callbacks):
    # given
    order = OrderFactory()
    received = []

    def receiver(sender, order_id, **kwargs):
        received.append(order_id)

    signals.order_paid.connect(receiver)
    try:
        # when: a transaction that marks paid and then fails announces nothing
        with (
            django_capture_on_commit_callbacks(execute=True) as callbacks,
            pytest.raises(RuntimeError),
            transaction.atomic(),
        ):
            order_mark_paid(order_id=order.id, actor_label="staff:test")
            raise RuntimeError("boom")
        assert received == [] and callbacks == []
        order.refresh_from_db()
        assert order.status == Order.Status.AWAITING_PAYMENT
        # when: it commits
        with django_capture_on_commit_callbacks(execute=True):
            order_mark_paid(order_id=order.id, actor_label="staff:test")
    finally:
        signals.order_paid.disconnect(receiver)
    # then
    assert received == [order.id]
    assert OrderEvent.objects.get(order=order).actor_label == "staff:test"
