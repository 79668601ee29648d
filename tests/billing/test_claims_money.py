"""Issue 28's money path: a customer that downloads a whole delivery and then rejects all of it
gets a dispute, not a refund; credit (a refund on the local Stripe emulator) and the reversal
of the fleet's payable happen only for the episodes staff grant; refused episodes stay
accepted, delivered and paid. A claim within the allowance that the re-check confirms is
granted at once, refunded to the cent of its seconds."""

import json
from decimal import Decimal

import pytest
from django.test import Client

from billing.models import FleetPayable, PayableDeduction, Refund
from billing.services.payables import payable_amount
from datasets.models import (
    Claim,
    ClaimEvent,
    ClaimItem,
    Delivery,
    Dispute,
    DownloadEvent,
    Episode,
    EpisodeExclusion,
)
from fleets.models import Fleet, Job, WebhookDelivery
from marketplace.models import User
from orders.models import Order
from orders.services import order_transition
from tests.datasets.claim_helpers import claim_of, decide, deliver, file_claim
from tests.datasets.helpers import Collection
from tests.datasets.test_deliveries import fetch, link
from tests.datasets.test_exclusions import assign
from tests.fleets.test_webhooks import Receiver

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3")]


@pytest.fixture
def paid_collection(paid_order, fleet_operator, customer):
    """A 0.02 h order paid 200.00 on the Stripe emulator, in collection by one fleet."""
    order, payment, _intent = paid_order(
        hours=Decimal("0.02"), environments=1, total=Decimal("200.00")
    )
    order_transition(order_id=order.id, to_status=Order.Status.IN_COLLECTION, actor_label="t")
    collection = Collection(fleet_operator, customer, target_hours="0.02", order=order)
    return collection, payment


@pytest.fixture
def fleet_receiver(paid_collection, settings):
    """The fleet's webhook endpoint, on loopback: what it is told, verified."""
    settings.FLEETS_WEBHOOK_ALLOW_INSECURE = True
    fleet = paid_collection[0].site.fleet
    secret = {"secret": fleet.webhook_secret}
    with Receiver([], secret) as receiver:
        Fleet.objects.filter(pk=fleet.pk).update(webhook_url=receiver.url)
        yield receiver


def _download_everything(client, delivery: Delivery) -> int:
    paths = list(delivery.files.values_list("path", flat=True))
    response = client.post(
        f"/api/v1/deliveries/{delivery.id}/links", {"paths": paths}, format="json"
    )
    assert response.status_code == 200, response.json()
    return sum(len(fetch(item["url"])) for item in response.json()["links"])


