"""QA decisions: check an uploaded episode, record the verdict once, accrue accepted time.

Locks are taken in the order episode -> order -> job (fleets takes order -> job), so
concurrent QA decisions on one order serialize on the order row and never lose an update.
"""

from decimal import ROUND_DOWN, Decimal

from django.conf import settings
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import Q
from django.utils import timezone

from datasets import storage
from datasets.models import Delivery, Episode, EpisodeVideo
from datasets.qa_checks import EpisodeExpectation, QAResult, Reason
from datasets.qa_content import ContentThresholds
from datasets.qa_sandbox import StoredVideo, check_stored_episode_bounded
from datasets.services.cells import cell_accrue, cells_collect_shortfall, plan_check
from datasets.services.delivery_versions import delivery_start
from datasets.services.duplicates import (
    VIDEO_LOCK_CLASS,
    lock_signatures,
    near_duplicate,
    record_signature,
    record_video_signatures,
    video_near_duplicate,
)
from datasets.services.episode_files import video_stored_key
from datasets.services.episodes import WORKING_JOB_STATES, stored_key_for
from fleets.models import Job
from fleets.services.jobs import job_transition
from marketplace.audit import system_label
from orders.content_qa import content_qa_thresholds
from orders.models import Order
from orders.services import order_send_to_review
from orders.streams import cameras_of, vectors_of

SYSTEM = system_label("qa")
# QA checks stop themselves at EPISODE_QA_TIME_LIMIT_SECONDS (in a sandbox that is killed a
# little later); the task's Celery limits (datasets/tasks.py), the last backstop, are this.
QA_TIME_LIMIT = settings.EPISODE_QA_TIME_LIMIT_SECONDS + 120


def content_thresholds(embodiment) -> ContentThresholds:
    values = content_qa_thresholds(embodiment)
    limits = tuple(tuple(float(bound) for bound in pair) for pair in values.pop("state_limits"))
    return ContentThresholds(
        state_limits=limits, state_names=tuple(embodiment.state_names or ()), **values
    )


def episode_expectation(episode: Episode) -> EpisodeExpectation:
    embodiment = episode.job.embodiment
    return EpisodeExpectation(
        size=episode.size_bytes,
        sha256_hex=episode.sha256,
        fps=episode.fps,
        action_dim=embodiment.action_dim,
        min_duration_seconds=settings.EPISODE_MIN_SECONDS,
        max_duration_seconds=settings.EPISODE_MAX_SECONDS,
        declared_frames=episode.declared_frames,
        part_bytes=episode.part_bytes,
        part_sha256s=tuple(episode.part_sha256s),
        vectors=tuple(
            (vector["key"], len(vector["names"]))
            for vector in vectors_of(episode.order.stream_spec)
        ),
        content=content_thresholds(embodiment) if settings.EPISODE_QA_CONTENT else None,
    )


def episode_run_qa(*, episode_id, previous_run_ended: bool = False) -> Episode:
    """Check an uploaded episode and record the decision. Safe to run again at any time.

    The file's checks run in a sandbox bounded in memory and time (datasets/qa_sandbox.py);
    a run that never finishes (its worker died) is counted, and after EPISODE_QA_MAX_ATTEMPTS
    such runs the episode is rejected `qa_failed` instead of being tried forever. A transient
    storage or database error is not a verdict: the run is released (best effort) and the
    task retries with `previous_run_ended`, so the failed run is not counted either way.
    """
    episode = _qa_start(episode_id, previous_run_ended=previous_run_ended)
    if episode.status != Episode.Status.UPLOADED or episode.qa_started_at is None:
        return episode
    try:
        result, stored_key, video_keys = _checked(episode)
    except TRANSIENT_ERRORS:
        _qa_release(episode_id)
        raise
    return episode_record_qa(
        episode_id=episode.id, result=result, stored_key=stored_key, video_keys=video_keys
    )


TRANSIENT_ERRORS = (storage.StorageError, OperationalError, InterfaceError)


def _qa_start(episode_id, *, previous_run_ended: bool) -> Episode:
    with transaction.atomic():
        episode = (
            Episode.objects.select_for_update(of=("self",))
            .select_related("job__embodiment", "order")
            .get(pk=episode_id)
        )
        if episode.status != Episode.Status.UPLOADED:
            return episode
        if episode.qa_started_at is not None and not previous_run_ended:
            episode.qa_unfinished_runs += 1  # the last run died without a verdict
        if episode.qa_unfinished_runs >= settings.EPISODE_QA_MAX_ATTEMPTS:
            episode.save(update_fields=["qa_unfinished_runs"])
            result = QAResult()
            result.fail(
                Reason.QA_FAILED,
                f"QA could not finish checking this file in {episode.qa_unfinished_runs} "
                "attempts (each ran out of time or memory, or its worker died).",
            )
            return episode_record_qa(episode_id=episode.id, result=result, stored_key="")
        episode.qa_started_at = timezone.now()
        episode.save(update_fields=["qa_started_at", "qa_unfinished_runs"])
    return episode


