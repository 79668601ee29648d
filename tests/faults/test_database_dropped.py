"""Fault: PostgreSQL drops the connections of the web server and of the worker.

pg_terminate_backend is aimed only at this test database's connections carrying the web
server's or the worker's application_name. Both keep connections open between requests and
tasks (CONN_MAX_AGE=60) as in production: CONN_HEALTH_CHECKS makes the next request notice
the dead connection and open a new one; a task that loses its connection mid-way rolls back
and is retried (autoretry on OperationalError), and its rerun does not count anything twice.
"""

import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.error import HTTPError

import pytest
from django.db import connection, connections

from datasets.episode_format import episode_table, parquet_bytes
from local_s3.launcher import free_port
from tests.celery_worker import ROOT, wait_for
from tests.datasets.helpers import Collection, frames_in
from tests.faults.conftest import (
    Stopwatch,
    assert_each_episode_decided_once,
    complete_all,
    terminate_backends,
    undecided,
    uploaded_episodes,
    worker_database_url,
)

pytestmark = [pytest.mark.real_worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GUNICORN = Path(sys.executable).with_name("gunicorn")


@pytest.fixture
def web_server(s3, tmp_path):
    """gunicorn (1 process, 2 threads) on the test database, keeping its connections."""
    port = free_port()
    log = (tmp_path / "gunicorn.log").open("wb")
    env = {
        **os.environ,
        **s3.settings(),
        "DJANGO_SETTINGS_MODULE": "marketplace.settings",
        "DATABASE_URL": worker_database_url("mkfault_web"),
        "DATABASE_CONN_MAX_AGE": "60",
    }
    process = subprocess.Popen(
        [str(GUNICORN), "marketplace.wsgi", "-b", f"127.0.0.1:{port}", "-w", "1", "--threads", "2"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def answers():
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=10).close()
        except OSError:  # not listening yet, or still importing the app
            return False
        return True

    try:
        wait_for(answers, timeout=45, what="gunicorn")
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def call(base: str, key: str, method: str, path: str, body: dict | None = None):
    request = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, json.loads(response.read() or b"{}")
    except HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_web_requests_after_the_database_dropped_the_connections_succeed(
    web_server, fleet_operator, customer, figures
):
    # given: a web server that has served requests and holds its database connections
    collection = Collection(fleet_operator, customer, target_hours="1")
    key = fleet_operator.raw_key
    for _ in range(4):
        assert call(web_server, key, "GET", "/api/v1/fleet/jobs")[0] == 200
    # when: the database terminates them
    terminated = terminate_backends("mkfault_web")
    assert terminated >= 1
    # then: the next reads and writes succeed, on fresh connections
    took = Stopwatch()
    statuses = [call(web_server, key, "GET", "/api/v1/fleet/jobs")[0] for _ in range(10)]
    data = parquet_bytes(episode_table(frames=90, seed=1))
    body = {
        "site": str(collection.site.id),
        "robot": str(collection.robot.id),
        "operator": "op-1",
        "task_instruction": "t",
        "success": True,
        "fps": 30,
        "size_bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "frames": frames_in(data),
    }
    path = f"/api/v1/fleet/jobs/{collection.job.id}/episodes"
    statuses += [call(web_server, key, "POST", path, body)[0] for _ in range(3)]
    assert statuses == [200] * 10 + [201] * 3
    assert collection.job.episodes.count() == 3
    figures.update(
        backends_terminated=terminated,
        requests_after=len(statuses),
        errors=sum(s >= 500 for s in statuses),
        seconds=took.seconds(),
    )


def test_qa_tasks_whose_connection_is_dropped_retry_and_count_once(
    s3, publish_to, workers, s3_proxy, proxy_settings, fleet_operator, customer, figures
):
    # given: 6 uploaded episodes, a worker keeping its connections, slowed by S3 latency
    collection = Collection(fleet_operator, customer, target_hours="1")
    ids = uploaded_episodes(collection, 6)
    s3_proxy.delay_seconds = 0.25
    workers(
        publish_to,
        "qa",
        DATABASE_URL=worker_database_url("mkfault_worker"),
        DATABASE_CONN_MAX_AGE=60,
        **proxy_settings,
    )
    complete_all(collection, ids)
    # when: the database drops the worker's connections every 0.7 s while QA runs
    terminated = kills = 0
    deadline = time.monotonic() + 20
    while undecided() > 2 and time.monotonic() < deadline:
        time.sleep(0.7)
        count = terminate_backends("mkfault_worker")
        terminated += count
        kills += bool(count)
    assert kills >= 2
    s3_proxy.delay_seconds = 0
    recovery = Stopwatch()
    wait_for(lambda: undecided() == 0, timeout=60, what="QA of every episode")
    # then: every episode decided once, credited once
    figures.update(
        assert_each_episode_decided_once(collection, ids),
        backends_terminated=terminated,
        recovery_s=recovery.seconds(),
    )


def test_a_request_whose_connection_died_answers_503_in_the_error_shape(customer, figures):
    # given: the database terminates this process's connection (the test client, unlike a
    # server, does not run the per-request health check, so the request meets a dead one)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            # wait (up to 5 s) until the backend has exited, as terminate_backends() does:
            # without it the request below raced the termination (it could meet the backend
            # still alive, or dying mid-query)
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
            assert cursor.fetchone()[0] is True
    finally:
        other.close()
    # when
    response = customer.client.get("/api/v1/orders")
    # then: 503 in the one error shape, not a 500 with a traceback
    assert response.status_code == 503
    assert response.json() == {
        "code": "database_unavailable",
        "message": "The database cannot be reached right now; try again shortly.",
        "fields": {},
    }
    assert response["Retry-After"] == "5"
    # when: the next request gets a fresh connection (a server's request_started does this)
    connection.close_if_unusable_or_obsolete()
    # then
    assert customer.client.get("/api/v1/orders").status_code == 200
    figures.update(requests=2, answered_503=1, then_200=1)
