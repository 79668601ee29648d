"""Fault tests: a real worker, broker, database and S3 server, with one thing broken at a time.

Each test records its figures (recovery time, tasks published / completed / duplicated);
they are printed at the end of the run and written as JSON to $FAULT_REPORT_JSON if set,
with pytest-xdist too (figures.py; bench/fault_report.py runs these tests and prints the table).
"""

import json
import os
import shutil
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode
from tests.celery_worker import Worker, publishing_to
from tests.datasets.helpers import Collection, put
from tests.faults.figures import FIGURES
from tests.faults.private_rabbit import PrivateRabbit
from tests.faults.s3_proxy import FaultyS3Proxy


@pytest.fixture
def figures(request):
    """figures["key"] = value; kept with the test's name for the report (figures.py)."""
    record: dict = {"test": request.node.name}
    yield record
    FIGURES.append(record)


class Stopwatch:
    def __init__(self):
        self.started = time.monotonic()

    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 2)


@pytest.fixture
def s3_proxy(s3_server):
    """The fault-injecting proxy in front of the session's local S3 server."""
    proxy = FaultyS3Proxy(s3_server.endpoint_url)
    yield proxy
    proxy.close()


@pytest.fixture
def proxy_settings(s3_server, s3_proxy):
    """S3 settings (environment) that send a worker through the proxy."""
    return {**s3_server.settings(), "S3_ENDPOINT_URL": s3_proxy.url}


@pytest.fixture
def workers(tmp_path):
    """Start workers on any broker; every one is stopped (or killed) at teardown."""
    started: list[Worker] = []

    def start(broker_url: str, queues: str, **extra_env) -> Worker:
        # Each fault is one more retry and the backoff doubles (with jitter): cap it so that
        # recovery fits the tests' waits (uncapped, one QA retry in CI came after 61 s).
        extra_env.setdefault("TASK_RETRY_BACKOFF_MAX_SECONDS", 4)
        worker = Worker(broker_url, tmp_path, {k: str(v) for k, v in extra_env.items()}, queues)
        started.append(worker)
        worker.start()
        return worker

    yield start
    for worker in started:
        worker.stop()
        worker.kill()
        # Shown by pytest only when the test failed: what each worker did.
        print(f"--- {worker.log.name} (tail)\n{worker.log.read_text(errors='replace')[-4000:]}")


@pytest.fixture
def private_broker():
    """A RabbitMQ node of this test's own (see private_rabbit.py), started and published to."""
    if shutil.which("rabbitmq-server") is None or os.geteuid() != 0:
        pytest.fail(
            "A private RabbitMQ node needs rabbitmq-server and root (Debian's wrapper runs the"
            " server as user rabbitmq); .ci/run installs it and runs as root."
        )
    base = Path(tempfile.mkdtemp(prefix="mkfault_rabbit_"))
    rabbit = PrivateRabbit(base)
    try:
        rabbit.start_seconds = rabbit.start()
        with publishing_to(rabbit.url):
            yield rabbit
    finally:
        if rabbit.reachable():
            rabbit.stop()
        rabbit.kill()
        shutil.rmtree(base, ignore_errors=True)


def worker_database_url(application_name: str) -> str:
    """The test database, with a name on the worker's connections so a test can find them."""
    db = connection.settings_dict
    return (
        f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
        f"/{db['NAME']}?application_name={application_name}"
    )


def terminate_backends(application_name: str) -> int:
    """pg_terminate_backend on the test database's connections of that name only, waiting
    (up to 5 s each) until each backend has exited: its FATAL then stands on the client's
    socket, as it does for a connection dropped while idle between requests (without the
    wait, a request in the same millisecond races the termination, a failure mid-request)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s"
            " AND pid <> pg_backend_pid()",
            [application_name],
        )
        return cursor.fetchone()[0]


def episode_frames(index: int) -> int:
    return 90 + 15 * index  # 3 s, 3.5 s, ... at 30 fps


def uploaded_episodes(collection: Collection, count: int) -> list[str]:
    """Register `count` valid episodes and PUT their bytes; QA is not queued yet."""
    ids = []
    for index in range(count):
        data = parquet_bytes(episode_table(frames=episode_frames(index), seed=index))
        response = collection.register(data, operator=f"op-{index % 3}")
        assert response.status_code == 201, response.json()
        body = response.json()
        assert put(body["upload"], data) == 200
        ids.append(body["id"])
    return ids


def expected_seconds(count: int) -> Decimal:
    return sum((Decimal(episode_frames(i)) / 30 for i in range(count)), Decimal(0)).quantize(
        Decimal("0.001")
    )


def complete_all(collection: Collection, ids: list[str]) -> None:
    for episode_id in ids:
        response = collection.operator.client.post(
            f"/api/v1/fleet/episodes/{episode_id}/complete", {}, format="json"
        )
        assert response.status_code == 200, response.json()


def undecided() -> int:
    return Episode.objects.filter(status=Episode.Status.UPLOADED).count()


def assert_each_episode_decided_once(collection: Collection, ids: list[str]) -> dict:
    """Every episode accepted, decided once, its time credited once to job and order."""
    episodes = Episode.objects.filter(pk__in=ids)
    statuses = {e.status for e in episodes}
    decisions = [(e.id, e.status, e.qa_failures) for e in episodes]
    assert statuses == {Episode.Status.ACCEPTED}, decisions
    runs = list(episodes.values_list("qa_runs", flat=True))
    assert runs == [1] * len(ids)
    collection.job.refresh_from_db()
    collection.order.refresh_from_db()
    expected = expected_seconds(len(ids))
    assert collection.job.accepted_seconds == expected
    assert collection.order.accepted_seconds == expected
    return {"published": len(ids), "completed": len(runs), "duplicated": sum(runs) - len(runs)}


def assert_delivery_consistent(delivery, s3_server) -> dict:
    """The delivery's files in S3 are exactly its manifest (and the manifest itself), with
    the manifest's sizes and SHA-256, and the database lists the same set once."""
    import hashlib

    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=s3_server.access_key,
        aws_secret_access_key=s3_server.secret_key,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    listed = s3.list_objects_v2(Bucket=s3_server.bucket, Prefix=delivery.prefix + "/")
    stored = {item["Key"][len(delivery.prefix) + 1 :] for item in listed.get("Contents", [])}
    manifest = json.loads(
        s3.get_object(Bucket=s3_server.bucket, Key=f"{delivery.prefix}/manifest.json")[
            "Body"
        ].read()
    )
    in_manifest = {f["path"]: f for f in manifest["files"]}
    assert stored == set(in_manifest) | {"manifest.json"}
    for path, entry in in_manifest.items():
        body = s3.get_object(Bucket=s3_server.bucket, Key=f"{delivery.prefix}/{path}")["Body"]
        data = body.read()
        assert len(data) == entry["size"], path
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], path
    rows = list(delivery.files.values_list("path", flat=True))
    assert sorted(rows) == sorted(stored)
    return {"files": len(stored)}
