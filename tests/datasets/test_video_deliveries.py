"""Deliveries of orders with cameras and other sensors (issue 15, item 4): assembled from
accepted episodes in the local S3 server (parquet and PyAV-encoded MP4s)."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from datasets import storage
from datasets.models import Delivery, EpisodeVideo
from tests.datasets import lerobot_loader
from tests.datasets.video_delivery import (
    ACTION_NAMES,
    CAMERAS,
    FORCE_NAMES,
    STATE_NAMES,
    TACTILE_NAMES,
    accepted_episode,
    assemble,
    camera_collection,
    camera_spec,
    download,
    episode_columns,
    video_bytes,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]


def _collect(collection, lengths, *, source_codec="libx264", cameras=CAMERAS):
    uploads = []
    for seed, length in enumerate(lengths):
        columns = episode_columns(length, seed)
        videos = {
            key: video_bytes(length, seed * 10 + number, codec=source_codec)
            for number, key in enumerate(cameras)
        }
        accepted_episode(collection, columns, videos, task=f"task {seed % 2}")
        uploads.append((columns, videos))
    return uploads


def test_a_camera_order_is_delivered_with_videos_names_and_sensor_features(
    fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path
):
    collection = camera_collection(fleet_operator, customer, camera_spec(codec="h264"))
    uploads = _collect(collection, [45, 30])
    delivery = assemble(collection, django_capture_on_commit_callbacks)
    assert delivery.status == Delivery.Status.READY, delivery.failure_reason
    root = download(delivery, tmp_path)
    dataset = lerobot_loader.load(root)
    lerobot_loader.check_invariants(dataset)
    info = dataset["info"]
    assert info["video_path"] == (
        "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    )
    features = info["features"]
    assert features["observation.state"]["names"] == STATE_NAMES
    assert features["action"]["names"] == ACTION_NAMES
    assert features["observation.force_torque"] == {
        "dtype": "float32",
        "shape": [6],
        "names": FORCE_NAMES,
    }
    assert features["observation.tactile"]["names"] == TACTILE_NAMES
    tactile = np.stack(dataset["data"].column("observation.tactile").to_numpy(zero_copy_only=False))
    assert np.array_equal(
        tactile, np.concatenate([columns["observation.tactile"] for columns, _ in uploads])
    )
    for key in CAMERAS:
        assert features[key]["dtype"] == "video" and features[key]["shape"] == [48, 64, 3]
        assert features[key]["info"]["video.codec"] == "h264"
        assert (root / f"videos/{key}/chunk-000/file-000.mp4").is_file()
    # the sensor stream is delivered as it was uploaded, with its stats
    force = np.stack(
        dataset["data"].column("observation.force_torque").to_numpy(zero_copy_only=False)
    )
    expected = np.concatenate([columns["observation.force_torque"] for columns, _ in uploads])
    assert np.array_equal(force, expected)
    stats = dataset["stats"]["observation.force_torque"]
    assert np.allclose(stats["mean"], expected.mean(axis=0), atol=1e-4)
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for key in CAMERAS:
        assert [
            (
                e[f"videos/{key}/file_index"],
                e[f"videos/{key}/from_timestamp"],
                e[f"videos/{key}/to_timestamp"],
            )
            for e in episodes
        ] == [(0, 0.0, 1.5), (0, 1.5, 2.5)]
    # the manifest and the card list the videos, their codec and resolution
    manifest = json.loads((root / "manifest.json").read_text())
    assert [(v["key"], v["codec"], v["width"], v["height"]) for v in manifest["videos"]] == [
        (key, "h264", 64, 48) for key in CAMERAS
    ]
    listed = {f["path"] for f in manifest["files"]}
    assert {f"videos/{key}/chunk-000/file-000.mp4" for key in CAMERAS} <= listed
    # each data and video file names the episodes it holds (no link once one is credited)
    holds = dict(delivery.files.values_list("path", "episode_ids"))
    for path in ["data/chunk-000/file-000.parquet"] + [
        f"videos/{key}/chunk-000/file-000.mp4" for key in CAMERAS
    ]:
        assert holds[path] == delivery.episode_ids, path
    assert holds["meta/info.json"] == []
    card = (root / "README.md").read_text()
    assert "| observation.images.scene | h264 | 64x48 | 30 | 1 |" in card
    assert "| observation.force\\_torque |" not in card  # "_" stays: no emphasis in words
    assert "| observation.force_torque | 6: fx, fy, fz, tx, ty, tz |" in card


def test_an_episode_without_its_camera_video_fails_the_delivery_with_the_reason(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    collection = camera_collection(fleet_operator, customer, camera_spec(codec="h264"))
    _collect(collection, [20], cameras=CAMERAS[:1])
    delivery = assemble(collection, django_capture_on_commit_callbacks)
    assert delivery.status == Delivery.Status.FAILED
    assert "observation.images.wrist" in delivery.failure_reason


def test_a_video_changed_in_storage_since_qa_fails_the_delivery(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    collection = camera_collection(fleet_operator, customer, camera_spec(codec="h264"))
    _collect(collection, [20])
    video = EpisodeVideo.objects.get(camera_key=CAMERAS[1], episode__order=collection.order)
    storage.put_bytes(key=video.stored_key, data=video_bytes(20, seed=99))
    delivery = assemble(collection, django_capture_on_commit_callbacks)
    assert delivery.status == Delivery.Status.FAILED
    assert "SHA-256" in delivery.failure_reason and CAMERAS[1] in delivery.failure_reason


def test_an_order_without_a_stream_spec_delivers_joints_only_as_before(
    fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path
):
    collection = camera_collection(fleet_operator, customer, {})
    columns = episode_columns(30, 0)
    columns["observation.state"] = columns["observation.state"][:, :8]
    accepted_episode(collection, columns, {}, task="insert the peg")
    delivery = assemble(collection, django_capture_on_commit_callbacks)
    assert delivery.status == Delivery.Status.READY, delivery.failure_reason
    root = download(delivery, tmp_path)
    dataset = lerobot_loader.load(root)
    lerobot_loader.check_invariants(dataset)
    info = dataset["info"]
    assert info["video_path"] is None
    assert info["features"]["action"]["names"] == [f"joint_{i}" for i in range(8)]
    # extra columns: dropped, as before
    assert "observation.force_torque" not in info["features"]
    assert "observation.tactile" not in info["features"]
    assert "videos" not in json.loads((root / "manifest.json").read_text())
    assert "## Cameras" not in (root / "README.md").read_text()
