"""Issue 16's acceptance-window test: the customer rejects 3 delivered episodes within
DELIVERY_ACCEPTANCE_DAYS: credited (a pro rata refund through billing's refund path, on the
local Stripe emulator) or re-collected; the fleet's payable is reversed (carried as a deduction
on its next payout when it was paid already); the delivery is versioned (v2 with its own
manifest); every rejection is an audit row. Outside the window: a clear 409.
Since issue 28 a rejection is a claim: 3 of 6 episodes is beyond the allowance, so staff grant
it after the fleet's time to answer (tests/billing/test_claims_money.py has the rest)."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from billing import stripe_gateway as gateway
from billing.ledger import balances
from billing.models import (
    FleetPayable,
    FleetPayoutAccount,
    LedgerAccount,
    PayableDeduction,
    Payout,
    Refund,
)
from billing.services.payables import order_fleet_payables
from billing.services.payouts import payout_plan, payout_prepare, payout_submit
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Claim, Delivery, Dispute, Episode, EpisodeExclusion
from datasets.services.disputes import dispute_decide
from fleets.models import Job
from marketplace.models import User
from orders.models import Order
from orders.services import order_transition
from tests.billing.payout_helpers import delivered_order
from tests.datasets.helpers import Collection, upload_episode
from tests.datasets.test_deliveries import fetch, link

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3")]

FRAMES = 360  # 12 s: six episodes fill the 0.02 h order


@pytest.fixture
def delivered(paid_order, fleet_operator, customer, django_capture_on_commit_callbacks):
    """A 0.02 h order paid 200.00 on the Stripe emulator, delivered (v1) from six 12 s
    episodes, with its fleet's payable recorded."""
    order, payment, _intent = paid_order(
        hours=Decimal("0.02"), environments=1, total=Decimal("200.00")
    )
    order_transition(order_id=order.id, to_status=Order.Status.IN_COLLECTION, actor_label="t")
    collection = Collection(fleet_operator, customer, target_hours="0.02", order=order)
    for seed in range(6):
        episode = upload_episode(
            collection,
            parquet_bytes(episode_table(frames=FRAMES, seed=40 + seed)),
            django_capture_on_commit_callbacks,
            operator=f"op-{seed % 2}",
        )
        assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    order.refresh_from_db()
    assert order.status == Order.Status.DELIVERED
    return collection, payment, Delivery.objects.get(order=order)


def reject(client, delivery, capture, **body):
    """A claim on the episodes, then (beyond the allowance: a dispute) granted by staff."""
    body.setdefault("remedy", "recollect")
    with capture(execute=True):
        response = client.post(f"/api/v1/deliveries/{delivery.id}/claims", body, format="json")
    if response.status_code != 201:
        return response
    (dispute,) = Dispute.objects.filter(claim_id=response.json()["id"])
    Dispute.objects.filter(pk=dispute.pk).update(answer_due_at=dispute.created_at)
    with capture(execute=True):
        dispute_decide(
            staff_label="staff:judge", dispute_id=dispute.id, decision="granted", note="checked"
        )
    return response


@pytest.fixture
def transfers(monkeypatch):
    """Stripe Connect transfers, in memory (the emulator has none): idempotent by key."""
    sent: dict[str, gateway.TransferResult] = {}

    def transfer_create(**kwargs):
        key = kwargs["idempotency_key"]
        sent.setdefault(
            key,
            gateway.TransferResult(
                id=f"tr_{len(sent)}",
                amount=kwargs["amount"],
                currency=kwargs["currency"],
                destination=kwargs["destination"],
            ),
        )
        return sent[key]

    monkeypatch.setattr(gateway, "transfer_find", lambda **kwargs: None)
    monkeypatch.setattr(gateway, "transfer_create", transfer_create)
    return sent


def _pay_out(fleet_id) -> list[Payout]:
    return [payout_submit(payout_id=p.id) for p in payout_prepare(fleet_id=fleet_id)]


