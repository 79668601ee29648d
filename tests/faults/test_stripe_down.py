"""Fault: Stripe cannot be reached, then the broker is down as Stripe's webhook arrives.

Paying answers 503 in the error shape and writes nothing; the retry after recovery creates
exactly one PaymentIntent. The webhook that arrives while the broker is down is stored and
answered 200 (Stripe's redeliveries of the same event are deduplicated); billing_sweep
queues it once the broker is back and a real worker processes it once.
"""

from datetime import timedelta

import pytest
import stripe
from django.urls import reverse
from django.utils import timezone

from billing.models import LedgerTransaction, Payment, StripeCustomer, WebhookEvent
from billing.services.sweep import billing_sweep
from local_s3.launcher import free_port
from orders.models import Order, OrderEvent
from tests.billing.conftest import (
    API_KEY,
    WEBHOOK_SECRET,
    confirm_card_payment,
    localstripe_url,  # noqa: F401 - the session's localstripe process (a fixture)
    make_event,
    sign,
)
from tests.celery_worker import wait_for
from tests.factories import OrderFactory
from tests.faults.conftest import Stopwatch

pytestmark = [pytest.mark.real_worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def intents_of(client: stripe.StripeClient, order) -> list:
    listed = client.v1.payment_intents.list(params={"limit": 100})
    intents = [i.to_dict() for i in listed.data]
    return [i for i in intents if (i.get("metadata") or {}).get("order_id") == str(order.id)]


def test_payment_through_stripe_and_broker_outages_is_taken_once(
    settings,
    localstripe_url,  # noqa: F811 - the fixture imported above
    private_broker,
    workers,
    customer,
    figures,
):
    settings.STRIPE_API_KEY = API_KEY
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    settings.STRIPE_TIMEOUT_SECONDS = 5
    stripe_client = stripe.StripeClient(
        API_KEY, base_addresses={"api": localstripe_url}, max_network_retries=0
    )
    order = OrderFactory(organization=customer.organization)
    pay_url = reverse("order-payments", args=[order.id])
    headers = {"HTTP_IDEMPOTENCY_KEY": f"pay-{order.id}"}
    # given: nothing listens where Stripe should be
    settings.STRIPE_API_BASE = f"http://127.0.0.1:{free_port()}"
    # when
    down = customer.client.post(pay_url, {}, format="json", **headers)
    # then: 503 in the error shape, nothing half-written
    assert down.status_code == 503
    assert set(down.json()) == {"code", "message", "fields"}
    assert down.json()["code"] == "payment_provider_unavailable"
    assert Payment.objects.count() == StripeCustomer.objects.count() == 0
    # when: Stripe is back; the client retries with the same key, then once more
    settings.STRIPE_API_BASE = localstripe_url
    recovery = Stopwatch()
    paid = customer.client.post(pay_url, {}, format="json", **headers)
    again = customer.client.post(pay_url, {}, format="json", **headers)
    # then: one payment, one PaymentIntent
    assert paid.status_code == 201, paid.json()
    assert again.json()["id"] == paid.json()["id"]
    payment = Payment.objects.get()
    assert [i["id"] for i in intents_of(stripe_client, order)] == [payment.stripe_payment_intent_id]
    # given: the customer confirms; the broker goes down before Stripe's webhook arrives
    intent = confirm_card_payment(stripe_client, payment.stripe_payment_intent_id)
    private_broker.stop()
    body = make_event("payment_intent.succeeded", intent)
    # when: Stripe delivers the event, and (no 2xx seen in time, say) delivers it twice more
    answers = [
        customer.client.generic(
            "POST",
            "/billing/stripe/webhook/",
            body,
            content_type="application/json",
            HTTP_STRIPE_SIGNATURE=sign(body),
        ).status_code
        for _ in range(3)
    ]
    # then: stored once, answered 200, not processed yet
    assert answers == [200, 200, 200]
    assert WebhookEvent.objects.count() == 1
    order.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT
    # when: the broker is back, a billing worker runs, and billing_sweep (celery beat) runs
    private_broker.start()
    workers(
        private_broker.url,
        "billing",
        STRIPE_API_KEY=API_KEY,
        STRIPE_API_BASE=localstripe_url,
        STRIPE_WEBHOOK_SECRET=WEBHOOK_SECRET,
    )
    billing_sweep(now=timezone.now() + timedelta(minutes=3))
    wait_for(
        lambda: Order.objects.filter(pk=order.pk, status=Order.Status.PAID).exists(),
        timeout=40,
        what="the swept webhook event to pay the order",
    )
    # then: paid once, one charge in the ledger, the event processed once
    assert OrderEvent.objects.filter(order=order, to_status=Order.Status.PAID).count() == 1
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.CHARGE).count() == 1
    assert WebhookEvent.objects.get().status == WebhookEvent.Status.PROCESSED
    payment.refresh_from_db()
    assert payment.status == Payment.Status.SUCCEEDED
    figures.update(
        pay_attempts=3,
        answered_503=1,
        payment_intents=len(intents_of(stripe_client, order)),
        webhook_deliveries=3,
        events_processed=1,
        charges=1,
        recovery_s=recovery.seconds(),
    )
