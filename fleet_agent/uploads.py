"""An episode's camera videos on the way up: declared at registration (size, SHA-256), PUT
to their own presigned URLs (one PUT or multipart, as the platform says), their multipart
ETags sent with `complete`.

A job's stream spec (`job["stream_spec"]`) lists the cameras every episode carries. An
`Episode` may bring its videos (`Episode.videos`); for a camera it lacks, the agent renders
one from the episode's trajectory (fleet_agent/cameras.py), so a reference fleet can serve
any order.
"""

from __future__ import annotations

import hashlib
import logging

from fleet_agent.cameras import ENCODERS, render_camera_videos
from fleet_agent.client import ApiError
from fleet_agent.episodes import Episode

log = logging.getLogger("fleet_agent")


def cameras_of(job: dict) -> list[dict]:
    return list((job.get("stream_spec") or {}).get("cameras") or [])


def vectors_of(job: dict) -> list[dict]:
    return list((job.get("stream_spec") or {}).get("vectors") or [])


def videos_for(
    job: dict, episode: Episode, seed: int = 0, defect: str | None = None
) -> dict[str, bytes]:
    """One MP4 per camera of the job: the episode's own, else rendered from its trajectory
    (fleet_agent/cameras.py) in the codec the order is delivered in, so that delivery
    copies the packets instead of re-encoding. `defect`: a video defect for the first camera."""
    cameras = [camera for camera in cameras_of(job) if camera["key"] not in episode.videos]
    videos = dict(episode.videos)
    if cameras:
        codec = (job.get("stream_spec") or {}).get("video_codec") or "h264"
        videos |= render_camera_videos(
            {"observation.state": episode.state},
            cameras,
            episode.fps,
            defect,
            codec=codec if codec in ENCODERS else "h264",
            seed=seed,
        )
    return {camera["key"]: videos[camera["key"]] for camera in cameras_of(job)}


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
