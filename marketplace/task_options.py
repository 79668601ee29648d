"""The options every Celery task of ours takes (tasks take ids and are safe to run twice).

acks_late + reject_on_worker_lost: a task whose worker dies is redelivered, not lost.
Transient errors (a dropped database connection, storage or a payment provider that is
down) retry with exponential backoff (2 s, 4 s, ... with jitter) capped at
TASK_RETRY_BACKOFF_MAX_SECONDS.
"""

from django.conf import settings
from django.db import InterfaceError, OperationalError

TRANSIENT_DATABASE_ERRORS = (OperationalError, InterfaceError)


def task_options(
    *, transient: tuple = (), max_retries: int | None = 10, backoff: int = 2, **extra
) -> dict:
    """Keyword arguments for @shared_task: ours, plus `transient` errors to retry on."""
    return {
        "acks_late": True,
        "reject_on_worker_lost": True,
        "autoretry_for": (*TRANSIENT_DATABASE_ERRORS, *transient),
        "retry_backoff": backoff,
        "retry_backoff_max": settings.TASK_RETRY_BACKOFF_MAX_SECONDS,
        "retry_jitter": True,
        "max_retries": max_retries,
        **extra,
    }
