"""Shared pieces of the claim and dispute tests (issue 28): a delivered order of 12 s episodes,
claims through the API, keys of other roles in the same organization, the staff's hand."""

from decimal import Decimal

import numpy as np
from rest_framework.test import APIClient

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Claim, Delivery, Dispute, Episode
from datasets.services.disputes import dispute_decide
from marketplace.models import Membership
from marketplace.services import api_key_create
from orders.models import Order
from tests.datasets.helpers import Collection, upload_episode

FRAMES = 360  # 12 s at 30 fps: six fill a 0.02 h order


def paused_table(seed: int) -> dict:
    """A demonstration that passes QA (idle 40 % of it, no idle head or tail) but stands still
    from 3.33 s to 8.33 s, then goes on where it stopped."""
    columns = episode_table(frames=FRAMES, seed=seed)
    rng = np.random.default_rng(seed)
    for name in ("observation.state", "action"):
        values = columns[name]
        hold = values[100] + rng.normal(0, 0.001, (150, values.shape[1]))
        columns[name] = np.concatenate([values[:100], hold, values[100:210]]).astype(np.float32)
    return columns


def deliver(collection: Collection, capture, episodes: list[dict]) -> Delivery:
    """Upload one 12 s episode per entry ({"seed", "success", "operator", "table"}); the last
    one completes the order, which is delivered (v1)."""
    for index, spec in enumerate(episodes):
        table = spec.get("table") or episode_table(frames=FRAMES, seed=spec.get("seed", 60 + index))
        episode = upload_episode(
            collection,
            parquet_bytes(table),
            capture,
            operator=spec.get("operator", f"op-{index % 2}"),
            success=spec.get("success", True),
        )
        assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    collection.order.refresh_from_db()
    assert collection.order.status == Order.Status.DELIVERED
    return Delivery.objects.get(order=collection.order, kind=Delivery.Kind.FULL, version=1)


def file_claim(client, delivery, capture, **body):
    """POST a claim and run its re-check (and what granting it queues) at once."""
    with capture(execute=True):
        return client.post(f"/api/v1/deliveries/{delivery.id}/claims", body, format="json")


def claim_of(response) -> Claim:
    assert response.status_code == 201, response.json()
    return Claim.objects.get(pk=response.json()["id"])


def role_client(organization, role: str) -> APIClient:
    """An API client with a key of `role` in the organization."""
    issued = api_key_create(organization=organization, name=f"{role} key", role=role)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw_key}")
    return client


MEMBER, BILLING = Membership.Role.MEMBER, Membership.Role.BILLING


def decide(dispute: Dispute, capture, decision: str, episodes=(), note="looked at the clips"):
    with capture(execute=True):
        return dispute_decide(
            staff_label="staff:judge",
            dispute_id=dispute.id,
            decision=decision,
            episode_ids=[str(e) for e in episodes],
            note=note,
        )


def seconds(*values) -> Decimal:
    return sum((Decimal(v) for v in values), Decimal(0))
