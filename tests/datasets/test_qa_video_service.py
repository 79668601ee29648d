"""Video and sensor QA through the real QA task on the local S3 server (issue 15, item 3):
an episode of an order with cameras is accepted only when every camera's MP4 passes, and what
QA measured is recorded on each EpisodeVideo."""

import hashlib
from decimal import Decimal

import numpy as np
import pytest

from datasets import storage, tasks
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode, EpisodeVideo
from orders.models import Order
from orders.streams import build_stream_spec
from tests.datasets.helpers import Collection, complete, put
from tests.datasets.hostile_videos import repeated_frames
from tests.datasets.videos import encode_mp4
from tests.factories import OrderFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]
SCENE, WRIST = "observation.images.scene", "observation.images.wrist"
FRAMES = 45


def order_with(customer, sensors) -> Order:
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("1"),
        environments=1,
        sensor_slugs=sorted(sensors),
    )
    order.stream_spec = build_stream_spec(embodiment=order.embodiment, sensor_slugs=sensors)
    order.save(update_fields=["stream_spec"])
    return order


@pytest.fixture
def cameras(fleet_operator, customer):
    return Collection(fleet_operator, customer, order=order_with(customer, ["wrist-camera"]))


def declared(videos):
    return [
        {"camera_key": k, "size_bytes": len(v), "sha256": hashlib.sha256(v).hexdigest()}
        for k, v in videos.items()
    ]


def upload_all(collection, data, videos) -> str:
    registered = collection.register(data, videos=declared(videos))
    assert registered.status_code == 201, registered.json()
    body = registered.json()
    assert put(body["upload"], data) == 200
    for video in body["upload"]["videos"]:
        assert put(video, videos[video["camera_key"]]) == 200
    return body["id"]


def failure_codes(episode: Episode) -> list[str]:
    return [failure["code"] for failure in episode.qa_failures]


def test_a_good_multi_camera_episode_is_accepted_and_measured(
    cameras, django_capture_on_commit_callbacks
):
    data = parquet_bytes(episode_table(frames=FRAMES))
    videos = {
        SCENE: encode_mp4(count=FRAMES, seed=1),
        WRIST: encode_mp4(count=FRAMES, seed=2, codec="av1", width=352, height=288),
    }
    episode_id = upload_all(cameras, data, videos)
    episode = complete(cameras.operator.client, episode_id, django_capture_on_commit_callbacks)
    assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    assert episode.frames == FRAMES
    measured = {v.camera_key: v for v in EpisodeVideo.objects.filter(episode=episode)}
    assert (measured[SCENE].codec, measured[SCENE].width, measured[SCENE].height) == (
        "h264",
        320,
        240,
    )
    assert (measured[WRIST].codec, measured[WRIST].width, measured[WRIST].frames) == (
        "av1",
        352,
        FRAMES,
    )
    for video in measured.values():
        assert video.fps == 30 and video.pix_fmt == "yuv420p"
        assert video.stored_key.endswith(f"/videos/{video.camera_key.split('.')[-1]}.mp4")
        assert storage.object_sha256(video.stored_key) == video.sha256
    assert episode.qa_bytes_read >= sum(len(v) for v in videos.values())
    shown = cameras.operator.client.get(f"/api/v1/fleet/episodes/{episode.id}").json()
    listed = {v["camera_key"]: v for v in shown["videos"]}
    assert listed[WRIST]["codec"] == "av1" and listed[WRIST]["frames"] == FRAMES
    assert listed[SCENE]["uploaded_at"] is not None


