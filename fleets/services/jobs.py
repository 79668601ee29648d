"""A job's life: the one transition function, progress reports, staff moves, cancellation."""

from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone

from fleets.error_codes import ErrorCode
from fleets.models import (
    JOB_HOLDING_STATES,
    JOB_TRANSITIONS,
    Assignment,
    Bid,
    Fleet,
    Job,
    JobEvent,
    Offer,
)
from fleets.services.webhooks import webhook_enqueue
from marketplace.audit import system_label
from marketplace.errors import Conflict, NotFound, invalid
from marketplace.models import Organization
from marketplace.queueing import enqueue_on_commit
from marketplace.transitions import require_transition

SYSTEM = system_label("dispatcher")


class InvalidJobTransition(Conflict):
    code = ErrorCode.INVALID_JOB_TRANSITION


def job_move(
    *, job: Job, to_status: str, reason: str = "", actor_label: str = SYSTEM, fleet=None
) -> Job:
    """Change a job's status by the map, with its audit event; the caller holds the job's
    row lock (the one place a job's status changes)."""
    from_status = job.status
    if from_status == to_status:
        return job
    _apply_move(job, to_status)
    job.save()
    JobEvent.objects.create(
        job=job,
        from_status=from_status,
        to_status=to_status,
        fleet=fleet or job.fleet,
        actor_label=actor_label,
        reason=reason,
    )
    return job


def _apply_move(job: Job, to_status: str) -> None:
    """Check the move against the map and set the status; a job leaving its holder (not
    held, not completed) forgets its fleet and site. Nothing is saved here."""
    if job.status != to_status:
        require_transition(
            transitions=JOB_TRANSITIONS,
            from_status=job.status,
            to_status=to_status,
            what="A job",
            error=InvalidJobTransition,
        )
    job.status = to_status
    if to_status not in JOB_HOLDING_STATES and to_status != Job.Status.COMPLETED:
        job.fleet = None
        job.site = None


def jobs_move(*, moves: list[tuple[Job, str, str, object]], actor_label: str = SYSTEM) -> None:
    """job_move for many jobs at once, (job, to_status, reason, fleet) each: the same map and
    audit, written with one UPDATE and one INSERT. The caller holds the jobs' row locks;
    `dispatch_attempts` and `flag_reason` set on the jobs are saved too."""
    now = timezone.now()
    changed, events = [], []
    for job, to_status, reason, fleet in moves:
        from_status = job.status
        _apply_move(job, to_status)
        job.updated_at = now
        changed.append(job)
        if from_status != to_status:
            events.append(
                JobEvent(
                    job=job,
                    from_status=from_status,
                    to_status=to_status,
                    fleet_id=fleet.pk if fleet is not None else job.fleet_id,
                    actor_label=actor_label,
                    reason=reason,
                )
            )
    _jobs_save_dispatch_fields(changed)
    JobEvent.objects.bulk_create(events)


DISPATCH_FIELDS = ["status", "fleet", "site", "flag_reason", "dispatch_attempts", "updated_at"]


def _jobs_save_dispatch_fields(jobs: list[Job]) -> None:
    """One UPDATE ... FROM (VALUES ...) for the fields dispatch changes (bulk_update's CASE
    per row and field costs seconds to compile for thousands of jobs)."""
    if not jobs:
        return
    if connection.vendor != "postgresql":
        Job.objects.bulk_update(jobs, DISPATCH_FIELDS)
        return
    table = connection.ops.quote_name(Job._meta.db_table)
    row = "(%s::uuid, %s, %s::uuid, %s::uuid, %s, %s::integer, %s::timestamptz)"
    for start in range(0, len(jobs), 5000):
        chunk = jobs[start : start + 5000]
        params = []
        for job in chunk:
            params += [
                job.pk,
                job.status,
                job.fleet_id,
                job.site_id,
                job.flag_reason,
                job.dispatch_attempts,
                job.updated_at,
            ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} AS j SET status = v.status, fleet_id = v.fleet_id, "  # noqa: S608
                "site_id = v.site_id, flag_reason = v.flag_reason, "
                "dispatch_attempts = v.attempts, updated_at = v.updated_at "
                f"FROM (VALUES {', '.join([row] * len(chunk))}) "
                "AS v(id, status, fleet_id, site_id, flag_reason, attempts, updated_at) "
                "WHERE j.id = v.id",
                params,
            )


def job_transition(*, job_id, to_status: str, reason: str = "", actor_label: str = SYSTEM) -> Job:
    """The public way to move a job by hand (staff tools): lock, check the map, audit."""
    if to_status not in Job.Status.values:
        raise invalid("status", f"Unknown job status {to_status!r}.")
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        return job_move(job=job, to_status=to_status, reason=reason, actor_label=actor_label)


def job_report_progress(
    *, organization: Organization, job_id, progress_hours: Decimal | None = None
) -> Job:
    """Heartbeat and progress of a held job; the first report starts it."""
    now = timezone.now()
    with transaction.atomic():
        job = (
            Job.objects.select_for_update()
            .filter(
                pk=job_id,
                fleet__organization=organization,
                status__in=[Job.Status.ASSIGNED, Job.Status.IN_PROGRESS],
            )
            .first()
        )
        if job is None:
            raise NotFound("Job not found.")
        if progress_hours is not None:
            if progress_hours < 0 or progress_hours > job.target_hours:
                raise invalid("progress_hours", f"Between 0 and {job.target_hours}.")
            job.progress_hours = progress_hours
        job.last_heartbeat_at = now
        Fleet.objects.filter(pk=job.fleet_id).update(last_heartbeat_at=now)
        if job.status == Job.Status.ASSIGNED:
            job_move(job=job, to_status=Job.Status.IN_PROGRESS, reason="Collection started.")
        else:
            job.save()
    return job


def job_redispatch(*, job_id, actor_label: str) -> Job:
    """Staff: send a flagged (or open) job through dispatch again."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status == Job.Status.FLAGGED:
            job_move(
                job=job,
                to_status=Job.Status.OPEN,
                reason="Re-dispatch by staff.",
                actor_label=actor_label,
            )
        elif job.status != Job.Status.OPEN:
            raise Conflict(f"Only flagged or open jobs can be re-dispatched, not {job.status}.")
        enqueue_on_commit("fleets.tasks.job_dispatch", str(job.pk))
    return job


def order_cancel_jobs(*, order_id) -> int:
    """The order was cancelled: cancel its unfinished jobs and tell the fleets holding them."""
    cancelled = 0
    with transaction.atomic():
        jobs = Job.objects.select_for_update().filter(order_id=order_id).order_by("pk")
        for job in jobs:
            if job.status in (Job.Status.COMPLETED, Job.Status.CANCELLED):
                continue
            fleet = job.fleet
            Offer.objects.filter(job=job, status=Offer.Status.PENDING).update(
                status=Offer.Status.WITHDRAWN
            )
            Assignment.objects.filter(job=job, active=True).update(
                active=False, ended_at=timezone.now(), end_reason="Order cancelled."
            )
            Bid.objects.filter(job=job, status=Bid.Status.OPEN).update(status=Bid.Status.LOST)
            job_move(job=job, to_status=Job.Status.CANCELLED, reason="Order cancelled.")
            if fleet is not None:
                webhook_enqueue(
                    fleet=fleet,
                    event_type="job.cancelled",
                    data={"job_id": str(job.pk), "reason": "order_cancelled"},
                )
            cancelled += 1
    return cancelled
