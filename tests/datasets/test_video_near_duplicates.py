"""Per-camera video fingerprints (issue 28 item 5): a camera video already accepted, sent
again under a new episode over another trajectory, is refused `near_duplicate` in its order,
in another customer's order and when its episode was excluded since, re-encoded with another
codec or downscaled; distinct videos still count; the matching episode is
named to staff only (Episode.near_duplicate_of). Real MP4s (PyAV), the real QA task and its
sandbox, PostgreSQL."""

import hashlib
from decimal import Decimal

import pytest

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode, EpisodeVideoSignature
from datasets.qa_format import Reason
from datasets.services.exclusions import episodes_exclude
from orders.models import Order
from orders.streams import build_stream_spec
from tests.datasets.helpers import Collection, complete, put
from tests.datasets.videos import encode_mp4, transcode
from tests.factories import OrderFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("s3", "eager_celery", "sandboxed"),
]
SCENE, WRIST = "observation.images.scene", "observation.images.wrist"
FRAMES = 300  # 10 s at 30 fps


@pytest.fixture
def sandboxed(settings):
    settings.EPISODE_QA_SANDBOX = True  # as in production: the checks run in the forked child
    settings.EPISODE_QA_VIDEO_DUPLICATES = True


def with_cameras(operator, customer) -> Collection:
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("1"),
        environments=1,
        sensor_slugs=["wrist-camera"],
    )
    order.stream_spec = build_stream_spec(
        embodiment=order.embodiment, sensor_slugs=["wrist-camera"]
    )
    order.save(update_fields=["stream_spec"])
    return Collection(operator, customer, order=order, target_hours="0.1")


def send(collection, trajectory_seed: int, videos: dict, capture) -> Episode:
    data = parquet_bytes(episode_table(frames=FRAMES, seed=trajectory_seed))
    declared = [
        {"camera_key": k, "size_bytes": len(v), "sha256": hashlib.sha256(v).hexdigest()}
        for k, v in videos.items()
    ]
    registered = collection.register(data, videos=declared)
    assert registered.status_code == 201, registered.json()
    body = registered.json()
    assert put(body["upload"], data) == 200
    for video in body["upload"]["videos"]:
        assert put(video, videos[video["camera_key"]]) == 200
    return complete(collection.operator.client, body["id"], capture)


def videos(scene_seed: int, wrist_seed: int) -> dict:
    return {
        SCENE: encode_mp4(count=FRAMES, seed=scene_seed),
        WRIST: encode_mp4(count=FRAMES, seed=wrist_seed),
    }


def rejected_as_copy(episode: Episode, original: Episode) -> bool:
    codes = [failure["code"] for failure in episode.qa_failures]
    return (
        episode.status == Episode.Status.REJECTED
        and codes == [Reason.NEAR_DUPLICATE]
        and episode.near_duplicate_of_id == original.id
        and "camera video" in episode.qa_failures[0]["message"]
        and str(original.id) not in str(episode.qa_failures)
    )


