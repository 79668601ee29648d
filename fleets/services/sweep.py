"""The periodic sweep (celery beat): expire offers, take jobs back from silent fleets, and
queue again whatever a lost message or a down broker left undone. Every step is idempotent."""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleets.models import Assignment, Job, Offer, WebhookDelivery
from fleets.services.jobs import job_move, order_cancel_jobs
from fleets.services.webhooks import webhook_enqueue, webhook_policy
from marketplace import outbound_webhooks
from marketplace.queueing import enqueue_on_commit
from orders.models import Order


def offer_expire(*, offer_id) -> bool:
    with transaction.atomic():
        job_id = Offer.objects.filter(pk=offer_id).values_list("job_id", flat=True).first()
        if job_id is None:
            return False
        job = Job.objects.select_for_update().get(pk=job_id)
        offer = Offer.objects.select_for_update().get(pk=offer_id)
        if offer.status != Offer.Status.PENDING or offer.expires_at > timezone.now():
            return False
        offer.status = Offer.Status.EXPIRED
        offer.save(update_fields=["status"])
        if job.status == Job.Status.OFFERED:
            job_move(job=job, to_status=Job.Status.OPEN, reason="Offer expired.", fleet=offer.fleet)
            enqueue_on_commit("fleets.tasks.job_dispatch", str(job.pk))
        webhook_enqueue(
            fleet=offer.fleet, event_type="offer.expired", data={"offer_id": str(offer.pk)}
        )
    return True


def job_reclaim_silent(*, assignment_id, timeout_seconds: int) -> bool:
    """Take a job back from a fleet that went silent (no heartbeat) and dispatch it again."""
    now = timezone.now()
    with transaction.atomic():
        job_id = (
            Assignment.objects.filter(pk=assignment_id).values_list("job_id", flat=True).first()
        )
        if job_id is None:
            return False
        job = Job.objects.select_for_update().get(pk=job_id)
        assignment = (
            Assignment.objects.select_for_update().select_related("fleet").get(pk=assignment_id)
        )
        if not assignment.active:
            return False
        seen = max(
            t
            for t in (
                assignment.created_at,
                job.last_heartbeat_at,
                assignment.fleet.last_heartbeat_at,
            )
            if t is not None
        )
        if seen > now - timedelta(seconds=timeout_seconds):
            return False
        assignment.active = False
        assignment.ended_at = now
        assignment.end_reason = "No heartbeat from the fleet."
        assignment.save(update_fields=["active", "ended_at", "end_reason"])
        fleet = assignment.fleet
        job_move(
            job=job, to_status=Job.Status.OPEN, reason="Fleet silent; re-dispatching.", fleet=fleet
        )
        webhook_enqueue(
            fleet=fleet,
            event_type="job.cancelled",
            data={"job_id": str(job.pk), "reason": "no_heartbeat"},
        )
        enqueue_on_commit("fleets.tasks.job_dispatch", str(job.pk))
    return True


@dataclass(frozen=True)
class SweepResult:
    offers_expired: int
    jobs_reclaimed: int
    jobs_redispatched: int
    webhooks_resent: int = 0
    orders_planned: int = 0
    jobs_of_cancelled_orders: int = 0


def dispatch_sweep() -> SweepResult:
    """Expire offers, reclaim jobs from silent fleets, re-kick open jobs, resend webhooks."""
    now = timezone.now()
    expired = sum(
        offer_expire(offer_id=offer_id)
        for offer_id in Offer.objects.filter(
            status=Offer.Status.PENDING, expires_at__lte=now
        ).values_list("pk", flat=True)[:1000]
    )
    reclaimed = _reclaim_from_silent_fleets(now)
    stale_open = now - timedelta(seconds=settings.FLEETS_STALE_OPEN_JOB_SECONDS)
    # Jobs of cancelled orders whose order_cancelled work was never queued (broker down):
    # cancelled first, so they are not dispatched again below. Idempotent.
    cancelled = sum(
        order_cancel_jobs(order_id=order_id)
        for order_id in Order.objects.filter(
            status=Order.Status.CANCELLED, updated_at__lte=stale_open
        )
        .filter(jobs__isnull=False)
        .exclude(jobs__status__in=[Job.Status.COMPLETED, Job.Status.CANCELLED])
        .values_list("pk", flat=True)
        .distinct()[:100]
    )
    open_jobs = list(
        Job.objects.filter(status=Job.Status.OPEN, updated_at__lte=stale_open).values_list(
            "pk", flat=True
        )[:1000]
    )
    batch = settings.FLEETS_DISPATCH_BATCH_SIZE
    for start in range(0, len(open_jobs), batch):  # batch dispatch: one task per batch
        enqueue_on_commit("fleets.tasks.jobs_dispatch", *open_jobs[start : start + batch])
    stuck = outbound_webhooks.deliveries_stuck(
        model=WebhookDelivery, policy=webhook_policy(), now=now
    )
    for delivery_id in stuck:
        enqueue_on_commit("fleets.tasks.webhook_deliver", delivery_id)
    # Paid orders whose order_paid work was never queued (the broker was down when the order
    # was paid): plan them (idempotent).
    unplanned = list(
        Order.objects.filter(
            status=Order.Status.PAID, jobs__isnull=True, updated_at__lte=stale_open
        ).values_list("pk", flat=True)[:100]
    )
    for order_id in unplanned:
        enqueue_on_commit("fleets.tasks.order_plan", order_id)
    return SweepResult(expired, reclaimed, len(open_jobs), len(stuck), len(unplanned), cancelled)


def _reclaim_from_silent_fleets(now) -> int:
    timeout = settings.FLEETS_HEARTBEAT_TIMEOUT_SECONDS
    cutoff = now - timedelta(seconds=timeout)
    reclaimed = 0
    stale = Assignment.objects.filter(active=True, created_at__lte=cutoff).select_related(
        "job", "fleet"
    )
    for assignment in stale[:1000]:
        seen = [assignment.job.last_heartbeat_at, assignment.fleet.last_heartbeat_at]
        if all(t is None or t <= cutoff for t in seen):
            reclaimed += job_reclaim_silent(assignment_id=assignment.pk, timeout_seconds=timeout)
    return reclaimed
