"""Episodes arrive: a fleet registers one, uploads its bytes straight to storage, completes."""

import logging
import re
import uuid
from dataclasses import dataclass, replace
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from datasets import storage
from datasets.error_codes import ErrorCode
from datasets.models import Episode
from datasets.qa_checks import Reason
from datasets.services import episode_files
from datasets.services.episode_files import SHA256_HEX, UploadInstructions, VideoDeclaration
from fleets.models import Job, Robot
from fleets.services.collection import (
    calibrations_for_episode,
    scene_for_episode,
)
from fleets.services.jobs import job_report_progress
from fleets.services.operators import operator_for_episode
from marketplace.errors import Conflict, NotFound, ServiceUnavailable, invalid
from marketplace.models import Organization
from marketplace.queueing import enqueue_on_commit
from orders.streams import camera_names

OPERATOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
WORKING_JOB_STATES = (Job.Status.ASSIGNED, Job.Status.IN_PROGRESS)
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeRegistration:
    site_id: uuid.UUID
    robot_id: uuid.UUID
    operator: str
    task_instruction: str
    success: bool
    fps: int
    size_bytes: int
    sha256: str
    frames: int  # rows of the parquet file: QA checks it, the job's free time is counted by it
    # In the order the fleet sent them (duplicates dropped): the first is the object whose
    # (environment, object) cell the episode counts in (issue 30).
    objects_handled: tuple[str, ...] = ()
    # The name of an active scene of the site (None: no scene named).
    scene: str | None = None
    # (camera, calibration id) pairs the fleet names; the order's other cameras get the
    # calibration in force (fleets.services.collection.calibrations_for_episode).
    camera_calibrations: tuple[tuple[str, str], ...] = ()
    # One per camera of the order's stream spec (none for an order without cameras).
    videos: tuple[VideoDeclaration, ...] = ()
    # SHA-256 (hex) of each EPISODE_MULTIPART_PART_BYTES part, for a file uploaded in parts:
    # optional; with them QA need not stream the file on a store that keeps checksums.
    part_sha256s: tuple[str, ...] = ()
    part_bytes: int = 0  # the part size the fleet computed them at (must be the platform's)

    @property
    def seconds(self) -> Decimal:
        return Decimal(self.frames) / Decimal(self.fps)


def _upload_key(episode: Episode) -> str:
    attempt = uuid.uuid4().hex[:12]
    return (
        f"orders/{episode.order_id}/jobs/{episode.job_id}/episodes/{episode.id}/"
        f"upload-{attempt}.parquet"
    )


def stored_key_for(episode: Episode) -> str:
    return f"orders/{episode.order_id}/jobs/{episode.job_id}/episodes/{episode.id}/episode.parquet"


def _validate(registration: EpisodeRegistration) -> None:
    if not OPERATOR.match(registration.operator or ""):
        raise invalid("operator", "A pseudonym of 1-64 letters, digits, '.', '_' or '-'.")
    if not (registration.task_instruction or "").strip():
        raise invalid("task_instruction", "Say what the operator was asked to do.")
    if not (1 <= registration.fps <= settings.EPISODE_MAX_FPS):
        raise invalid("fps", f"Between 1 and {settings.EPISODE_MAX_FPS}.")
    if not (1 <= registration.size_bytes <= settings.EPISODE_MAX_BYTES):
        raise invalid("size_bytes", f"Between 1 and {settings.EPISODE_MAX_BYTES} bytes.")
    if not SHA256_HEX.match(registration.sha256 or ""):
        raise invalid("sha256", "64 lowercase hexadecimal characters (SHA-256 of the file).")
    episode_files.validate_part_sha256s(
        size_bytes=registration.size_bytes,
        part_sha256s=registration.part_sha256s,
        part_bytes=registration.part_bytes,
    )
    if registration.frames < 1 or not (
        settings.EPISODE_MIN_SECONDS <= registration.seconds <= settings.EPISODE_MAX_SECONDS
    ):
        raise invalid(
            "frames",
            f"An episode lasts {settings.EPISODE_MIN_SECONDS:g} to"
            f" {settings.EPISODE_MAX_SECONDS:g} s: frames / fps must be in that range.",
        )
    if len(registration.objects_handled) > 50 or any(
        not (1 <= len(name) <= 100) for name in registration.objects_handled
    ):
        raise invalid("objects_handled", "Up to 50 object names of 1-100 characters.")


