"""Refunds at localstripe: true-up at delivery, cancellation, staff, Stripe down."""

from decimal import Decimal

import pytest

from billing import tasks
from billing.ledger import balances
from billing.models import BillingFlag, Payment, Refund
from billing.services.refunds import (
    order_cancellation_refund,
    order_trueup,
    prorata_refund,
    refund_by_staff,
    refund_submit,
)
from billing.stripe_gateway import GatewayUnavailable
from marketplace.errors import Conflict
from orders.models import Order
from orders.services import order_transition
from tests.billing.conftest import make_event, post_webhook
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def assign_jobs(order, *, hours: list[str]) -> None:
    """Jobs of the order, each assigned to a fleet (what dispatch leaves behind)."""
    for target in hours:
        JobFactory(order=order, target_hours=Decimal(target))


def move(order, *statuses):
    for status in statuses:
        order_transition(order_id=order.id, to_status=status, actor_label="test")
    order.refresh_from_db()


def stripe_refunds(stripe_client, intent_id) -> list[int]:
    listing = stripe_client.v1.refunds.list(params={"payment_intent": intent_id})
    return [refund.amount for refund in listing.data]


# --- The pure pro-rata rule ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("paid", "ordered", "kept", "already", "expected"),
    [
        ("1000.00", "10", "10", "0", "0.00"),
        ("1000.00", "10", "7.5", "0", "250.00"),
        ("1000.00", "10", "0", "0", "1000.00"),
        ("1000.00", "10", "12", "0", "0.00"),  # more accepted than ordered: nothing back
        ("1000.00", "10", "-1", "0", "1000.00"),
        ("100.00", "3", "1", "0", "66.67"),  # rounded half-up to the cent
        ("1000.00", "10", "0", "900.00", "100.00"),  # never more than what is left
    ],
)
def test_prorata_refund(paid, ordered, kept, already, expected):
    # when
    amount = prorata_refund(
        paid=Decimal(paid),
        currency="USD",
        hours_ordered=Decimal(ordered),
        hours_kept=Decimal(kept),
        already_refunded=Decimal(already),
    )
    # then
    assert amount == Decimal(expected)


def test_prorata_refuses_floats():
    with pytest.raises(TypeError):
        prorata_refund(
            paid=1000.0, currency="USD", hours_ordered=Decimal(10), hours_kept=Decimal(1)
        )


# --- Through signals, tasks and localstripe --------------------------------------------------


def test_delivery_refunds_hours_not_accepted(
    paid_order, stripe_client, django_capture_on_commit_callbacks
):
    # given: 10 h paid, 7.5 h accepted by QA
    order, payment, intent = paid_order()
    Order.objects.filter(pk=order.id).update(accepted_hours=Decimal("7.50"))
    # when: the order is delivered (order_delivered -> receiver -> task -> refund)
    with django_capture_on_commit_callbacks(execute=True):
        move(order, Order.Status.IN_COLLECTION, Order.Status.IN_REVIEW, Order.Status.DELIVERED)
    # then
    refund = Refund.objects.get()
    assert refund.reason == Refund.Reason.TRUE_UP
    assert refund.status == Refund.Status.SUCCEEDED
    assert refund.amount == Decimal("250.00")
    assert stripe_refunds(stripe_client, intent["id"]) == [25000]
    assert balances(order=order) == {
        ("stripe_balance", "USD"): Decimal("750.00"),
        ("customer_funds", "USD"): Decimal("-750.00"),
    }
    # when: the true-up runs again and Stripe's charge.refunded arrives (twice)
    order_trueup(order_id=order.id)
    charge = stripe_client.v1.charges.retrieve(payment.stripe_charge_id).to_dict()
    body = make_event("charge.refunded", charge)
    from rest_framework.test import APIClient

    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            assert post_webhook(APIClient(), body).status_code == 200
    # then: still one refund, at Stripe and here
    assert Refund.objects.count() == 1
    assert stripe_refunds(stripe_client, intent["id"]) == [25000]
    order.refresh_from_db()
    assert order.status == Order.Status.DELIVERED


def test_full_delivery_refunds_nothing(paid_order, django_capture_on_commit_callbacks):
    # given
    order, _, _ = paid_order()
    Order.objects.filter(pk=order.id).update(accepted_hours=Decimal("10.00"))
    # when
    with django_capture_on_commit_callbacks(execute=True):
        move(order, Order.Status.IN_COLLECTION, Order.Status.IN_REVIEW, Order.Status.DELIVERED)
    # then
    assert Refund.objects.count() == 0


def test_cancellation_before_dispatch_refunds_in_full(
    paid_order, stripe_client, django_capture_on_commit_callbacks
):
    # given
    order, _, intent = paid_order()
    # when
    with django_capture_on_commit_callbacks(execute=True):
        move(order, Order.Status.CANCELLED)
    # then
    refund = Refund.objects.get()
    assert refund.amount == Decimal("1000.00")
    assert refund.reason == Refund.Reason.CANCELLATION
    assert stripe_refunds(stripe_client, intent["id"]) == [100000]
    order.refresh_from_db()
    assert order.status == Order.Status.REFUNDED
    assert balances(order=order) == {
        ("stripe_balance", "USD"): Decimal("0.00"),
        ("customer_funds", "USD"): Decimal("0.00"),
    }


