"""The one-command demo, played once end to end (`make run ONCE=1` does the same).

On embedded defaults (SQLite, filesystem broker, the local S3 server) in a temporary data
directory, and again on PostgreSQL + RabbitMQ + the S3 server. Each run: three simulated
fleets take the demo order, QA rejects the defective episodes, the order is delivered, and
every delivered file downloaded through its audited link matches manifest.json.
"""

import os
import re
import subprocess
import sys
import uuid

import psycopg
import pytest
from django.conf import settings

from local_s3.launcher import free_port

pytestmark = [pytest.mark.slow]

SERVICES = {
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "S3_ENDPOINT_URL",
    "S3_BUCKET",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
}


def play_once(env: dict, tmp_path) -> str:
    env = {**env, "MARKETPLACE_DATA_DIR": str(tmp_path)}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=settings.BASE_DIR, env=env, check=True
    )
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "run_platform",
            "--demo",
            "--once",
            "--port",
            str(free_port()),
            "--s3-port",
            str(free_port()),
            "--timeout",
            "420",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "DEMO OK" in output
    rejected = int(re.search(r"rejected by QA (\d+)", output).group(1))
    accepted = int(re.search(r"episodes accepted (\d+)", output).group(1))
    assert accepted > 0 and rejected > 0, output[-2000:]  # the defective share was caught
    assert re.search(r"(\d+) files verified against manifest.json", output)
    # the 2 x 2 collection plan filled, the cameras' calibrations delivered (issue 30)
    assert "demo: 4 of 4 (environment, object) cells filled" in output, output[-3000:]
    assert int(re.search(r"(\d+) camera calibrations delivered", output).group(1)) >= 2
    return output


def test_the_demo_delivers_on_embedded_defaults(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in SERVICES}
    output = play_once(env, tmp_path)
    assert "local S3 server" in output


@pytest.mark.real_worker
def test_the_demo_delivers_on_postgresql_and_rabbitmq(tmp_path, broker_url):
    name = f"mk_demo_{uuid.uuid4().hex[:8]}"
    admin = "postgres://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        env = {k: v for k, v in os.environ.items() if k not in SERVICES}
        env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{name}"
        env["CELERY_BROKER_URL"] = broker_url
        play_once(env, tmp_path)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
