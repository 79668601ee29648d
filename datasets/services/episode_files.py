"""The files of an episode (issue 15): the parquet and one video per ordered camera, each with
its own presigned upload (size and SHA-256 signed in; multipart when large).

episodes.py holds the episode's life (register, renew, complete, abandon); this module the
per-file part of it: how one file is presigned, which videos an order's episode must list,
and which files of an episode are still to arrive when the fleet says `complete`.
"""

import re
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from datasets import storage
from datasets.models import Episode, EpisodeVideo
from marketplace.errors import invalid
from orders.streams import camera_keys

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
PARQUET = "parquet"  # how the parquet is named among the files still missing


@dataclass(frozen=True)
class UploadPart:
    part_number: int
    url: str
    headers: dict[str, str]


@dataclass(frozen=True)
class VideoDeclaration:
    """One camera's video as the fleet declares it when registering the episode."""

    camera_key: str
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class UploadInstructions:
    """How to send one file's bytes: one PUT, or multipart parts then `complete` with their
    ETags. The parquet's instructions list the videos' (`videos`) next to their own."""

    method: str  # "single" or "multipart"
    expires_at: datetime
    url: str = ""
    headers: dict | None = None
    part_size: int = 0
    parts: tuple[UploadPart, ...] = ()
    camera_key: str = ""  # a video's; "" for the parquet
    videos: tuple["UploadInstructions", ...] = ()


@dataclass(frozen=True)
class Presigned:
    instructions: UploadInstructions
    multipart_upload_id: str  # "" for a single PUT
    part_bytes: int = 0  # the part size of a multipart upload


def is_multipart(size_bytes: int) -> bool:
    return size_bytes >= settings.EPISODE_MULTIPART_THRESHOLD_BYTES


