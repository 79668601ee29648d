"""Quote endpoint vs a bare DRF endpoint, on one gunicorn server, under the same load.

    python bench/quote_bench.py [--seconds 5] [--clients 8] [--rounds 3] [--workers 4 2]

Starts gunicorn on 127.0.0.1 against PostgreSQL (BENCH_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/marketplace_bench, created and migrated if needed) with
its cache on Redis as in production (BENCH_REDIS_URL, default redis://127.0.0.1:6379/14;
started as .ci/run starts it if it does not answer),
then alternates timed rounds: quote, quote with a customer's API key, bare, quote, ... with
the same number of client processes, and prints requests/s, p50/p99 latency, errors, the CPU
per request of the gunicorn server and of the database's PostgreSQL backends, and the share
of the machine's CPU left idle (medians over rounds) of each, and the throughput ratios of
each quote to bare.

Once per worker count in --workers, each with a server of its own: 4 is how the production
checklist (README) runs gunicorn; with 2 (one per core) a sync worker that waits for
PostgreSQL to make a quote durable (its commit's flush to disk) leaves its core idle, which
the bare endpoint, touching no database, never does: the idle column shows that share.
Bounded: len(workers) x rounds x 3 x seconds of load, loopback only.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadgen import (
    ROOT,
    database_cpu_seconds,
    ensure_database,
    ensure_redis,
    gunicorn,
    idle_share,
    machine_cpu_ticks,
    post_load,
    server_cpu_seconds,
)

PRODUCTION_WORKERS = 4  # README's production checklist: gunicorn marketplace.wsgi -w 4


def measured_load(port: int, database: str, path: str, body: str, **load) -> dict:
    """post_load, with the CPU per request of the gunicorn server and of the database's
    PostgreSQL backends over the round, and the share of the machine's CPU left idle."""
    server, db, machine = (
        server_cpu_seconds(port),
        database_cpu_seconds(database),
        machine_cpu_ticks(),
    )
    row = post_load(port, path, body, **load)
    requests = max(row["requests"], 1)
    row["cpu_ms"] = (server_cpu_seconds(port) - server) * 1000 / requests
    row["db_cpu_ms"] = (database_cpu_seconds(database) - db) * 1000 / requests
    row["idle"] = idle_share(machine, machine_cpu_ticks())
    return row


QUOTE_BODY = json.dumps(
    {
        "task_type": "peg-insertion",
        "embodiment": "franka-fr3",
        "hours": "120",
        "environments": 4,
        "sensors": ["wrist-camera"],
        "rush": True,
    }
)
BARE_BODY = json.dumps({"hours": "120"})


def summary(rounds: list[dict]) -> dict:
    return {
        "rps": statistics.median(r["rps"] for r in rounds),
        "p50_ms": statistics.median(r["p50_ms"] for r in rounds),
        "p99_ms": statistics.median(r["p99_ms"] for r in rounds),
        "errors": sum(r["errors"] for r in rounds),
        "cpu_ms": statistics.median(r["cpu_ms"] for r in rounds),
        "db_cpu_ms": statistics.median(r["db_cpu_ms"] for r in rounds),
        "idle": statistics.median(r["idle"] for r in rounds),
        "requests": sum(r["requests"] for r in rounds),
    }


def compare(env: dict, database: str, workers: int, args, key: str) -> dict:
    """Alternating rounds on one gunicorn of `workers` workers: an anonymous quote, a quote
    with a customer's API key (kept by each worker, checked against Redis's version; its row
    locked while the quote is stored), the bare endpoint."""
    keyed = {"Authorization": f"Bearer {key}"}
    calls = {
        "POST /api/v1/quotes": ("/api/v1/quotes", QUOTE_BODY, {}),
        "  with an API key": ("/api/v1/quotes", QUOTE_BODY, keyed),
        "POST /bench/bare": ("/bench/bare", BARE_BODY, {}),
    }
    with gunicorn(env, workers=workers) as port:
        for path, body, headers in calls.values():  # warm up
            post_load(port, path, body, seconds=1.0, clients=2, headers=headers)
        rounds: dict = {name: [] for name in calls}
        for _ in range(args.rounds):
            load = {"seconds": args.seconds, "clients": args.clients}
            for name, (path, body, headers) in calls.items():
                rounds[name].append(
                    measured_load(port, database, path, body, headers=headers, **load)
                )
    return {name: summary(done) for name, done in rounds.items()}


def customer_key(env: dict) -> str:
    """A new customer organization's API key in the bench database (a key per run)."""
    code = (
        "import django; django.setup()\n"
        "from marketplace import services\n"
        "from marketplace.models import Organization\n"
        "org = services.organization_create(name='quote bench', kind=Organization.Kind.CUSTOMER)\n"
        "print(services.api_key_create(organization=org, name='quote bench').raw_key)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.split()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[PRODUCTION_WORKERS, 2],
        help="gunicorn worker counts, one server each (default: 4, as in production, and 2)",
    )
    args = parser.parse_args()

    database_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/marketplace_bench"
    )
    ensure_database(database_url)
    database = database_url.rsplit("/", 1)[1]
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        # the production checklist's cache: Redis (BENCH_REDIS_URL, DB 14 by default)
        "REDIS_URL": ensure_redis(),
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PYTHONPATH": str(ROOT),
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    key = customer_key(env)
    errors = 0
    for workers in args.workers:
        rows = compare(env, database, workers, args, key)
        errors += sum(row["errors"] for row in rows.values())
        bare = rows["POST /bench/bare"]
        production = " (as in production)" if workers == PRODUCTION_WORKERS else ""
        print(
            f"gunicorn {workers} workers{production}, {args.clients} client processes,"
            f" {args.rounds} x {args.seconds:g}s rounds each"
        )
        print(
            f"{'endpoint':<22}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'requests':>10}"
            f"{'errors':>8}{'CPU ms':>8}{'DB CPU ms':>11}{'idle':>7}"
        )
        for name, row in rows.items():
            print(
                f"{name:<22}{row['rps']:>10.1f}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}"
                f"{row['requests']:>10}{row['errors']:>8}{row['cpu_ms']:>8.2f}"
                f"{row['db_cpu_ms']:>11.2f}{row['idle']:>6.0%}"
            )
        quote, with_key = rows["POST /api/v1/quotes"], rows["  with an API key"]
        print(f"ratio quote/bare throughput ({workers} workers): {quote['rps'] / bare['rps']:.3f}")
        print(
            f"ratio quote with an API key/bare throughput ({workers} workers):"
            f" {with_key['rps'] / bare['rps']:.3f}"
        )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