def test_cancellation_after_dispatch_refunds_the_undispatched_part(paid_order, stripe_client):
    # given: in collection with 4 of 10 h dispatched (hours supplied explicitly)
    order, _, intent = paid_order()
    move(order, Order.Status.IN_COLLECTION, Order.Status.CANCELLED)
    # when
    refund = order_cancellation_refund(order_id=order.id, dispatched_hours=Decimal("4"))
    refund_submit(refund_id=refund.id)
    # then
    refund.refresh_from_db()
    assert refund.amount == Decimal("600.00")
    assert refund.status == Refund.Status.SUCCEEDED
    assert stripe_refunds(stripe_client, intent["id"]) == [60000]


def test_cancellation_after_dispatch_keeps_the_hours_fleets_were_given(
    paid_order, django_capture_on_commit_callbacks
):
    # given: 6 of the order's 10 hours were assigned to fleets (fleets.selectors says so)
    order, _, _ = paid_order()
    assign_jobs(order, hours=["4", "2"])
    # when
    with django_capture_on_commit_callbacks(execute=True):
        move(order, Order.Status.IN_COLLECTION, Order.Status.CANCELLED)
    # then
    assert Refund.objects.get().amount == Decimal("400.00")


def test_cancellation_after_dispatch_with_nothing_assigned_refunds_everything(
    paid_order, django_capture_on_commit_callbacks
):
    # given: the order reached collection but no job was ever assigned to a fleet
    order, _, _ = paid_order()
    # when
    with django_capture_on_commit_callbacks(execute=True):
        move(order, Order.Status.IN_COLLECTION, Order.Status.CANCELLED)
    # then: nothing was dispatched, so the whole payment comes back
    assert Refund.objects.get().amount == order.total


def test_a_refund_never_exceeds_what_was_charged(paid_order):
    # given
    _, payment, _ = paid_order()
    refund_by_staff(payment_id=payment.id, amount=Decimal("600"), note="a", user=None)
    # when / then
    with pytest.raises(Conflict) as excinfo:
        refund_by_staff(payment_id=payment.id, amount=Decimal("400.01"), note="", user=None)
    assert excinfo.value.code == "refund_exceeds_payment"
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("600.00")


def test_refund_while_stripe_is_down_stays_pending_and_retry_works(
    paid_order, stripe_on, closed_port_url, localstripe_url, stripe_client
):
    # given
    order, payment, intent = paid_order()
    refund = refund_by_staff(payment_id=payment.id, amount=Decimal("100"), note="", user=None)
    stripe_on.STRIPE_API_BASE = closed_port_url
    # when
    with pytest.raises(GatewayUnavailable):
        refund_submit(refund_id=refund.id)
    # then: reserved, not booked, not lost
    refund.refresh_from_db()
    assert refund.status == Refund.Status.PENDING
    assert not refund.ledger_entries.exists()
    assert stripe_refunds(stripe_client, intent["id"]) == []
    # when: Stripe is back (the task retries)
    stripe_on.STRIPE_API_BASE = localstripe_url
    refund_submit(refund_id=refund.id)
    refund_submit(refund_id=refund.id)
    # then
    refund.refresh_from_db()
    assert refund.status == Refund.Status.SUCCEEDED
    assert stripe_refunds(stripe_client, intent["id"]) == [10000]
    assert balances(order=order)[("stripe_balance", "USD")] == Decimal("900.00")


def test_a_refused_refund_releases_the_reservation_and_is_flagged(paid_order, stripe_on):
    # given: a payment whose intent Stripe does not know
    _, payment, _ = paid_order()
    Payment.objects.filter(pk=payment.pk).update(stripe_payment_intent_id="pi_unknown")
    refund = refund_by_staff(payment_id=payment.id, amount=Decimal("100"), note="", user=None)
    # when
    refund_submit(refund_id=refund.id)
    # then
    refund.refresh_from_db()
    payment.refresh_from_db()
    assert refund.status == Refund.Status.FAILED
    assert payment.amount_refunded == 0
    assert BillingFlag.objects.get().kind == BillingFlag.Kind.REFUND_FAILED


def test_cancelling_an_unpaid_order_closes_its_open_payment(
    customer, start_payment, django_capture_on_commit_callbacks
):
    # given
    from tests.factories import OrderFactory

    order = OrderFactory(organization=customer.organization)
    payment = start_payment(customer, order)
    # when
    with django_capture_on_commit_callbacks(execute=True):
        move(order, Order.Status.CANCELLED)
    # then
    payment.refresh_from_db()
    assert payment.status == Payment.Status.CANCELED
    assert Refund.objects.count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_refund_submitted_by_two_workers_at_once_reaches_stripe_once(
    paid_order, stripe_client, monkeypatch
):
    # given: localstripe ignores idempotency keys, so only our lock can prevent a double refund
    import threading

    from django.db import connection

    _, payment, intent = paid_order()
    monkeypatch.setattr(tasks.refund_submit, "delay", lambda *args: None)  # no worker runs it first
    refund = refund_by_staff(payment_id=payment.id, amount=Decimal("50"), note="", user=None)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            barrier.wait(timeout=10)
            refund_submit(refund_id=refund.id)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    # when
    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # then
    assert not errors
    assert stripe_refunds(stripe_client, intent["id"]) == [5000]
    refund.refresh_from_db()
    assert refund.status == Refund.Status.SUCCEEDED
