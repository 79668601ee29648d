"""Issue 15, item 2: an episode of an order with cameras is several files (the parquet and one
MP4 per camera), each with its own presigned upload; QA starts only when all are up."""

import hashlib
import urllib.request
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from datasets import storage
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode, EpisodeVideo
from datasets.services.episodes import episode_abandon_upload
from orders.models import Order
from orders.streams import build_stream_spec
from tests.datasets.helpers import Collection, put
from tests.datasets.videos import encode_mp4
from tests.factories import OrderFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]
SCENE, WRIST = "observation.images.scene", "observation.images.wrist"


def camera_order(customer, sensors=("wrist-camera",)) -> Order:
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("1"),
        environments=1,
    )
    order.stream_spec = build_stream_spec(embodiment=order.embodiment, sensor_slugs=sensors)
    order.save(update_fields=["stream_spec"])
    return order


@pytest.fixture
def collection(fleet_operator, customer):
    return Collection(fleet_operator, customer, order=camera_order(customer))


@pytest.fixture
def files():
    data = parquet_bytes(episode_table(frames=30))
    return data, {SCENE: encode_mp4(count=30, seed=1), WRIST: encode_mp4(count=30, seed=2)}


def declared(videos: dict[str, bytes]) -> list[dict]:
    return [
        {"camera_key": key, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for key, data in videos.items()
    ]


def uploads_by_camera(upload: dict) -> dict[str, dict]:
    return {video["camera_key"]: video for video in upload["videos"]}


def complete_call(collection, episode_id, capture, **body):
    with capture(execute=True):
        return collection.operator.client.post(
            f"/api/v1/fleet/episodes/{episode_id}/complete", body, format="json"
        )


@pytest.mark.parametrize(
    ("listed", "why"),
    [
        ([], "missing"),
        ([SCENE], "missing observation.images.wrist"),
        ([SCENE, WRIST, "observation.images.top"], "not ordered: observation.images.top"),
        ([SCENE, SCENE, WRIST], "once"),
    ],
)
def test_a_registration_must_list_exactly_the_ordered_cameras(collection, files, listed, why):
    data, _ = files
    body = [{"camera_key": key, "size_bytes": 100, "sha256": "a" * 64} for key in listed]
    response = collection.register(data, videos=body)
    assert response.status_code == 400, response.json()
    assert "videos" in response.json()["fields"]
    assert why in response.json()["message"]
    assert not Episode.objects.exists() and not EpisodeVideo.objects.exists()


def test_an_order_without_cameras_takes_no_videos(fleet_operator, customer, files):
    plain = Collection(fleet_operator, customer)  # stream_spec {}: state/action only
    data, videos = files
    response = plain.register(data, videos=declared({SCENE: videos[SCENE]}))
    assert response.status_code == 400
    assert "none (the order has no cameras)" in response.json()["message"]
    assert plain.register(data).status_code == 201


def test_bad_video_declarations_are_400(collection, files):
    data, videos = files
    bad_sha = declared(videos)
    bad_sha[0]["sha256"] = "xyz"
    assert collection.register(data, videos=bad_sha).status_code == 400
    too_big = declared(videos)
    too_big[1]["size_bytes"] = 10**13
    response = collection.register(data, videos=too_big)
    assert response.status_code == 400 and "videos" in response.json()["fields"]


def test_each_file_has_its_own_signed_url_and_qa_waits_for_all_of_them(
    collection, files, django_capture_on_commit_callbacks
):
    data, videos = files
    registered = collection.register(data, videos=declared(videos))
    assert registered.status_code == 201, registered.json()
    body = registered.json()
    by_camera = uploads_by_camera(body["upload"])
    assert sorted(by_camera) == [SCENE, WRIST]
    urls = {body["upload"]["url"].split("?")[0]} | {
        u["url"].split("?")[0] for u in by_camera.values()
    }
    assert len(urls) == 3
    for key, upload in by_camera.items():
        assert upload["method"] == "single"
        assert upload["headers"]["Content-Length"] == str(len(videos[key]))
        assert upload["headers"]["x-amz-checksum-sha256"] == storage.sha256_hex_to_base64(
            hashlib.sha256(videos[key]).hexdigest()
        )
    # the signed length holds: another body is refused by storage
    short = videos[SCENE][:-1]
    headers = {**by_camera[SCENE]["headers"], "Content-Length": str(len(short))}
    assert put(by_camera[SCENE], short, headers) == 403
    assert put(body["upload"], data) == 200
    assert put(by_camera[SCENE], videos[SCENE]) == 200
    early = complete_call(collection, body["id"], django_capture_on_commit_callbacks)
    assert early.status_code == 409, early.json()
    assert early.json()["code"] == "episode_files_missing"
    assert early.json()["fields"]["files"] == [WRIST]
    assert Episode.objects.get(pk=body["id"]).status == Episode.Status.REGISTERED
    assert EpisodeVideo.objects.get(camera_key=SCENE).uploaded_at is not None
    assert put(by_camera[WRIST], videos[WRIST]) == 200
    done = complete_call(collection, body["id"], django_capture_on_commit_callbacks)
    assert done.status_code == 200, done.json()
    episode = Episode.objects.get(pk=body["id"])
    assert episode.status in (Episode.Status.ACCEPTED, Episode.Status.UPLOADED)
    assert episode.qa_runs == 1  # QA was queued (and ran) once every file was up


def test_a_missing_parquet_is_named_too(collection, files, django_capture_on_commit_callbacks):
    data, videos = files
    body = collection.register(data, videos=declared(videos)).json()
    for key, upload in uploads_by_camera(body["upload"]).items():
        assert put(upload, videos[key]) == 200
    response = complete_call(collection, body["id"], django_capture_on_commit_callbacks)
    assert response.status_code == 409
    assert response.json()["fields"]["files"] == ["parquet"]


def _put_parts(upload: dict, data: bytes) -> list[dict]:
    etags = []
    for part in upload["parts"]:
        start = (part["part_number"] - 1) * upload["part_size"]
        request = urllib.request.Request(
            part["url"],
            data=data[start : start + upload["part_size"]],
            method="PUT",
            headers=part["headers"],
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            etags.append({"part_number": part["part_number"], "etag": response.headers["ETag"]})
    return etags


def test_large_videos_upload_in_parts(
    collection, settings, files, django_capture_on_commit_callbacks
):
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 12_000
    settings.EPISODE_MULTIPART_PART_BYTES = 6_000
    data, _ = files
    videos = {SCENE: encode_mp4(count=75, seed=3), WRIST: encode_mp4(count=75, seed=4)}
    assert all(len(v) > 12_000 for v in videos.values()), [len(v) for v in videos.values()]
    assert len(data) < 12_000
    body = collection.register(data, videos=declared(videos)).json()
    by_camera = uploads_by_camera(body["upload"])
    assert {u["method"] for u in by_camera.values()} == {"multipart"}
    assert put(body["upload"], data) == 200
    scene_parts = _put_parts(by_camera[SCENE], videos[SCENE])
    wrist_parts = _put_parts(by_camera[WRIST], videos[WRIST])
    # the parts of one camera only: the other is still missing
    partial = complete_call(
        collection,
        body["id"],
        django_capture_on_commit_callbacks,
        videos=[{"camera_key": SCENE, "parts": scene_parts}],
    )
    assert partial.status_code == 409 and partial.json()["fields"]["files"] == [WRIST]
    done = complete_call(
        collection,
        body["id"],
        django_capture_on_commit_callbacks,
        videos=[{"camera_key": WRIST, "parts": wrist_parts}],
    )
    assert done.status_code == 200, done.json()
    for video in EpisodeVideo.objects.all():
        assert storage.object_sha256(video.upload_key) == video.sha256


def test_renewing_renews_every_unfinished_file_only(
    collection, files, django_capture_on_commit_callbacks
):
    data, videos = files
    body = collection.register(data, videos=declared(videos)).json()
    by_camera = uploads_by_camera(body["upload"])
    assert put(by_camera[SCENE], videos[SCENE]) == 200
    assert (
        complete_call(collection, body["id"], django_capture_on_commit_callbacks).status_code == 409
    )
    scene_key = EpisodeVideo.objects.get(camera_key=SCENE).upload_key
    renewed = collection.operator.client.post(f"/api/v1/fleet/episodes/{body['id']}/upload")
    assert renewed.status_code == 200, renewed.json()
    renewed = renewed.json()
    assert [v["camera_key"] for v in renewed["videos"]] == [WRIST]
    new_wrist = renewed["videos"][0]
    assert new_wrist["url"].split("?")[0] != by_camera[WRIST]["url"].split("?")[0]
    assert EpisodeVideo.objects.get(camera_key=SCENE).upload_key == scene_key
    assert put(renewed, data) == 200
    assert put(new_wrist, videos[WRIST]) == 200
    done = complete_call(collection, body["id"], django_capture_on_commit_callbacks)
    assert done.status_code == 200, done.json()


def test_an_abandoned_episode_aborts_its_videos_multipart_uploads(
    collection, settings, files, django_capture_on_commit_callbacks
):
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 12_000
    settings.EPISODE_MULTIPART_PART_BYTES = 6_000
    data, _ = files
    videos = {SCENE: encode_mp4(count=75, seed=3), WRIST: encode_mp4(count=75, seed=4)}
    body = collection.register(data, videos=declared(videos)).json()
    Episode.objects.filter(pk=body["id"]).update(
        upload_expires_at=timezone.now() - timedelta(days=1)
    )
    assert all(EpisodeVideo.objects.values_list("multipart_upload_id", flat=True))
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert episode_abandon_upload(episode_id=body["id"]) is True
    assert len(callbacks) == 2  # one abort per camera's multipart upload (the parquet: a PUT)
    episode = Episode.objects.get(pk=body["id"])
    assert episode.status == Episode.Status.REJECTED
    assert episode.qa_failures[0]["code"] == "upload_abandoned"


def test_completing_an_already_completed_multipart_upload_again_is_harmless(
    collection, settings, files, django_capture_on_commit_callbacks
):
    """A multipart upload completed in storage whose answer was lost (or whose transaction
    rolled back) completes again without a 400."""
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 12_000
    settings.EPISODE_MULTIPART_PART_BYTES = 6_000
    data, _ = files
    videos = {SCENE: encode_mp4(count=75, seed=3), WRIST: encode_mp4(count=75, seed=4)}
    body = collection.register(data, videos=declared(videos)).json()
    by_camera = uploads_by_camera(body["upload"])
    assert put(body["upload"], data) == 200
    parts = {key: _put_parts(by_camera[key], videos[key]) for key in (SCENE, WRIST)}
    scene = EpisodeVideo.objects.get(camera_key=SCENE)
    storage.multipart_complete(
        key=scene.upload_key,
        upload_id=scene.multipart_upload_id,
        parts=[{"PartNumber": p["part_number"], "ETag": p["etag"]} for p in parts[SCENE]],
    )
    done = complete_call(
        collection,
        body["id"],
        django_capture_on_commit_callbacks,
        videos=[{"camera_key": key, "parts": parts[key]} for key in (SCENE, WRIST)],
    )
    assert done.status_code == 200, done.json()
    assert storage.object_sha256(scene.upload_key) == scene.sha256
