"""QA decisions: check an uploaded episode, record the verdict once, accrue accepted time.

Locks are taken in the order episode -> order -> job (fleets takes order -> job), so
concurrent QA decisions on one order serialize on the order row and never lose an update.
"""

from decimal import ROUND_DOWN, Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from datasets import storage
from datasets.models import Delivery, Episode
from datasets.qa_checks import EpisodeExpectation, QAResult, Reason, check_stored_episode
from datasets.services.deliveries import delivery_start
from datasets.services.episodes import WORKING_JOB_STATES, stored_key_for
from fleets.models import Job
from fleets.services.jobs import job_transition
from marketplace.audit import system_label
from orders.models import Order
from orders.services import order_send_to_review

SYSTEM = system_label("qa")


def episode_expectation(episode: Episode) -> EpisodeExpectation:
    return EpisodeExpectation(
        size=episode.size_bytes,
        sha256_hex=episode.sha256,
        fps=episode.fps,
        action_dim=episode.job.embodiment.action_dim,
        min_duration_seconds=settings.EPISODE_MIN_SECONDS,
        max_duration_seconds=settings.EPISODE_MAX_SECONDS,
    )


def episode_run_qa(*, episode_id) -> Episode:
    """Check an uploaded episode and record the decision. Safe to run again at any time."""
    episode = Episode.objects.select_related("job__embodiment").get(pk=episode_id)
    if episode.status != Episode.Status.UPLOADED:
        return episode
    stored_key = stored_key_for(episode)
    if not storage.exists(stored_key):
        try:
            storage.copy(source_key=episode.upload_key, dest_key=stored_key)
        except storage.ObjectMissing:
            result = QAResult()
            result.fail(Reason.OBJECT_MISSING, "No file was uploaded for this episode.")
            return episode_record_qa(episode_id=episode.id, result=result, stored_key="")
    result = check_stored_episode(stored_key, episode_expectation(episode))
    return episode_record_qa(episode_id=episode.id, result=result, stored_key=stored_key)


def episode_record_qa(*, episode_id, result: QAResult, stored_key: str) -> Episode:
    """Lock, check it is still undecided, record; accepted time accrues to job and order."""
    with transaction.atomic():
        episode = Episode.objects.select_for_update().get(pk=episode_id)
        if episode.status != Episode.Status.UPLOADED:
            return episode
        episode.qa_runs += 1
        episode.qa_failures = [failure.as_json() for failure in result.failures]
        episode.qa_bytes_read = result.bytes_read + result.checksum_bytes_read
        episode.frames = result.frames or None
        episode.stored_key = stored_key
        episode.decided_at = timezone.now()
        if not result.passed:
            episode.status = Episode.Status.REJECTED
            episode.save()
            return episode
        episode.status = Episode.Status.ACCEPTED
        episode.duration_seconds = result.duration_seconds
        episode.save()
        _accrue(episode)
    return episode


def _accrue(episode: Episode) -> None:
    """Add an accepted episode's time to its order and job (both rows locked here)."""
    seconds = episode.duration_seconds
    # FOR NO KEY UPDATE: only non-key columns change, so inserting episodes (whose foreign keys
    # take a KEY SHARE lock on these rows) is not blocked; that block, with registration
    # holding the job, was a deadlock.
    order = Order.objects.select_for_update(no_key=True).get(pk=episode.order_id)
    job = Job.objects.select_for_update(no_key=True).get(pk=episode.job_id)
    order.accepted_seconds += seconds
    order.accepted_hours = (order.accepted_seconds / 3600).quantize(
        Decimal("0.01"), rounding=ROUND_DOWN
    )
    order.save(update_fields=["accepted_seconds", "accepted_hours", "updated_at"])
    job.accepted_seconds += seconds
    job.save(update_fields=["accepted_seconds", "updated_at"])
    if job.status in WORKING_JOB_STATES and job.accepted_seconds >= job.target_hours * 3600:
        job_transition(
            job_id=job.id,
            to_status=Job.Status.COMPLETED,
            reason=f"{job.accepted_seconds} s accepted of {job.target_hours} h.",
            actor_label=SYSTEM,
        )
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