def validate_part_sha256s(
    *, size_bytes: int, part_sha256s: tuple[str, ...], part_bytes: int
) -> None:
    """Declared part checksums: none, or one SHA-256 (hex) per EPISODE_MULTIPART_PART_BYTES
    part of a file uploaded in parts, computed at that part size (`part_bytes`, declared with
    them: the platform fixes the part size, so the parts and their composite are a function of
    the file's bytes, and a fleet assuming another size is told so, not rejected by QA)."""
    if not part_sha256s:
        return
    if part_bytes != settings.EPISODE_MULTIPART_PART_BYTES:
        raise invalid(
            "part_sha256s",
            f"Parts are {settings.EPISODE_MULTIPART_PART_BYTES} bytes here (part_bytes"
            f" {part_bytes} declared).",
        )
    if not is_multipart(size_bytes):
        raise invalid(
            "part_sha256s",
            f"Files under {settings.EPISODE_MULTIPART_THRESHOLD_BYTES} bytes are one PUT:"
            " declare no parts.",
        )
    count = -(-size_bytes // part_bytes)
    if len(part_sha256s) != count:
        raise invalid(
            "part_sha256s",
            f"One SHA-256 per part of {part_bytes} bytes (the last shorter): {count} for"
            f" {size_bytes} bytes, not {len(part_sha256s)}.",
        )
    if not all(SHA256_HEX.match(part or "") for part in part_sha256s):
        raise invalid("part_sha256s", "Each part's SHA-256 is 64 lowercase hex characters.")


def presign(
    *,
    key: str,
    size_bytes: int,
    sha256: str,
    camera_key: str = "",
    part_sha256s: tuple[str, ...] = (),
    part_bytes: int = 0,
) -> Presigned:
    """Upload URL(s) for one file to `key`: a single PUT with its length and SHA-256 signed
    in, or (from EPISODE_MULTIPART_THRESHOLD_BYTES) a multipart upload's part URLs, each with
    its length and, when the fleet declared them, its SHA-256 signed in (the upload is then
    begun with ChecksumAlgorithm=SHA256: the store refuses a part of other bytes). `part_bytes`:
    the part size the episode was registered with (renewed URLs keep it), else the setting."""
    expires_in = settings.S3_UPLOAD_URL_EXPIRY_SECONDS
    expires_at = timezone.now() + timezone.timedelta(seconds=expires_in)
    if not is_multipart(size_bytes):
        request = storage.presigned_put(
            key=key, content_length=size_bytes, sha256_hex=sha256, expires_in=expires_in
        )
        instructions = UploadInstructions(
            method="single",
            expires_at=expires_at,
            url=request.url,
            headers=request.headers,
            camera_key=camera_key,
        )
        return Presigned(instructions=instructions, multipart_upload_id="")
    part_size = part_bytes or settings.EPISODE_MULTIPART_PART_BYTES
    upload_id = storage.multipart_start(key=key, sha256_checksums=bool(part_sha256s))
    parts = []
    for index, start in enumerate(range(0, size_bytes, part_size), start=1):
        request = storage.presigned_part_put(
            key=key,
            upload_id=upload_id,
            part_number=index,
            content_length=min(part_size, size_bytes - start),
            sha256_hex=part_sha256s[index - 1] if part_sha256s else "",
            expires_in=expires_in,
        )
        parts.append(UploadPart(part_number=index, url=request.url, headers=request.headers))
    instructions = UploadInstructions(
        method="multipart",
        expires_at=expires_at,
        part_size=part_size,
        parts=tuple(parts),
        camera_key=camera_key,
    )
    return Presigned(instructions=instructions, multipart_upload_id=upload_id, part_bytes=part_size)


# --- Videos ------------------------------------------------------------------------------------


def _episode_dir(episode: Episode) -> str:
    return f"orders/{episode.order_id}/jobs/{episode.job_id}/episodes/{episode.id}"


def camera_file_name(camera_key: str) -> str:
    return camera_key.removeprefix("observation.images.")


def video_upload_key(episode: Episode, camera_key: str) -> str:
    attempt = uuid.uuid4().hex[:12]
    return f"{_episode_dir(episode)}/upload-{attempt}-{camera_file_name(camera_key)}.mp4"


def video_stored_key(episode: Episode, camera_key: str) -> str:
    return f"{_episode_dir(episode)}/videos/{camera_file_name(camera_key)}.mp4"


def validate_videos(*, stream_spec: dict, videos: tuple[VideoDeclaration, ...]) -> None:
    """The registration lists exactly one video per camera of the order (none without)."""
    expected = camera_keys(stream_spec)
    declared = [video.camera_key for video in videos]
    if len(set(declared)) != len(declared):
        raise invalid("videos", "Each camera's video is listed once.")
    if sorted(declared) != sorted(expected):
        missing = sorted(set(expected) - set(declared))
        extra = sorted(set(declared) - set(expected))
        wanted = ", ".join(expected) if expected else "none (the order has no cameras)"
        parts = [f"missing {', '.join(missing)}"] if missing else []
        parts += [f"not ordered: {', '.join(extra)}"] if extra else []
        raise invalid(
            "videos", f"List one video per ordered camera: {wanted} ({'; '.join(parts)})."
        )
    for video in videos:
        if not (1 <= video.size_bytes <= settings.EPISODE_MAX_BYTES):
            raise invalid("videos", f"{video.camera_key}: 1 to {settings.EPISODE_MAX_BYTES} bytes.")
        if not SHA256_HEX.match(video.sha256 or ""):
            raise invalid("videos", f"{video.camera_key}: sha256 is 64 lowercase hex characters.")


def videos_create(
    *, episode: Episode, videos: tuple[VideoDeclaration, ...]
) -> tuple[UploadInstructions, ...]:
    """The episode's EpisodeVideo rows (the episode is saved), each with its upload URL(s)."""
    uploads = []
    for declared in sorted(videos, key=lambda v: v.camera_key):
        video = EpisodeVideo(
            episode=episode,
            camera_key=declared.camera_key,
            size_bytes=declared.size_bytes,
            sha256=declared.sha256,
        )
        uploads.append(_presign_video(episode, video))
        video.save(force_insert=True)
    return tuple(uploads)


def _presign_video(episode: Episode, video: EpisodeVideo) -> UploadInstructions:
    video.upload_key = video_upload_key(episode, video.camera_key)
    presigned = presign(
        key=video.upload_key,
        size_bytes=video.size_bytes,
        sha256=video.sha256,
        camera_key=video.camera_key,
    )
    video.multipart_upload_id = presigned.multipart_upload_id
    return presigned.instructions


def videos_renew(*, episode: Episode) -> tuple[tuple[UploadInstructions, ...], list[tuple]]:
    """Fresh URL(s) for every video not uploaded yet; the multipart uploads they replace
    (key, upload id) are returned for the caller to abort once committed."""
    uploads, replaced = [], []
    for video in episode.videos.select_for_update().filter(uploaded_at__isnull=True):
        if video.multipart_upload_id:
            replaced.append((video.upload_key, video.multipart_upload_id))
        uploads.append(_presign_video(episode, video))
        video.save(update_fields=["upload_key", "multipart_upload_id"])
    return tuple(uploads), replaced


def unfinished_multipart(episode: Episode) -> list[tuple[str, str]]:
    return list(
        episode.videos.filter(uploaded_at__isnull=True)
        .exclude(multipart_upload_id="")
        .values_list("upload_key", "multipart_upload_id")
    )


def finish_files(
    *, episode: Episode, parts: list[dict] | None, video_parts: dict[str, list[dict]]
) -> list[str]:
    """At `complete` of an episode with videos: finish each multipart upload given its parts,
    note each single PUT that arrived; return the files still missing ([] = all uploaded).
    What is finished stays finished (a multipart upload completes once)."""
    missing = []
    if episode.multipart_upload_id:
        if parts:
            complete_multipart(
                episode.upload_key, episode.multipart_upload_id, parts, episode.part_sha256s
            )
            episode.multipart_upload_id = ""  # done: from now on a stored object like a PUT
            episode.save(update_fields=["multipart_upload_id"])
        else:
            missing.append(PARQUET)
    elif not storage.exists(episode.upload_key):
        missing.append(PARQUET)
    for video in episode.videos.select_for_update().filter(uploaded_at__isnull=True):
        given = video_parts.get(video.camera_key)
        if video.multipart_upload_id and given:
            complete_multipart(video.upload_key, video.multipart_upload_id, given)
        elif video.multipart_upload_id or not storage.exists(video.upload_key):
            missing.append(video.camera_key)
            continue
        video.uploaded_at = timezone.now()
        video.save(update_fields=["uploaded_at"])
    return missing


def complete_multipart(
    key: str, upload_id: str, parts: list[dict], part_sha256s: list[str] | tuple = ()
) -> None:
    """storage.multipart_complete (each part with its declared SHA-256, if any: the store
    checks them against the parts it verified and keeps the composite); a refusal is the
    caller's 400 (unless the object is there: completed by an earlier call whose answer was
    lost or rolled back), an outage propagates."""
    given = [{"PartNumber": p["part_number"], "ETag": p["etag"]} for p in parts]
    for part in given if part_sha256s else ():
        number = part["PartNumber"]
        if not (isinstance(number, int) and 1 <= number <= len(part_sha256s)):
            raise invalid("parts", f"Part {number} is not a part of this upload.")
        part["ChecksumSHA256"] = storage.sha256_hex_to_base64(part_sha256s[number - 1])
    try:
        storage.multipart_complete(key=key, upload_id=upload_id, parts=given)
    except storage.StorageError as exc:
        if storage.exists(key):  # storage down: this raises StorageUnavailable too (503)
            return
        if isinstance(exc, storage.StorageUnavailable):
            raise
        raise invalid("parts", f"The storage refused to complete the upload: {exc}") from exc