def test_a_camera_file_missing_from_storage_rejects_the_episode(
    cameras, django_capture_on_commit_callbacks
):
    data = parquet_bytes(episode_table(frames=FRAMES))
    videos = {SCENE: encode_mp4(count=FRAMES, seed=1), WRIST: encode_mp4(count=FRAMES, seed=2)}
    episode_id = upload_all(cameras, data, videos)
    with django_capture_on_commit_callbacks(execute=False):
        response = cameras.operator.client.post(f"/api/v1/fleet/episodes/{episode_id}/complete")
    assert response.status_code == 200
    wrist = EpisodeVideo.objects.get(episode_id=episode_id, camera_key=WRIST)
    storage.client().delete_object(Bucket=storage.bucket(), Key=wrist.upload_key)
    tasks.qa_episode.delay(episode_id)
    episode = Episode.objects.get(pk=episode_id)
    assert episode.status == Episode.Status.REJECTED
    assert failure_codes(episode) == ["video_missing"]
    assert WRIST in episode.qa_failures[0]["message"]
    assert EpisodeVideo.objects.get(pk=wrist.pk).stored_key == ""


def test_a_camera_below_the_ordered_resolution_rejects_the_episode(
    cameras, django_capture_on_commit_callbacks
):
    data = parquet_bytes(episode_table(frames=FRAMES))
    videos = {
        SCENE: encode_mp4(count=FRAMES, seed=1),
        WRIST: encode_mp4(count=FRAMES, seed=2, width=160, height=120),
    }
    episode = complete(
        cameras.operator.client,
        upload_all(cameras, data, videos),
        django_capture_on_commit_callbacks,
    )
    assert episode.status == Episode.Status.REJECTED
    assert failure_codes(episode) == ["video_resolution"]
    shown = cameras.operator.client.get(f"/api/v1/fleet/episodes/{episode.id}").json()
    assert shown["qa_failures"][0]["code"] == "video_resolution"
    assert EpisodeVideo.objects.get(episode=episode, camera_key=WRIST).width == 160


def test_cameras_of_different_lengths_reject_the_episode(
    cameras, django_capture_on_commit_callbacks
):
    data = parquet_bytes(episode_table(frames=FRAMES))
    videos = {SCENE: encode_mp4(count=FRAMES, seed=1), WRIST: encode_mp4(count=FRAMES - 3)}
    episode = complete(
        cameras.operator.client,
        upload_all(cameras, data, videos),
        django_capture_on_commit_callbacks,
    )
    assert episode.status == Episode.Status.REJECTED
    assert failure_codes(episode) == ["video_frame_count", "video_lengths_differ"]


def test_a_video_other_than_declared_is_a_checksum_mismatch(
    cameras, django_capture_on_commit_callbacks
):
    """The local S3 server does not verify the signed SHA-256: QA does."""
    data = parquet_bytes(episode_table(frames=FRAMES))
    videos = {SCENE: encode_mp4(count=FRAMES, seed=1), WRIST: encode_mp4(count=FRAMES, seed=2)}
    episode_id = upload_all(cameras, data, videos)
    wrist = EpisodeVideo.objects.get(episode_id=episode_id, camera_key=WRIST)
    other = encode_mp4(count=FRAMES, seed=9)
    storage.put_bytes(key=wrist.upload_key, data=other[: wrist.size_bytes].ljust(wrist.size_bytes))
    episode = complete(cameras.operator.client, episode_id, django_capture_on_commit_callbacks)
    assert episode.status == Episode.Status.REJECTED
    assert failure_codes(episode) == ["checksum_mismatch"]


@pytest.fixture
def sensors(fleet_operator, customer):
    return Collection(
        fleet_operator, customer, order=order_with(customer, ["force-torque", "tactile"])
    )


def sensor_columns(frames=FRAMES, force_dim=6, tactile_dim=16, nan=False) -> dict:
    rng = np.random.default_rng(0)
    force = rng.normal(0, 1, (frames, force_dim)).astype(np.float32)
    if nan:
        force[5, 2] = np.nan
    tactile = rng.uniform(0, 1, (frames, tactile_dim)).astype(np.float32)
    return {"observation.force_torque": force, "observation.tactile": tactile}


