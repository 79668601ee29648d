"""Run the whole platform on one machine: web server, Celery worker and beat, local S3.

    python manage.py run_platform [--port 8000] [--no-s3] [--s3-port 9000]
                                  [--demo [--once] [--defect-rate 0.1] [--timeout 600]]

--demo also starts three simulated fleets (the reference fleet-agent) and places an order as
the demo customer, then prints a signed download link once it is delivered. --once plays
that scenario a single time and exits 0 only when every delivered file, downloaded through
its audited link, matches manifest.json.

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

# Every queue the platform routes tasks to (marketplace/celery.py).
WORKER_QUEUES = "default,dispatch,qa,delivery,billing,webhooks"

LOCAL_S3_PORT = 9000


class Command(BaseCommand):
    help = "Run web server, Celery worker and beat, and (embedded) the local S3 server."
    # `make run` has just run them (migrate): the children start without waiting for a second
    # pass (the URL check imports every view, seconds on a busy 2-core machine).
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--no-s3", action="store_true", help="Do not start the local S3 server."
        )
        parser.add_argument("--s3-port", type=int, default=LOCAL_S3_PORT)
        parser.add_argument(
            "--demo", action="store_true", help="Simulated fleets and a demo order."
        )
        parser.add_argument(
            "--once", action="store_true", help="With --demo: play it once, verify, exit."
        )
        parser.add_argument("--defect-rate", type=float, default=0.1)
        parser.add_argument(
            "--timeout", type=float, default=600.0, help="Seconds to wait for delivery."
        )

    def handle(
        self, *args, host, port, no_s3, s3_port, demo, once, defect_rate, timeout, **options
    ):
        env = dict(os.environ)
        local_s3 = None if no_s3 or not self._wants_local_s3() else self._start_local_s3(s3_port)
        if local_s3 is not None:
            env.update(local_s3.settings())
        children: list[subprocess.Popen] = []
        stopping = False
        playing_demo = False
        return_code = 0

        def stop(*_):
            nonlocal stopping
            stopping = True
            # The demo's waits (web server, fleets, delivery) would otherwise run to their
            # timeout before the flag is looked at: Ctrl-C must stop everything now.
            if playing_demo:
                raise DemoInterrupted

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            for name, command in self._commands(host, port).items():
                # Our own fixed commands (python -m celery / manage.py), no user input.
                children.append(subprocess.Popen(command, cwd=settings.BASE_DIR, env=env))  # noqa: S603
                self.stdout.write(f"started {name} (pid {children[-1].pid})")
            self.stdout.write(
                f"Web: http://{host}:{port}/  API docs: http://{host}:{port}/api/docs/  "
                f"Admin: http://{host}:{port}/admin/   (Ctrl-C stops everything)"
            )
            if demo:
                os.environ.update({k: v for k, v in env.items() if k.startswith(("S3_", "AWS_"))})
                playing_demo = True
                try:
                    code = self._demo(
                        f"http://{host}:{port}",
                        children,
                        once=once,
                        defect_rate=defect_rate,
                        timeout=timeout,
                    )
                except DemoInterrupted:
                    self.stderr.write("demo: interrupted; stopping everything")
                    code, once = 130, True
                finally:
                    playing_demo = False
                if once:
                    return_code = code
                    stopping = True
            while not stopping:
                stopping = self._any_exited(children)
                time.sleep(0.5)
        finally:
            self._stop_all(children)
            if local_s3 is not None:
                launcher.stop(local_s3)
        if return_code:
            sys.exit(return_code)

    def _start_local_s3(self, port: int):
        server = launcher.start(
            Path(settings.DATA_DIR) / "s3",
            port=port,
            bucket=settings.S3_BUCKET,
            access_key=settings.AWS_ACCESS_KEY_ID,
            secret_key=settings.AWS_SECRET_ACCESS_KEY,
        )
        self.stdout.write(
            f"local S3 server: {server.endpoint_url} (data in {settings.DATA_DIR / 's3'})"
        )
        return server

    @staticmethod
    def _commands(host: str, port: int) -> dict[str, list[str]]:
        celery = [sys.executable, "-m", "celery", "-A", "marketplace"]
        beat_schedule = Path(settings.DATA_DIR) / "celerybeat-schedule"
        return {
            "worker": [*celery, "worker", "--loglevel", "INFO", "-Q", WORKER_QUEUES, "-c", "2"],
            "beat": [*celery, "beat", "--loglevel", "INFO", "--schedule", str(beat_schedule)],
            "web": [
                sys.executable,
                "manage.py",
                "runserver",
                f"{host}:{port}",
                "--noreload",
                "--skip-checks",
            ],
        }

    def _any_exited(self, children: list[subprocess.Popen]) -> bool:
        exited = False
        for child in children:
            if child.poll() is not None:
                self.stderr.write(f"process {child.args[:4]} exited with {child.returncode}")
                exited = True
        return exited

    @staticmethod
    def _stop_all(children: list[subprocess.Popen]) -> None:
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()

    def _demo(
        self, base_url: str, children: list, *, once: bool, defect_rate: float, timeout: float
    ) -> int:
        """Play the demo scenario; in once-mode return 0 only if the delivery verifies."""
        import io
        import json

        from django.core.management import call_command

        from marketplace.management import demo_scenario

        # Accounts, keys and fleet configs go straight to the database while the web server,
        # worker and beat start (seconds each on 2 cores); the fleets need the web server.
        out = io.StringIO()
        call_command("seed_demo", "--json", stdout=out)
        credentials = json.loads(out.getvalue())
        configs = demo_scenario.fleet_configs(
            Path(settings.DATA_DIR) / "demo", base_url, defect_rate=defect_rate
        )
        # (a bound, not a pause: on a 2-core machine busy with other work, 60 s was too short)
        if not _wait_http(f"{base_url}/healthz", 180):
            self.stderr.write("the web server did not come up")
            return 1
        agents = demo_scenario.start_agents(configs, max_seconds=timeout + 60 if once else 86400)
        children.extend(agents)
        self.stdout.write(
            f"started {len(agents)} simulated fleets (fleet-agent); configs in {configs[0].parent}"
        )
        self.stdout.write(
            f"demo logins (password {credentials['password']}):"
            f" customer '{credentials['customer']}', staff '{credentials['admin']}'"
        )
        result = demo_scenario.play(
            base_url=base_url,
            customer_key=credentials["customer_api_key"],
            timeout=timeout,
            verify=once,
            log=lambda line: self.stdout.write(f"demo: {line}"),
        )
        self.stdout.write(
            f"demo: order {result.order_id} {result.status} in {result.seconds_to_delivery:.0f}s;"
            f" accepted {result.accepted_hours} h; episodes accepted {result.episodes_accepted},"
            f" rejected by QA {result.episodes_rejected}"
        )
        if result.link:
            self.stdout.write(
                f"demo: signed link to manifest.json (expires in minutes): {result.link}"
            )
        if once:
            self.stdout.write(f"demo: {result.files_verified} files verified against manifest.json")
            self.stdout.write(
                f"demo: {result.videos_verified} cameras' videos decoded, every frame present"
            )
            filled = sum(cell["state"] != "short" for cell in result.cells)
            self.stdout.write(
                f"demo: {filled} of {len(result.cells)} (environment, object) cells filled;"
                f" {result.calibrations_verified} camera calibrations delivered"
            )
            for problem in result.problems:
                self.stderr.write(f"demo problem: {problem}")
            self.stdout.write("DEMO OK" if result.ok else "DEMO FAILED")
            return 0 if result.ok else 1
        return 0

    @staticmethod
    def _wants_local_s3() -> bool:
        endpoint = settings.S3_ENDPOINT_URL or ""
        return (
            endpoint.rstrip("/") == f"http://127.0.0.1:{LOCAL_S3_PORT}"
            and "S3_ENDPOINT_URL" not in os.environ
        )


class DemoInterrupted(Exception):
    """SIGINT or SIGTERM while the demo plays (raised by the signal handler)."""


def _wait_http(url: str, seconds: float) -> bool:
    import urllib.request

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - our own server
                return True
        except OSError:
            time.sleep(0.3)
    return False
