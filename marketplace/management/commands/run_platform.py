"""Run the whole platform on one machine: web server, Celery worker and beat, local S3.

    python manage.py run_platform [--port 8000] [--no-s3] [--s3-port 9000]

With no DATABASE_URL / CELERY_BROKER_URL / S3_ENDPOINT_URL set, everything runs on embedded
defaults under MARKETPLACE_DATA_DIR: SQLite, the filesystem broker, and the local S3 server
(local_s3/, data kept on disk across restarts). With them set (PostgreSQL, RabbitMQ, a real
S3), the same command starts only the processes (web, worker, beat) against them.
Stops every child on Ctrl-C or SIGTERM.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from local_s3 import launcher

LOCAL_S3_PORT = 9000


class Command(BaseCommand):
    help = "Run web server, Celery worker and beat, and (embedded) the local S3 server."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--no-s3", action="store_true", help="Do not start the local S3 server."
        )
        parser.add_argument("--s3-port", type=int, default=LOCAL_S3_PORT)

    def handle(self, *args, host, port, no_s3, s3_port, **options):
        children: list[subprocess.Popen] = []
        env = dict(os.environ)
        local_s3 = None
        if not no_s3 and self._wants_local_s3():
            local_s3 = launcher.start(
                Path(settings.DATA_DIR) / "s3",
                port=s3_port,
                bucket=settings.S3_BUCKET,
                access_key=settings.AWS_ACCESS_KEY_ID,
                secret_key=settings.AWS_SECRET_ACCESS_KEY,
            )
            env.update(local_s3.settings())
            self.stdout.write(
                f"local S3 server: {local_s3.endpoint_url} (data in {settings.DATA_DIR / 's3'})"
            )
        python = sys.executable
        beat_schedule = Path(settings.DATA_DIR) / "celerybeat-schedule"
        commands = {
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "marketplace",
                "worker",
                "--loglevel",
                "INFO",
                "-Q",
                "default,dispatch,qa,delivery,billing",
                "-c",
                "2",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "marketplace",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(beat_schedule),
            ],
            "web": [python, "manage.py", "runserver", f"{host}:{port}", "--noreload"],
        }
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            for name, command in commands.items():
                # Our own fixed commands (python -m celery / manage.py), no user input.
                children.append(subprocess.Popen(command, cwd=settings.BASE_DIR, env=env))  # noqa: S603
                self.stdout.write(f"started {name} (pid {children[-1].pid})")
            self.stdout.write(
                f"Web: http://{host}:{port}/  API docs: http://{host}:{port}/api/docs/  "
                f"Admin: http://{host}:{port}/admin/   (Ctrl-C stops everything)"
            )
            while not stopping:
                for child in children:
                    if child.poll() is not None:
                        self.stderr.write(
                            f"process {child.args[:4]} exited with {child.returncode}"
                        )
                        stopping = True
                time.sleep(0.5)
        finally:
            for child in children:
                if child.poll() is None:
                    child.terminate()
            for child in children:
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    child.kill()
            if local_s3 is not None:
                launcher.stop(local_s3)

    @staticmethod
    def _wants_local_s3() -> bool:
        endpoint = settings.S3_ENDPOINT_URL or ""
        return (
            endpoint.rstrip("/") == f"http://127.0.0.1:{LOCAL_S3_PORT}"
            and "S3_ENDPOINT_URL" not in os.environ
        )
