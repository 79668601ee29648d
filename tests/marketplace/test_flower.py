"""Flower watches the queues: on RabbitMQ and on the embedded filesystem broker it sees the
worker, sends it a task and follows that task to SUCCESS through Celery events."""

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bench.loadgen import free_port
from tests.celery_worker import CELERY, ROOT, Worker, wait_for

pytestmark = [
    pytest.mark.real_worker,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


class Flower:
    """`celery -A marketplace flower` on a loopback port, in its own process group."""

    def __init__(self, env: dict, log: Path):
        self.port = free_port()
        self.log = log
        handle = log.open("wb")
        self.process = subprocess.Popen(
            [
                str(CELERY),
                "-A",
                "marketplace",
                "flower",
                "--address=127.0.0.1",
                f"--port={self.port}",
            ],
            cwd=ROOT,
            # The API refuses anonymous callers unless told otherwise; loopback-only test.
            env={**env, "FLOWER_UNAUTHENTICATED_API": "true"},
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()

    def get(self, path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as resp:
            return json.loads(resp.read())

    def post(self, path: str):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=b"{}", method="POST"
        )
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.loads(resp.read())

    def task_info(self, task_id: str) -> dict | None:
        """None until Flower has seen an event of the task (it answers 404 before)."""
        try:
            return self.get(f"/api/task/info/{task_id}")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def reachable(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}/healthcheck", timeout=2
            ) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)


def _watch_a_task(worker: Worker, tmp_path: Path) -> dict:
    """Start the worker and Flower on the worker's broker; Flower sends a sweep task and
    follows it. Returns what Flower reports about the worker and the task."""
    worker.start()
    flower = Flower(worker.env, tmp_path / "flower.log")
    try:
        wait_for(flower.reachable, 60, "Flower to listen")
        # Flower lists a worker once it has answered a broadcast inspect; each inspect reply
        # (active_queues among them) can arrive in a later round on a slow machine:
        # ?refresh=1 inspects again each poll. (On the filesystem broker a torn reply table
        # once failed a round; marketplace/broker.py writes tables whole.)
        workers = wait_for(
            lambda: {
                name: info
                for name, info in flower.get("/api/workers?refresh=1").items()
                if info and "active_queues" in info
            },
            60,
            "Flower to see the worker",
            step=1,
        )
        sent = flower.post("/api/task/async-apply/fleets.tasks.dispatch_sweep")
        task = wait_for(
            lambda: (
                (info := flower.task_info(sent["task-id"])) and info["state"] == "SUCCESS" and info
            ),
            60,
            "Flower to see the task succeed (from worker events)",
            step=0.5,
        )
        return {"workers": workers, "task": task}
    except AssertionError:
        print((tmp_path / "flower.log").read_text()[-3000:])
        print(worker.log.read_text()[-3000:])
        raise
    finally:
        flower.stop()
        worker.stop()


def test_flower_follows_a_task_on_rabbitmq(make_worker, tmp_path):
    # given: a worker on this session's RabbitMQ vhost
    worker = make_worker(queues="dispatch")

    # when
    seen = _watch_a_task(worker, tmp_path)

    # then: the worker, the queue it consumes, and the task's result from its events
    (info,) = seen["workers"].values()
    assert [queue["name"] for queue in info["active_queues"]] == ["dispatch"]
    assert seen["task"]["name"] == "fleets.tasks.dispatch_sweep"
    assert "offers_expired" in seen["task"]["result"]


def test_flower_follows_a_task_on_the_filesystem_broker(transactional_db, tmp_path):
    # given: a worker on the embedded filesystem broker, in a data folder of its own
    worker = Worker(
        "filesystem://",
        tmp_path,
        {"MARKETPLACE_DATA_DIR": str(tmp_path / "data")},
        queues="default,dispatch",
    )

    # when
    seen = _watch_a_task(worker, tmp_path)

    # then: remote control and events work there too (queue lengths need RabbitMQ or Redis)
    (info,) = seen["workers"].values()
    assert {queue["name"] for queue in info["active_queues"]} == {"default", "dispatch"}
    assert seen["task"]["state"] == "SUCCESS"
