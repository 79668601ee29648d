"""What a customer sees of an accepted episode: a poster frame per camera, the camera's clip
through a short-lived audited link, and a plot of state and action over time.

Only accepted episodes of the caller's own orders are shown (another tenant's is "not found");
their bytes are the stored copies QA checked, never an upload key a fleet could still write.
"""

import io
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

import av
import numpy as np
import pyarrow.parquet as pq
from django.conf import settings
from django.utils import timezone
from PIL import Image

from datasets import storage
from datasets.models import Episode, EpisodeMediaEvent, EpisodeVideo
from marketplace.errors import NotFound
from marketplace.models import Organization
from marketplace.tenancy import Caller

POSTER_MAX_WIDTH = 480
PLOT_POINTS = 300  # samples per line, whatever the episode's length
PLOT_WIDTH, PLOT_HEIGHT, PLOT_MARGIN = 640, 160, 4
PLOT_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def customer_episode(*, organization: Organization, order_id, episode_id) -> Episode:
    episode = (
        Episode.objects.filter(
            pk=episode_id,
            order_id=order_id,
            order__organization=organization,
            status=Episode.Status.ACCEPTED,
        )
        .select_related("order", "site")
        .first()
    )
    if episode is None:
        raise NotFound("Episode not found.")
    return episode


def episode_videos(episode: Episode) -> list[EpisodeVideo]:
    """The episode's checked camera videos, in camera order."""
    return list(episode.videos.exclude(stored_key="").order_by("camera_key"))


def _video(episode: Episode, camera_key: str) -> EpisodeVideo:
    video = episode.videos.exclude(stored_key="").filter(camera_key=camera_key).first()
    if video is None:
        raise NotFound("This episode has no such camera.")
    return video


@dataclass(frozen=True)
class MediaLink:
    url: str
    expires_at: datetime
    event: EpisodeMediaEvent


def episode_clip_link(
    *,
    caller: Caller,
    episode: Episode,
    camera_key: str,
    ip_address: str | None,
    user_agent: str,
) -> MediaLink:
    """A freshly signed GET for one camera's clip, recorded before it is handed out."""
    video = _video(episode, camera_key)
    expires_in = settings.EPISODE_MEDIA_LINK_SECONDS
    expires_at = timezone.now() + timedelta(seconds=expires_in)
    event = EpisodeMediaEvent.objects.create(
        episode=episode,
        camera_key=camera_key,
        **EpisodeMediaEvent.requester(caller, ip_address=ip_address, user_agent=user_agent),
        link_expires_at=expires_at,
    )
    url = storage.presigned_get(key=video.stored_key, expires_in=expires_in)
    return MediaLink(url=url, expires_at=expires_at, event=event)


def poster_key(video: EpisodeVideo) -> str:
    return f"previews/{video.episode_id}/{video.camera_key}.jpg"


def episode_poster(*, episode: Episode, camera_key: str) -> bytes:
    """A JPEG of the camera's middle frame, at most POSTER_MAX_WIDTH wide. Rendered once, on
    first view, and kept next to the episode's files (the checked video never changes)."""
    video = _video(episode, camera_key)
    key = poster_key(video)
    try:
        return b"".join(storage.stream(key))
    except storage.ObjectMissing:
        pass
    jpeg = render_poster(video.stored_key, frames=video.frames)
    storage.put_bytes(key=key, data=jpeg, content_type="image/jpeg")
    return jpeg


def render_poster(stored_key: str, *, frames: int | None) -> bytes:
    # The video goes to a temporary file (an MP4's index may sit at its end); QA bounded its
    # size, and only frames up to the middle one are decoded, one at a time.
    with tempfile.NamedTemporaryFile(suffix=".mp4") as local:
        for block in storage.stream(stored_key):
            local.write(block)
        local.flush()
        with av.open(local.name) as container:
            middle = (frames or 1) // 2
            picture = None
            for index, frame in enumerate(container.decode(video=0)):
                picture = frame
                if index >= middle:
                    break
    if picture is None:
        raise NotFound("This camera's video has no frames.")
    image = picture.to_image()
    if image.width > POSTER_MAX_WIDTH:
        height = round(image.height * POSTER_MAX_WIDTH / image.width)
        image = image.resize((POSTER_MAX_WIDTH, height), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=80)
    return out.getvalue()


def episode_plot_svg(*, episode: Episode) -> str:
    """State and action over time as inline SVG: one panel each, every element a line scaled
    to the panel, at most PLOT_POINTS samples per line; names from the order's stream spec."""
    reader = storage.RangeReader(episode.stored_key)
    table = pq.ParquetFile(reader).read(columns=["observation.state", "action"])
    spec = episode.order.stream_spec or {}
    panels = [
        ("State", column_matrix(table.column("observation.state")), spec.get("state", {})),
        ("Action", column_matrix(table.column("action")), spec.get("action", {})),
    ]
    seconds = (episode.frames or table.num_rows) / max(episode.fps, 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="episode-plot" role="img" '
        f'viewBox="0 0 {PLOT_WIDTH} {len(panels) * (PLOT_HEIGHT + 24)}" '
        f'aria-label="State and action over {seconds:.1f} s">'
    ]
    for row, (title, values, names_spec) in enumerate(panels):
        top = row * (PLOT_HEIGHT + 24)
        names = list(names_spec.get("names") or [])
        parts.append(
            f'<text x="0" y="{top + 14}" font-size="12">{escape(title)} '
            f"({values.shape[1]} elements, {seconds:.1f} s)</text>"
        )
        parts.append(
            f'<rect x="0" y="{top + 20}" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" '
            'fill="none" stroke="#ccc"/>'
        )
        for column in range(values.shape[1]):
            label = names[column] if column < len(names) else f"{title.lower()}[{column}]"
            points = _polyline(values[:, column], top + 20)
            colour = PLOT_COLOURS[column % len(PLOT_COLOURS)]
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="1" points="{points}">'
                f"<title>{escape(str(label))}</title></polyline>"
            )
    parts.append("</svg>")
    return "".join(parts)


def column_matrix(column) -> np.ndarray:
    """A list or fixed-size-list column as a frames x D float64 matrix."""
    rows = column.combine_chunks()
    width = rows.type.list_size if hasattr(rows.type, "list_size") else len(rows[0])
    flat = np.asarray(rows.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    return flat.reshape(-1, width)


def _polyline(values: np.ndarray, top: int) -> str:
    picks = np.linspace(0, len(values) - 1, min(PLOT_POINTS, len(values))).round().astype(int)
    sampled = values[picks]
    low, high = float(np.min(sampled)), float(np.max(sampled))
    span = high - low or 1.0
    inner = PLOT_HEIGHT - 2 * PLOT_MARGIN
    xs = picks / max(len(values) - 1, 1) * PLOT_WIDTH
    ys = top + PLOT_MARGIN + inner - (sampled - low) / span * inner
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))
