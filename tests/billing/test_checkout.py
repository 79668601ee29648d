"""Web orders pay through Stripe Checkout (a local fake in front of localstripe)."""

from decimal import Decimal

import pytest
from django.urls import reverse

from billing.ledger import balances
from billing.models import LedgerTransaction, Payment
from orders.models import Order
from tests.billing.conftest import make_event, post_webhook
from tests.billing.fake_checkout import FakeCheckout
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def checkout(stripe_on, localstripe_url):
    fake = FakeCheckout(localstripe_url)
    stripe_on.STRIPE_API_BASE = fake.url
    yield fake
    fake.close()


def test_checkout_session_then_completed_event_pays_once(
    customer, checkout, webhook_client, django_capture_on_commit_callbacks
):
    # given: a web order sent to Checkout
    order = OrderFactory(organization=customer.organization)
    response = customer.client.post(
        reverse("order-payments", args=[order.id]), {"method": "checkout"}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["checkout_url"].startswith(checkout.url + "/pay/cs_test_")
    payment = Payment.objects.get()
    session = checkout.sessions[payment.stripe_checkout_session_id]
    assert session["amount_total"] == 100000
    assert session["client_reference_id"] == str(order.id)
    assert session["success_url"].endswith(f"/orders/{order.id}/?payment=success")
    assert checkout.idempotency_keys == [f"order:{order.id}:payment:1:checkout"]
    # when: the customer pays; Stripe sends checkout.session.completed, then the intent's event
    completed = checkout.complete(payment.stripe_checkout_session_id)
    intent = {
        "id": completed["payment_intent"],
        "object": "payment_intent",
        "amount": 100000,
        "currency": "usd",
        "status": "succeeded",
        "metadata": completed["metadata"],
    }
    for event in (
        make_event("checkout.session.completed", completed),
        make_event("payment_intent.succeeded", intent),
    ):
        with django_capture_on_commit_callbacks(execute=True):
            assert post_webhook(webhook_client, event).status_code == 200
    # then
    order.refresh_from_db()
    payment.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert payment.status == Payment.Status.SUCCEEDED
    assert payment.stripe_payment_intent_id == completed["payment_intent"]
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.CHARGE).count() == 1
    assert balances(order=order)[("stripe_balance", "USD")] == Decimal("1000.00")


def test_checkout_completed_with_another_amount_does_not_pay(
    customer, checkout, webhook_client, django_capture_on_commit_callbacks
):
    # given
    order = OrderFactory(organization=customer.organization)
    customer.client.post(
        reverse("order-payments", args=[order.id]), {"method": "checkout"}, format="json"
    )
    payment = Payment.objects.get()
    completed = {**checkout.complete(payment.stripe_checkout_session_id), "amount_total": 100}
    # when
    with django_capture_on_commit_callbacks(execute=True):
        post_webhook(webhook_client, make_event("checkout.session.completed", completed))
    # then
    order.refresh_from_db()
    payment.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT
    assert payment.status == Payment.Status.REVIEW


def test_an_expired_session_is_not_reused_the_next_pay_opens_a_new_one(
    customer, checkout, webhook_client, django_capture_on_commit_callbacks
):
    # given: an open Checkout session that Stripe then expires unpaid
    order = OrderFactory(organization=customer.organization)
    url = reverse("order-payments", args=[order.id])
    first = customer.client.post(url, {"method": "checkout"}, format="json").json()
    payment = Payment.objects.get()
    session = checkout.sessions[payment.stripe_checkout_session_id]
    expired = {**session, "status": "expired", "payment_status": "unpaid"}
    with django_capture_on_commit_callbacks(execute=True):
        response = post_webhook(webhook_client, make_event("checkout.session.expired", expired))
    assert response.status_code == 200
    payment.refresh_from_db()
    assert payment.status == Payment.Status.CANCELED
    # when: the customer presses Pay again
    again = customer.client.post(url, {"method": "checkout"}, format="json")
    # then: a second attempt with its own session, the order still awaiting payment
    assert again.status_code == 201, again.json()
    assert again.json()["checkout_url"] != first["checkout_url"]
    assert Payment.objects.filter(order=order).count() == 2
    assert checkout.idempotency_keys[-1] == f"order:{order.id}:payment:2:checkout"
    order.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT
