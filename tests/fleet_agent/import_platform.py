"""Imported recordings on the platform: an order with cameras, a fleet holding its job, each
recording registered (`POST jobs/<id>/episodes`, declaring its videos), PUT to the local S3
server by the agent's own `fleet_agent.uploads.put_all`, completed (QA runs at once, eager
Celery), then the order's delivery assembled and downloaded as a LeRobot v3.0 dataset."""

from __future__ import annotations

import io
from decimal import Decimal

import av
import numpy as np
import pyarrow.parquet as pq

from datasets.models import Delivery, Episode
from fleet_agent.client import ApiClient
from fleet_agent.importers.base import Recording
from fleet_agent.uploads import declarations, put_all
from orders.models import Order
from tests.datasets import lerobot_loader
from tests.datasets.helpers import Collection, complete
from tests.datasets.video_delivery import assemble, download
from tests.factories import OrderFactory

# only presigned PUTs go through it (they carry no API key), so no API address is needed
STORAGE = ApiClient(base_url="http://127.0.0.1:9", api_key="unused")


def import_collection(fleet_operator, customer, stream_spec: dict) -> Collection:
    """A fleet holding an assigned job of an FR3 order with `stream_spec` (hours to spare)."""
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("1"),
        environments=1,
    )
    order.stream_spec = stream_spec
    order.save(update_fields=["stream_spec"])
    return Collection(fleet_operator, customer, order=order, target_hours="1")


def upload(collection: Collection, recording: Recording, capture) -> Episode:
    """Register, PUT and complete one imported recording; the episode as QA left it."""
    episode = recording.episode
    response = collection.register(
        episode.data,
        fps=episode.fps,
        frames=episode.frames,
        videos=declarations(episode.videos),
        task_instruction=recording.task_instruction or "insert the peg",
        operator=recording.operator or "op-7",
        success=True if recording.success is None else recording.success,
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    parts, video_parts = put_all(STORAGE, body["id"], body["upload"], episode.data, episode.videos)
    extra = {"parts": parts} if parts else {}
    if video_parts:
        extra["videos"] = video_parts
    return complete(collection.operator.client, body["id"], capture, **extra)


def deliver(collection: Collection, capture, target) -> tuple:
    """The order's full delivery, assembled and downloaded: (root, lerobot_loader's dataset)."""
    collection.order.status = Order.Status.IN_REVIEW
    collection.order.save(update_fields=["status"])
    delivery = assemble(collection, capture)
    assert delivery.status == Delivery.Status.READY, delivery.failure_reason
    root = download(delivery, target)
    dataset = lerobot_loader.load(root)
    lerobot_loader.check_invariants(dataset)
    return root, dataset


def delivered_episodes(root, dataset, cameras) -> dict[int, dict]:
    """Per delivered episode, by its length: its rows' vectors and its decoded camera frames."""
    data = dataset["data"]
    frames = {key: lerobot_loader.camera_frames(root, dataset, key) for key in cameras}
    episodes = {}
    for number, row in enumerate(dataset["episodes"]):
        rows = data.slice(row["dataset_from_index"], row["length"])
        episodes[row["length"]] = {
            "observation.state": np.stack(rows["observation.state"].to_numpy(zero_copy_only=False)),
            "action": np.stack(rows["action"].to_numpy(zero_copy_only=False)),
            "frames": {key: frames[key][number] for key in cameras},
        }
    return episodes


def vectors(recording: Recording, name: str) -> np.ndarray:
    table = pq.read_table(io.BytesIO(recording.episode.data))
    return np.stack(table[name].to_numpy(zero_copy_only=False))


def decoded(data: bytes) -> list[np.ndarray]:
    with av.open(io.BytesIO(data)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def same_frames(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def codec_loss(a, b) -> float:
    """The largest mean absolute pixel difference over frame pairs (0-255)."""
    assert len(a) == len(b)
    return max(
        float(np.abs(x.astype(int) - y.astype(int)).mean()) for x, y in zip(a, b, strict=True)
    )
