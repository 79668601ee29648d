"""End to end: localstripe itself signs and POSTs the event to our running server."""

import time
import urllib.parse
import urllib.request

import pytest

from billing.models import WebhookEvent
from orders.models import Order
from tests.billing.conftest import WEBHOOK_SECRET, confirm_card_payment
from tests.factories import OrderFactory

HOOK_ID = "billing-e2e"


def configure_hook(localstripe_url: str, url: str, events: list[str]) -> None:
    fields = [("url", url), ("secret", WEBHOOK_SECRET)] + [("events[]", e) for e in events]
    request = urllib.request.Request(
        f"{localstripe_url}/_config/webhooks/{HOOK_ID}",
        data=urllib.parse.urlencode(fields).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


@pytest.fixture
def localstripe_posts_to_us(live_server, localstripe_url):
    assert live_server.url.startswith("http://127.0.0.1:")
    configure_hook(
        localstripe_url,
        f"{live_server.url}/billing/stripe/webhook/",
        ["payment_intent.succeeded"],
    )
    yield
    # localstripe cannot forget a hook: point this one at an event that never happens.
    configure_hook(localstripe_url, f"{live_server.url}/billing/stripe/webhook/", ["none.ever"])


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_an_event_signed_and_sent_by_localstripe_pays_the_order(
    customer, start_payment, stripe_client, localstripe_posts_to_us
):
    # given
    order = OrderFactory(organization=customer.organization)
    payment = start_payment(customer, order)
    # when: the customer confirms; localstripe sends payment_intent.succeeded ~1 s later
    confirm_card_payment(stripe_client, payment.stripe_payment_intent_id)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        order.refresh_from_db()
        if order.status == Order.Status.PAID:
            break
        time.sleep(0.2)
    # then
    assert order.status == Order.Status.PAID
    # (an event of an earlier test may arrive too: localstripe sends each after ~1 s)
    ours = [
        event
        for event in WebhookEvent.objects.filter(type="payment_intent.succeeded")
        if event.payload["data"]["object"]["id"] == payment.stripe_payment_intent_id
    ]
    assert len(ours) == 1
    assert ours[0].status == WebhookEvent.Status.PROCESSED
