"""Shared pieces of the episode and delivery tests: a fleet holding a job, uploads."""

import hashlib
import io
import urllib.request
from decimal import Decimal
from urllib.error import HTTPError

import pyarrow as pa
import pyarrow.parquet as pq

from datasets.models import Episode
from orders.models import Order
from tests.factories import FleetFactory, JobFactory, OrderFactory, RobotFactory, SiteFactory


def frames_in(data: bytes, default: int = 30) -> int:
    """The rows of an episode file, as a fleet declares them; `default` for a file that is not
    parquet (tests of QA's refusals)."""
    try:
        return pq.ParquetFile(io.BytesIO(data)).metadata.num_rows
    except (pa.ArrowException, OSError, ValueError):
        return default


class Collection:
    """A fleet operator holding one assigned job of a customer's order, at a site with a robot."""

    def __init__(self, operator, customer, *, target_hours="0.01", order=None, **job_fields):
        self.operator = operator
        fleet = FleetFactory(organization=operator.organization)
        self.site = SiteFactory(fleet=fleet)
        self.robot = RobotFactory(site=self.site, fleet=fleet)
        self.order = order or OrderFactory(
            organization=customer.organization,
            status=Order.Status.IN_COLLECTION,
            hours=Decimal("1"),
            environments=1,
        )
        self.job = JobFactory(
            order=self.order, site=self.site, target_hours=Decimal(target_hours), **job_fields
        )

    def register(self, data: bytes, client=None, **overrides):
        fps = overrides.get("fps", 30)
        body = {
            "site": str(self.site.id),
            "robot": str(self.robot.id),
            "operator": "op-7",
            "task_instruction": "insert the peg",
            "success": True,
            "fps": 30,
            "size_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "frames": frames_in(data, default=2 * fps),
            "objects_handled": ["peg-8mm", "block"],
            **overrides,
        }
        return (client or self.operator.client).post(
            f"/api/v1/fleet/jobs/{self.job.id}/episodes", body, format="json"
        )


def put(upload: dict, data: bytes, headers: dict | None = None) -> int:
    request = urllib.request.Request(
        upload["url"], data=data, method="PUT", headers=headers or upload["headers"]
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except HTTPError as exc:
        return exc.code


def complete(client, episode_id, capture, **body):
    """Complete the upload and run what that enqueues (QA, and what QA triggers) at once."""
    with capture(execute=True):
        response = client.post(f"/api/v1/fleet/episodes/{episode_id}/complete", body, format="json")
    assert response.status_code == 200, response.json()
    return Episode.objects.get(pk=episode_id)


def upload_episode(collection, data: bytes, capture, **overrides) -> Episode:
    body = collection.register(data, **overrides).json()
    assert put(body["upload"], data) == 200
    return complete(collection.operator.client, body["id"], capture)
