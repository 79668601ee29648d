"""Celery tasks of the accounts app: events to organizations' own webhooks. They take ids and
call one service; services queue them by name (marketplace/queueing.py) and never import this
module."""

from celery import shared_task

from marketplace import services
from marketplace.task_options import task_options


@shared_task(bind=True, **task_options(max_retries=None))
def organization_webhook_deliver(self, delivery_id: str) -> str:
    """One attempt; on failure, retry after the delivery's exponential backoff."""
    outcome = services.organization_webhook_attempt(delivery_id=delivery_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.status
