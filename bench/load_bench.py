"""Load test of the main read and write endpoints with locust, on gunicorn and PostgreSQL,
beside a bare DRF endpoint on the same server in the same run.

    pip install -e '.[bench]'        # locust
    python bench/load_bench.py [--seconds 10] [--users 8] [--workers 2] [--only NAME ...]

Recreates the PostgreSQL database BENCH_LOAD_DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/marketplace_load_bench; dropped and created each run),
seeds a world (6 customers with 50 orders each, 4 fleet operators with 3 sites each, jobs,
about 2,900 episodes, deliveries), starts the local S3 server (episode registration presigns
uploads) and gunicorn (bench.settings: no throttling, plus /bench/bare; its cache on Redis as
in production: BENCH_REDIS_URL, default redis://127.0.0.1:6379/14) on 127.0.0.1, and
runs locust headless: for each endpoint, and then for all of them at once ("mixed"), a bare
run and then the endpoint's run (--seconds each, --users concurrent users, closed loop).
Prints per endpoint: requests/s, p50, p99, errors, the ratio of its requests/s to the bare
run just before it, the SQL queries one request makes (measured in-process with Django's
test client), the statements PostgreSQL really receives for one request from gunicorn
("on wire": counted by bench/pg_statements.py between gunicorn and PostgreSQL, so BEGIN,
COMMIT and conn_health_checks' SELECT 1 are in it) and the gunicorn CPU time per request
(from /proc, Linux). Then checks the
writes: every order and episode that answered 201 is stored exactly once (orders are also
retried with their Idempotency-Key during the run). Exits non-zero on any error. Bounded:
20 runs of --seconds (about 4 min at the default).
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load_scenarios import ENDPOINTS, user_class_name  # noqa: E402
from bench.loadgen import ensure_redis, gunicorn, server_cpu_seconds  # noqa: E402

CUSTOMERS, ORDERS_PER_CUSTOMER = 6, 50
FLEET_OPERATORS, SITES_PER_FLEET = 4, 3
EPISODES_PER_JOB = 8


def recreate_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def seed_world() -> dict:
    """Customers with orders in every state, fleets holding jobs with episodes, deliveries.
    Returns the API keys and ids the locust users need."""
    import random
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from datasets.models import Delivery, DeliveryFile, Episode
    from fleets.models import Job
    from marketplace import services as accounts
    from marketplace.models import Membership, Organization
    from orders.models import Order, OrderEvent
    from tests.factories import FleetFactory, JobFactory, OrderFactory, RobotFactory, SiteFactory

    rng = random.Random(9)
    fleets = []
    for f in range(FLEET_OPERATORS):
        operator = accounts.organization_create(
            name=f"load fleet operator {f}", kind=Organization.Kind.FLEET_OPERATOR
        )
        fleet = FleetFactory(organization=operator)
        sites = []
        for s in range(SITES_PER_FLEET):
            site = SiteFactory(fleet=fleet, kind=["lab_bench", "kitchen", "warehouse"][s])
            sites.append((site, RobotFactory(site=site, fleet=fleet)))
        key = accounts.api_key_create(organization=operator, name="load").raw_key
        fleets.append({"key": key, "sites": sites, "jobs": []})

    statuses = (
        [Order.Status.AWAITING_PAYMENT] * 10
        + [Order.Status.PAID] * 5
        + [Order.Status.IN_COLLECTION] * 20
        + [Order.Status.DELIVERED] * 10
        + [Order.Status.CANCELLED] * 5
    )
    customers, events, episodes, files = [], [], [], []
    now = timezone.now()
    for c in range(CUSTOMERS):
        organization = accounts.organization_create(
            name=f"load customer {c}", kind=Organization.Kind.CUSTOMER
        )
        key = accounts.api_key_create(
            organization=organization, name="load", role=Membership.Role.MEMBER
        ).raw_key
        entry = {"key": key, "orders": [], "orders_in_collection": [], "orders_delivered": []}
        for n in range(ORDERS_PER_CUSTOMER):
            status = statuses[n % len(statuses)]
            order = OrderFactory(organization=organization, status=status, environments=2)
            entry["orders"].append(str(order.id))
            events += [
                OrderEvent(order=order, from_status="", to_status="draft", reason="created"),
                OrderEvent(order=order, from_status="draft", to_status=status, reason="load"),
            ]
            if status not in (Order.Status.IN_COLLECTION, Order.Status.DELIVERED):
                continue
            delivered = status == Order.Status.DELIVERED
            key_of = "orders_delivered" if delivered else "orders_in_collection"
            entry[key_of].append(str(order.id))
            for env_index, fleet in enumerate(rng.sample(fleets, 2)):
                site, robot = rng.choice(fleet["sites"])
                job = JobFactory(
                    order=order,
                    site=site,
                    environment_index=env_index,
                    target_hours=Decimal("5"),
                    status=Job.Status.COMPLETED if delivered else Job.Status.IN_PROGRESS,
                )
                if not delivered:
                    fleet["jobs"].append(
                        {"id": str(job.id), "site": str(site.id), "robot": str(robot.id)}
                    )
                for e in range(EPISODES_PER_JOB):
                    accepted = e % 4 != 3
                    episodes.append(
                        Episode(
                            job=job,
                            order=order,
                            fleet=site.fleet,
                            site=site,
                            robot=robot,
                            operator=f"op-{rng.randint(1, 6)}",
                            task_instruction="insert the peg",
                            success=rng.random() < 0.8,
                            objects_handled=[rng.choice(["peg-a", "peg-b", "peg-c"])],
                            fps=30,
                            size_bytes=1_000_000,
                            sha256=f"{uuid.uuid4().hex}{e:032x}",  # distinct files
                            upload_key=f"load/{job.id}/{e}",
                            status=Episode.Status.ACCEPTED if accepted else "rejected",
                            frames=1800 if accepted else None,
                            duration_seconds=Decimal("60") if accepted else None,
                            qa_failures=[] if accepted else [{"code": "gap", "message": "gap"}],
                            decided_at=now,
                        )
                    )
            if delivered:
                delivery = Delivery.objects.create(
                    order=order,
                    kind=Delivery.Kind.FULL,
                    status=Delivery.Status.READY,
                    prefix=f"deliveries/{order.id}/",
                    episodes=12,
                    frames=21600,
                    seconds=Decimal("720"),
                    ready_at=now - timedelta(days=1),
                )
                files += [
                    DeliveryFile(delivery=delivery, path=path, size_bytes=1000, sha256="0" * 64)
                    for path in ("meta/info.json", "meta/stats.json", "data/chunk-000/file-000")
                ]
        customers.append(entry)
    OrderEvent.objects.bulk_create(events)
    Episode.objects.bulk_create(episodes)
    DeliveryFile.objects.bulk_create(files)
    return {
        "customers": customers,
        "fleets": [{"key": f["key"], "jobs": f["jobs"]} for f in fleets],
        "episodes": len(episodes),
    }


def scenario_calls(world: dict) -> dict[str, tuple]:
    """name -> (method, path, caller, body, extra headers in the test client's spelling)."""
    customer, fleet = world["customers"][0], world["fleets"][0]
    job = fleet["jobs"][0]
    body = {
        "task_type": "peg-insertion",
        "embodiment": "franka-fr3",
        "hours": "120",
        "environments": 4,
        "sensors": ["wrist-camera"],
    }
    episode = {
        "site": job["site"],
        "robot": job["robot"],
        "operator": "op-1",
        "task_instruction": "t",
        "success": True,
        "fps": 30,
        "size_bytes": 1000,
        "sha256": "0" * 64,
        "frames": 30,
    }
    order = customer["orders_in_collection"][0]
    calls = {
        "bare": ("post", "/bench/bare", None, {"hours": "1"}, {}),
        "order list": ("get", "/api/v1/orders", customer, None, {}),
        "order detail": ("get", f"/api/v1/orders/{order}", customer, None, {}),
        "coverage": ("get", f"/api/v1/orders/{order}/coverage", customer, None, {}),
        "deliveries": (
            "get",
            f"/api/v1/orders/{customer['orders_delivered'][0]}/deliveries",
            customer,
            None,
            {},
        ),
        "fleet job list": ("get", "/api/v1/fleet/jobs", fleet, None, {}),
        "quote preview": ("post", "/api/v1/quotes/preview", customer, body, {}),
        "quote create": ("post", "/api/v1/quotes", customer, body, {}),
        "order create": (
            "post",
            "/api/v1/orders",
            customer,
            body,
            {"HTTP_IDEMPOTENCY_KEY": "count-queries"},
        ),
        "episode register": (
            "post",
            f"/api/v1/fleet/jobs/{job['id']}/episodes",
            fleet,
            episode,
            {},
        ),
    }
    return calls


def queries_per_request(world: dict) -> dict[str, int]:
    """SQL queries one request of each scenario makes, through Django's test client."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    calls = scenario_calls(world)
    customer, fleet = world["customers"][0], world["fleets"][0]
    counts = {}
    client = Client()
    for caller in (customer, fleet):  # a key's first use records it: count the uses after
        client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {caller['key']}")
    for name, (method, path, caller, data, extra) in calls.items():
        if caller:
            extra = {**extra, "HTTP_AUTHORIZATION": f"Bearer {caller['key']}"}
        kwargs = {"data": json.dumps(data), "content_type": "application/json"} if data else {}
        with CaptureQueriesContext(connection) as queries:
            response = getattr(client, method)(path, **kwargs, **extra)
        assert response.status_code < 300, (name, response.status_code, response.content[:300])
        counts[name] = len(queries)
    return counts


def statements_on_server(env: dict, world: dict, names: list[str]) -> dict[str, int]:
    """Statements PostgreSQL receives for one request of each scenario from gunicorn (one
    worker, warm: each scenario asked twice first), counted on the wire by bench/pg_statements
    (conn_health_checks' SELECT 1, BEGIN and COMMIT included). The median of three requests."""
    import http.client

    from bench.pg_statements import StatementCounter

    calls = scenario_calls(world)
    url = env["DATABASE_URL"]
    host, port = url.split("@", 1)[1].split("/", 1)[0].split(":")
    counts = {}
    with StatementCounter(host, int(port)) as proxy:
        proxied = {**env, "DATABASE_URL": proxy.database_url(url)}
        with gunicorn(proxied, workers=1) as server_port:
            for name in ["bare", *names]:
                if name not in calls:
                    continue
                method, path, caller, data, extra = calls[name]
                seen = []
                for attempt in range(5):
                    headers = {"Content-Type": "application/json"}
                    if caller:
                        headers["Authorization"] = f"Bearer {caller['key']}"
                    for header, value in extra.items():
                        spelled = header.removeprefix("HTTP_").replace("_", "-").title()
                        headers[spelled] = f"{value}-server-{attempt}"
                    before = proxy.count
                    conn = http.client.HTTPConnection("127.0.0.1", server_port, timeout=30)
                    body = json.dumps(data) if data else None
                    conn.request(method.upper(), path, body, headers)
                    response = conn.getresponse()
                    response.read()
                    conn.close()
                    assert response.status < 300, (name, response.status)
                    if attempt >= 2:  # after two warm-up requests
                        seen.append(proxy.count - before)
                counts[name] = int(statistics.median(seen))
    return counts


def run_locust(env: dict, port: int, user_class: str, seconds: float, users: int, out: Path):
    """One headless locust run; returns its stats rows by request name, and its failures."""
    prefix = out / user_class
    with (out / f"{user_class}.log").open("w") as log:  # its summary table; figures from CSV
        subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(ROOT / "bench" / "load_locustfile.py"),
                "--headless",
                "--host",
                f"http://127.0.0.1:{port}",
                "-u",
                str(users),
                "-r",
                str(users),
                "-t",
                f"{int(seconds)}s",
                "--stop-timeout",
                "5",
                "--csv",
                str(prefix),
                "--only-summary",
                "--loglevel",
                "ERROR",
                "--exit-code-on-error",
                "0",  # errors are counted from the CSV and fail the run at the end
                user_class,
            ],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=seconds + 60,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    with open(f"{prefix}_stats.csv") as handle:
        rows = {row["Name"]: row for row in csv.DictReader(handle)}
    with open(f"{prefix}_failures.csv") as handle:
        failures = list(csv.DictReader(handle))
    return rows, failures


def figures(row: dict) -> dict:
    return {
        "requests": int(row["Request Count"]),
        "errors": int(row["Failure Count"]),
        "rps": float(row["Requests/s"]),
        "p50_ms": float(row["50%"]),
        "p99_ms": float(row["99%"]),
        "cpu_ms": row.get("cpu_ms", 0.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=10, help="per run")
    parser.add_argument("--users", type=int, default=8, help="concurrent locust users")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--only", nargs="*", help="endpoint names to run (default: all)")
    args = parser.parse_args()

    database_url = os.environ.get(
        "BENCH_LOAD_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/marketplace_load_bench"
    )
    recreate_database(database_url)
    from local_s3 import launcher

    with tempfile.TemporaryDirectory() as tmp, launcher.running(Path(tmp) / "s3") as s3:
        tmp = Path(tmp)
        env = {
            **os.environ,
            **s3.settings(),
            "DATABASE_URL": database_url,
            # the production checklist's cache: Redis (BENCH_REDIS_URL, DB 14 by default)
            "REDIS_URL": ensure_redis(),
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "PYTHONPATH": str(ROOT),
            # Tasks enqueued by the writes (after commit) go to a filesystem broker of this run.
            "CELERY_BROKER_URL": "filesystem://",
            "MARKETPLACE_DATA_DIR": str(tmp / "data"),
            "LOG_LEVEL": "WARNING",
            "LOAD_WORLD": str(tmp / "world.json"),
            "LOAD_WRITES": str(tmp / "writes.txt"),
        }
        os.environ.update(env)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        import django

        django.setup()
        started = time.perf_counter()
        world = seed_world()
        seeded_in = time.perf_counter() - started
        Path(env["LOAD_WORLD"]).write_text(json.dumps(world))
        queries = queries_per_request(world)
        names = [n for n in ENDPOINTS if n != "bare" and (not args.only or n in args.only)]
        on_server = statements_on_server(env, world, names)

        results, bare_runs, failures = {}, [], []
        with gunicorn(env, workers=args.workers) as port:

            def run(user_class: str, seconds: int):
                cpu_before = server_cpu_seconds(port)
                rows, failed = run_locust(env, port, user_class, seconds, args.users, tmp)
                cpu = server_cpu_seconds(port) - cpu_before
                for row in rows.values():
                    row["cpu_ms"] = cpu * 1000 / max(int(rows["Aggregated"]["Request Count"]), 1)
                return rows, failed

            run("Mixed", 3)  # warm up: imports, connections, caches

            def bare_run() -> float:
                rows, failed = run(user_class_name("bare"), args.seconds)
                failures.extend(failed)
                bare_runs.append(figures(rows["bare"]))
                return bare_runs[-1]["rps"]

            # Each endpoint right after a bare run of its own: on a shared machine the load
            # drifts, so each ratio compares two runs a few seconds apart.
            for name in [*names, "mixed"]:
                bare_rps = bare_run()
                rows, failed = run(user_class_name(name), args.seconds)
                failures += failed
                row = rows["Aggregated" if name == "mixed" else name]
                results[name] = {**figures(row), "bare_rps": bare_rps}

        bare = {
            "requests": sum(r["requests"] for r in bare_runs),
            "errors": sum(r["errors"] for r in bare_runs),
            "rps": statistics.median(r["rps"] for r in bare_runs),
            "p50_ms": statistics.median(r["p50_ms"] for r in bare_runs),
            "p99_ms": statistics.median(r["p99_ms"] for r in bare_runs),
            "bare_rps": statistics.median(r["rps"] for r in bare_runs),
            "cpu_ms": statistics.median(r["cpu_ms"] for r in bare_runs),
        }
        integrity = check_writes(Path(env["LOAD_WRITES"]))

    print(
        f"world: {CUSTOMERS} customers x {ORDERS_PER_CUSTOMER} orders,"
        f" {FLEET_OPERATORS} fleet operators x {SITES_PER_FLEET} sites,"
        f" {world['episodes']} episodes (seeded in {seeded_in:.1f} s)"
    )
    print(
        f"gunicorn {args.workers} workers; locust {args.users} users, closed loop,"
        f" {args.seconds:g} s per run; each endpoint run right after a bare run, and"
        f" compared with it (bare row: median of {len(bare_runs)} runs)"
    )
    header = f"{'endpoint':<18}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'requests':>10}"
    print(
        header + f"{'errors':>8}{'bare req/s':>12}{'vs bare':>9}{'queries':>9}{'on wire':>9}"
        f"{'CPU ms':>8}"
    )
    for name, row in [("bare", bare), *results.items()]:
        print(
            f"{name:<18}{row['rps']:>9.1f}{row['p50_ms']:>9.0f}{row['p99_ms']:>9.0f}"
            f"{row['requests']:>10}{row['errors']:>8}{row['bare_rps']:>12.1f}"
            f"{row['rps'] / row['bare_rps']:>9.3f}{queries.get(name, ''):>9}"
            f"{on_server.get(name, ''):>9}{row['cpu_ms']:>8.1f}"
        )
    for check, ok in integrity.items():
        print(f"{'ok ' if ok else 'FAILED '} {check}")
    for failure in failures[:10]:
        print(f"failure: {failure['Method']} {failure['Name']} x{failure['Occurrences']}:")
        print(f"  {failure['Error'][:300]}")
    errors = bare["errors"] + sum(r["errors"] for r in results.values())
    return 1 if errors or not all(integrity.values()) else 0


def check_writes(writes_file: Path) -> dict[str, bool]:
    """No write lost or duplicated under load: every write that answered 201 is in the
    database exactly once. A write still in flight when a scenario's time ran out may be
    stored without its answer having been counted: reported, not an error."""
    from collections import Counter

    from datasets.models import Episode
    from orders.models import Order

    answered = {"order": set(), "episode": set()}
    for line in writes_file.read_text().splitlines() if writes_file.exists() else []:
        kind, marker = line.split(" ", 1)
        answered[kind].add(marker)
    stored = {
        "order": Counter(
            n.removeprefix("load ")
            for n in Order.objects.filter(notes__startswith="load ").values_list("notes", flat=True)
        ),
        "episode": Counter(
            t.removeprefix("insert the peg ")
            for t in Episode.objects.filter(
                task_instruction__startswith="insert the peg ", status=Episode.Status.REGISTERED
            ).values_list("task_instruction", flat=True)
        ),
    }
    checks = {}
    for kind in ("order", "episode"):
        lost = answered[kind] - set(stored[kind])
        duplicated = [marker for marker, count in stored[kind].items() if count > 1]
        unanswered = set(stored[kind]) - answered[kind]
        checks[
            f"{kind}s: {len(answered[kind])} answered 201, {sum(stored[kind].values())} stored;"
            f" lost {len(lost)}, duplicated {len(duplicated)}"
            f" (in flight at a scenario's end: {len(unanswered)})"
        ] = not lost and not duplicated
    return checks


if __name__ == "__main__":
    sys.exit(main())
