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
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()

    from bench.loadgen import ensure_database, gunicorn, post_load
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
                "frames": 30,
            }
        )
        with gunicorn(env) as port:
            result = post_load(
                port,
                f"/api/v1/fleet/jobs/{job.id}/episodes",
                body,
                seconds=args.seconds,
                clients=args.clients,
                headers={"Authorization": f"Bearer {key}"},
            )
        print(
            f"episode registrations: {result['rps']:.1f}/s over {args.seconds}s, "
            f"{args.clients} clients, gunicorn 2 workers;"
            f" p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms,"
            f" errors {result['errors']}"
        )
        return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
