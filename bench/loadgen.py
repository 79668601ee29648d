"""Shared by the HTTP benchmarks: a gunicorn server on loopback and a bounded load of POSTs
from client processes, measured the same way for every endpoint compared."""

import http.client
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_database(url: str) -> None:
    """Create the benchmark's PostgreSQL database if it does not exist."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")


def ensure_redis(url: str = REDIS_URL) -> str:
    """The production checklist's cache (CACHES on Redis): Redis on loopback answering at
    `url`, started as .ci/run starts it when it does not answer. Returns `url`."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()
        return url
    except redis.ConnectionError:
        pass
    server = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", "6379"]
    subprocess.run([*server, "--save", "", "--appendonly", "no"], check=True)
    for _ in range(30):
        try:
            client.ping()
            return url
        except redis.ConnectionError:
            time.sleep(0.5)
    raise SystemExit(f"Redis did not answer at {url}")


@contextmanager
def gunicorn(env: dict, workers: int = 2, root: Path = ROOT):
    """bench.wsgi of the checkout at `root` on a free loopback port; yields the port; stopped
    on exit."""
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
            str(workers),
            "--log-level",
            "warning",
        ],
        cwd=root,
        env={**env, "PYTHONPATH": str(root)},
        start_new_session=True,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)


def cpu_seconds(marker: bytes) -> float:
    """User + system CPU of the processes whose command line holds `marker`, from /proc: a
    cost per request that the load of other processes on the machine hardly moves."""
    ticks = 0
    for proc in Path("/proc").iterdir():
        try:
            if marker not in (proc / "cmdline").read_bytes():
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # not a process, or gone meanwhile
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_cpu_ticks() -> tuple[int, int]:
    """(all, idle) CPU ticks of the whole machine so far, from /proc/stat (idle with iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]


def idle_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the machine's CPU left idle between two machine_cpu_ticks()."""
    total, idle = after[0] - before[0], after[1] - before[1]
    return idle / total if total else 0.0


def server_cpu_seconds(port: int) -> float:
    """CPU of the gunicorn processes serving `port` (master and workers)."""
    return cpu_seconds(f"127.0.0.1:{port}".encode())


def database_cpu_seconds(database: str) -> float:
    """CPU of the PostgreSQL backends connected to `database` (on this machine)."""
    return cpu_seconds(f" {database} ".encode())  # "postgres: 15/main: user db host(port) ..."


def _client(port, method, path, body, headers, expected, seconds, out) -> None:
    latencies, errors, unexpected = [], 0, {}
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request(method, path, body, {"Content-Type": "application/json", **headers})
            response = conn.getresponse()
            response.read()
            conn.close()
            if response.status != expected:
                errors += 1
                unexpected[response.status] = unexpected.get(response.status, 0) + 1
        except OSError as exc:
            errors += 1
            unexpected[type(exc).__name__] = unexpected.get(type(exc).__name__, 0) + 1
        latencies.append(time.perf_counter() - started)
    out.put((latencies, errors, unexpected))


def post_load(port: int, path: str, body: str, *, expected: int = 201, **load) -> dict:
    """`clients` processes POST `body` to `path` for `seconds`: requests/s, p50/p99, errors."""
    return http_load(port, "POST", path, body, expected=expected, **load)


def http_load(
    port: int,
    method: str,
    path: str,
    body: str | None,
    *,
    seconds: float,
    clients: int,
    headers: dict | None = None,
    expected: int = 200,
) -> dict:
    """`clients` processes send `method` `path` (with `body`) for `seconds`: requests/s,
    p50/p99, errors (answers other than `expected`)."""
    queue = multiprocessing.Queue()
    args = (port, method, path, body, headers or {}, expected, seconds, queue)
    procs = [multiprocessing.Process(target=_client, args=args) for _ in range(clients)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=seconds + 60) for _ in procs]
    for proc in procs:
        proc.join(timeout=10)
    latencies = sorted(lat for lats, _, _ in results for lat in lats)
    unexpected: dict = {}
    for _, _, answers in results:
        for answer, count in answers.items():
            unexpected[answer] = unexpected.get(answer, 0) + count
    return {
        "requests": len(latencies),
        "rps": len(latencies) / seconds,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000,
        "errors": sum(err for _, err, _ in results),
        "unexpected": unexpected,  # answer (status or exception) -> count, when not `expected`
    }
