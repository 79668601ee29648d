import json
import re
import threading
import time
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleets.models import Job, WebhookDelivery
from fleets.services.planning import order_plan
from fleets.services.sweep import dispatch_sweep
from fleets.services.webhooks import webhook_enqueue
from marketplace import outbound_webhooks
from marketplace.celery import app
from orders.models import Order
from tests.factories import OrderFactory, equipped_site

README = Path(__file__).resolve().parents[2] / "fleets" / "README.md"


def documented_verify():
    """The receiver's recipe exactly as fleets/README.md shows it."""
    source = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 (our own documentation)
    return namespace["verify"]


def test_signature_verifies_with_the_documented_recipe():
    verify = documented_verify()
    secret, body = "whsec_test", outbound_webhooks.encode_body({"type": "offer.created", "n": 1})
    header = outbound_webhooks.signature_header(secret, body)
    # then
    assert verify(secret, header, body)
    assert outbound_webhooks.verify_signature(secret, header, body)


def test_signature_fails_on_changed_body_old_timestamp_wrong_secret_or_garbage():
    verify = documented_verify()
    secret, body = "whsec_test", b'{"a":1}'
    header = outbound_webhooks.signature_header(secret, body)
    old = outbound_webhooks.signature_header(secret, body, timestamp=int(time.time()) - 301)
    for check in (verify, outbound_webhooks.verify_signature):
        assert not check(secret, header, b'{"a":2}')
        assert not check(secret, old, body)
        assert not check("whsec_other", header, body)
        assert not check(secret, "garbage", body)


def test_backoff_doubles_and_is_capped():
    assert [outbound_webhooks.backoff_seconds(n, base=10, cap=60) for n in range(1, 6)] == [
        10,
        20,
        40,
        60,
        60,
    ]


class Receiver:
    """A tiny webhook receiver on 127.0.0.1: answers the given statuses in turn."""

    def __init__(self, statuses: list[int], secret_box: dict):
        self.statuses = list(statuses)
        self.requests: list[dict] = []
        receiver = self
        verify = documented_verify()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(
                    {
                        "body": body,
                        "event": self.headers["X-Marketplace-Event"],
                        "delivery": self.headers["X-Marketplace-Delivery"],
                        "verified": verify(
                            secret_box["secret"], self.headers["X-Marketplace-Signature"], body
                        ),
                    }
                )
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fast_retries(settings):
    # Eager mode re-applies a retried task at once (the countdown is not waited for), and
    # only does so when task errors are not propagated.
    app.conf.task_eager_propagates = False
    settings.FLEETS_WEBHOOK_ALLOW_INSECURE = True  # the receivers here are on loopback
    settings.FLEETS_WEBHOOK_BACKOFF_SECONDS = 0.01
    settings.FLEETS_WEBHOOK_TIMEOUT_SECONDS = 5
    settings.FLEETS_WEBHOOK_MAX_ATTEMPTS = 4


def offer_to(site, customer, django_capture_on_commit_callbacks):
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.PAID,
        environments=1,
        hours=Decimal("2"),
    )
    with django_capture_on_commit_callbacks(execute=True):
        order_plan(order_id=order.id)
    return Job.objects.get(order=order)


@pytest.mark.django_db
def test_offer_webhook_is_signed_retried_and_logged(
    customer, fast_retries, django_capture_on_commit_callbacks
):
    secret_box: dict = {}
    with Receiver([500, 503], secret_box) as receiver:
        # given a fleet whose endpoint fails twice, then answers 200
        site = equipped_site()
        site.fleet.webhook_url = receiver.url
        site.fleet.save()
        secret_box["secret"] = site.fleet.webhook_secret
        # when an offer is created for it
        job = offer_to(site, customer, django_capture_on_commit_callbacks)
    # then three attempts arrived, each signed, all with the same delivery id
    assert job.status == Job.Status.OFFERED
    assert len(receiver.requests) == 3
    assert all(r["verified"] for r in receiver.requests)
    assert {r["event"] for r in receiver.requests} == {"offer.created"}
    assert len({r["delivery"] for r in receiver.requests}) == 1
    payload = json.loads(receiver.requests[0]["body"])
    assert payload["type"] == "offer.created"
    assert payload["data"]["job"]["job_id"] == str(job.pk)
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookDelivery.Status.DELIVERED
    assert delivery.attempt_count == 3
    assert [a["status_code"] for a in delivery.attempts] == [500, 503, 200]


@pytest.mark.django_db
def test_delivery_gives_up_after_max_attempts_and_logs_each(
    customer, fast_retries, django_capture_on_commit_callbacks
):
    secret_box: dict = {}
    with Receiver([500] * 10, secret_box) as receiver:
        site = equipped_site()
        site.fleet.webhook_url = receiver.url
        site.fleet.save()
        secret_box["secret"] = site.fleet.webhook_secret
        offer_to(site, customer, django_capture_on_commit_callbacks)
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookDelivery.Status.FAILED
    assert delivery.attempt_count == 4 == len(receiver.requests)
    assert [a["status_code"] for a in delivery.attempts] == [500] * 4


@pytest.mark.django_db
def test_unreachable_endpoint_is_logged_with_the_error(
    customer, fast_retries, django_capture_on_commit_callbacks, settings
):
    settings.FLEETS_WEBHOOK_MAX_ATTEMPTS = 2
    site = equipped_site()
    site.fleet.webhook_url = "http://127.0.0.1:9/closed"  # discard port: refused
    site.fleet.save()
    offer_to(site, customer, django_capture_on_commit_callbacks)
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookDelivery.Status.FAILED
    assert all(a["status_code"] is None and a["error"] for a in delivery.attempts)


@pytest.mark.django_db
def test_sweeper_resends_deliveries_whose_message_was_lost(customer, fast_retries):
    # given a pending delivery created long ago that no task ever picked up
    from datetime import timedelta
    from unittest import mock

    from django.utils import timezone

    site = equipped_site()
    site.fleet.webhook_url = "https://fleet.example.com/hooks"
    site.fleet.save()
    delivery = webhook_enqueue(fleet=site.fleet, event_type="offer.created", data={})
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        created_at=timezone.now() - timedelta(hours=1)
    )
    # when
    with mock.patch("fleets.tasks.webhook_deliver.delay") as delay:
        from django.test import TestCase

        with TestCase.captureOnCommitCallbacks(execute=True):
            result = dispatch_sweep()
    # then
    assert result.webhooks_resent == 1
    delay.assert_called_once_with(str(delivery.pk))
