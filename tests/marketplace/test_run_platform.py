"""`manage.py run_platform` (what `make run` starts) on embedded defaults in a fresh data dir:
web, worker, beat and the local S3 server come up, answer, and all stop on SIGTERM."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from django.conf import settings

from local_s3.launcher import free_port
from tests.marketplace.helpers import embedded_env

pytestmark = pytest.mark.slow


def get(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, json.loads(response.read())


def test_the_platform_runs_on_embedded_defaults_and_stops_cleanly(tmp_path):
    env = embedded_env(tmp_path)
    port, s3_port = free_port(), free_port()
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=settings.BASE_DIR, env=env, check=True
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "run_platform",
            "--port",
            str(port),
            "--s3-port",
            str(s3_port),
        ],
        cwd=settings.BASE_DIR,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        status, body = None, None
        while time.monotonic() < deadline:
            try:
                status, body = get(f"http://127.0.0.1:{port}/readyz")
                break
            except OSError:
                time.sleep(0.5)
        # the readiness probe sees the database, the broker and this run's own S3 server
        assert status == 200, (body, process.stdout.peek().decode() if status is None else "")
        assert (tmp_path / "marketplace.sqlite3").exists() and (
            tmp_path / "broker" / "queue"
        ).is_dir()
    finally:
        os.kill(process.pid, signal.SIGTERM)
        output = process.communicate(timeout=60)[0].decode()
    assert process.returncode == 0, output
    assert "started worker" in output and "started beat" in output and "local S3 server" in output