def test_reject_all_after_downloading_everything_is_a_dispute_and_only_granted_episodes_cost(
    paid_collection, fleet_receiver, customer, fleet_operator, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    collection, payment = paid_collection
    v1 = deliver(collection, capture, [{"seed": 70 + i} for i in range(6)])
    payable = FleetPayable.objects.get(job=collection.job)
    assert payable.accepted_seconds == Decimal("72.000")
    rate = payable.rate_per_hour
    downloaded = _download_everything(customer.client, v1)
    assert downloaded == sum(v1.files.values_list("size_bytes", flat=True))
    # when: every episode rejected for credit, with a reason the re-check could confirm
    response = file_claim(
        customer.client,
        v1,
        capture,
        remedy="credit",
        episodes=v1.episode_ids,
        reason_code="idle",
        note="useless",
    )
    # then: a dispute, nothing excluded, credited or reversed; v1 still issues links
    claim = claim_of(response)
    claim.refresh_from_db()
    assert claim.status == Claim.Status.DISPUTED
    (dispute,) = Dispute.objects.filter(claim=claim)
    assert dispute.fleet_id == collection.site.fleet_id and dispute.status == Dispute.Status.OPEN
    routes = set(claim.items.values_list("status", "route"))
    assert routes == {("disputed", "Disputed: beyond the order's rejection allowance.")}
    assert not EpisodeExclusion.objects.exists()
    assert not Refund.objects.filter(order=collection.order, reason=Refund.Reason.CREDIT).exists()
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("0.00")
    payable.refresh_from_db()
    assert (payable.accepted_seconds, payable.amount) == (
        Decimal("72.000"),
        payable_amount(accepted_seconds=Decimal(72), rate_per_hour=rate, currency="USD"),
    )
    assert link(customer.client, v1.id).status_code == 302
    # the fleet is told (its webhook, signed) and reads it in its API
    (told,) = [json.loads(r["body"]) for r in fleet_receiver.requests]
    assert fleet_receiver.requests[0]["verified"] and told["type"] == "dispute.opened"
    assert told["data"]["dispute"] == str(dispute.id)
    assert {e["episode"] for e in told["data"]["episodes"]} == set(v1.episode_ids)
    assert WebhookDelivery.objects.get(event_type="dispute.opened").status == "delivered"
    listed = fleet_operator.client.get("/api/v1/fleet/disputes").json()["results"]
    assert [d["id"] for d in listed] == [str(dispute.id)] and len(listed[0]["items"]) == 6
    answer = fleet_operator.client.post(
        f"/api/v1/fleet/disputes/{dispute.id}/answer",
        {"answer": "Every episode passed QA; the customer downloaded all 6 first."},
        format="json",
    )
    assert answer.status_code == 200 and answer.json()["status"] == "awaiting_decision"
    # staff see what was downloaded and the customer's record before deciding
    staff = Client()
    staff.force_login(User.objects.create_user(username="judge", password="x", is_staff=True))
    page = staff.get(f"/staff/disputes/{dispute.id}/").content.decode()
    assert f"{v1.files.count()} / {v1.files.count()} (100%)" in page
    assert "Every episode passed QA" in page
    # when: staff grant two of them
    granted = v1.episode_ids[:2]
    with capture(execute=True):
        decided = staff.post(
            f"/staff/disputes/{dispute.id}/",
            {"decision": "partial", "episodes": granted, "note": "two really stand still"},
        )
    assert decided.status_code == 302
    # then: exactly those two are excluded and credited; the four others stay and are paid
    dispute.refresh_from_db()
    assert (dispute.status, dispute.decision) == ("decided", "partial")
    rows = EpisodeExclusion.objects.filter(order=collection.order)
    assert sorted(str(r.episode_id) for r in rows) == sorted(granted)
    assert {(r.remedy, r.scope, r.actor_label) for r in rows} == {
        ("credit", "acceptance", "staff:judge")
    }
    statuses = dict(claim.items.values_list("episode_id", "status"))
    assert sorted(str(e) for e, s in statuses.items() if s == "granted") == sorted(granted)
    assert sum(1 for s in statuses.values() if s == "refused") == 4
    refused = Episode.objects.filter(pk__in=v1.episode_ids[2:])
    assert {e.status for e in refused} == {Episode.Status.ACCEPTED}
    (refund,) = Refund.objects.filter(order=collection.order, reason=Refund.Reason.CREDIT)
    # 24 s of 72 s: a third of 200.00, to the cent
    assert refund.amount == Decimal("66.67") and refund.status == Refund.Status.SUCCEEDED
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("66.67")
    payable.refresh_from_db()
    assert payable.accepted_seconds == Decimal("48.000")
    (deduction,) = PayableDeduction.objects.filter(payable=payable)
    assert deduction.seconds == Decimal("24.000")
    assert payable.amount == payable_amount(
        accepted_seconds=Decimal(72), rate_per_hour=rate, currency="USD"
    ) - payable_amount(accepted_seconds=Decimal(24), rate_per_hour=rate, currency="USD")
    # v2 without the credited two (the refused four are delivered still); v1 issues no links
    v2 = Delivery.objects.get(order=collection.order, version=2)
    assert v2.status == Delivery.Status.READY and sorted(v2.episode_ids) == sorted(
        v1.episode_ids[2:]
    )
    manifest = json.loads(fetch(link(customer.client, v2.id)["Location"]))
    assert manifest["dataset_version"] == 2
    old = link(customer.client, v1.id)
    assert old.status_code == 409 and old.json()["code"] == "delivery_superseded"
    claim.refresh_from_db()
    assert claim.status == Claim.Status.DECIDED
    decided_event = json.loads(fleet_receiver.requests[-1]["body"])
    assert decided_event["type"] == "dispute.decided"
    assert decided_event["data"]["decision"] == "partial"
    actions = list(ClaimEvent.objects.filter(claim=claim).values_list("action", flat=True))
    assert actions == ["filed", "rechecked", "disputed", "answered", "decided"]
    # every file once, and the manifest once more while the claim was in dispute
    assert DownloadEvent.objects.filter(delivery=v1).count() == v1.files.count() + 1


def test_a_confirmed_claim_within_the_allowance_is_credited_at_once_to_the_second(
    paid_collection, customer, settings, django_capture_on_commit_callbacks
):
    """20 % of 72 s is 14.4 s: one 12 s episode fits. Its label says it failed: granted at
    once, 12 s of 72 s refunded (33.33 of 200.00); the fleet is not paid those 12 s. The
    other claimed episode is labelled a success: not confirmed, so disputed, and costs
    nothing."""
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("0.20")
    capture = django_capture_on_commit_callbacks
    collection, _payment = paid_collection
    v1 = deliver(collection, capture, [{"seed": 80 + i, "success": i != 0} for i in range(6)])
    failed = Episode.objects.get(order=collection.order, success=False)
    fine = next(e for e in v1.episode_ids if e != str(failed.id))
    payable = FleetPayable.objects.get(job=collection.job)
    before = payable.amount
    # when
    response = file_claim(
        customer.client,
        v1,
        capture,
        remedy="credit",
        items=[
            {"episode": fine, "reason_code": "failed_task"},
            {"episode": str(failed.id), "reason_code": "failed_task"},
        ],
    )
    # then
    claim = claim_of(response)
    claim.refresh_from_db()
    assert claim.status == Claim.Status.DISPUTED
    granted = ClaimItem.objects.get(episode=failed)
    assert (granted.status, granted.recheck) == ("granted", "confirmed")
    disputed = ClaimItem.objects.get(episode_id=fine)
    assert (disputed.status, disputed.recheck) == ("disputed", "not_confirmed")
    (refund,) = Refund.objects.filter(order=collection.order, reason=Refund.Reason.CREDIT)
    assert refund.amount == Decimal("33.33") and refund.status == Refund.Status.SUCCEEDED
    payable.refresh_from_db()
    assert payable.accepted_seconds == Decimal("60.000")
    assert before - payable.amount == payable_amount(
        accepted_seconds=Decimal(12), rate_per_hour=payable.rate_per_hour, currency="USD"
    )
    (row,) = EpisodeExclusion.objects.all()
    assert (row.episode_id, row.actor_label, row.against_allowance) == (
        failed.id,
        "system:claims",
        True,
    )
    # a refusal by staff costs nothing more
    (dispute,) = claim.disputes.all()
    Dispute.objects.filter(pk=dispute.pk).update(answer_due_at=dispute.created_at)
    decide(dispute, capture, "refused", note="the fleet's label says success, the clip too")
    assert Refund.objects.filter(order=collection.order).count() == 1
    payable.refresh_from_db()
    assert payable.accepted_seconds == Decimal("60.000")
    assert Episode.objects.get(pk=fine).status == Episode.Status.ACCEPTED


def test_a_credit_after_a_true_up_refunds_only_the_difference(
    paid_order, fleet_operator, customer, settings, django_capture_on_commit_callbacks
):
    """Delivered short (36 s of 72 s): the true-up refunds 100.00. Crediting one 12 s
    episode then owes 33.33 more, not the whole unkept share again."""
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("1")
    capture = django_capture_on_commit_callbacks
    order, payment, _intent = paid_order(
        hours=Decimal("0.02"), environments=1, total=Decimal("200.00")
    )
    order_transition(order_id=order.id, to_status=Order.Status.IN_COLLECTION, actor_label="t")
    collection = Collection(fleet_operator, customer, target_hours="0.01", order=order)
    v1 = deliver(collection, capture, [{"seed": 90 + i, "success": i != 0} for i in range(3)])
    (trueup,) = Refund.objects.filter(order=order, reason=Refund.Reason.TRUE_UP)
    assert trueup.amount == Decimal("100.00")
    # when
    claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="credit",
            episodes=v1.episode_ids[:1],
            reason_code="failed_task",
        )
    )
    # then
    (credit,) = Refund.objects.filter(order=order, reason=Refund.Reason.CREDIT)
    assert credit.amount == Decimal("33.33") and credit.status == Refund.Status.SUCCEEDED
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("133.33")


