"""Deliveries end to end against the local S3 server: assembly, loading, links, pilot review."""

import hashlib
import json
import threading
import time
import urllib.request
from contextlib import contextmanager
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.error import HTTPError

import numpy as np
import pytest
from django.core import mail

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery, DownloadEvent, Episode
from fleets.models import Job
from marketplace.models import Organization
from orders.models import Order
from tests.datasets import lerobot_loader
from tests.datasets.helpers import Collection, upload_episode
from tests.factories import JobFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def link(client, delivery_id, path="manifest.json"):
    return client.get(f"/api/v1/deliveries/{delivery_id}/download", {"path": path})


@pytest.fixture
def delivered(fleet_operator, customer, django_capture_on_commit_callbacks):
    """An order of 0.01 h collected in two 20 s episodes of two tasks (and one rejected)."""
    collection = Collection(fleet_operator, customer, target_hours="0.01")
    uploads = [episode_table(frames=600, seed=1), episode_table(frames=600, seed=2)]
    broken = episode_table(frames=300, seed=3)
    broken["timestamp"][100:] += 1.0
    upload_episode(collection, parquet_bytes(broken), django_capture_on_commit_callbacks)
    for columns, task in zip(uploads, ["insert the peg", "wipe the table"], strict=True):
        upload_episode(
            collection,
            parquet_bytes(columns),
            django_capture_on_commit_callbacks,
            task_instruction=task,
        )
    collection.order.refresh_from_db()
    return collection, uploads, Delivery.objects.get(order=collection.order)


def test_a_collected_order_is_assembled_delivered_and_announced(delivered, customer):
    collection, _, delivery = delivered
    assert delivery.kind == Delivery.Kind.FULL and delivery.status == Delivery.Status.READY
    assert collection.order.status == Order.Status.DELIVERED
    assert (
        delivery.episodes == 2 and delivery.frames == 1200 and delivery.seconds == Decimal("40.000")
    )
    assert [m.to for m in mail.outbox] == [[customer.user.email]]
    listed = customer.client.get(f"/api/v1/orders/{collection.order.id}/deliveries").json()[
        "results"
    ]
    assert [d["id"] for d in listed] == [str(delivery.id)]
    files = {
        f["path"] for f in customer.client.get(f"/api/v1/deliveries/{delivery.id}/files").json()
    }
    assert {
        "meta/info.json",
        "meta/stats.json",
        "meta/tasks.parquet",
        "README.md",
        "manifest.json",
        "meta/episodes/chunk-000/file-000.parquet",
        "data/chunk-000/file-000.parquet",
    } <= files


