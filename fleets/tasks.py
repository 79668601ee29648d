"""Celery tasks (queue "dispatch", see marketplace/celery.py). They take ids and call one
service; services queue them by name (marketplace/queueing.py) and never import this module."""

from dataclasses import asdict

from celery import shared_task

from fleets.services import batch_dispatch, dispatch, jobs, planning, sweep, webhooks
from marketplace.task_options import task_options


@shared_task(**task_options())
def order_plan(order_id: str) -> list:
    """Plan a paid order's jobs (once) and enqueue the dispatch of its open jobs."""
    return planning.order_plan(order_id=order_id)


@shared_task(**task_options())
def job_dispatch(job_id: str) -> str:
    return dispatch.job_dispatch(job_id=job_id).outcome


@shared_task(**task_options())
def jobs_dispatch(*job_ids: str) -> dict:
    """A batch of jobs dispatched in one transaction (the sweeper's re-kick of open jobs)."""
    results = batch_dispatch.jobs_dispatch(job_ids=list(job_ids))
    return {job_id: result.outcome for job_id, result in results.items()}


@shared_task(**task_options())
def order_cancel_jobs(order_id: str) -> int:
    return jobs.order_cancel_jobs(order_id=order_id)


@shared_task(**task_options())
def dispatch_sweep() -> dict:
    """celery beat, every FLEETS_SWEEP_INTERVAL_SECONDS."""
    return asdict(sweep.dispatch_sweep())


@shared_task(bind=True, **task_options(max_retries=None))
def webhook_deliver(self, delivery_id: str) -> str:
    """One attempt; on failure, retry after the delivery's exponential backoff."""
    outcome = webhooks.webhook_attempt(delivery_id=delivery_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.status
