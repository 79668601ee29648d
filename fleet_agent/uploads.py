"""An episode's camera videos on the way up: declared at registration (size, SHA-256), PUT
to their own presigned URLs (one PUT or multipart, as the platform says), their multipart
ETags sent with `complete`.

A job's stream spec (`job["stream_spec"]`) lists the cameras every episode carries. An
`Episode` normally brings its videos (`Episode.videos`); for a camera it lacks, the agent
encodes a plain synthetic view here (a lit scene with a moving marker and sensor noise, H.264
with PyAV) so that a reference fleet can serve any order.
"""

from __future__ import annotations

import hashlib
import io
import logging

import numpy as np

from fleet_agent.client import ApiError
from fleet_agent.episodes import Episode

log = logging.getLogger("fleet_agent")


def cameras_of(job: dict) -> list[dict]:
    return list((job.get("stream_spec") or {}).get("cameras") or [])


def videos_for(job: dict, episode: Episode, seed: int = 0) -> dict[str, bytes]:
    """One MP4 per camera of the job: the episode's own, else a synthetic view."""
    videos = {}
    for index, camera in enumerate(cameras_of(job)):
        key = camera["key"]
        videos[key] = episode.videos.get(key) or synthetic_view(
            frames=episode.frames,
            fps=episode.fps,
            width=max(int(camera.get("min_width") or 0), 64),
            height=max(int(camera.get("min_height") or 0), 48),
            seed=seed + index,
        )
    return videos


def declarations(videos: dict[str, bytes]) -> list[dict]:
    """The registration's `videos`: each camera's size and SHA-256."""
    return [
        {"camera_key": key, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for key, data in sorted(videos.items())
    ]


def put_videos(client, upload: dict, videos: dict[str, bytes]) -> list[dict]:
    """PUT each camera's video as the registration's `upload.videos` says; the multipart
    ones' parts for `complete` ([] when every video went up in one PUT)."""
    completed = []
    for video in upload.get("videos") or []:
        data = videos[video["camera_key"]]
        if video["method"] == "single":
            client.put_bytes(video["url"], data, video["headers"])
        else:
            parts = client.put_parts(video, data)
            completed.append({"camera_key": video["camera_key"], "parts": parts})
    return completed


def put_all(
    client, episode_id: str, upload: dict, data: bytes, videos: dict[str, bytes]
) -> tuple[list[dict] | None, list[dict]]:
    """PUT the parquet and every video as `upload` (the registration's) says; if storage
    refuses a URL (expired), renew once (the platform renews every file not completed: fresh
    keys for all) and PUT them all again. The parquet's multipart parts and the videos'."""
    for attempt in range(2):
        try:
            if upload["method"] == "single":
                client.put_bytes(upload["url"], data, upload["headers"])
                parts = None
            else:
                parts = client.put_parts(upload, data)
            return parts, put_videos(client, upload, videos)
        except ApiError as exc:
            if attempt or exc.status not in (400, 403):
                raise
            log.info("storage refused the upload (%s): renewing its URLs", exc)
            upload = client.renew_upload(episode_id)
    raise AssertionError("unreachable")


def synthetic_view(*, frames: int, fps: int, width: int, height: int, seed: int = 0) -> bytes:
    """`frames` frames at `fps` (frame i at i/fps), H.264 yuv420p in MP4."""
    import av  # only agents serving camera orders need PyAV

    width, height = width + width % 2, height + height % 2  # yuv420p wants even sizes
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width]
    scene = np.stack([70 + 70 * xs / width, 80 + 60 * ys / height, np.full(xs.shape, 110.0)], -1)
    # Sensor noise: a few precomputed noisy exposures, cycled (cheap for long episodes).
    exposures = [
        np.clip(scene + rng.normal(0, 2.0, scene.shape), 0, 255).astype(np.uint8) for _ in range(4)
    ]
    side = max(8, min(width, height) // 6)
    sink = io.BytesIO()
    with av.open(sink, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast", "tune": "zerolatency", "crf": "30"}
        for index in range(frames):
            pixels = exposures[index % len(exposures)].copy()
            x = int((width - side) * (0.5 + 0.45 * np.sin(index * 2.0 / fps)))
            y = int((height - side) * (0.5 + 0.45 * np.cos(index * 1.3 / fps)))
            pixels[y : y + side, x : x + side] = (240, 230, 90)  # bright in luma too
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return sink.getvalue()