def test_the_delivered_dataset_loads_like_lerobot_and_round_trips(delivered, customer, tmp_path):
    _collection, uploads, delivery = delivered
    # when: every file is downloaded through the audited links
    files = customer.client.get(f"/api/v1/deliveries/{delivery.id}/files").json()
    manifest = None
    for entry in files:
        response = link(customer.client, delivery.id, entry["path"])
        assert response.status_code == 302
        data = fetch(response["Location"])
        target = tmp_path / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if entry["path"] == "manifest.json":
            manifest = json.loads(data)
    # then: manifest sha256 values match the bytes in S3
    for entry in manifest["files"]:
        assert (
            hashlib.sha256((tmp_path / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]
        )
    dataset = lerobot_loader.load(tmp_path)
    lerobot_loader.check_invariants(dataset)
    assert sorted(dataset["tasks"].index) == ["insert the peg", "wipe the table"]
    state = np.stack(dataset["data"].column("observation.state").to_numpy(zero_copy_only=False))
    for episode, columns in zip(dataset["episodes"], uploads, strict=True):
        rows = slice(episode["dataset_from_index"], episode["dataset_to_index"])
        assert np.array_equal(state[rows], columns["observation.state"])
    card = (tmp_path / "README.md").read_text()
    assert "| Episodes | 2 |" in card and "timestamp_gap: 1" in card
    # every issued link has its download event
    assert DownloadEvent.objects.filter(delivery=delivery).count() == len(files)
    event = DownloadEvent.objects.filter(delivery=delivery).first()
    assert event.actor_label.startswith("api_key:") and event.api_key == customer.api_key


def test_a_link_works_at_once_then_expires_and_refuses_alteration(delivered, customer, settings):
    _, _, delivery = delivered
    settings.DELIVERY_LINK_EXPIRY_SECONDS = 1
    url = link(customer.client, delivery.id, "meta/info.json")["Location"]
    assert b"v3.0" in fetch(url)
    altered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
    with pytest.raises(HTTPError) as refused:
        fetch(altered)
    assert refused.value.code == 403
    time.sleep(2.1)
    with pytest.raises(HTTPError) as expired:
        fetch(url)
    assert expired.value.code == 403


def test_other_organizations_get_404_and_fleets_403(delivered, other_customer, fleet_operator):
    _, _, delivery = delivered
    assert link(other_customer.client, delivery.id).status_code == 404
    assert other_customer.client.get(f"/api/v1/deliveries/{delivery.id}/files").status_code == 404
    assert other_customer.client.post(f"/api/v1/deliveries/{delivery.id}/revoke").status_code == 404
    assert link(fleet_operator.client, delivery.id).status_code == 403
    assert DownloadEvent.objects.count() == 0


def test_a_file_outside_the_delivery_is_not_found(delivered, customer):
    _, _, delivery = delivered
    for path in ("../../orders/x", "data/chunk-999/file-000.parquet", ""):
        assert link(customer.client, delivery.id, path).status_code == 404
    assert DownloadEvent.objects.count() == 0


def test_a_revoked_delivery_issues_no_link(delivered, customer):
    _, _, delivery = delivered
    assert link(customer.client, delivery.id).status_code == 302
    revoked = customer.client.post(f"/api/v1/deliveries/{delivery.id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    response = link(customer.client, delivery.id)
    assert response.status_code == 409 and response.json()["code"] == "delivery_revoked"
    assert DownloadEvent.objects.count() == 1


def test_only_owners_revoke(delivered, make_tenant, customer):
    from rest_framework.test import APIClient

    from marketplace.models import Membership
    from marketplace.services import api_key_create

    _, _, delivery = delivered
    member_key = api_key_create(
        organization=customer.organization, name="m", role=Membership.Role.MEMBER
    )
    member = APIClient()
    member.credentials(HTTP_AUTHORIZATION=f"Bearer {member_key.raw_key}")
    assert member.post(f"/api/v1/deliveries/{delivery.id}/revoke").status_code == 403
    assert link(member, delivery.id).status_code == 302  # members may download


@pytest.fixture
def pilot(fleet_operator, customer, django_capture_on_commit_callbacks):
    collection = Collection(fleet_operator, customer, target_hours="0.01", is_pilot=True)
    held = JobFactory(order=collection.order, site=None, status=Job.Status.HELD, sequence=99)
    upload_episode(
        collection, parquet_bytes(episode_table(frames=1200)), django_capture_on_commit_callbacks
    )
    collection.order.refresh_from_db()
    return collection, held, Delivery.objects.get(order=collection.order)


def test_a_pilot_is_delivered_for_review_and_approval_releases_the_rest(
    pilot, customer, django_capture_on_commit_callbacks
):
    collection, held, delivery = pilot
    assert delivery.kind == Delivery.Kind.PILOT and delivery.review == Delivery.Review.PENDING
    assert collection.order.status == Order.Status.IN_REVIEW
    assert link(customer.client, delivery.id).status_code == 302
    # when
    with django_capture_on_commit_callbacks(execute=True):
        response = customer.client.post(
            f"/api/v1/deliveries/{delivery.id}/approve", {}, format="json"
        )
    # then
    assert response.status_code == 200 and response.json()["review"] == "approved"
    collection.order.refresh_from_db()
    held.refresh_from_db()
    assert collection.order.status == Order.Status.IN_COLLECTION
    assert held.status != Job.Status.HELD
    again = customer.client.post(f"/api/v1/deliveries/{delivery.id}/approve", {}, format="json")
    assert again.status_code == 409


def test_a_rejected_pilot_keeps_the_reason_and_tells_staff(
    pilot, customer, settings, django_capture_on_commit_callbacks
):
    settings.ADMINS = [("Ops", "ops@example.com")]
    _collection, held, delivery = pilot
    mail.outbox.clear()
    without_reason = customer.client.post(
        f"/api/v1/deliveries/{delivery.id}/reject", {}, format="json"
    )
    assert without_reason.status_code == 400 and "reason" in without_reason.json()["fields"]
    with django_capture_on_commit_callbacks(execute=True):
        response = customer.client.post(
            f"/api/v1/deliveries/{delivery.id}/reject", {"reason": "grasps too slow"}, format="json"
        )
    assert response.status_code == 200 and response.json()["review_reason"] == "grasps too slow"
    assert [m.to for m in mail.outbox] == [
        ["ops@example.com"]
    ] and "grasps too slow" in mail.outbox[0].body
    held.refresh_from_db()
    assert held.status == Job.Status.HELD


def test_a_full_delivery_is_not_reviewed(delivered, customer):
    _, _, delivery = delivered
    response = customer.client.post(f"/api/v1/deliveries/{delivery.id}/approve", {}, format="json")
    assert response.status_code == 409 and response.json()["code"] == "not_a_pilot"


def test_episodes_of_one_order_share_one_frame_rate(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    collection = Collection(fleet_operator, customer, target_hours="1")
    upload_episode(
        collection, parquet_bytes(episode_table(frames=300)), django_capture_on_commit_callbacks
    )
    response = collection.register(b"x" * 10, fps=50)
    assert response.status_code == 400 and "30 fps" in response.json()["fields"]["fps"][0]


def test_cancelling_or_revoking_deletes_no_episode_or_delivery(delivered, customer):
    _, _, delivery = delivered
    before = (Episode.objects.count(), Delivery.objects.count())
    customer.client.post(f"/api/v1/deliveries/{delivery.id}/revoke")
    assert (Episode.objects.count(), Delivery.objects.count()) == before
    assert Organization.objects.filter(pk=customer.organization.pk).exists()


@contextmanager
def webhook_receiver():
    """A loopback HTTP server answering 200 to every POST; yields (url, [(headers, body)])."""
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(
                (dict(self.headers), self.rfile.read(int(self.headers["Content-Length"])))
            )
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def test_a_customer_webhook_hears_delivery_ready_signed(
    fleet_operator, customer, settings, django_capture_on_commit_callbacks
):
    from marketplace.outbound_webhooks import verify_signature

    with webhook_receiver() as (url, received):
        # given: the customer's owner sets a webhook (a secret comes back once)
        settings.CUSTOMER_WEBHOOK_ALLOW_INSECURE = True
        answer = customer.client.put(
            "/api/v1/organization/webhook", {"url": url}, format="json"
        ).json()
        assert answer["url"] == url and len(answer["secret"]) == 64
        # when: an order is collected and delivered
        collection = Collection(fleet_operator, customer, target_hours="0.01")
        for seed in range(2):
            upload_episode(
                collection,
                parquet_bytes(episode_table(frames=600, seed=seed)),
                django_capture_on_commit_callbacks,
            )
    # then: one signed delivery.ready event
    [(headers, body)] = received
    assert headers["X-Marketplace-Event"] == "delivery.ready"
    assert verify_signature(answer["secret"], headers["X-Marketplace-Signature"], body)
    assert json.loads(body)["data"]["order"] == str(collection.order.id)


def test_webhook_urls_must_be_https_and_owners_only(customer, make_tenant):
    from marketplace.models import Membership, Organization

    response = customer.client.put(
        "/api/v1/organization/webhook", {"url": "http://example.com/h"}, format="json"
    )
    assert response.status_code == 400 and "url" in response.json()["fields"]
    member = make_tenant(Organization.Kind.CUSTOMER, Membership.Role.MEMBER)
    assert (
        member.client.put(
            "/api/v1/organization/webhook", {"url": "https://example.com/h"}, format="json"
        ).status_code
        == 403
    )


def _backdate_ready(delivery, seconds: int) -> None:
    from datetime import timedelta

    from django.utils import timezone

    Delivery.objects.filter(pk=delivery.pk).update(
        ready_at=timezone.now() - timedelta(seconds=seconds)
    )


def test_a_ready_email_lost_with_the_broker_is_sent_by_the_sweep_once(delivered, customer):
    from datasets.tasks import delivery_sweep

    # given: a delivery announced at once, then one whose email task never ran (its message
    # was lost: modelled by clearing what the first run recorded)
    _, _, delivery = delivered
    delivery.refresh_from_db()
    assert delivery.notified_at is not None and len(mail.outbox) == 1
    _backdate_ready(delivery, 3600)
    assert delivery_sweep() == 0 and len(mail.outbox) == 1  # announced: nothing again
    Delivery.objects.filter(pk=delivery.pk).update(notified_at=None)
    mail.outbox.clear()
    # when: beat runs the sweep twice
    queued = [delivery_sweep(), delivery_sweep()]
    # then: the email goes out once
    assert queued == [1, 0]
    assert [m.to for m in mail.outbox] == [[customer.user.email]]
    # and a delivery ready too long ago is left alone
    Delivery.objects.filter(pk=delivery.pk).update(notified_at=None)
    _backdate_ready(delivery, 3 * 86400)
    assert delivery_sweep() == 0


def test_a_customer_webhook_never_tried_is_sent_by_the_sweep(
    delivered, customer, settings, django_capture_on_commit_callbacks
):
    from datasets.tasks import delivery_sweep

    with webhook_receiver() as (url, received):
        # given: the organization has a webhook, and the delivery's webhook task never ran
        settings.CUSTOMER_WEBHOOK_ALLOW_INSECURE = True
        assert (
            customer.client.put(
                "/api/v1/organization/webhook", {"url": url}, format="json"
            ).status_code
            == 200
        )
        _, _, delivery = delivered
        Delivery.objects.filter(pk=delivery.pk).update(webhook_attempted_at=None)
        _backdate_ready(delivery, 3600)
        # when: beat runs the sweep twice (each commits what it records)
        queued = []
        for _ in range(2):
            with django_capture_on_commit_callbacks(execute=True):
                queued.append(delivery_sweep())
    # then: delivery.ready reaches the customer once
    assert queued == [1, 0]
    assert len(received) == 1 and str(delivery.id).encode() in received[0][1]
