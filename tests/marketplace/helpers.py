"""Shared by the marketplace tests: running code on the embedded defaults in a subprocess,
and terminating a kept connection's backend from the server side."""

import os
import subprocess
import sys
import time

from django.conf import settings
from django.db import connection

# what makes a process use the services instead of the embedded defaults
SERVICE_VARIABLES = {"DATABASE_URL", "CELERY_BROKER_URL", "S3_ENDPOINT_URL"}


def embedded_env(data_dir) -> dict:
    """This process's environment without the services: SQLite, the filesystem broker and
    the local S3 server's defaults, all under `data_dir`."""
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES}
    env.update(MARKETPLACE_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="marketplace.settings")
    return env


def run_on_embedded_defaults(code: str, data_dir, timeout: float = 120) -> list[str]:
    """`python -c code` on the embedded defaults; its output's words."""
    return run_python(code, embedded_env(data_dir), timeout)


def run_python(code: str, env: dict, timeout: float = 120) -> list[str]:
    """`python -c code` in the project's directory with `env`; its output's words."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=settings.BASE_DIR,
        timeout=timeout,
    ).stdout.split()


def terminate_backend(kept, wait: bool = False) -> int:
    """Terminate the kept connection's backend from the test's own connection, then wait (up
    to 5 s) until the kept connection sees it; `wait` also waits for the backend's exit.
    Returns the terminated backend's pid."""
    pid = kept.connection.info.backend_pid
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        else:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 5
    while kept.is_usable() and time.monotonic() < deadline:
        time.sleep(0.02)
    return pid