@pytest.mark.parametrize(
    ("columns", "reason"),
    [
        (sensor_columns(), None),
        ({"observation.tactile": sensor_columns()["observation.tactile"]}, "sensor_missing"),
        (sensor_columns(force_dim=5), "vector_length"),
        (sensor_columns(nan=True), "non_finite"),
    ],
)
def test_low_dim_sensor_columns_are_checked_like_the_state(
    sensors, django_capture_on_commit_callbacks, columns, reason
):
    data = parquet_bytes(episode_table(frames=FRAMES, extra_columns=columns))
    episode_id = upload_all(sensors, data, {SCENE: encode_mp4(count=FRAMES)})  # + the scene
    episode = complete(sensors.operator.client, episode_id, django_capture_on_commit_callbacks)
    if reason is None:
        assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    else:
        assert episode.status == Episode.Status.REJECTED
        assert failure_codes(episode) == [reason]
        assert "observation.force_torque" in episode.qa_failures[0]["message"]


def test_the_qa_time_limit_covers_the_videos(cameras, settings, django_capture_on_commit_callbacks):
    """The QA time limit (in the sandbox) bounds the whole episode, its videos included."""
    settings.EPISODE_QA_SANDBOX = True
    frames = 600
    data = parquet_bytes(episode_table(frames=frames))
    video = encode_mp4(count=frames, seed=1)
    videos = {SCENE: video, WRIST: video}
    episode_id = upload_all(cameras, data, videos)
    settings.EPISODE_QA_TIME_LIMIT_SECONDS = 0.01
    episode = complete(cameras.operator.client, episode_id, django_capture_on_commit_callbacks)
    assert episode.status == Episode.Status.REJECTED
    assert failure_codes(episode)[0] == "qa_time_limit"


def test_an_mpeg_ts_of_many_streams_sent_as_a_cameras_mp4_is_rejected(
    cameras, django_capture_on_commit_callbacks
):
    """Issue 28: such a file was accepted and delivered; its boxes say what it is."""
    data = parquet_bytes(episode_table(frames=FRAMES))
    videos = {
        SCENE: encode_mp4(count=FRAMES, seed=1),
        WRIST: repeated_frames(FRAMES, format="mpegts", streams=20),
    }
    episode = complete(
        cameras.operator.client,
        upload_all(cameras, data, videos),
        django_capture_on_commit_callbacks,
    )
    assert episode.status == Episode.Status.REJECTED
    assert failure_codes(episode) == ["video_container"]
    assert WRIST in episode.qa_failures[0]["message"]


def test_the_video_bounds_are_the_settings(cameras, settings, django_capture_on_commit_callbacks):
    """EPISODE_QA_VIDEO_MAX_* and the CPU budget reach the checks (in the sandbox)."""
    settings.EPISODE_QA_SANDBOX = True
    data = parquet_bytes(episode_table(frames=FRAMES))
    videos = {SCENE: encode_mp4(count=FRAMES, seed=1), WRIST: encode_mp4(count=FRAMES, seed=2)}
    settings.EPISODE_QA_VIDEO_MAX_WIDTH = 319
    episode = complete(
        cameras.operator.client,
        upload_all(cameras, data, videos),
        django_capture_on_commit_callbacks,
    )
    assert failure_codes(episode) == ["video_resolution_too_high"] * 2
    settings.EPISODE_QA_VIDEO_MAX_WIDTH = 4096
    settings.EPISODE_QA_VIDEO_CPU_SECONDS_BASE = 0
    settings.EPISODE_QA_VIDEO_CPU_SECONDS_PER_SECOND = 0
    other = {SCENE: encode_mp4(count=FRAMES, seed=3), WRIST: encode_mp4(count=FRAMES, seed=4)}
    episode = complete(
        cameras.operator.client,
        upload_all(cameras, data, other),
        django_capture_on_commit_callbacks,
    )
    assert failure_codes(episode) == ["video_decode_budget"] * 2
