"""Billing fixtures: a real localstripe process, signed webhooks, eager Celery."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import stripe

from tests.billing import stripe_events
from tests.billing.stripe_events import make_event

# pytest-django's live_server binds "localhost" unless told: keep it on 127.0.0.1 only.
os.environ.setdefault("DJANGO_LIVE_TEST_SERVER_ADDRESS", "127.0.0.1")

WEBHOOK_SECRET = "whsec_test_billing"
API_KEY = "sk_test_billing_0123456789"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


@pytest.fixture(scope="session")
def localstripe_url(tmp_path_factory):
    port = free_port()
    state = tmp_path_factory.mktemp("localstripe") / "state.pickle"
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("localstripe_server.py")), str(port), state],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def stripe_on(settings, localstripe_url, eager_celery):
    """Payments configured against the local Stripe emulator."""
    settings.STRIPE_API_KEY = API_KEY
    settings.STRIPE_API_BASE = localstripe_url
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    settings.STRIPE_TIMEOUT_SECONDS = 5
    return settings


@pytest.fixture
def stripe_client(localstripe_url) -> stripe.StripeClient:
    """Plays the customer's browser (Stripe.js) and the Stripe dashboard in tests."""
    return stripe.StripeClient(
        API_KEY, base_addresses={"api": localstripe_url}, max_network_retries=0
    )


def sign(body: str, *, secret: str = WEBHOOK_SECRET, timestamp: int | None = None) -> str:
    return stripe_events.sign(body, secret=secret, timestamp=timestamp)


def post_webhook(client, body: str, signature: str | None = None):
    return client.post(
        "/billing/stripe/webhook/",
        data=body,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=signature if signature is not None else sign(body),
    )


def confirm_card_payment(stripe_client: stripe.StripeClient, intent_id: str) -> dict:
    """What Stripe.js does with the client secret: attach a test card and confirm."""
    method = stripe_client.v1.payment_methods.create(
        params={
            "type": "card",
            "card": {"number": "4242424242424242", "exp_month": 12, "exp_year": 2034, "cvc": "123"},
        }
    )
    stripe_client.v1.payment_intents.update(intent_id, params={"payment_method": method.id})
    intent = stripe_client.v1.payment_intents.confirm(intent_id)
    return intent.to_dict()


# --- Shared scenario helpers ------------------------------------------------------------------


@pytest.fixture
def webhook_client():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def start_payment(stripe_on):
    """POST /orders/<id>/payments as the tenant; returns the Payment."""
    from django.urls import reverse

    from billing.models import Payment

    def start(tenant, order, method: str = "payment_intent"):
        response = tenant.client.post(
            reverse("order-payments", args=[order.id]), {"method": method}, format="json"
        )
        assert response.status_code in (200, 201), response.json()
        return Payment.objects.get(pk=response.json()["id"])

    return start


@pytest.fixture
def paid_order(customer, start_payment, stripe_client, webhook_client):
    """An order paid through localstripe and confirmed by a signed webhook."""
    from tests.factories import OrderFactory

    def make(**order_fields):
        from django.db import connection

        order = OrderFactory(organization=customer.organization, **order_fields)
        payment = start_payment(customer, order)
        intent = confirm_card_payment(stripe_client, payment.stripe_payment_intent_id)
        body = make_event("payment_intent.succeeded", intent)
        # Run the on-commit processing like a worker would.
        from django.test import TestCase

        with TestCase.captureOnCommitCallbacks(using=connection.alias, execute=True):
            response = post_webhook(webhook_client, body)
        assert response.status_code == 200
        order.refresh_from_db()
        payment.refresh_from_db()
        assert payment.status == "succeeded"
        assert order.status == "paid"
        return order, payment, intent

    return make


class FakeStripeDown:
    """A loopback HTTP server answering every request with one status; records the requests."""

    def __init__(self, status: int = 500):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        fake = self
        self.requests: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                fake.requests.append(
                    {
                        "path": self.path,
                        "idempotency_key": self.headers.get("Idempotency-Key"),
                        "body": self.rfile.read(length).decode(),
                    }
                )
                payload = json.dumps({"error": {"type": "api_error", "message": "boom"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stripe_5xx():
    fake = FakeStripeDown(status=500)
    yield fake
    fake.close()


@pytest.fixture
def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture(autouse=True)
def _without_dispatch():
    """Billing tests stop at 'paid': keep fleets' planning (an order_paid receiver) out of them.
    The paid -> dispatch chain has its own tests in tests/fleets."""
    from fleets import receivers
    from orders import signals

    signals.order_paid.disconnect(dispatch_uid="fleets.on_order_paid")
    yield
    signals.order_paid.connect(receivers.on_order_paid, dispatch_uid="fleets.on_order_paid")


# --- Stripe Connect (fleet payouts) -----------------------------------------------------------


@pytest.fixture
def connect(settings, localstripe_url, eager_celery):
    """Payouts configured against a loopback Connect fake (in front of localstripe)."""
    from tests.billing.fake_connect import FakeConnect

    fake = FakeConnect(upstream=localstripe_url)
    settings.STRIPE_API_KEY = API_KEY
    settings.STRIPE_API_BASE = fake.url
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    settings.STRIPE_TIMEOUT_SECONDS = 5
    yield fake
    fake.close()


@pytest.fixture
def staff_client(db):
    from django.test import Client

    from tests.factories import UserFactory

    user = UserFactory(is_staff=True, is_superuser=True)
    user.save()  # the factory's password hash is set after its first save
    client = Client()
    client.force_login(user)
    return client
