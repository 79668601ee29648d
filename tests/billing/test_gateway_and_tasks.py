"""The gateway's boundary (minor units, signatures), task routing, the sweeper."""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import stripe_gateway as gateway
from billing.models import BillingFlag, Payment, Refund, WebhookEvent
from billing.services.stripe_events import WEBHOOK_HANDLERS
from billing.services.sweep import billing_sweep
from marketplace.celery import app as celery_app
from orders.models import Order
from orders.services import order_transition
from tests.billing.conftest import make_event, post_webhook, sign
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [
        ("1000.00", "USD", 100000),
        ("0.01", "EUR", 1),
        ("1500", "JPY", 1500),
        ("12.345", "USD", 1235),
    ],
)
def test_minor_units_round_trip(amount, currency, minor):
    # when / then
    assert gateway.minor_units(Decimal(amount), currency) == minor
    assert gateway.from_minor_units(minor, currency.lower()) == (
        Decimal(minor).scaleb(-2 if currency != "JPY" else 0)
    )


def test_gateway_creates_a_yen_intent_in_whole_yen(stripe_on, stripe_client):
    # given
    customer_id = gateway.customer_create(
        name="Yen Co", organization_id="org-1", idempotency_key="customer:test-yen"
    )
    # when
    result = gateway.payment_intent_create(
        amount=Decimal("1500"),
        currency="JPY",
        customer_id=customer_id,
        metadata={"order_id": "o"},
        idempotency_key="order:o:payment:1:intent",
    )
    # then
    intent = stripe_client.v1.payment_intents.retrieve(result.id)
    assert (intent.amount, intent.currency) == (1500, "jpy")
    assert result.client_secret.startswith(result.id)


def test_webhook_verification_uses_stripes_scheme(stripe_on):
    # given
    body = make_event("payment_intent.succeeded", {"id": "pi_1"})
    # when
    event = gateway.webhook_verify(payload=body.encode(), signature_header=sign(body))
    # then
    assert event["type"] == "payment_intent.succeeded"
    with pytest.raises(gateway.WebhookSignatureInvalid):
        gateway.webhook_verify(
            payload=body.encode(), signature_header=sign(body, timestamp=int(time.time()) - 301)
        )


def test_the_raw_body_is_stored_byte_for_byte(stripe_on, webhook_client):
    # given: odd but valid JSON spacing, which a re-serialisation would lose
    body = '{"id": "evt_raw",   "type": "customer.created", "data": {"object": {"id": "cus_1"}}}'
    # when
    response = post_webhook(webhook_client, body)
    # then
    assert response.status_code == 200
    assert WebhookEvent.objects.get().raw_body == body


def test_billing_tasks_go_to_the_billing_queue():
    # when
    routes = [
        celery_app.amqp.router.route({}, f"billing.tasks.{name}")
        for name in ("webhook_event_process", "refund_submit", "order_trueup")
    ]
    # then
    assert all(route["queue"].name == "billing" for route in routes)


def test_sweeper_reenqueues_events_a_lost_task_left_behind(stripe_on, monkeypatch):
    # given: an event stored while the broker was down
    event = WebhookEvent.objects.create(
        stripe_event_id="evt_lost",
        type="customer.created",
        raw_body="{}",
        payload={"id": "evt_lost", "type": "customer.created", "data": {"object": {}}},
    )
    WebhookEvent.objects.filter(pk=event.pk).update(
        received_at=timezone.now() - timedelta(minutes=10)
    )
    # when
    result = billing_sweep()
    # then (eager Celery: the task ran)
    assert result["events"] == 1
    event.refresh_from_db()
    assert event.status == WebhookEvent.Status.IGNORED


def test_a_payment_arriving_after_cancellation_is_refunded(
    customer, start_payment, stripe_client, webhook_client, django_capture_on_commit_callbacks
):
    # given: the customer cancels while their card payment is in flight
    from tests.billing.conftest import confirm_card_payment

    order = OrderFactory(organization=customer.organization)
    payment = start_payment(customer, order)
    intent = confirm_card_payment(stripe_client, payment.stripe_payment_intent_id)
    with django_capture_on_commit_callbacks(execute=True):
        order_transition(order_id=order.id, to_status=Order.Status.CANCELLED, actor_label="t")
    # when
    with django_capture_on_commit_callbacks(execute=True):
        post_webhook(webhook_client, make_event("payment_intent.succeeded", intent))
    # then
    order.refresh_from_db()
    payment.refresh_from_db()
    assert payment.status == Payment.Status.SUCCEEDED
    assert BillingFlag.objects.filter(kind=BillingFlag.Kind.PAID_AFTER_CANCEL).count() == 1
    refund = Refund.objects.get()
    assert refund.amount == Decimal("1000.00")
    assert refund.status == Refund.Status.SUCCEEDED
    assert order.status == Order.Status.REFUNDED


def test_a_crashing_handler_is_recorded_and_retried_later_not_a_500(
    stripe_on, webhook_client, monkeypatch, django_capture_on_commit_callbacks
):
    # given: a handler with a bug
    def broken(*, event, obj):
        raise RuntimeError("handler bug")

    monkeypatch.setitem(WEBHOOK_HANDLERS, "charge.dispute.created", broken)
    body = make_event("charge.dispute.created", {"id": "dp_bug", "charge": "ch_x"})
    # when
    with django_capture_on_commit_callbacks(execute=True):
        response = post_webhook(webhook_client, body)
    # then: Stripe is told we have it; the event waits, failed, for the sweeper
    assert response.status_code == 200
    event = WebhookEvent.objects.get()
    assert event.status == WebhookEvent.Status.FAILED
    assert "handler bug" in event.last_error
    # when: the bug is fixed and the sweeper runs
    monkeypatch.undo()
    WebhookEvent.objects.filter(pk=event.pk).update(
        received_at=timezone.now() - timedelta(minutes=10)
    )
    billing_sweep()
    # then
    event.refresh_from_db()
    assert event.status == WebhookEvent.Status.UNMATCHED
