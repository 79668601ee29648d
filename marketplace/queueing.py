"""The one way work is queued: after the transaction commits, surviving a broker outage.

Services import their app's tasks at module top and call `enqueue_on_commit(task, *ids)`;
tasks import the services they call inside the task body, so there is no import circle.

A task enqueued after commit describes work whose data is already saved. If the broker
cannot be reached (kombu has retried per CELERY_TASK_PUBLISH_RETRY_POLICY), failing the
request or the calling task would not undo that commit; it would only turn a recoverable
delay into an error. So the failure is logged and a periodic sweeper, which finds such
work from the database (qa_sweep, delivery_sweep, dispatch_sweep, billing_sweep), queues it
again once the broker is back.
"""

import logging

from django.db import transaction
from kombu.exceptions import OperationalError as BrokerUnreachable

logger = logging.getLogger(__name__)


def enqueue_or_leave_to_sweeper(task, *args) -> bool:
    """task.delay(*args) now; False (logged) when the broker cannot be reached."""
    try:
        task.delay(*args)
    except BrokerUnreachable:
        logger.warning(
            "broker unreachable: %s%r not queued; its sweeper will queue it", task.name, args
        )
        return False
    return True


def enqueue_on_commit(task, *ids) -> None:
    """Queue `task(*ids)` once the current transaction commits (at once outside one).

    Ids are passed as strings (UUIDs and integers alike), so a task's arguments are plain JSON.
    """
    args = tuple(str(value) for value in ids)
    transaction.on_commit(lambda: enqueue_or_leave_to_sweeper(task, *args))