def test_three_rejected_episodes_are_credited_deducted_after_payout_and_versioned(
    delivered, customer, transfers, django_capture_on_commit_callbacks
):
    collection, payment, v1 = delivered
    order, fleet = collection.order, collection.site.fleet
    FleetPayoutAccount.objects.create(fleet=fleet, stripe_account_id="acct_window")
    payable = FleetPayable.objects.get(job=collection.job)
    assert payable.accepted_seconds == Decimal("72.000")
    (paid,) = _pay_out(fleet.id)  # the fleet was paid before the customer pushed back
    assert paid.status == Payout.Status.PAID and paid.amount == payable.amount
    chosen = v1.episode_ids[:3]
    assert len(v1.episode_ids) == 6
    # when
    response = reject(
        customer.client,
        v1,
        django_capture_on_commit_callbacks,
        episodes=chosen,
        reason_code="wrong_task",
        note="the wrong peg",
        remedy="credit",
    )
    # then: audited, not re-collected, the order stays delivered
    assert response.status_code == 201, response.json()
    rows = EpisodeExclusion.objects.filter(order=order)
    assert sum(r.seconds for r in rows) == Decimal("36.000")
    assert sorted(str(r.episode_id) for r in rows) == sorted(chosen)
    assert {(r.scope, r.remedy, r.reason_code) for r in rows} == {
        ("acceptance", "credit", "wrong_task")
    }
    order.refresh_from_db()
    assert order.status == Order.Status.DELIVERED and order.accepted_hours == Decimal("0.01")
    assert Job.objects.filter(order=order).count() == 1
    # credited: half the hours, half the payment, refunded on the Stripe emulator
    (refund,) = Refund.objects.filter(order=order, reason=Refund.Reason.CREDIT)
    assert refund.amount == Decimal("100.00") and refund.status == Refund.Status.SUCCEEDED
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("100.00")
    # the fleet's payable (paid already) is carried as a deduction on its next payout
    (deduction,) = PayableDeduction.objects.filter(payable=payable)
    assert not deduction.in_place and deduction.payout_id is None
    assert deduction.seconds == Decimal("36.000")
    assert deduction.amount == (payable.amount / 2).quantize(Decimal("0.01"))
    assert _pay_out(fleet.id) == []  # nothing owed yet: the deduction waits
    later = delivered_order(jobs=[(fleet, 7200)], hours="2.00", total="500.00")
    job = later.jobs.get()
    job.assignments.update(rate_per_hour=payable.rate_per_hour, currency=later.currency)
    (next_payable,) = order_fleet_payables(order_id=later.id)
    (planned,) = [row for row in payout_plan() if row.fleet == fleet]
    assert planned.amount == next_payable.amount - deduction.amount
    (next_payout,) = _pay_out(fleet.id)
    assert next_payout.amount == next_payable.amount - deduction.amount
    deduction.refresh_from_db()
    assert deduction.payout_id == next_payout.id
    assert balances(fleet=fleet).get((LedgerAccount.FLEET_PAYABLE, order.currency)) == 0
    for currency_total in _totals(balances(order_id=order.id)).values():
        assert currency_total == 0
    # versioned: v2 without the rejected episodes, its own prefix and manifest; v1 still works
    v2 = Delivery.objects.get(order=order, version=2)
    assert (v2.version, v2.previous_id, v2.status, v2.episodes) == (2, v1.id, "ready", 3)
    assert v2.prefix != v1.prefix and not set(chosen) & set(v2.episode_ids)
    manifest = json.loads(fetch(link(customer.client, v2.id)["Location"]))
    assert manifest["dataset_version"] == 2 and manifest["previous_delivery"] == str(v1.id)
    # v2 is ready: v1 issues no new links (issue 28)
    assert link(customer.client, v1.id).status_code == 409


def _totals(by_account: dict) -> dict:
    out: dict = {}
    for (_account, currency), amount in by_account.items():
        out[currency] = out.get(currency, Decimal(0)) + amount
    return out


