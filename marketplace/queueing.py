"""The one way work is queued: after the transaction commits, surviving a broker outage.

Services name the task they queue, `enqueue_on_commit("datasets.tasks.qa_episode", *ids)`,
and never import a tasks module: the name is looked up in the Celery app's registry
(`registered_task`). Tasks import the service modules they call at module top. So imports
run one way, tasks -> services, and no service <-> task circle exists (import-linter's
`services-do-not-import-tasks` contract in pyproject.toml holds it).

A task enqueued after commit describes work whose data is already saved. If the broker
cannot be reached (kombu has retried per CELERY_TASK_PUBLISH_RETRY_POLICY), failing the
request or the calling task would not undo that commit; it would only turn a recoverable
delay into an error. So the failure is logged and a periodic sweeper, which finds such
work from the database (qa_sweep, delivery_sweep, dispatch_sweep, billing_sweep), queues it
again once the broker is back.
"""

import importlib
import logging

from celery import Task
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerUnreachable

from marketplace.celery import app

logger = logging.getLogger(__name__)


def registered_task(name: str) -> Task:
    """The task registered as `name` ("<app>.tasks.<function>", Celery's default name).

    Its module is imported on first use when nothing has yet (a web process imports tasks
    modules only through their receivers); a name no module registers is a KeyError."""
    try:
        return app.tasks[name]
    except KeyError:
        importlib.import_module(name.rpartition(".")[0])
        return app.tasks[name]


def enqueue_or_leave_to_sweeper(task: Task | str, *args) -> bool:
    """task.delay(*args) now; False (logged) when the broker cannot be reached. `task` is the
    task or its registered name."""
    if isinstance(task, str):
        task = registered_task(task)
    try:
        task.delay(*args)
    except BrokerUnreachable:
        logger.warning(
            "broker unreachable: %s%r not queued; its sweeper will queue it", task.name, args
        )
        return False
    return True


def enqueue_on_commit(task: Task | str, *ids) -> None:
    """Queue `task(*ids)` once the current transaction commits (at once outside one); `task`
    is the task or its registered name (looked up when it is queued).

    Ids are passed as strings (UUIDs and integers alike), so a task's arguments are plain JSON.
    """
    args = tuple(str(value) for value in ids)
    transaction.on_commit(lambda: enqueue_or_leave_to_sweeper(task, *args))