def episode_register(
    *, organization: Organization, job_id, registration: EpisodeRegistration
) -> tuple[Episode, UploadInstructions]:
    """A fleet announces an episode of a job it holds and gets where to upload it."""
    _validate(registration)
    job = (
        Job.objects.select_related("fleet", "site", "order")
        .filter(pk=job_id, fleet__organization=organization)
        .first()
    )
    if job is None:
        raise NotFound("Job not found.")
    if job.status not in WORKING_JOB_STATES:
        raise Conflict(
            f"Episodes are taken only for assigned jobs; this one is {job.status}.",
            code=ErrorCode.JOB_NOT_ACTIVE,
        )
    episode_files.validate_videos(stream_spec=job.order.stream_spec, videos=registration.videos)
    if registration.site_id != job.site_id:
        raise invalid("site", "Episodes of this job are collected at the job's site.")
    # One dataset has one frame rate: the order's first episode sets it.
    other_fps = (
        Episode.objects.filter(order_id=job.order_id)
        .exclude(fps=registration.fps)
        .values_list("fps", flat=True)
        .first()
    )
    if other_fps is not None:
        raise invalid("fps", f"This order's episodes are recorded at {other_fps} fps.")
    robot = Robot.objects.filter(pk=registration.robot_id, site_id=job.site_id).first()
    if robot is None:
        raise invalid("robot", "Not a robot of the job's site.")
    if robot.embodiment_id != job.embodiment_id:
        raise invalid("robot", "This robot's embodiment is not the one the order asks for.")
    registered = operator_for_episode(fleet_id=job.fleet_id, pseudonym=registration.operator)
    scene = scene_for_episode(site_id=job.site_id, name=registration.scene)
    camera_calibrations = calibrations_for_episode(
        robot_id=robot.id,
        cameras=camera_names(job.order.stream_spec),
        given=dict(registration.camera_calibrations),
    )
    with transaction.atomic():
        # Registering is also a heartbeat: the job is being worked on. It locks the job, so
        # two registrations at once count each other's time.
        job = job_report_progress(organization=organization, job_id=job.id)
        _check_room(job=job, registration=registration)
        episode = Episode(
            job=job,
            order_id=job.order_id,
            fleet_id=job.fleet_id,
            site_id=job.site_id,
            robot=robot,
            operator=registration.operator,
            registered_operator=registered,
            task_instruction=registration.task_instruction.strip(),
            success=registration.success,
            objects_handled=list(dict.fromkeys(registration.objects_handled)),
            scene=scene,
            camera_calibrations=camera_calibrations,
            fps=registration.fps,
            size_bytes=registration.size_bytes,
            sha256=registration.sha256,
            part_sha256s=list(registration.part_sha256s),
            declared_frames=registration.frames,
        )
        episode.upload_key = _upload_key(episode)
        instructions = _upload_instructions(episode)
        episode.save(force_insert=True)
        try:
            videos = episode_files.videos_create(episode=episode, videos=registration.videos)
        except storage.StorageError as exc:
            raise _storage_unavailable(exc) from exc
    return episode, replace(instructions, videos=videos)


