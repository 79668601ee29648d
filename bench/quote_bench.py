"""Quote endpoint vs a bare DRF endpoint, on one gunicorn server, under the same load.

    python bench/quote_bench.py [--seconds 5] [--clients 8] [--rounds 3]

Starts gunicorn (2 workers) on 127.0.0.1 against PostgreSQL (BENCH_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/marketplace_bench, created and migrated if needed),
then alternates timed rounds: quote, bare, quote, bare ... with the same number of client
processes, and prints requests/s, p50/p99 latency and errors of each, and their ratio.
Bounded: rounds x 2 x seconds of load, loopback only.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def client_worker(port: int, path: str, body: str, seconds: float, out) -> None:
    latencies, errors = [], 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            conn.close()
            if response.status != 201:
                errors += 1
        except OSError:
            errors += 1
        latencies.append(time.perf_counter() - started)
    out.put((latencies, errors))


def run_round(port: int, path: str, body: str, seconds: float, clients: int) -> dict:
    queue = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=client_worker, args=(port, path, body, seconds, queue))
        for _ in range(clients)
    ]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=seconds + 60) for _ in procs]
    for proc in procs:
        proc.join(timeout=10)
    latencies = sorted(lat for lats, _ in results for lat in lats)
    errors = sum(err for _, err in results)
    return {
        "requests": len(latencies),
        "rps": len(latencies) / seconds,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "errors": errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    database_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/marketplace_bench"
    )
    ensure_database(database_url)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PYTHONPATH": str(ROOT),
    }
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    server = subprocess.Popen(
        [
            python,
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
        run_round(port, "/api/v1/quotes", QUOTE_BODY, 1.0, 2)  # warm up both workers
        run_round(port, "/bench/bare", BARE_BODY, 1.0, 2)
        quote_rounds, bare_rounds = [], []
        for _ in range(args.rounds):
            quote_rounds.append(
                run_round(port, "/api/v1/quotes", QUOTE_BODY, args.seconds, args.clients)
            )
            bare_rounds.append(
                run_round(port, "/bench/bare", BARE_BODY, args.seconds, args.clients)
            )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)

    def summary(rounds):
        return {
            "rps": statistics.median(r["rps"] for r in rounds),
            "p50_ms": statistics.median(r["p50_ms"] for r in rounds),
            "p99_ms": statistics.median(r["p99_ms"] for r in rounds),
            "errors": sum(r["errors"] for r in rounds),
            "requests": sum(r["requests"] for r in rounds),
        }

    quote, bare = summary(quote_rounds), summary(bare_rounds)
    print(
        f"gunicorn 2 workers, {args.clients} client processes,"
        f" {args.rounds} x {args.seconds}s rounds each"
    )
    print(f"{'endpoint':<22}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'requests':>10}{'errors':>8}")
    for name, row in (("POST /api/v1/quotes", quote), ("POST /bench/bare", bare)):
        print(
            f"{name:<22}{row['rps']:>10.1f}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}"
            f"{row['requests']:>10}{row['errors']:>8}"
        )
    print(f"ratio quote/bare throughput: {quote['rps'] / bare['rps']:.3f}")
    return 1 if quote["errors"] or bare["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