def _qa_release(episode_id) -> None:
    """A transient error ended the run: it does not count as unfinished (best effort: with the
    database down this fails too, and the next run counts one more)."""
    try:
        if not connection.in_atomic_block:
            close_old_connections()  # a connection the error broke is replaced
        Episode.objects.filter(pk=episode_id, status=Episode.Status.UPLOADED).update(
            qa_started_at=None
        )
    except (OperationalError, InterfaceError):
        pass


def _stored(upload_key: str, stored_key: str) -> bool:
    """Copy an upload to its stored key (once: a retried QA reads the stored copy); False
    when nothing was uploaded."""
    if storage.exists(stored_key):
        return True
    try:
        storage.copy(source_key=upload_key, dest_key=stored_key)
    except storage.ObjectMissing:
        return False
    return True


def _checked(episode: Episode) -> tuple[QAResult, str, dict[str, str]]:
    """QA of the parquet and every camera's video, each copied to its stored key first."""
    stored_key = stored_key_for(episode)
    if not _stored(episode.upload_key, stored_key):
        result = QAResult()
        result.fail(Reason.OBJECT_MISSING, "No file was uploaded for this episode.")
        return result, "", {}
    uploaded = {video.camera_key: video for video in episode.videos.all()}
    videos, video_keys = [], {}
    for camera in cameras_of(episode.order.stream_spec):
        video = uploaded.get(camera["key"])
        key = video_stored_key(episode, camera["key"]) if video else ""
        if video is not None and _stored(video.upload_key, key):
            video_keys[camera["key"]] = key
        videos.append(
            StoredVideo(
                camera_key=camera["key"],
                key=video_keys.get(camera["key"], ""),
                size=video.size_bytes if video else 0,
                sha256=video.sha256 if video else "",
                min_width=camera["min_width"],
                min_height=camera["min_height"],
            )
        )
    expectation = episode_expectation(episode)
    result = check_stored_episode_bounded(
        stored_key, expectation, tuple(videos), uploaded_key=episode.upload_key
    )
    return result, stored_key, video_keys


def episode_record_qa(
    *, episode_id, result: QAResult, stored_key: str, video_keys: dict[str, str] | None = None
) -> Episode:
    """Lock, check it is still undecided, record; accepted time accrues to job and order.

    A file that passed its checks is still refused when its job was cancelled, when the same
    file is already accepted in the order, or when its job's target is already met.
    """
    with transaction.atomic():
        episode = Episode.objects.select_for_update().get(pk=episode_id)
        if episode.status != Episode.Status.UPLOADED:
            return episode
        # FOR NO KEY UPDATE: only non-key columns change, so inserting episodes (whose foreign
        # keys take a KEY SHARE lock on these rows) is not blocked; that block, with
        # registration holding the job, was a deadlock.
        order = Order.objects.select_for_update(no_key=True).get(pk=episode.order_id)
        job = Job.objects.select_for_update(no_key=True).get(pk=episode.job_id)
        _record_content(episode, result)
        cell = None
        if result.passed:
            _refuse_if_not_countable(episode=episode, job=job, result=result)
        if result.passed and order.cells_planned:
            cell = plan_check(episode=episode, order=order, job=job, result=result)
        episode.qa_runs += 1
        episode.qa_started_at = None
        episode.qa_failures = [failure.as_json() for failure in result.failures]
        episode.qa_bytes_read = result.bytes_read + result.checksum_bytes_read
        episode.frames = result.frames or None
        episode.stored_key = stored_key
        episode.decided_at = timezone.now()
        _record_videos(episode, result, video_keys or {})
        if not result.passed:
            episode.status = Episode.Status.REJECTED
            episode.save()
            return episode
        episode.status = Episode.Status.ACCEPTED
        episode.duration_seconds = result.duration_seconds
        episode.save()
        if result.signature is not None:
            record_signature(episode, result.signature)
        if _video_signatures(result):
            record_video_signatures(episode, result.video_signatures)
        _accrue(episode, order=order, job=job, cell=cell)
    return episode


def _record_videos(episode: Episode, result: QAResult, video_keys: dict[str, str]) -> None:
    """Each camera's stored copy and what QA measured (codec, size, frames) on its row."""
    for video in EpisodeVideo.objects.filter(episode=episode):
        measured = result.videos.get(video.camera_key) or {}
        video.stored_key = video_keys.get(video.camera_key, "")
        for name in ("codec", "pix_fmt", "width", "height", "frames", "fps"):
            setattr(video, name, measured.get(name) or ({"codec": "", "pix_fmt": ""}.get(name)))
        video.save()


def _record_content(episode: Episode, result: QAResult) -> None:
    measurements = result.measurements or {}
    episode.qa_measurements = measurements
    episode.quality_score = result.quality_score
    episode.idle_fraction = measurements.get("idle_fraction")
    episode.jerk = measurements.get("jerk")
    episode.content_fingerprint, episode.content_fingerprint_alt = result.fingerprints
    episode.parts_sha256 = result.parts_sha256


# A file counts once per order: accepted, or accepted then excluded (an excluded episode sent
# again is not paid again). A trajectory counts once on the platform (services/duplicates.py).
COUNTED_ONCE = (Episode.Status.ACCEPTED, Episode.Status.EXCLUDED)


