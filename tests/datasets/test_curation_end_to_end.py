"""Issue 16's end-to-end acceptance: an operator with injected bad habits is flagged by the
operator figures, excluded by the customer, its hours are re-dispatched and collected by another
operator, the fleet is paid only for the kept episodes, and the delivered v2 leaves them out;
the ledger still balances."""

import json
from decimal import Decimal

import numpy as np
import pytest

from billing.ledger import balances
from billing.models import FleetPayable, LedgerAccount, PayableDeduction
from billing.services.payables import order_earned
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery, Dispute, Episode, EpisodeExclusion
from datasets.services.disputes import dispute_decide
from fleets.models import Job, Offer
from orders.models import Order
from tests.datasets.helpers import Collection, upload_episode
from tests.datasets.test_deliveries import fetch, link

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]

FRAMES = 540  # 18 s at 30 fps: four episodes fill the 0.02 h job exactly


def bad_habits(seed: int) -> dict:
    """A demonstration with an operator's bad habits: the robot stands still for the first
    40 % (under QA's 50 % idle limit, so accepted) and then moves with a 4 Hz tremor (jerky,
    still within speed limits): accepted, measured, and well under the order's median
    quality."""
    columns = episode_table(frames=FRAMES, seed=seed)
    still_until = int(FRAMES * 0.4)
    state = columns["observation.state"]
    t = np.arange(FRAMES) / 30
    tremor = (0.03 * np.sin(2 * np.pi * 4 * t)).astype(np.float32)
    state[still_until:, :-1] += tremor[still_until:, None]
    columns["action"][still_until - 1 : -1, :-1] = state[still_until:, :-1]
    still = state[still_until].copy()
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, 0.001, state[:still_until].shape).astype(np.float32)
    state[:still_until] = still + noise
    columns["action"][: still_until - 1] = still
    return columns


def _accept_offer(collection: Collection, job: Job, capture) -> None:
    offer = Offer.objects.filter(job=job, status=Offer.Status.PENDING).first()
    assert offer is not None, (job.status, job.flag_reason)
    with capture(execute=True):
        response = collection.operator.client.post(
            f"/api/v1/fleet/offers/{offer.id}/accept", {}, format="json"
        )
    assert response.status_code in (200, 201), response.json()


def _ledger_is_balanced(order: Order) -> None:
    """Every ledger entry of the order sums to zero (each transaction balances)."""
    assert sum(balances(order_id=order.id).values(), Decimal(0)) == 0


def test_a_bad_operator_is_flagged_excluded_recollected_unpaid_and_left_out_of_v2(
    fleet_operator, customer, settings, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    settings.OPERATOR_OUTLIER_MIN_EPISODES = 1
    collection = Collection(fleet_operator, customer, target_hours="0.02")
    order, first_job = collection.order, collection.job
    order.hours = Decimal("0.02")
    order.save(update_fields=["hours"])
    for seed, operator in ((11, "op-a"), (12, "op-bad"), (13, "op-b"), (14, "op-bad")):
        columns = bad_habits(seed) if operator == "op-bad" else episode_table(FRAMES, seed=seed)
        episode = upload_episode(collection, parquet_bytes(columns), capture, operator=operator)
        assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    v1 = Delivery.objects.get(order=order)
    order.refresh_from_db()
    assert order.status == Order.Status.DELIVERED and v1.episodes == 4
    payable = FleetPayable.objects.get(job=first_job)
    assert payable.accepted_seconds == Decimal("72.000")

    # 1. the operator figures flag op-bad against the order's median
    figures = customer.client.get(f"/api/v1/orders/{order.id}/operators").json()
    rows = {row["operator"]: row for row in figures}
    assert "quality" in rows["op-bad"]["flags"], rows
    assert rows["op-a"]["flags"] == rows["op-b"]["flags"] == []

    # 2. the customer claims op-bad's delivered episodes (issue 28); a person judges the
    # operator's habits: the fleet's time to answer passes, staff grant it
    bad = Episode.objects.filter(order=order, operator="op-bad").values_list("id", flat=True)
    with capture(execute=True):
        claimed = customer.client.post(
            f"/api/v1/deliveries/{v1.id}/claims",
            {
                "remedy": "recollect",
                "note": "idle starts",
                "items": [{"episode": str(e), "reason_code": "operator_habits"} for e in bad],
            },
            format="json",
        )
    assert claimed.status_code == 201, claimed.json()
    (dispute,) = Dispute.objects.filter(claim_id=claimed.json()["id"])
    Dispute.objects.filter(pk=dispute.pk).update(answer_due_at=dispute.created_at)
    with capture(execute=True):
        dispute_decide(
            staff_label="staff:ops", dispute_id=dispute.id, decision="granted", note="idle starts"
        )
    excluded = EpisodeExclusion.objects.filter(order=order)
    assert sum(e.seconds for e in excluded) == Decimal("36.000")
    order.refresh_from_db()
    assert order.status == Order.Status.IN_COLLECTION and order.accepted_seconds == 36
    payable.refresh_from_db()
    assert payable.accepted_seconds == Decimal("36.000")  # reduced before any payout

    # 3. its hours are re-dispatched (the existing dispatch path) and collected by op-new
    (extra,) = Job.objects.filter(order=order).exclude(pk=first_job.pk)
    assert extra.target_hours == Decimal("0.01")
    _accept_offer(collection, extra, capture)
    collection.job = extra
    for seed in (21, 22):
        episode = upload_episode(
            collection, parquet_bytes(episode_table(FRAMES, seed=seed)), capture, operator="op-new"
        )
        assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures

    # 4. v2 is delivered without op-bad's episodes
    order.refresh_from_db()
    assert order.status == Order.Status.DELIVERED
    v2 = Delivery.objects.get(order=order, version=2)
    assert v2.status == Delivery.Status.READY and v2.previous_id == v1.id and v2.episodes == 4
    kept = Episode.objects.filter(order=order, status=Episode.Status.ACCEPTED)
    assert sorted(kept.values_list("operator", flat=True)) == ["op-a", "op-b", "op-new", "op-new"]
    manifest = json.loads(fetch(link(customer.client, v2.id)["Location"]))
    assert manifest["dataset_version"] == 2
    assert link(customer.client, v1.id).status_code == 409  # replaced by v2, which is ready

    # 5. the fleet is paid only for the kept episodes: 36 s on each job, at the agreed rate
    payables = FleetPayable.objects.filter(order=order).order_by("job__sequence")
    assert [p.accepted_seconds for p in payables] == [Decimal("36.000")] * 2
    rate = payables[0].rate_per_hour
    assert sum(p.amount for p in payables) == (Decimal(72) * rate / 3600).quantize(Decimal("0.01"))
    assert PayableDeduction.objects.filter(payable=payable, in_place=True).count() == 1
    # and the customer's parts of the payables still add up to what the customer pays, exactly
    assert sum(p.customer_amount for p in payables) == order_earned(order)
    fleet_balance = balances(fleet=collection.site.fleet).get(
        (LedgerAccount.FLEET_PAYABLE, order.currency)
    )
    assert fleet_balance == -sum(p.amount for p in payables)
    _ledger_is_balanced(order)