def test_rejected_episodes_are_recollected_and_the_unpaid_payable_reduced(
    delivered, customer, django_capture_on_commit_callbacks
):
    collection, _payment, v1 = delivered
    payable = FleetPayable.objects.get(job=collection.job)
    response = reject(
        customer.client,
        v1,
        django_capture_on_commit_callbacks,
        episodes=v1.episode_ids[3:],
        reason_code="camera",
    )
    assert response.status_code == 201, response.json()
    order = collection.order
    order.refresh_from_db()
    assert order.status == Order.Status.IN_COLLECTION
    (extra,) = Job.objects.filter(order=order).exclude(pk=collection.job.pk)
    assert extra.target_hours == Decimal("0.01")
    payable.refresh_from_db()
    assert payable.accepted_seconds == Decimal("36.000") and payable.payout_id is None
    assert PayableDeduction.objects.get(payable=payable).in_place
    assert not Refund.objects.filter(order=order, reason=Refund.Reason.CREDIT).exists()
    v1.refresh_from_db()
    assert v1.superseded_at is not None
    again = reject(
        customer.client,
        v1,
        django_capture_on_commit_callbacks,
        episodes=v1.episode_ids[:1],
        reason_code="camera",
    )
    assert again.status_code == 409 and again.json()["code"] == "delivery_superseded"


def test_the_window_closes_and_hostile_requests_are_refused(
    delivered, customer, other_customer, fleet_operator, settings
):
    collection, _payment, v1 = delivered
    url = f"/api/v1/deliveries/{v1.id}/claims"
    body = {"episodes": v1.episode_ids[:1], "reason_code": "idle", "remedy": "recollect"}
    assert other_customer.client.post(url, body, format="json").status_code == 404
    assert fleet_operator.client.post(url, body, format="json").status_code == 403
    stranger = customer.client.post(
        url, {**body, "episodes": [str(collection.job.id)]}, format="json"
    )
    assert stranger.status_code == 400 and "items" in stranger.json()["fields"]
    listed = customer.client.get(f"/api/v1/deliveries/{v1.id}").json()
    assert listed["acceptance_until"].startswith(
        f"{(v1.ready_at + timedelta(days=settings.DELIVERY_ACCEPTANCE_DAYS)):%Y-%m-%d}"
    )
    Delivery.objects.filter(pk=v1.pk).update(
        ready_at=timezone.now() - timedelta(days=settings.DELIVERY_ACCEPTANCE_DAYS, minutes=1)
    )
    closed = customer.client.post(url, body, format="json")
    assert closed.status_code == 409 and closed.json()["code"] == "acceptance_window_closed"
    assert "closed on" in closed.json()["message"]
    assert EpisodeExclusion.objects.count() == 0 and not Claim.objects.exists()


def test_staff_credit_a_delivered_order_from_their_page_and_not_one_still_collecting(
    delivered, django_capture_on_commit_callbacks
):
    collection, _payment, _v1 = delivered
    order = collection.order
    url = f"/staff/orders/{order.id}/exclusions/"
    staff = Client()
    staff.force_login(User.objects.create_user(username="stella", password="x", is_staff=True))
    page = staff.get(url).content.decode()
    assert 'id="exclude-remedy"' in page and "Credit the customer" in page
    body = {"operator": "op-0", "reason_code": "jerky", "remedy": "credit"}
    asked = staff.post(url, body).content.decode()
    assert "refunded to the customer" in asked and not EpisodeExclusion.objects.exists()
    # when: confirmed
    with django_capture_on_commit_callbacks(execute=True):
        done = staff.post(url, {**body, "confirmed": "yes"})
    # then: op-0's 3 episodes are credited by a real refund, v2 is ready without them
    assert done.status_code == 302
    rows = EpisodeExclusion.objects.all()
    assert {(r.operator, r.scope, r.remedy, r.actor_label) for r in rows} == {
        ("op-0", "operator", "credit", "staff:stella")
    } and len(rows) == 3
    (refund,) = Refund.objects.filter(order=order, reason=Refund.Reason.CREDIT)
    assert refund.amount == Decimal("100.00") and refund.status == Refund.Status.SUCCEEDED
    v2 = Delivery.objects.get(order=order, version=2)
    assert v2.status == Delivery.Status.READY and v2.episodes == 3
    order.refresh_from_db()
    assert order.status == Order.Status.DELIVERED
    assert Job.objects.filter(order=order).count() == 1  # credited, not collected again
    # a credit while the order still collects is refused with the reason; nothing changes
    order.status = Order.Status.IN_COLLECTION
    order.save(update_fields=["status"])
    refused = staff.post(
        url, {**body, "operator": "op-1", "confirmed": "yes"}, follow=True
    ).content.decode()
    assert "Only a delivered order" in refused and EpisodeExclusion.objects.count() == 3
