"""Paying an order through the API: PaymentIntents at a real localstripe, tenancy, retries."""

from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import Payment, StripeCustomer
from marketplace.models import Membership
from orders.models import Order
from tests.billing.factories import PaymentFactory
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


def pay_url(order) -> str:
    return reverse("order-payments", args=[order.id])


def test_paying_returns_the_client_secret_of_a_payment_intent(customer, stripe_on, stripe_client):
    # given
    order = OrderFactory(organization=customer.organization, total=Decimal("1234.56"))
    # when
    response = customer.client.post(pay_url(order), {}, format="json")
    # then
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["client_secret"].startswith("pi_")
    payment = Payment.objects.get(pk=body["id"])
    intent = stripe_client.v1.payment_intents.retrieve(payment.stripe_payment_intent_id)
    assert intent.amount == 123456  # minor units only at the Stripe boundary
    assert intent.currency == "usd"
    assert intent.metadata["order_id"] == str(order.id)
    assert intent.customer == StripeCustomer.objects.get().stripe_customer_id
    order.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT  # paid only when Stripe confirms


def test_paying_twice_returns_the_open_payment(customer, stripe_on):
    # given
    order = OrderFactory(organization=customer.organization)
    first = customer.client.post(pay_url(order), {}, format="json").json()
    # when
    again = customer.client.post(pay_url(order), {}, format="json")
    # then
    assert again.status_code == 200
    assert again.json()["id"] == first["id"]
    assert Payment.objects.count() == 1
    assert StripeCustomer.objects.count() == 1


def test_idempotency_key_replays_the_first_response(customer, stripe_on):
    # given
    order = OrderFactory(organization=customer.organization)
    headers = {"HTTP_IDEMPOTENCY_KEY": "pay-once-1"}
    first = customer.client.post(pay_url(order), {}, format="json", **headers)
    # when
    second = customer.client.post(pay_url(order), {}, format="json", **headers)
    # then
    assert first.status_code == 201
    assert second.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()


def test_a_foreign_order_is_not_found(customer, other_customer, stripe_on):
    # given
    order = OrderFactory(organization=other_customer.organization)
    # when
    response = customer.client.post(pay_url(order), {}, format="json")
    listing = customer.client.get(pay_url(order))
    # then
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert listing.status_code == 404
    assert Payment.objects.count() == 0


def test_billing_role_may_pay(make_tenant, stripe_on):
    # given
    tenant = make_tenant(role=Membership.Role.BILLING)
    order = OrderFactory(organization=tenant.organization)
    # when
    response = tenant.client.post(pay_url(order), {}, format="json")
    # then
    assert response.status_code == 201


def test_a_paid_or_cancelled_order_cannot_be_paid(customer, stripe_on):
    # given
    cancelled = OrderFactory(organization=customer.organization, status=Order.Status.CANCELLED)
    # when
    response = customer.client.post(pay_url(cancelled), {}, format="json")
    # then
    assert response.status_code == 409
    assert response.json()["code"] == "order_not_payable"


def test_without_stripe_key_payment_is_refused_clearly(customer, settings):
    # given
    settings.STRIPE_API_KEY = ""
    order = OrderFactory(organization=customer.organization)
    # when
    response = customer.client.post(pay_url(order), {}, format="json")
    # then
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "payments_not_configured"
    assert "not configured" in body["message"]
    assert set(body) == {"code", "message", "fields"}


def test_stripe_unreachable_leaves_the_order_unpaid_and_a_retry_works(
    customer, stripe_on, closed_port_url, localstripe_url
):
    # given: nothing listens where Stripe should be
    stripe_on.STRIPE_API_BASE = closed_port_url
    order = OrderFactory(organization=customer.organization)
    headers = {"HTTP_IDEMPOTENCY_KEY": "retry-me"}
    # when
    down = customer.client.post(pay_url(order), {}, format="json", **headers)
    # then: a clear error, nothing half-written
    assert down.status_code == 503
    assert down.json()["code"] == "payment_provider_unavailable"
    assert "try again" in down.json()["message"]
    assert Payment.objects.count() == 0
    assert StripeCustomer.objects.count() == 0
    order.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT
    # when: Stripe is back and the client retries with the same key
    stripe_on.STRIPE_API_BASE = localstripe_url
    retry = customer.client.post(pay_url(order), {}, format="json", **headers)
    # then
    assert retry.status_code == 201
    assert Payment.objects.get().attempt == 1


def test_stripe_5xx_leaves_nothing_written_and_the_retry_sends_the_same_keys(
    customer, stripe_on, stripe_5xx, localstripe_url
):
    # given
    stripe_on.STRIPE_API_BASE = stripe_5xx.url
    order = OrderFactory(organization=customer.organization)
    # when
    first = customer.client.post(pay_url(order), {}, format="json")
    second = customer.client.post(pay_url(order), {}, format="json")
    # then
    assert first.status_code == second.status_code == 503
    assert Payment.objects.count() == 0
    keys = [r["idempotency_key"] for r in stripe_5xx.requests]
    assert keys == [f"customer:{customer.organization.id}"] * 2
    # when: Stripe recovers
    stripe_on.STRIPE_API_BASE = localstripe_url
    third = customer.client.post(pay_url(order), {}, format="json")
    # then
    assert third.status_code == 201


def test_payment_intent_key_is_derived_from_order_and_attempt(customer, stripe_on, stripe_5xx):
    # given: the customer exists, then Stripe fails on the intent
    order = OrderFactory(organization=customer.organization)
    other = OrderFactory(organization=customer.organization)
    assert customer.client.post(pay_url(other), {}, format="json").status_code == 201
    stripe_on.STRIPE_API_BASE = stripe_5xx.url
    # when
    customer.client.post(pay_url(order), {}, format="json")
    customer.client.post(pay_url(order), {}, format="json")
    # then
    keys = [r["idempotency_key"] for r in stripe_5xx.requests]
    assert keys == [f"order:{order.id}:payment:1:intent"] * 2
    assert "amount=100000" in stripe_5xx.requests[0]["body"]


def test_payment_list_is_scoped_and_query_count_is_constant(
    customer, other_customer, django_assert_max_num_queries
):
    # given
    PaymentFactory.create_batch(3, order__organization=customer.organization)
    PaymentFactory(order__organization=other_customer.organization)
    url = reverse("payment-list")
    customer.client.get(url)  # warm up (api key lookup caches)
    # when
    with django_assert_max_num_queries(3) as few:  # key lookup, key last-used, payments
        response = customer.client.get(url)
    PaymentFactory.create_batch(20, order__organization=customer.organization)
    with django_assert_max_num_queries(len(few.captured_queries)):
        many = customer.client.get(url)
    # then
    assert response.status_code == 200
    assert len(response.json()["results"]) == 3
    assert len(many.json()["results"]) == 23
    assert "client_secret" not in response.json()["results"][0]


def test_an_orders_payments_are_listed_without_secrets(customer):
    # given
    payment = PaymentFactory(order__organization=customer.organization)
    PaymentFactory(order__organization=customer.organization)  # another order
    # when
    response = customer.client.get(pay_url(payment.order))
    # then
    assert response.status_code == 200
    results = response.json()["results"]
    assert [row["id"] for row in results] == [str(payment.id)]
    assert "client_secret" not in results[0]
