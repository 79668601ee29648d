"""A real Celery worker for tests: a RabbitMQ vhost per test session, a worker subprocess
pointed at pytest's test database, bounded waits. Registered as a plugin in tests/conftest.py.

Tests using it need transaction=True, so their data is committed and visible to the worker.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection
from kombu import Queue

from marketplace.celery import app

ROOT = Path(__file__).resolve().parents[1]
CELERY = Path(sys.executable).with_name("celery")
RABBIT = ("127.0.0.1", 5672)


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def broker_url():
    try:
        socket.create_connection(RABBIT, timeout=3).close()
    except OSError:
        pytest.fail("RabbitMQ is not reachable on 127.0.0.1:5672 (.ci/run starts it).")
    vhost = f"mk_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    _rabbitmqctl("add_vhost", vhost)
    _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    _rabbitmqctl("delete_vhost", vhost)  # drops the vhost's queues and messages


@contextlib.contextmanager
def publishing_to(broker_url: str):
    """Make this (test) process publish tasks to `broker_url`, really (not eagerly), starting
    from empty queues; the previous broker settings come back afterwards."""
    saved = app.conf.broker_url, app.conf.task_always_eager

    def reset_pools():
        app._pool = None
        with contextlib.suppress(AttributeError):
            app.amqp._producer_pool = None

    app.conf.broker_url = broker_url
    app.conf.task_always_eager = False
    reset_pools()
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=3)
            # Start from empty queues: a declared-but-unconsumed queue keeps nothing from before.
            for name in ("dispatch", "qa", "delivery", "billing", "webhooks", "default"):
                queue = Queue(name)(conn.default_channel)  # declared as Celery declares it
                queue.declare()
                queue.purge()
        yield broker_url
    finally:
        app.conf.broker_url, app.conf.task_always_eager = saved
        reset_pools()


@pytest.fixture
def publish_to(broker_url):
    """Make this (test) process publish tasks to the test vhost, really (not eagerly)."""
    with publishing_to(broker_url):
        yield broker_url


class Worker:
    """`celery -A marketplace worker -Q <queues> --pool prefork -c 2`, in its own process group."""

    def __init__(
        self,
        broker_url: str,
        log_dir: Path,
        extra_env: dict | None = None,
        queues: str = "dispatch",
        app: str = "marketplace",
    ):
        self.queues = queues
        self.app = app
        self.name = uuid.uuid4().hex[:8]
        db = connection.settings_dict
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "marketplace.settings",
            "DATABASE_URL": (
                f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
                f"/{db['NAME']}"
            ),
            "DATABASE_CONN_MAX_AGE": "0",
            "CELERY_BROKER_URL": broker_url,
            "CELERY_TASK_ALWAYS_EAGER": "false",
            **(extra_env or {}),
        }
        self.log_dir = log_dir
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 90) -> None:
        self.starts += 1
        # one log per worker and start: workers of one test share the folder
        self.log = self.log_dir / f"worker-{self.queues}-{self.name}-{self.starts}.log"
        handle = self.log.open("wb")
        self.process = subprocess.Popen(
            [
                str(CELERY),
                "-A",
                self.app,
                "worker",
                "-Q",
                self.queues,
                "--pool",
                "prefork",
                "-c",
                "2",
                "-n",
                f"test-{uuid.uuid4().hex[:8]}@%h",
                "--without-gossip",
                "--without-mingle",
                "--loglevel",
                "INFO",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b" ready." in self.log.read_bytes():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"worker did not start:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the whole process group (main process and pool children), no goodbye."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """Celery's warm shutdown: SIGTERM to the main process only, which lets the pool
        finish the tasks it runs (their after-commit publishing included). A pool child
        itself dies at once on SIGTERM (Celery resets it to the default), so signalling the
        whole group could cut a task between its commit and what it queues after it."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def make_worker(publish_to, tmp_path):
    workers: list[Worker] = []

    def make(queues: str = "dispatch", app: str = "marketplace", **extra_env) -> Worker:
        env = {k: str(v) for k, v in extra_env.items()}
        worker = Worker(publish_to, tmp_path, env, queues=queues, app=app)
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.stop()
        worker.kill()


def wait_for(predicate, timeout: float, what: str, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
