"""Services queue tasks by name (marketplace/queueing.py), so a misspelt name would only fail
when the work is queued: every name product code queues is a registered task, and the
registry hands out the task itself (what tests patch)."""

import ast
import pathlib

import pytest

from datasets import tasks as dataset_tasks
from marketplace.queueing import registered_task

ROOT = pathlib.Path(__file__).resolve().parents[2]
APPS = ("billing", "datasets", "fleets", "marketplace", "orders", "portal")
QUEUEING = {"enqueue_on_commit", "enqueue_or_leave_to_sweeper"}


def queued_calls() -> list[tuple[str, str | None]]:
    """(module path, the task's name, or None when the task is not named by a literal)."""
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", getattr(node.func, "attr", None)) in QUEUEING
                    and node.args
                ):
                    first = node.args[0]
                    name = first.value if isinstance(first, ast.Constant) else None
                    found.append((str(path.relative_to(ROOT)), name))
    return found


def queued_names() -> list[tuple[str, str]]:
    return [(where, name) for where, name in queued_calls() if name is not None]


def test_services_queue_tasks_by_name():
    in_services = [(where, name) for where, name in queued_calls() if "services" in where]
    assert {where.split("/")[0] for where, _ in in_services} >= {"billing", "datasets", "fleets"}
    assert [where for where, name in in_services if name is None] == []


@pytest.mark.parametrize(("where", "name"), queued_names())
def test_every_name_queued_is_a_registered_task(where, name):
    task = registered_task(name)
    assert task.name == name, where


def test_the_registry_hands_out_the_task_itself():
    assert (
        registered_task("datasets.tasks.qa_episode")
        is dataset_tasks.qa_episode._get_current_object()
    )
    with pytest.raises(KeyError):
        registered_task("datasets.tasks.no_such_task")
