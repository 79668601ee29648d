"""The quote, order and order-list endpoints of this checkout against another checkout's, side
by side in one run, with the production checklist's cache (Redis).

    python bench/checkout_bench.py --against DIR [--seconds 5] [--clients 8] [--rounds 3]
                                   [--workers 4] [--other-env NAME=VALUE ...]

DIR is another checkout of the project (e.g. `git archive <commit> | tar -x -C DIR`) whose
models match this one's (one database serves both). Migrates PostgreSQL (BENCH_DATABASE_URL,
default postgres://postgres@127.0.0.1:5432/marketplace_bench), seeds a customer with an API key
and 50 orders, starts one gunicorn per checkout (bench.settings, --workers workers each, both
with REDIS_URL: BENCH_REDIS_URL, default redis://127.0.0.1:6379/14, started as .ci/run starts
it if it does not answer) and alternates timed rounds endpoint by endpoint, checkout by
checkout, with the same client processes. Prints per endpoint the requests/s (median over
rounds), p50 and p99 of each checkout, errors, and the ratio this / other. --other-env sets
environment variables for the other checkout's server only (--against . --other-env
DATABASE_PREPARE_THRESHOLD=off compares one setting on the same code). Exits 1 on any
error (a non-2xx answer). Bounded: rounds x 2 x 6 x seconds of load, loopback only.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadgen import ROOT, ensure_database, ensure_redis, gunicorn, http_load
from bench.quote_bench import QUOTE_BODY

SEED = """
import django; django.setup()
from marketplace import services
from marketplace.models import Organization
from tests.factories import OrderFactory
org = services.organization_create(name="checkout bench", kind=Organization.Kind.CUSTOMER)
key = services.api_key_create(organization=org, name="checkout bench").raw_key
orders = OrderFactory.create_batch(50, organization=org)
print(key, orders[0].pk)
"""


def seed(env: dict) -> tuple[str, str]:
    """A new customer's API key and one of its 50 orders' ids, in the bench database."""
    done = subprocess.run(
        [sys.executable, "-c", SEED], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    key, order_id = done.stdout.split()[-2:]
    return key, order_id


def endpoints(key: str, order_id: str) -> dict:
    """name -> (method, path, body, headers, expected status)."""
    keyed = {"Authorization": f"Bearer {key}"}
    return {
        "POST /quotes (anonymous)": ("POST", "/api/v1/quotes", QUOTE_BODY, {}, 201),
        "POST /quotes (API key)": ("POST", "/api/v1/quotes", QUOTE_BODY, keyed, 201),
        "POST /orders (API key)": ("POST", "/api/v1/orders", QUOTE_BODY, keyed, 201),
        "GET /orders/{id}": ("GET", f"/api/v1/orders/{order_id}", None, keyed, 200),
        "GET /orders (50)": ("GET", "/api/v1/orders?page_size=50", None, keyed, 200),
        "POST /bench/bare": ("POST", "/bench/bare", json.dumps({"hours": "120"}), {}, 201),
    }


def run(env: dict, checkouts: dict, calls: dict, args) -> dict:
    """{(endpoint, checkout): [round, ...]}, rounds alternating checkouts per endpoint."""
    rounds: dict = {(name, label): [] for name in calls for label in checkouts}
    other_env = {**env, **dict(pair.split("=", 1) for pair in args.other_env)}
    with (
        gunicorn(env, args.workers, checkouts["this"]) as this,
        gunicorn(other_env, args.workers, checkouts["other"]) as other,
    ):
        ports = {"this": this, "other": other}
        for port in ports.values():  # warm up every worker of both
            for method, path, body, headers, expected in calls.values():
                http_load(
                    port,
                    method,
                    path,
                    body,
                    seconds=1.0,
                    clients=2,
                    headers=headers,
                    expected=expected,
                )
        for round_ in range(args.rounds):
            for name, (method, path, body, headers, expected) in calls.items():
                order = list(ports.items())
                if round_ % 2:
                    order.reverse()
                for label, port in order:
                    rounds[(name, label)].append(
                        http_load(
                            port,
                            method,
                            path,
                            body,
                            seconds=args.seconds,
                            clients=args.clients,
                            headers=headers,
                            expected=expected,
                        )
                    )
    return rounds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--against", type=Path, required=True, help="the other checkout")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--other-env", nargs="*", default=[], metavar="NAME=VALUE")
    parser.add_argument("--only", nargs="*", default=[], help="endpoints whose name holds this")
    args = parser.parse_args()

    database_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/marketplace_bench"
    )
    ensure_database(database_url)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": ensure_redis(),
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PYTHONPATH": str(ROOT),
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    calls = endpoints(*seed(env))
    if args.only:
        calls = {name: call for name, call in calls.items() if any(o in name for o in args.only)}
    checkouts = {"this": ROOT, "other": args.against.resolve()}
    rounds = run(env, checkouts, calls, args)
    print(
        f"this checkout {ROOT} vs {checkouts['other']} {' '.join(args.other_env)}:"
        f" gunicorn {args.workers} workers each,"
        f" Redis cache, {args.clients} client processes, {args.rounds} x {args.seconds:g}s rounds"
    )
    print(
        f"{'endpoint':<26}{'this req/s':>11}{'other req/s':>12}{'ratio':>7}"
        f"{'this p50/p99 ms':>17}{'other p50/p99 ms':>18}{'errors':>8}"
    )
    errors = 0
    for name in calls:
        this, other = rounds[(name, "this")], rounds[(name, "other")]
        rps = [statistics.median(r["rps"] for r in done) for done in (this, other)]
        lat = [
            f"{statistics.median(r['p50_ms'] for r in done):.1f}/"
            f"{statistics.median(r['p99_ms'] for r in done):.1f}"
            for done in (this, other)
        ]
        failed = sum(r["errors"] for r in this + other)
        errors += failed
        if failed:
            answers = [
                (label, r["unexpected"])
                for label, done in (("this", this), ("other", other))
                for r in done
                if r["unexpected"]
            ]
            print(f"  unexpected answers of {name}: {answers}")
        print(
            f"{name:<26}{rps[0]:>11.1f}{rps[1]:>12.1f}{rps[0] / rps[1]:>7.3f}"
            f"{lat[0]:>17}{lat[1]:>18}{failed:>8}"
        )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
