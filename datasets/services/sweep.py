"""What celery beat re-queues from the database: work a lost message (the broker was down when
it was published) or a worker that died past its retries left undone. Every task it queues is
idempotent, so queueing one twice does no harm."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from datasets.models import Claim, Delivery, Episode
from datasets.services.deliveries import delivery_webhook_record
from datasets.services.disputes import disputes_time_up
from datasets.services.episodes import episode_abandon_upload
from datasets.services.qa import QA_TIME_LIMIT
from marketplace import outbound_webhooks
from marketplace.models import OrganizationWebhookDelivery
from marketplace.queueing import enqueue_or_leave_to_sweeper
from marketplace.services import organization_webhook_policy


def qa_sweep() -> int:
    """QA of episodes uploaded long ago and still undecided, except those whose QA is running
    now (a run is over by QA's time limits); and uploads abandoned long ago are rejected.
    Returns how many QA runs were queued."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.EPISODE_QA_STALE_SECONDS)
    running_since = now - timedelta(seconds=qa_run_seconds())
    stale = Episode.objects.filter(status=Episode.Status.UPLOADED, uploaded_at__lt=cutoff).filter(
        Q(qa_started_at__isnull=True) | Q(qa_started_at__lt=running_since)
    )
    ids = list(stale.values_list("id", flat=True)[:1000])
    for episode_id in ids:
        enqueue_or_leave_to_sweeper("datasets.tasks.qa_episode", str(episode_id))
    abandoned_before = now - timedelta(
        seconds=settings.EPISODE_UPLOAD_ABANDONED_SECONDS + settings.S3_UPLOAD_URL_EXPIRY_SECONDS
    )
    for episode_id in Episode.objects.filter(
        status=Episode.Status.REGISTERED, created_at__lt=abandoned_before
    ).values_list("id", flat=True)[:1000]:
        episode_abandon_upload(episode_id=episode_id)
    return len(ids)


def qa_run_seconds() -> float:
    """How long a QA run can last at most (its Celery hard time limit, and a margin)."""
    return QA_TIME_LIMIT + 60


def delivery_sweep() -> int:
    """- assembly of deliveries still assembling long after they were opened;
    - the ready email and the customer webhook event of deliveries ready for a while (within
      DELIVERY_NOTIFY_WITHIN_SECONDS) that never had them;
    - customer webhook events whose sending message was lost.
    Returns how many were queued."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.DELIVERY_ASSEMBLY_STALE_SECONDS)
    stale = Delivery.objects.filter(status=Delivery.Status.ASSEMBLING, created_at__lt=cutoff)
    assembling = list(stale.values_list("id", flat=True)[:100])
    for delivery_id in assembling:
        enqueue_or_leave_to_sweeper("datasets.tasks.delivery_assemble", str(delivery_id))
    ready = Delivery.objects.filter(
        status=Delivery.Status.READY,
        ready_at__lt=cutoff,
        ready_at__gte=now - timedelta(seconds=settings.DELIVERY_NOTIFY_WITHIN_SECONDS),
    )
    unannounced = list(ready.filter(notified_at=None).values_list("id", flat=True)[:100])
    for delivery_id in unannounced:
        enqueue_or_leave_to_sweeper("datasets.tasks.delivery_notify", str(delivery_id))
    unhooked = list(
        ready.filter(webhook_attempted_at=None)
        .exclude(order__organization__webhook_url="")
        .values_list("id", flat=True)[:100]
    )
    recorded = sum(delivery_webhook_record(delivery_id=delivery_id) for delivery_id in unhooked)
    stuck = outbound_webhooks.deliveries_stuck(
        model=OrganizationWebhookDelivery, policy=organization_webhook_policy(), now=now
    )
    for delivery_id in stuck:
        enqueue_or_leave_to_sweeper(
            "marketplace.tasks.organization_webhook_deliver", str(delivery_id)
        )
    return len(assembling) + len(unannounced) + recorded + len(stuck)


def claims_sweep() -> int:
    """- the re-check of claims filed long ago and still being checked (a lost message);
    - disputes whose fleet did not answer in time go to staff (never granted by themselves).
    Returns how many were queued or moved."""
    cutoff = timezone.now() - timedelta(seconds=settings.CLAIM_RECHECK_STALE_SECONDS)
    stale = Claim.objects.filter(status=Claim.Status.CHECKING, created_at__lt=cutoff)
    ids = list(stale.values_list("id", flat=True)[:100])
    for claim_id in ids:
        enqueue_or_leave_to_sweeper("datasets.tasks.qa_claim_recheck", str(claim_id))
    return len(ids) + disputes_time_up()
