"""The order page's payment section and "Pay with card" (Stripe Checkout through the local
fake in front of localstripe), by Django's test client; the hosted page against a live server."""

import re
import urllib.error
import urllib.request

import pytest
from django.test import Client
from django.urls import reverse

from billing.models import Payment
from marketplace.models import Membership, Organization
from orders.models import Order
from tests.billing.conftest import WEBHOOK_SECRET, make_event, post_webhook
from tests.billing.fake_checkout import FakeCheckout
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


def browser_for(tenant) -> Client:
    client = Client()
    client.force_login(tenant.user)
    return client


@pytest.fixture
def checkout(stripe_on, localstripe_url):
    fake = FakeCheckout(localstripe_url, webhook_secret=WEBHOOK_SECRET)
    stripe_on.STRIPE_API_BASE = fake.url
    yield fake
    fake.close()


@pytest.fixture
def order(customer):
    return OrderFactory(organization=customer.organization)


def order_page(client, order, query: str = "") -> str:
    response = client.get(reverse("order-detail-page", args=[order.pk]) + query)
    assert response.status_code == 200
    return response.content.decode()


def pay(client, order):
    return client.post(reverse("order-pay-page", args=[order.pk]))


def test_without_stripe_the_page_says_staff_mark_the_payment(settings, customer, order):
    settings.STRIPE_API_KEY = ""
    html = order_page(browser_for(customer), order)
    assert "Payment pending." in html and "our staff mark the order paid" in html
    assert "Pay with card" not in html
    # and the action refuses with the reason, writing nothing
    response = pay(browser_for(customer), order)
    assert response.status_code == 302
    follow = browser_for(customer).get(response.url)
    assert follow.status_code == 200
    assert Payment.objects.count() == 0


def test_pay_with_card_redirects_to_checkout_and_reuses_the_open_session(checkout, customer, order):
    client = browser_for(customer)
    # given: the owner sees the button, a CSRF-protected POST form
    html = order_page(client, order)
    assert re.search(r'<form method="post" action="/orders/[0-9a-f-]+/pay/" id="pay-form">', html)
    assert "csrfmiddlewaretoken" in html and "Pay with card" in html
    # when
    first = pay(client, order)
    second = pay(client, order)
    # then: 303 to the session's hosted page, the same one both times
    payment = Payment.objects.get()
    assert first.status_code == 303 and first["Location"] == payment.checkout_url
    assert first["Location"].startswith(checkout.url + "/pay/cs_test_")
    assert second.status_code == 303 and second["Location"] == first["Location"]
    assert payment.method == Payment.Method.CHECKOUT and payment.amount == order.total
    assert checkout.idempotency_keys == [f"order:{order.id}:payment:1:checkout"]
    session = checkout.sessions[payment.stripe_checkout_session_id]
    assert session["success_url"].endswith(f"/orders/{order.id}/?payment=success")


def test_every_customer_role_may_pay_as_on_the_api(checkout, make_tenant, customer):
    # One rule for web and API (billing.services.PAYING_ROLES): members place orders, the
    # billing role exists to pay them.
    for role in (Membership.Role.MEMBER, Membership.Role.BILLING):
        tenant = make_tenant(Organization.Kind.CUSTOMER, role)
        order = OrderFactory(organization=tenant.organization)
        html = order_page(browser_for(tenant), order)
        assert "Pay with card" in html and "cannot pay orders" not in html
        assert pay(browser_for(tenant), order).status_code == 303
        assert Payment.objects.filter(order=order).count() == 1


def test_another_organizations_order_is_404_and_gets_no_payment(checkout, other_customer, order):
    assert pay(browser_for(other_customer), order).status_code == 404
    assert Payment.objects.count() == 0


def test_paying_needs_the_csrf_token(checkout, customer, order):
    client = Client(enforce_csrf_checks=True)
    client.force_login(customer.user)
    assert pay(client, order).status_code == 403
    assert Payment.objects.count() == 0


def test_stripe_unreachable_shows_the_error_and_writes_nothing(
    stripe_on, closed_port_url, customer, order
):
    stripe_on.STRIPE_API_BASE = closed_port_url
    client = browser_for(customer)
    response = pay(client, order)
    assert response.status_code == 302
    assert response.url == reverse("order-detail-page", args=[order.pk])
    html = client.get(response.url).content.decode()
    assert 'role="alert"' in html
    assert "The payment provider cannot be reached right now" in html
    assert "Pay with card" in html  # try again
    assert Payment.objects.count() == 0
    order.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT


def test_returning_from_checkout_shows_confirming_then_paid(
    checkout, customer, order, webhook_client, django_capture_on_commit_callbacks
):
    client = browser_for(customer)
    pay(client, order)
    payment = Payment.objects.get()
    # back from Checkout before the webhook: confirming, no second button, the page polls
    html = order_page(client, order, "?payment=success")
    assert "Payment received, confirming" in html
    assert "Pay with card" not in html and "window.location.reload" in html
    # the webhook arrives: paid
    completed = checkout.complete(payment.stripe_checkout_session_id)
    with django_capture_on_commit_callbacks(execute=True):
        assert post_webhook(webhook_client, make_event("checkout.session.completed", completed))
    html = order_page(client, order, "?payment=success")
    assert "Payment confirmed." in html and "by card on" in html
    assert "confirming" not in html and "window.location.reload" not in html


def test_a_cancelled_checkout_invites_another_try(checkout, customer, order):
    client = browser_for(customer)
    pay(client, order)
    html = order_page(client, order, "?payment=cancelled")
    assert "Payment cancelled, you can try again" in html
    assert "Pay with card" in html
    assert pay(client, order).status_code == 303  # the same open session again
    assert Payment.objects.count() == 1


def test_an_unknown_return_state_is_ignored(checkout, customer, order):
    html = order_page(browser_for(customer), order, "?payment=%3Cscript%3E")
    assert "<script>alert" not in html and "Payment pending." in html


@pytest.mark.django_db(transaction=True)
def test_the_hosted_checkout_page_pays_through_a_signed_webhook(
    checkout, customer, live_server, settings
):
    # given: Stripe's webhooks go to the live server; Checkout returns there too
    checkout.webhook_url = live_server.url + reverse("stripe-webhook")
    settings.BILLING_CHECKOUT_SUCCESS_URL = live_server.url + "/orders/{order_id}/?payment=success"
    order = OrderFactory(organization=customer.organization)
    location = pay(browser_for(customer), order)["Location"]
    # when: the customer opens the hosted page and presses Pay
    with urllib.request.urlopen(location, timeout=10) as page:
        assert b"Pay 1,000.00 USD" in page.read()

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as answer:
        opener.open(urllib.request.Request(location, data=b"card=4242", method="POST"), timeout=30)
    # then: a verified webhook paid the order and the browser is sent back
    assert answer.value.code == 303
    back = f"{live_server.url}/orders/{order.id}/?payment=success"
    assert answer.value.headers["Location"] == back
    assert checkout.webhook_responses == [200]
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert Payment.objects.get().status == Payment.Status.SUCCEEDED