def test_a_credit_granted_during_a_recollection_is_refunded_at_the_next_delivery(
    paid_collection, customer, settings, django_capture_on_commit_callbacks
):
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("1")
    capture = django_capture_on_commit_callbacks
    collection, payment = paid_collection
    order, first_job = collection.order, collection.job.pk
    v1 = deliver(collection, capture, [{"seed": 110 + i, "success": i != 0} for i in range(6)])
    failed, disputed = v1.episode_ids[0], v1.episode_ids[1]
    # a credit claim a person must judge, then a re-collection granted at once
    credit_claim = claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="credit",
            episodes=[disputed],
            reason_code="wrong_task",
        )
    )
    claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="recollect",
            episodes=[failed],
            reason_code="failed_task",
        )
    )
    order.refresh_from_db()
    assert order.status == Order.Status.IN_COLLECTION
    # when: staff grant the credit while the hours are collected again
    (dispute,) = credit_claim.disputes.all()
    Dispute.objects.filter(pk=dispute.pk).update(answer_due_at=dispute.created_at)
    decide(dispute, capture, "granted", note="a cup, not a peg")
    # then: nothing refunded yet (the order is not delivered) ...
    assert not Refund.objects.filter(order=order, reason=Refund.Reason.CREDIT).exists()
    # ... until the re-collection is delivered: then 12 s of 72 s
    (again,) = Job.objects.filter(order=order).exclude(pk=collection.job.pk)
    collection.job = assign(again, collection)
    deliver(collection, capture, [{"seed": 120, "operator": "op-c"}])
    v2 = Delivery.objects.get(order=order, version=2)
    assert v2.status == Delivery.Status.READY and disputed not in v2.episode_ids
    (credit,) = Refund.objects.filter(order=order, reason=Refund.Reason.CREDIT)
    assert credit.amount == Decimal("33.33") and credit.status == Refund.Status.SUCCEEDED
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("33.33")
    # the fleet is paid for 48 s of the first job and the 12 s re-collected, not the credit
    payables = {p.job_id: p.accepted_seconds for p in FleetPayable.objects.filter(order=order)}
    assert payables == {first_job: Decimal("48.000"), again.pk: Decimal("12.000")}
