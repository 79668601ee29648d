"""Celery tasks (queue "dispatch", see marketplace/celery.py). They take ids, call a
service, are safe to run twice, run with acks_late (a task whose worker dies is redelivered)
and retry transient database errors with exponential backoff."""

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from fleets import services

TRANSIENT = (OperationalError, InterfaceError)
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
def order_plan(order_id: str) -> list:
    """Plan a paid order's jobs (once) and enqueue the dispatch of its open jobs."""
    return services.order_plan(order_id=order_id)


@shared_task(**COMMON)
def job_dispatch(job_id: str) -> str:
    return services.job_dispatch(job_id=job_id).outcome


@shared_task(**COMMON)
def order_cancel_jobs(order_id: str) -> int:
    return services.order_cancel_jobs(order_id=order_id)


@shared_task(**COMMON)
def dispatch_sweep() -> dict:
    """celery beat, every FLEETS_SWEEP_INTERVAL_SECONDS."""
    result = services.dispatch_sweep()
    return {
        "offers_expired": result.offers_expired,
        "jobs_reclaimed": result.jobs_reclaimed,
        "jobs_redispatched": result.jobs_redispatched,
        "webhooks_resent": result.webhooks_resent,
        "orders_planned": result.orders_planned,
        "jobs_of_cancelled_orders": result.jobs_of_cancelled_orders,
    }


@shared_task(bind=True, **{**COMMON, "max_retries": None})
def webhook_deliver(self, delivery_id: str) -> str:
    """One attempt; on failure, retry after the delivery's exponential backoff."""
    outcome = services.webhook_attempt(delivery_id=delivery_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.status
