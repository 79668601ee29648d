"""An episode's files on the way up: registered with the parquet's part checksums when it
goes up in parts, the camera videos declared (size, SHA-256), PUT to their own presigned
URLs (one PUT or multipart, as the platform says), their multipart ETags sent with `complete`.

A parquet of MULTIPART_FROM bytes or more is registered with the SHA-256 of each PART_BYTES
part (`part_sha256s`, the platform's fixed part size): its part URLs then carry their
checksums, and on a store that keeps them QA reads only what it checks. A platform with
another part size or threshold answers 400 on `part_sha256s`; the agent then registers the
file without them (QA streams it; nothing else changes).

A job's stream spec (`job["stream_spec"]`) lists the cameras every episode carries. An
`Episode` may bring its videos (`Episode.videos`); for a camera it lacks, the agent renders
one from the episode's trajectory (fleet_agent/cameras.py), so a reference fleet can serve
any order.
"""

from __future__ import annotations

import hashlib
import logging
import uuid

from fleet_agent.cameras import ENCODERS, render_camera_videos
from fleet_agent.client import ApiError
from fleet_agent.episodes import Episode

log = logging.getLogger("fleet_agent")

# The platform's EPISODE_MULTIPART_THRESHOLD_BYTES and EPISODE_MULTIPART_PART_BYTES defaults.
MULTIPART_FROM = 64 * 1024 * 1024
PART_BYTES = 16 * 1024 * 1024


def part_sha256s(data: bytes, part_bytes: int | None = None) -> list[str]:
    part_bytes = part_bytes or PART_BYTES
    view = memoryview(data)
    return [
        hashlib.sha256(view[start : start + part_bytes]).hexdigest()
        for start in range(0, len(data), part_bytes)
    ]


def with_parts(body: dict, data: bytes) -> dict:
    """The registration body, with the parquet's part checksums when it goes up in parts."""
    if len(data) < MULTIPART_FROM:
        return body
    return {**body, "part_sha256s": part_sha256s(data), "part_bytes": PART_BYTES}


def register(client, job_id: str, body: dict, data: bytes, key: str = "", *, replayed=False):
    """Register with the part checksums (`with_parts`) under Idempotency-Key `key` (a fresh
    one when ""); `replayed`: `client.register_episode_replayed`'s answer. A platform refusing
    the checksums (another part size or threshold: 400 on `part_sha256s`) gets the plain body
    instead: a 400 is not kept under the key, so the same key serves the second request."""
    key = key or uuid.uuid4().hex
    call = client.register_episode_replayed if replayed else client.register_episode
    declared = with_parts(body, data)
    try:
        return call(job_id, declared, key)
    except ApiError as exc:
        if declared is body or exc.status != 400 or "part_sha256s" not in exc.fields:
            raise
        log.info("the platform takes no part checksums here (%s): registering without", exc)
        return call(job_id, body, key)


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