def _same_file(episode: Episode) -> Q:
    """The same file: by its declared SHA-256, and for a multipart file by its verified parts
    (on a store that keeps checksums QA proves the parts, not the declared whole-file SHA-256;
    the part size is fixed by the platform, so the same bytes always have the same parts)."""
    same = Q(sha256=episode.sha256)
    return same | Q(parts_sha256=episode.parts_sha256) if episode.parts_sha256 else same


def _near_duplicate(episode: Episode, result: QAResult) -> Episode | None:
    """Lock, then look up (the lock is held until the decision commits, with the keys)."""
    if result.signature is None:
        return None
    lock_signatures(result.signature.dim)
    return near_duplicate(episode, result.signature)


def _video_signatures(result: QAResult) -> dict:
    """The cameras' signatures QA computed (none when EPISODE_QA_VIDEO_DUPLICATES is off)."""
    if not settings.EPISODE_QA_VIDEO_DUPLICATES:
        return {}
    return result.video_signatures


def _video_near_duplicate(episode: Episode, result: QAResult) -> Episode | None:
    """Lock, then look up each camera's video (the lock is held until the decision commits)."""
    signatures = _video_signatures(result)
    if not signatures:
        return None
    lock_signatures(next(iter(signatures.values())).dim, VIDEO_LOCK_CLASS)
    return video_near_duplicate(episode, signatures)


def _refuse_if_not_countable(*, episode: Episode, job: Job, result: QAResult) -> None:
    if job.status == Job.Status.CANCELLED:
        result.fail(
            Reason.JOB_CANCELLED, "The order was cancelled before this episode was checked."
        )
    elif (
        Episode.objects.filter(
            _same_file(episode), order_id=episode.order_id, status__in=COUNTED_ONCE
        )
        .exclude(pk=episode.pk)
        .exists()
    ):
        result.fail(Reason.DUPLICATE, "The same file was already accepted in this order.")
    elif (twin := _near_duplicate(episode, result)) is not None:
        # Named to staff only (near_duplicate_of): it may be another fleet's or customer's.
        episode.near_duplicate_of_id = twin.id
        result.fail(
            Reason.NEAR_DUPLICATE,
            "The same trajectory (or a part of it, shifted, cut or resampled) was already"
            " accepted: a re-submitted demonstration does not count again.",
        )
    elif (twin := _video_near_duplicate(episode, result)) is not None:
        episode.near_duplicate_of_id = twin.id  # named to staff only, as above
        result.fail(
            Reason.NEAR_DUPLICATE,
            "A camera video (or a part of it) was already accepted with another episode: a"
            " re-submitted recording does not count again.",
        )
    elif job.accepted_seconds >= job.target_seconds:
        result.fail(
            Reason.SURPLUS,
            f"The job's target of {job.target_seconds} s was already met; this episode is not "
            "counted (nor paid).",
        )


def _accrue(episode: Episode, *, order: Order, job: Job, cell=None) -> None:
    """Add an accepted episode's time to its job (never past the job's target) and, by the
    same amount, to its order and its plan cell (if planned by cell); the caller holds the
    rows' locks. A planned order's environment whose jobs are now all done gets a job for
    each of its cells left short (before the order can go to review)."""
    target_seconds = job.target_seconds
    seconds = min(episode.duration_seconds, target_seconds - job.accepted_seconds)
    order.accepted_seconds += seconds
    order.accepted_hours = (order.accepted_seconds / 3600).quantize(
        Decimal("0.01"), rounding=ROUND_DOWN
    )
    order.save(update_fields=["accepted_seconds", "accepted_hours", "updated_at"])
    job.accepted_seconds += seconds
    job.save(update_fields=["accepted_seconds", "updated_at"])
    if cell is not None:
        cell_accrue(episode=episode, cell=cell, seconds=seconds)
    if job.status in WORKING_JOB_STATES and job.accepted_seconds >= target_seconds:
        job_transition(
            job_id=job.id,
            to_status=Job.Status.COMPLETED,
            reason=f"{job.accepted_seconds} s accepted of {job.target_seconds} s.",
            actor_label=SYSTEM,
        )
        if order.cells_planned:
            cells_collect_shortfall(order=order, environment_index=job.environment_index)
        _advance_order_if_collected(order)


def _advance_order_if_collected(order: Order) -> None:
    """All jobs of the current phase complete: the order goes to review (pilot or full)."""
    if order.status != Order.Status.IN_COLLECTION:
        return
    jobs = Job.objects.filter(order=order).exclude(status=Job.Status.CANCELLED)
    pending = jobs.exclude(status__in=[Job.Status.COMPLETED, Job.Status.HELD])
    if pending.exists():
        return
    held = jobs.filter(status=Job.Status.HELD).exists()
    reason = "Pilot collected; waiting for its review." if held else "All jobs collected."
    order_send_to_review(order_id=order.id, actor_label=SYSTEM, reason=reason)
    delivery_start(order_id=order.id, kind=Delivery.Kind.PILOT if held else Delivery.Kind.FULL)