def test_a_camera_video_sent_again_over_another_trajectory_is_refused_in_the_order(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    collection = with_cameras(fleet_operator, customer)
    first = videos(101, 102)
    original = send(collection, 1, first, capture)
    assert original.status == Episode.Status.ACCEPTED, original.qa_failures
    assert set(
        EpisodeVideoSignature.objects.filter(episode=original).values_list("camera_key", flat=True)
    ) == {SCENE, WRIST}
    # a new trajectory and a new scene video, the wrist video of the accepted episode
    copy = send(
        collection, 2, {SCENE: encode_mp4(count=FRAMES, seed=103), WRIST: first[WRIST]}, capture
    )
    assert rejected_as_copy(copy, original), (copy.status, copy.qa_failures)
    assert not EpisodeVideoSignature.objects.filter(episode=copy).exists()  # only accepted ones
    collection.job.refresh_from_db()
    assert collection.job.accepted_seconds == original.duration_seconds
    # distinct videos over a distinct trajectory still count
    fresh = send(collection, 3, videos(104, 105), capture)
    assert fresh.status == Episode.Status.ACCEPTED, fresh.qa_failures


def test_an_excluded_episodes_video_is_refused_in_another_customers_order_under_any_camera(
    fleet_operator, customer, other_customer, make_tenant, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    first = with_cameras(fleet_operator, customer)
    sent = videos(201, 202)
    original = send(first, 11, sent, capture)
    assert original.status == Episode.Status.ACCEPTED, original.qa_failures
    with capture(execute=True):
        episodes_exclude(
            order_id=first.order.id,
            staff_label="staff:ops",
            episode_ids=[original.id],
            reason_code="idle",
            remedy="credit",
        )
    original.refresh_from_db()
    assert original.status == Episode.Status.EXCLUDED
    # the scene video, as another fleet's wrist camera, in another customer's order
    elsewhere = with_cameras(make_tenant("fleet_operator"), other_customer)
    again = {SCENE: encode_mp4(count=FRAMES, seed=203), WRIST: sent[SCENE]}
    copy = send(elsewhere, 12, again, capture)
    assert rejected_as_copy(copy, original), (copy.status, copy.qa_failures)
    shown = elsewhere.operator.client.get(f"/api/v1/fleet/episodes/{copy.id}").content.decode()
    assert "near_duplicate" in shown and str(original.id) not in shown
    assert str(first.order.id) not in shown
    fresh = send(elsewhere, 13, videos(204, 205), capture)
    assert fresh.status == Episode.Status.ACCEPTED, fresh.qa_failures


def test_a_re_encoded_or_downscaled_copy_is_refused_and_distinct_videos_still_count(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    """A copy re-encoded with another codec (H.264 -> AV1: each block's brightness shifts by
    ~1.2 levels of 255) or halved (640x480 -> 320x240, H.264 again) is refused; videos of other
    seeds (the same kind of scene and motion, the harder case) are not."""
    capture = django_capture_on_commit_callbacks
    collection = with_cameras(fleet_operator, customer)
    first = {
        SCENE: encode_mp4(count=FRAMES, seed=401),
        WRIST: encode_mp4(count=FRAMES, seed=301, width=640, height=480),
    }
    original = send(collection, 31, first, capture)
    assert original.status == Episode.Status.ACCEPTED, original.qa_failures
    again = {SCENE: encode_mp4(count=FRAMES, seed=403), WRIST: transcode(first[SCENE])}
    copy = send(collection, 32, again, capture)
    assert rejected_as_copy(copy, original), (copy.status, copy.qa_failures)
    smaller = {
        SCENE: encode_mp4(count=FRAMES, seed=404),
        WRIST: transcode(first[WRIST], codec="h264", half=True),
    }
    resized = send(collection, 33, smaller, capture)
    assert rejected_as_copy(resized, original), (resized.status, resized.qa_failures)
    for number, seed in enumerate((405, 407, 409)):  # each against every video stored before
        fresh = send(collection, 34 + number, videos(seed, seed + 1), capture)
        assert fresh.status == Episode.Status.ACCEPTED, (seed, fresh.qa_failures)


def test_with_the_setting_off_videos_are_neither_fingerprinted_nor_looked_up(
    settings, fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    collection = with_cameras(fleet_operator, customer)
    first = videos(301, 302)
    original = send(collection, 21, first, capture)
    assert original.status == Episode.Status.ACCEPTED, original.qa_failures
    settings.EPISODE_QA_VIDEO_DUPLICATES = False
    again = send(
        collection, 22, {SCENE: first[SCENE], WRIST: encode_mp4(count=FRAMES, seed=303)}, capture
    )
    assert again.status == Episode.Status.ACCEPTED, again.qa_failures
    assert not EpisodeVideoSignature.objects.filter(episode=again).exists()