def _check_room(*, job: Job, registration: EpisodeRegistration) -> None:
    """A job takes episodes while its time still to fill exceeds what is already on the way
    (registered or awaiting QA): at most one episode's worth beyond its target is ever in
    flight, and a file already accepted (or awaiting QA) in the order is refused at once."""
    same_file = Q(sha256=registration.sha256)
    if registration.part_sha256s:
        same_file |= Q(parts_sha256=storage.parts_digest(registration.part_sha256s))
    twin = (
        Episode.objects.filter(same_file, order_id=job.order_id)
        .filter(
            status__in=[Episode.Status.UPLOADED, Episode.Status.ACCEPTED, Episode.Status.EXCLUDED]
        )
        .values_list("id", flat=True)
        .first()
    )
    if twin is not None:
        raise Conflict(
            f"This file is already episode {twin} of this order: each file counts once.",
            code=ErrorCode.DUPLICATE_EPISODE,
            fields={"sha256": ["Already uploaded for this order."]},
        )
    in_flight = Episode.objects.filter(
        job=job, status__in=[Episode.Status.REGISTERED, Episode.Status.UPLOADED]
    ).values_list("declared_frames", "fps")
    pending = sum(
        (
            Decimal(frames) / Decimal(fps) if frames else Decimal(settings.EPISODE_MAX_SECONDS)
            for frames, fps in in_flight
        ),
        Decimal(0),
    )
    remaining = job.target_seconds - job.accepted_seconds
    if pending >= remaining:
        raise Conflict(
            f"The job's remaining {max(remaining, Decimal(0)):.0f} s are covered by "
            f"{len(in_flight)} episode(s) already registered or awaiting QA; register more once "
            "QA has decided them (a rejected one frees its time).",
            code=ErrorCode.JOB_FULLY_BOOKED,
        )


def _storage_unavailable(exc: Exception) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"Storage cannot be reached right now; nothing was changed, try again shortly. ({exc})",
        code=ErrorCode.STORAGE_UNAVAILABLE,
    )


def _upload_instructions(episode: Episode) -> UploadInstructions:
    try:
        return _upload_instructions_from_storage(episode)
    except storage.StorageError as exc:  # storage refused or is down: not the caller's fault
        raise _storage_unavailable(exc) from exc


def _upload_instructions_from_storage(episode: Episode) -> UploadInstructions:
    presigned = episode_files.presign(
        key=episode.upload_key,
        size_bytes=episode.size_bytes,
        sha256=episode.sha256,
        part_sha256s=tuple(episode.part_sha256s),
        part_bytes=episode.part_bytes,
    )
    episode.multipart_upload_id = presigned.multipart_upload_id
    episode.part_bytes = presigned.part_bytes
    episode.upload_expires_at = presigned.instructions.expires_at
    return presigned.instructions


def _own_episode_locked(*, organization: Organization, episode_id) -> Episode:
    episode = (
        Episode.objects.select_for_update()
        .filter(pk=episode_id, fleet__organization=organization)
        .first()
    )
    if episode is None:
        raise NotFound("Episode not found.")
    return episode


def episode_renew_upload(*, organization: Organization, episode_id) -> UploadInstructions:
    """New upload URL(s), to a fresh key, while the episode still waits for its bytes; a
    multipart upload begun for the old key is aborted (its parts are never stored)."""
    with transaction.atomic():
        episode = _own_episode_locked(organization=organization, episode_id=episode_id)
        if episode.status != Episode.Status.REGISTERED:
            raise Conflict(
                f"This episode is {episode.status}: its file can no longer change.",
                code=ErrorCode.EPISODE_NOT_AWAITING_UPLOAD,
            )
        replaced = [(episode.upload_key, episode.multipart_upload_id)]
        episode.upload_key = _upload_key(episode)
        instructions = _upload_instructions(episode)
        try:
            videos, replaced_videos = episode_files.videos_renew(episode=episode)
        except storage.StorageError as exc:
            raise _storage_unavailable(exc) from exc
        episode.save(
            update_fields=["upload_key", "multipart_upload_id", "upload_expires_at", "part_bytes"]
        )
        _abort_on_commit([*replaced, *replaced_videos])
    return replace(instructions, videos=videos)


