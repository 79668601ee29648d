"""Celery tasks (queue "dispatch", see marketplace/celery.py). They take ids and call one
service (imported inside the task: services import this module to enqueue)."""

from dataclasses import asdict

from celery import shared_task

from marketplace.task_options import task_options


@shared_task(**task_options())
def order_plan(order_id: str) -> list:
    """Plan a paid order's jobs (once) and enqueue the dispatch of its open jobs."""
    from fleets.services.planning import order_plan

    return order_plan(order_id=order_id)


@shared_task(**task_options())
def job_dispatch(job_id: str) -> str:
    from fleets.services.dispatch import job_dispatch

    return job_dispatch(job_id=job_id).outcome


@shared_task(**task_options())
def jobs_dispatch(*job_ids: str) -> dict:
    """A batch of jobs dispatched in one transaction (the sweeper's re-kick of open jobs)."""
    from fleets.services.batch_dispatch import jobs_dispatch

    results = jobs_dispatch(job_ids=list(job_ids))
    return {job_id: result.outcome for job_id, result in results.items()}


@shared_task(**task_options())
def order_cancel_jobs(order_id: str) -> int:
    from fleets.services.jobs import order_cancel_jobs

    return order_cancel_jobs(order_id=order_id)


@shared_task(**task_options())
def dispatch_sweep() -> dict:
    """celery beat, every FLEETS_SWEEP_INTERVAL_SECONDS."""
    from fleets.services.sweep import dispatch_sweep

    return asdict(dispatch_sweep())


@shared_task(bind=True, **task_options(max_retries=None))
def webhook_deliver(self, delivery_id: str) -> str:
    """One attempt; on failure, retry after the delivery's exponential backoff."""
    from fleets.services.webhooks import webhook_attempt

    outcome = webhook_attempt(delivery_id=delivery_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.status
