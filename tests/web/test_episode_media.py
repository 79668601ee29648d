"""The customer sees an accepted episode: a poster frame per camera (a real JPEG of the video's
middle frame), the clip through a fresh audited link (the stored bytes, signed, short-lived)
and a plot of state and action; other tenants get 404, fleets 403, anonymous visitors the
login page, and episodes not accepted have no page."""

import io
import re
import urllib.request
from decimal import Decimal

import av
import numpy as np
import pytest
from django.urls import reverse
from PIL import Image

from datasets import storage
from datasets.episode_format import episode_table, parquet_bytes, sha256
from datasets.models import Episode, EpisodeMediaEvent, EpisodeVideo
from orders.models import Order
from tests.factories import JobFactory, OrderFactory, RobotFactory, SiteFactory
from tests.web.conftest import logged_in

pytestmark = pytest.mark.django_db

FRAMES, FPS, WIDTH, HEIGHT = 30, 15, 64, 48
CAMERA = "observation.images.wrist"


def encoded_video(frames: int = FRAMES) -> tuple[bytes, list[int]]:
    """An H.264 MP4 whose frame i is one flat grey level (so the poster can be identified)."""
    out = io.BytesIO()
    levels = [int(v) for v in np.linspace(20, 230, frames)]
    with av.open(out, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for level in levels:
            image = np.full((HEIGHT, WIDTH, 3), level, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return out.getvalue(), levels


def accepted_episode(organization, *, status=Episode.Status.ACCEPTED) -> tuple[Episode, bytes]:
    order = OrderFactory(
        organization=organization,
        status=Order.Status.IN_COLLECTION,
        stream_spec={
            "state": {"names": [f"joint_{i + 1}" for i in range(7)] + ["gripper_<width>"]},
            "action": {"names": [f"joint_{i + 1}" for i in range(7)] + ["gripper_<width>"]},
            "cameras": [{"key": CAMERA, "min_width": WIDTH, "min_height": HEIGHT}],
        },
    )
    site = SiteFactory()
    fleet = site.fleet
    job = JobFactory(order=order, site=site, fleet=fleet, target_hours=Decimal("1"))
    data = parquet_bytes(episode_table(frames=FRAMES, fps=FPS, dim=8))
    episode = Episode.objects.create(
        job=job,
        order=order,
        fleet=fleet,
        site=site,
        robot=RobotFactory(site=site, fleet=fleet),
        operator="op-7",
        task_instruction="insert the peg",
        success=True,
        fps=FPS,
        size_bytes=len(data),
        sha256=sha256(data),
        upload_key="uploads/x",
        stored_key=f"episodes/{order.pk}/data.parquet",
        status=status,
        frames=FRAMES,
        duration_seconds=Decimal(FRAMES) / FPS,
    )
    storage.put_bytes(key=episode.stored_key, data=data)
    video, _ = encoded_video()
    stored = f"episodes/{order.pk}/{episode.pk}/{CAMERA}.mp4"
    storage.put_bytes(key=stored, data=video, content_type="video/mp4")
    EpisodeVideo.objects.create(
        episode=episode,
        camera_key=CAMERA,
        size_bytes=len(video),
        sha256=sha256(video),
        upload_key="uploads/v",
        stored_key=stored,
        codec="h264",
        pix_fmt="yuv420p",
        width=WIDTH,
        height=HEIGHT,
        frames=FRAMES,
        fps=FPS,
    )
    return episode, video


def _urls(episode):
    args = (episode.order_id, episode.pk)
    return {
        "page": reverse("episode-detail-page", args=args),
        "poster": reverse("episode-poster", args=(*args, CAMERA)),
        "clip": reverse("episode-clip", args=(*args, CAMERA)),
    }


def test_the_page_shows_each_camera_with_its_poster_and_clip_and_a_plot(s3, customer):
    episode, _ = accepted_episode(customer.organization)
    client = logged_in(customer)
    urls = _urls(episode)

    page = client.get(urls["page"]).content.decode()

    assert f'poster="{urls["poster"]}"' in page
    assert f'src="{urls["clip"]}"' in page
    assert 'preload="none"' in page  # opening the page hands out no link
    assert "64\u00d748 · h264 · 30 frames" in page
    svg = re.search(r"<svg .*?</svg>", page, re.S).group(0)
    assert svg.count("<polyline") == 16  # 8 state + 8 action elements
    assert "<title>joint_1</title>" in svg
    assert "<title>gripper_&lt;width&gt;</title>" in svg  # names are escaped
    points = re.search(r'points="([^"]+)"', svg).group(1).split()
    assert len(points) == FRAMES  # fewer frames than PLOT_POINTS: every frame is a point
    assert EpisodeMediaEvent.objects.count() == 0
    listing = client.get(reverse("order-episodes-page", args=(episode.order_id,))).content
    assert urls["page"].encode() in listing


def test_the_poster_is_the_middle_frame_as_a_jpeg_rendered_once(s3, customer):
    episode, _ = accepted_episode(customer.organization)
    _, levels = encoded_video()
    client = logged_in(customer)

    first = client.get(_urls(episode)["poster"])
    second = client.get(_urls(episode)["poster"])

    assert first.status_code == 200 and first["Content-Type"] == "image/jpeg"
    image = Image.open(io.BytesIO(first.content))
    assert image.size == (WIDTH, HEIGHT)
    grey = np.asarray(image.convert("L"), dtype=float).mean()
    assert abs(grey - levels[FRAMES // 2]) < 6  # the middle frame, within JPEG/H.264 loss
    assert abs(grey - levels[0]) > 50  # not the first one
    assert second.content == first.content
    assert storage.exists(f"previews/{episode.pk}/{CAMERA}.jpg")


def test_each_play_is_a_fresh_audited_link_to_the_checked_bytes(s3, customer):
    episode, video = accepted_episode(customer.organization)
    client = logged_in(customer)

    response = client.get(_urls(episode)["clip"], HTTP_USER_AGENT="viewer/1")

    assert response.status_code == 302 and response["Cache-Control"] == "no-store"
    assert "X-Amz-Signature=" in response.url and "X-Amz-Expires=120" in response.url
    with urllib.request.urlopen(response.url, timeout=10) as signed:
        assert signed.read() == video
    event = EpisodeMediaEvent.objects.get()
    assert (event.episode_id, event.camera_key, event.user_agent) == (
        episode.pk,
        CAMERA,
        "viewer/1",
    )
    assert event.actor_label.startswith("user:")
    client.get(_urls(episode)["clip"])
    assert EpisodeMediaEvent.objects.count() == 2


def test_other_tenants_fleets_and_anonymous_visitors_see_nothing(
    s3, customer, other_customer, fleet_operator, client
):
    episode, _ = accepted_episode(customer.organization)
    urls = _urls(episode)
    for url in urls.values():
        assert logged_in(other_customer).get(url).status_code == 404
        assert logged_in(fleet_operator).get(url).status_code == 403
        anonymous = client.get(url)
        assert anonymous.status_code == 302 and anonymous.url.startswith(reverse("login"))
    assert EpisodeMediaEvent.objects.count() == 0


def test_episodes_not_accepted_and_unknown_cameras_have_no_media(s3, customer):
    rejected, _ = accepted_episode(customer.organization, status=Episode.Status.REJECTED)
    episode, _ = accepted_episode(customer.organization)
    client = logged_in(customer)
    assert client.get(_urls(rejected)["page"]).status_code == 404
    assert client.get(_urls(rejected)["clip"]).status_code == 404
    args = (episode.order_id, episode.pk, "observation.images.nope")
    assert client.get(reverse("episode-poster", args=args)).status_code == 404
    assert client.get(reverse("episode-clip", args=args)).status_code == 404
    assert EpisodeMediaEvent.objects.count() == 0


def test_an_episode_without_cameras_says_so_and_still_plots(s3, customer):
    episode, _ = accepted_episode(customer.organization)
    EpisodeVideo.objects.filter(episode=episode).delete()
    page = logged_in(customer).get(_urls(episode)["page"]).content.decode()
    assert "This episode has no camera streams" in page
    assert page.count("<polyline") == 16


def test_orders_without_a_stream_spec_name_plot_lines_by_index(s3, customer):
    # old orders have no stream spec: element names fall back to state[i] / action[i]
    episode, _ = accepted_episode(customer.organization)
    Order.objects.filter(pk=episode.order_id).update(stream_spec={})
    page = logged_in(customer).get(_urls(episode)["page"]).content.decode()
    assert "<title>state[0]</title>" in page and "<title>action[7]</title>" in page