def _abort_on_commit(uploads: list[tuple[str, str]]) -> None:
    for key, upload_id in uploads:
        if upload_id:
            transaction.on_commit(
                lambda key=key, upload_id=upload_id: _abort_quietly(key=key, upload_id=upload_id)
            )


def _abort_quietly(*, key: str, upload_id: str) -> bool:
    """Abort a multipart upload; False (logged) when storage refuses or is down: the bucket's
    lifecycle rule for incomplete uploads, or a later sweep, gets it."""
    try:
        storage.multipart_abort(key=key, upload_id=upload_id)
    except storage.StorageError as exc:
        logger.warning("multipart upload %s of %s not aborted: %s", upload_id, key, exc)
        return False
    return True


def episode_abandon_upload(*, episode_id) -> bool:
    """A registered episode whose upload URLs expired long ago without a completed upload is
    rejected (`upload_abandoned`), which frees its time on the job, and a multipart upload
    begun for it is aborted. True if this call rejected it."""
    cutoff = timezone.now() - timezone.timedelta(seconds=settings.EPISODE_UPLOAD_ABANDONED_SECONDS)
    with transaction.atomic():
        episode = Episode.objects.select_for_update().get(pk=episode_id)
        if episode.status != Episode.Status.REGISTERED:
            return False
        issued_until = episode.upload_expires_at or episode.created_at
        if issued_until > cutoff:
            return False
        uploads = [(episode.upload_key, episode.multipart_upload_id)]
        uploads += episode_files.unfinished_multipart(episode)
        episode.status = Episode.Status.REJECTED
        episode.decided_at = timezone.now()
        episode.qa_failures = [
            {
                "code": Reason.UPLOAD_ABANDONED,
                "message": "No upload was completed before its URLs expired.",
            }
        ]
        episode.save(update_fields=["status", "decided_at", "qa_failures"])
        _abort_on_commit(uploads)
    return True


def episode_complete(
    *,
    organization: Organization,
    episode_id,
    parts: list[dict] | None = None,
    video_parts: dict[str, list[dict]] | None = None,
) -> Episode:
    """The fleet says the bytes are up: finish the multipart uploads given their parts, queue
    QA once every file of the episode is uploaded (409 naming the missing ones otherwise:
    what was finished stays finished, `complete` again when the rest is up)."""
    with transaction.atomic():
        episode = _own_episode_locked(organization=organization, episode_id=episode_id)
        if episode.status != Episode.Status.REGISTERED:
            return episode  # completing twice is harmless
        if episode.videos.exists():
            try:
                missing = episode_files.finish_files(
                    episode=episode, parts=parts, video_parts=video_parts or {}
                )
            except storage.StorageUnavailable as exc:
                raise _storage_unavailable(exc) from exc
        else:  # the parquet alone, as before videos
            missing = []
            if episode.multipart_upload_id:
                if not parts:
                    raise invalid("parts", "A multipart upload completes with its parts and ETags.")
                try:
                    episode_files.complete_multipart(
                        episode.upload_key,
                        episode.multipart_upload_id,
                        parts,
                        episode.part_sha256s,
                    )
                except storage.StorageUnavailable as exc:
                    raise _storage_unavailable(exc) from exc
        if not missing:
            episode.status = Episode.Status.UPLOADED
            episode.uploaded_at = timezone.now()
            episode.save(update_fields=["status", "uploaded_at"])
            # Broker down: the episode stays "uploaded" and qa_sweep queues its QA later.
            enqueue_on_commit("datasets.tasks.qa_episode", episode.id)
    if missing:
        raise Conflict(
            f"Not every file of the episode is uploaded yet: {', '.join(missing)}. Upload them "
            "(a multipart upload completes with its parts) and complete again.",
            code=ErrorCode.EPISODE_FILES_MISSING,
            fields={"files": missing},
        )
    return episode
