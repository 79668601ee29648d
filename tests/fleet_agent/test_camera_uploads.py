"""The reference agent on an order with cameras (issue 15): it registers each camera's MP4
next to the parquet, uploads all of them and completes; QA checks them and the order is
delivered. Against the real platform (live_server, local S3, Celery eager)."""

from decimal import Decimal

import av
import pytest

from datasets import storage
from datasets.models import Episode, EpisodeVideo
from fleet_agent import FleetAgent
from fleet_agent.cameras import render_camera_videos
from fleet_agent.uploads import declarations, put_videos, videos_for
from fleets.models import Job
from fleets.services.planning import order_plan
from orders.models import Order
from orders.streams import build_stream_spec
from tests.factories import OrderFactory
from tests.fleet_agent.test_integration import assert_delivered, config_for
from tests.fleet_agent.test_integration import operator as operator
from tests.fleet_agent.test_integration import platform as platform

CAMERAS = ["observation.images.scene", "observation.images.wrist"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_agent_uploads_every_cameras_video_and_the_order_is_delivered(
    platform,
    operator,
    customer,
):
    agent = FleetAgent(config_for(platform, operator.raw_key))
    agent.register()
    order = OrderFactory(
        organization=customer.organization,
        hours=Decimal("0.02"),
        environments=1,
        status=Order.Status.PAID,
        sensor_slugs=["wrist-camera"],
    )
    order.stream_spec = build_stream_spec(
        embodiment=order.embodiment, sensor_slugs=["wrist-camera"]
    )
    order.save(update_fields=["stream_spec"])
    order_plan(order_id=order.id)
    assert Job.objects.get(order=order).status == Job.Status.OFFERED

    summary = agent.run_once(max_seconds=150)

    assert summary.errors == [], summary.as_dict()
    assert_delivered(order)
    accepted = Episode.objects.filter(order=order, status="accepted")
    assert accepted.count() >= 3
    for episode in accepted:
        videos = list(EpisodeVideo.objects.filter(episode=episode))
        assert [v.camera_key for v in videos] == CAMERAS
        for video in videos:
            assert video.uploaded_at is not None
            assert storage.object_sha256(video.upload_key) == video.sha256


def test_a_job_without_cameras_gets_no_videos_and_rendered_views_decode():
    from fleet_agent.episodes import make_episode

    episode = make_episode(action_dim=8, seconds=1, seed=0)
    assert videos_for({"stream_spec": {}}, episode) == {}
    job = {"stream_spec": {"cameras": [{"key": CAMERAS[0], "min_width": 321, "min_height": 240}]}}
    videos = videos_for(job, episode)
    assert list(videos) == [CAMERAS[0]]
    assert declarations(videos)[0]["size_bytes"] == len(videos[CAMERAS[0]])
    import io

    with av.open(io.BytesIO(videos[CAMERAS[0]])) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
    assert len(frames) == episode.frames
    assert (stream.codec_context.width, stream.codec_context.height) == (322, 240)
    own = make_episode(action_dim=8, seconds=1, seed=0)
    mine = render_camera_videos({"observation.state": own.state}, CAMERAS[:1], 30, seed=5)[
        CAMERAS[0]
    ]
    assert videos_for(job, own.__class__(**{**own.__dict__, "videos": {CAMERAS[0]: mine}})) == {
        CAMERAS[0]: mine
    }


class _Recorder:
    def __init__(self):
        self.puts = []

    def put_bytes(self, url, data, headers):
        self.puts.append((url, len(data)))

    def put_parts(self, upload, data):
        self.puts.append((upload["camera_key"], "parts"))
        return [{"part_number": 1, "etag": '"e"'}]


def test_put_videos_sends_single_puts_and_returns_multipart_parts():
    client = _Recorder()
    upload = {
        "videos": [
            {"camera_key": CAMERAS[0], "method": "single", "url": "u0", "headers": {}},
            {"camera_key": CAMERAS[1], "method": "multipart", "part_size": 5, "parts": []},
        ]
    }
    parts = put_videos(client, upload, {CAMERAS[0]: b"abc", CAMERAS[1]: b"defgh"})
    assert client.puts == [("u0", 3), (CAMERAS[1], "parts")]
    assert parts == [{"camera_key": CAMERAS[1], "parts": [{"part_number": 1, "etag": '"e"'}]}]


class _Expiring(_Recorder):
    """Storage refuses the first video URL (expired); renewing gives fresh URLs for all."""

    def __init__(self):
        super().__init__()
        self.renewed = 0

    def put_bytes(self, url, data, headers):
        from fleet_agent.client import ApiError

        self.puts.append((url, len(data)))
        if url == "v-old":
            raise ApiError(403, "http_error", "Request has expired")

    def renew_upload(self, episode_id):
        self.renewed += 1
        return {
            "method": "single",
            "url": "p-new",
            "headers": {},
            "videos": [
                {"camera_key": CAMERAS[0], "method": "single", "url": "v-new", "headers": {}}
            ],
        }


def test_a_refused_video_url_renews_and_resends_every_file():
    from fleet_agent.uploads import put_all

    client = _Expiring()
    upload = {
        "method": "single",
        "url": "p-old",
        "headers": {},
        "videos": [{"camera_key": CAMERAS[0], "method": "single", "url": "v-old", "headers": {}}],
    }
    parts, video_parts = put_all(client, "e1", upload, b"parquet", {CAMERAS[0]: b"mp4"})
    assert (parts, video_parts) == (None, [])
    assert client.renewed == 1
    assert [url for url, _ in client.puts] == ["p-old", "v-old", "p-new", "v-new"]
