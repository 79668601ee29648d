"""Celery tasks for episodes (queue "qa", see marketplace/celery.py). They take ids, are safe
to run twice (QA records a decision only once), run with acks_late so a task whose worker
dies is redelivered, and retry transient database and storage errors with backoff."""

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from datasets import services, storage
from datasets.models import Delivery, Episode

TRANSIENT = (OperationalError, InterfaceError, storage.StorageError)
COMMON = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": TRANSIENT,
    "retry_backoff": 2,
    "retry_backoff_max": settings.TASK_RETRY_BACKOFF_MAX_SECONDS,
    "retry_jitter": True,
    "max_retries": 10,
}


@shared_task(**COMMON)
def qa_episode(episode_id: str) -> str:
    return services.episode_run_qa(episode_id=episode_id).status


@shared_task(**COMMON)
def qa_sweep() -> int:
    """celery beat: re-queue QA of episodes uploaded long ago and still undecided (a lost
    message, a worker that died past its retries). Returns how many were re-queued."""
    cutoff = timezone.now() - timedelta(seconds=settings.EPISODE_QA_STALE_SECONDS)
    stale = Episode.objects.filter(status=Episode.Status.UPLOADED, uploaded_at__lt=cutoff)
    ids = list(stale.values_list("id", flat=True)[:1000])
    for episode_id in ids:
        qa_episode.delay(str(episode_id))
    return len(ids)


@shared_task(**COMMON)
def delivery_assemble(delivery_id: str) -> str:
    """Queue "delivery": write the dataset, card and manifest; the order moves on when done."""
    return services.delivery_assemble(delivery_id=delivery_id).status


@shared_task(**COMMON)
def delivery_sweep() -> int:
    """celery beat: queue what a lost message left undone (the broker was down when it was
    published, or a worker died past its retries); every task here is idempotent.
    - assembly of deliveries still assembling long after they were opened;
    - the ready email and the customer webhook of deliveries ready for a while (within
      DELIVERY_NOTIFY_WITHIN_SECONDS) that never had them.
    Returns how many tasks were queued."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.DELIVERY_ASSEMBLY_STALE_SECONDS)
    stale = Delivery.objects.filter(status=Delivery.Status.ASSEMBLING, created_at__lt=cutoff)
    ids = list(stale.values_list("id", flat=True)[:100])
    for delivery_id in ids:
        delivery_assemble.delay(str(delivery_id))
    ready = Delivery.objects.filter(
        status=Delivery.Status.READY,
        ready_at__lt=cutoff,
        ready_at__gte=now - timedelta(seconds=settings.DELIVERY_NOTIFY_WITHIN_SECONDS),
    )
    unannounced = list(ready.filter(notified_at=None).values_list("id", flat=True)[:100])
    for delivery_id in unannounced:
        delivery_notify.delay(str(delivery_id))
    unhooked = list(
        ready.filter(webhook_attempted_at=None)
        .exclude(order__organization__webhook_url="")
        .values_list("id", flat=True)[:100]
    )
    for delivery_id in unhooked:
        delivery_webhook.delay(str(delivery_id))
    return len(ids) + len(unannounced) + len(unhooked)


@shared_task(**COMMON)
def delivery_notify(delivery_id: str) -> int:
    return services.delivery_notify(delivery_id=delivery_id)


@shared_task(bind=True, **{**COMMON, "max_retries": None})
def delivery_webhook(self, delivery_id: str) -> str:
    """Tell the customer's webhook; retried with exponential backoff, then given up."""
    result = services.delivery_webhook_send(delivery_id=delivery_id)
    if result is None or result.ok:
        return "sent" if result else "no webhook"
    if self.request.retries + 1 >= settings.CUSTOMER_WEBHOOK_MAX_ATTEMPTS:
        return f"gave up: {result.error}"
    raise self.retry(countdown=min(3600, 10 * 2**self.request.retries))
