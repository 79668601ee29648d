"""Episode registration throughput through the fleet API on gunicorn.

    python bench/registration_bench.py [--seconds 5] [--clients 4]

Against PostgreSQL (BENCH_DATABASE_URL, default .../marketplace_bench, created and migrated if
needed) and the local S3 server: creates a fleet operator with an API key and an assigned
job, starts gunicorn (2 workers) on loopback, then has --clients processes register episodes
(each registration validates, records the episode, heartbeats the job and presigns a
length- and checksum-bound upload URL) for --seconds, and prints episodes/s, p50/p99 and
errors. Bounded in time, loopback only.
"""

import argparse
import hashlib
import http.client
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def client(port, path, key, body, seconds, out):
    latencies, errors = [], 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request(
            "POST",
            path,
            body,
            {"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        )
        response = conn.getresponse()
        response.read()
        conn.close()
        errors += response.status != 201
        latencies.append(time.perf_counter() - started)
    out.put((latencies, errors))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()

    from bench.quote_bench import ensure_database, free_port
    from local_s3 import launcher

    database_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/marketplace_bench"
    )
    ensure_database(database_url)
    with tempfile.TemporaryDirectory() as tmp, launcher.running(Path(tmp)) as s3:
        env = {
            **os.environ,
            **s3.settings(),
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "PYTHONPATH": str(ROOT),
        }
        os.environ.update(env)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        import django

        django.setup()
        from decimal import Decimal

        from marketplace import services as accounts
        from marketplace.models import Organization
        from orders.models import Order
        from tests.factories import (
            FleetFactory,
            JobFactory,
            OrderFactory,
            RobotFactory,
            SiteFactory,
        )

        operator = accounts.organization_create(
            name="bench fleet", kind=Organization.Kind.FLEET_OPERATOR
        )
        key = accounts.api_key_create(organization=operator, name="bench").raw_key
        customer = accounts.organization_create(
            name="bench customer", kind=Organization.Kind.CUSTOMER
        )
        fleet = FleetFactory(organization=operator)
        site = SiteFactory(fleet=fleet)
        robot = RobotFactory(site=site, fleet=fleet)
        order = OrderFactory(organization=customer, status=Order.Status.IN_COLLECTION)
        job = JobFactory(order=order, site=site, target_hours=Decimal("100"))
        body = json.dumps(
            {
                "site": str(site.id),
                "robot": str(robot.id),
                "operator": "op-1",
                "task_instruction": "t",
                "success": True,
                "fps": 30,
                "size_bytes": 123456,
                "sha256": hashlib.sha256(b"x").hexdigest(),
            }
        )
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "bench.wsgi",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "2",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            queue = multiprocessing.Queue()
            path = f"/api/v1/fleet/jobs/{job.id}/episodes"
            procs = [
                multiprocessing.Process(
                    target=client, args=(port, path, key, body, args.seconds, queue)
                )
                for _ in range(args.clients)
            ]
            for proc in procs:
                proc.start()
            results = [queue.get(timeout=args.seconds + 60) for _ in procs]
            for proc in procs:
                proc.join(timeout=10)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)
        latencies = sorted(lat for lats, _ in results for lat in lats)
        errors = sum(err for _, err in results)
        print(
            f"episode registrations: {len(latencies) / args.seconds:.1f}/s over {args.seconds}s, "
            f"{args.clients} clients, gunicorn 2 workers;"
            f" p50 {statistics.median(latencies) * 1000:.1f} ms, "
            f"p99 {latencies[int(len(latencies) * 0.99) - 1] * 1000:.1f} ms, errors {errors}"
        )
        return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
