"""`manage.py run_platform` (what `make run` starts) on embedded defaults in a fresh data dir:
web, worker, beat and the local S3 server come up, answer, and all stop on SIGTERM; with
--demo, Ctrl-C (SIGINT) stops everything while the demo plays, not when it ends."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
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


def test_the_platform_runs_on_embedded_defaults_and_ctrl_c_stops_its_demo(tmp_path):
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
            "--demo",
            "--port",
            str(port),
            "--s3-port",
            str(s3_port),
            "--timeout",
            "600",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in process.stdout], daemon=True
    ).start()
    seen = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("simulated fleets" in x for x in seen):
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                assert process.poll() is None, "".join(seen)
        assert any("simulated fleets" in x for x in seen), "".join(seen)
        # the readiness probe sees the database, the broker and this run's own S3 server
        status, body = get(f"http://127.0.0.1:{port}/readyz")
        assert status == 200, body
        assert (tmp_path / "marketplace.sqlite3").exists() and (
            tmp_path / "broker" / "queue"
        ).is_dir()
        # when: Ctrl-C while the demo waits for the fleets and the delivery (600 s timeout)
        interrupted = time.monotonic()
        os.kill(process.pid, signal.SIGINT)
        process.wait(timeout=45)
        took = time.monotonic() - interrupted
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    time.sleep(0.2)
    output = "".join(seen) + "".join(lines.queue)
    # then: it stopped at once, said so, and exited as an interrupted command does
    assert process.returncode == 130, output[-3000:]
    assert took < 45 and "demo: interrupted" in output, output[-3000:]
    assert "started worker" in output and "started beat" in output and "local S3 server" in output
    try:  # and the web server it started is gone with it
        get(f"http://127.0.0.1:{port}/healthz")
        raise AssertionError("the web server still answers")
    except OSError:
        pass
