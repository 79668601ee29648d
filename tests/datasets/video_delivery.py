"""Accepted camera episodes made directly (as the intake side leaves them): the parquet and
one PyAV-encoded MP4 per camera in the local S3 server, Episode and EpisodeVideo rows."""

import hashlib
import io
import tempfile
from decimal import Decimal
from pathlib import Path

import av
import numpy as np
from django.utils import timezone

from datasets import storage
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode, EpisodeVideo
from orders.models import Order
from tests.datasets.helpers import Collection
from tests.datasets.videos import encode, square_frames

FPS = 30
STATE_NAMES = [f"fr3_joint{i}" for i in range(1, 8)] + ["finger_left", "finger_right"]
ACTION_NAMES = [f"fr3_joint{i}" for i in range(1, 8)] + ["gripper_width"]
FORCE_NAMES = ["fx", "fy", "fz", "tx", "ty", "tz"]
TACTILE_NAMES = ["left_0", "left_1", "right_0", "right_1"]
CAMERAS = ("observation.images.scene", "observation.images.wrist")


def camera_spec(*, codec: str = "av1", cameras=CAMERAS, force: bool = True) -> dict:
    return {
        "state": {"names": STATE_NAMES},
        "action": {"names": ACTION_NAMES},
        "cameras": [{"key": key, "min_width": 32, "min_height": 24} for key in cameras],
        "vectors": [
            {"key": "observation.force_torque", "names": FORCE_NAMES},
            {"key": "observation.tactile", "names": TACTILE_NAMES},
        ]
        if force
        else [],
        "video_codec": codec,
    }


def camera_collection(fleet_operator, customer, spec: dict) -> Collection:
    order = Collection(fleet_operator, customer).order
    order.stream_spec = spec
    order.status = Order.Status.IN_REVIEW  # collected: the full delivery comes next
    order.save(update_fields=["stream_spec", "status"])
    return Collection(fleet_operator, customer, order=order)


def episode_columns(frames: int, seed: int) -> dict:
    rng = np.random.default_rng(seed + 100)
    columns = episode_table(frames=frames, fps=FPS, dim=len(ACTION_NAMES), seed=seed)
    state = np.concatenate(
        [columns["observation.state"], rng.normal(0, 0.01, (frames, 1)).astype(np.float32)],
        axis=1,
    )
    columns["observation.state"] = state
    columns["observation.force_torque"] = rng.normal(0, 5, (frames, 6)).astype(np.float32)
    columns["observation.tactile"] = rng.uniform(0, 1, (frames, 4)).astype(np.float32)
    return columns


def video_bytes(frames: int, seed: int, *, codec="libx264", width=64, height=48) -> bytes:
    path = encode(
        _tmp(seed, codec),
        square_frames(frames, width=width, height=height, seed=seed),
        fps=FPS,
        codec=codec,
    )
    data = path.read_bytes()
    path.unlink()
    return data


def _tmp(seed, codec) -> Path:
    return Path(tempfile.mkdtemp(prefix="video-")) / f"{seed}-{codec}.mp4"


def decoded(data: bytes) -> list[np.ndarray]:
    with av.open(io.BytesIO(data)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def accepted_episode(collection: Collection, columns: dict, videos: dict, task: str) -> Episode:
    """An accepted episode of `collection`'s job: parquet and videos ({key: mp4 bytes})."""
    data = parquet_bytes(columns)
    digest = hashlib.sha256(data).hexdigest()
    frames = len(columns["frame_index"])
    key = f"episodes/{collection.order.id}/{digest}.parquet"
    storage.put_bytes(key=key, data=data)
    episode = Episode.objects.create(
        job=collection.job,
        order=collection.order,
        fleet=collection.site.fleet,
        site=collection.site,
        robot=collection.robot,
        operator="op-7",
        task_instruction=task,
        success=True,
        objects_handled=["peg-8mm"],
        fps=FPS,
        size_bytes=len(data),
        sha256=digest,
        upload_key=key,
        stored_key=key,
        status=Episode.Status.ACCEPTED,
        frames=frames,
        declared_frames=frames,
        duration_seconds=Decimal(frames) / FPS,
        uploaded_at=timezone.now(),
        decided_at=timezone.now(),
    )
    for camera_key, mp4 in videos.items():
        stored = f"episodes/{collection.order.id}/{episode.id}/{camera_key}.mp4"
        storage.put_bytes(key=stored, data=mp4)
        with av.open(io.BytesIO(mp4)) as container:
            context = container.streams.video[0].codec_context
            codec = "av1" if context.codec.name in {"libdav1d", "av1"} else context.codec.name
            width, height, pix_fmt = context.width, context.height, context.pix_fmt
        EpisodeVideo.objects.create(
            episode=episode,
            camera_key=camera_key,
            size_bytes=len(mp4),
            sha256=hashlib.sha256(mp4).hexdigest(),
            upload_key=stored,
            stored_key=stored,
            uploaded_at=timezone.now(),
            codec=codec,
            pix_fmt=pix_fmt,
            width=width,
            height=height,
            frames=frames,
            fps=FPS,
        )
    return episode


def assemble(collection: Collection, capture):
    """Open and assemble (eagerly) the order's full delivery."""
    from datasets.models import Delivery
    from datasets.services.delivery_versions import delivery_start

    with capture(execute=True):
        delivery = delivery_start(order_id=collection.order.id, kind=Delivery.Kind.FULL)
    delivery.refresh_from_db()
    return delivery


def download(delivery, target: Path) -> Path:
    """Every file of a ready delivery, from storage into `target`."""
    for entry in delivery.files.all():
        path = target / entry.path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            for block in storage.stream(f"{delivery.prefix}/{entry.path}"):
                handle.write(block)
    return target
