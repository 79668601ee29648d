"""Whole-dataset download: `marketplace-download` vs a plain parallel fetch of the same files.

    python bench/download_bench.py [--rounds 5] [--workers 8] [--profile]

Starts the local S3 server and gunicorn (2 workers, bench.settings) on loopback against
PostgreSQL (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/mk_portals_bench,
created and migrated if needed), stores two synthetic deliveries straight in storage:

- `large`: 16 data files of 16 MiB (256 MiB), like a LeRobot delivery of data files;
- `many`:  1,000 files of 32-64 KiB (~48 MiB), like a delivery of many small files.

For each, alternately in the same run, `rounds` times (after one warm-up round), each round
in a rotated order, every run starting after `sync` (the previous run's writeback is not
charged to the next):

- `cli`: `DeliveryDownloader` (what `marketplace-download` runs), `--workers` files at once:
  the manifest's link, then the files' links signed in batches by the platform
  (`POST /deliveries/<id>/links`, each file recorded) fetched ahead while the files stream
  from storage over kept-alive connections, SHA-256 verified, moved into place, state recorded;
- `plain`: the same number of threads fetching presigned URLs of the same objects (signed
  beforehand, outside the timing) with urllib, one connection per file, writing to disk;
- `plain-keepalive`: the same with kept-alive connections (http.client), no hashing;
- `keepalive+sha256`: that, hashing every block as it arrives (what verifying against the
  manifest costs at the least), for reference.

It prints MB/s (median of the rounds), the CPU seconds each side spent (this process, i.e.
the client; the S3 server; gunicorn), and the CLI's ratio to the faster plain fetch. The
acceptance bar is cli / plain >= 0.8. `--profile` adds one CLI run per scenario under
cProfile (every worker thread) and prints where its time goes.
"""

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.loadgen import ensure_database, gunicorn  # noqa: E402
from local_s3 import launcher  # noqa: E402

SCENARIOS = {
    "large": {"count": 16, "size": 16 * 1024 * 1024, "jitter": 0},
    "many": {"count": 1000, "size": 32 * 1024, "jitter": 32 * 1024},
}


def make_files(count: int, size: int, jitter: int, seed: int) -> dict:
    import random

    rng = random.Random(seed)
    block = rng.randbytes(1024 * 1024)
    files = {}
    for index in range(count):
        length = size + (rng.randrange(0, jitter) if jitter else 0)
        data = (block * (length // len(block) + 1))[:length]
        # make each file distinct (first bytes), so checksums differ
        files[f"data/chunk-000/file-{index:04d}.bin"] = index.to_bytes(8, "big") + data[8:]
    return files


def plain_fetch(urls: list[str], dest: Path, workers: int) -> int:
    def one(item):
        index, url = item
        target = dest / f"{index:05d}"
        with urllib.request.urlopen(url, timeout=60) as response, open(target, "wb") as out:
            while block := response.read(1024 * 1024):
                out.write(block)
        return target.stat().st_size

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(one, enumerate(urls)))


def keepalive_fetch(client, urls: list[str], dest: Path, workers: int, hashed=False) -> int:
    def one(item):
        index, url = item
        target = dest / f"{index:05d}"

        def receive(response):
            digest = hashlib.sha256()
            with open(target, "wb") as out:
                while block := response.read(1024 * 1024):
                    out.write(block)
                    if hashed:
                        digest.update(block)
            return target.stat().st_size

        return client._pooled("GET", url, {"User-Agent": "bench"}, receive)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(one, enumerate(urls)))


def process_cpu(pids) -> float:
    """User + system CPU seconds of these processes so far (from /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def gunicorn_pids(port: int) -> list[int]:
    """The gunicorn master and workers bound to this port."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"gunicorn" in command and f"127.0.0.1:{port}".encode() in command:
            pids.append(int(entry.name))
    return pids


def profiled(run):
    """Run `run()` with cProfile in this thread and in every thread it starts; return the
    merged pstats.Stats."""
    import cProfile
    import pstats
    import threading

    profiles = []

    def start_in_thread(*_):
        sys.setprofile(None)
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()

    main_profile = cProfile.Profile()
    threading.setprofile(start_in_thread)
    main_profile.enable()
    try:
        run()
    finally:
        main_profile.disable()
        threading.setprofile(None)
    stats = pstats.Stats(main_profile)
    for profile in profiles:
        stats.add(profile)
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="one more CLI run, profiled")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--scenarios", default="large,many")
    args = parser.parse_args()

    database_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mk_portals_bench"
    )
    ensure_database(database_url)
    with tempfile.TemporaryDirectory() as tmp, launcher.running(Path(tmp) / "s3") as s3:
        env = {
            **os.environ,
            **s3.settings(),
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "PYTHONPATH": str(ROOT),
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        os.environ.update({k: v for k, v in env.items() if k != "PYTHONPATH"})
        import django

        django.setup()
        from datasets import storage
        from marketplace import services
        from marketplace.models import Organization
        from marketplace_client.download import DeliveryDownloader
        from marketplace_client.http import ApiClient
        from tests.datasets.synthetic_delivery import make_ready_delivery

        organization = Organization.objects.create(name="Bench Lab", kind="customer")
        raw_key = services.api_key_create(
            organization=organization, name="bench", role="owner"
        ).raw_key
        with gunicorn(env) as port:
            base_url = f"http://127.0.0.1:{port}"
            servers = {"s3": [s3.process.pid], "gunicorn": gunicorn_pids(port)}
            print(f"gunicorn 2 workers, local S3 server, {args.workers} workers each side")
            for name in args.scenarios.split(","):
                shape = SCENARIOS[name]
                files = make_files(shape["count"], shape["size"], shape["jitter"], seed=1)
                total = sum(len(data) for data in files.values())
                delivery = make_ready_delivery(organization, files)
                keys = [f"{delivery.prefix}/{path}" for path in files]

                def plain(out, keys=keys):
                    urls = [storage.presigned_get(key=k, expires_in=900) for k in keys]
                    return lambda: plain_fetch(urls, out, args.workers)

                def keepalive(out, keys=keys):
                    urls = [storage.presigned_get(key=k, expires_in=900) for k in keys]
                    client = ApiClient(base_url, raw_key)
                    return lambda: keepalive_fetch(client, urls, out, args.workers)

                def keepalive_sha256(out, keys=keys):
                    urls = [storage.presigned_get(key=k, expires_in=900) for k in keys]
                    client = ApiClient(base_url, raw_key)
                    return lambda: keepalive_fetch(client, urls, out, args.workers, hashed=True)

                def cli(out, delivery=delivery):
                    client = ApiClient(base_url, raw_key)
                    downloader = DeliveryDownloader(
                        client, str(delivery.id), out, workers=args.workers, quiet=True
                    )

                    def download():
                        summary = downloader.run()
                        assert not summary.failures, summary.failures
                        return summary.bytes_fetched

                    return download

                methods = {
                    "plain": plain,
                    "plain-keepalive": keepalive,
                    "keepalive+sha256": keepalive_sha256,
                    "cli": cli,
                }
                figures = {k: [] for k in methods}
                cpu = {k: {"client": [], "s3": [], "gunicorn": []} for k in methods}
                names = list(methods)
                for round_index in range(-1, args.rounds):  # round -1: warm-up, not counted
                    # each round in another order, and each run after the page cache's dirty
                    # pages are written out: no method pays for another's writeback
                    shift = max(round_index, 0) % len(names)
                    for method in names[shift:] + names[:shift]:
                        with tempfile.TemporaryDirectory() as out:
                            run = methods[method](Path(out))
                            os.sync()
                            before = {k: process_cpu(v) for k, v in servers.items()}
                            cpu_started = time.process_time()
                            started = time.perf_counter()
                            fetched = run()
                            seconds = time.perf_counter() - started
                            if round_index < 0:
                                continue
                            figures[method].append(fetched / seconds)
                            cpu[method]["client"].append(time.process_time() - cpu_started)
                            for k, v in servers.items():
                                cpu[method][k].append(process_cpu(v) - before[k])
                    if round_index >= 0:
                        print(
                            f"  {name} round {round_index + 1}: "
                            + ", ".join(f"{k} {v[-1] / 1e6:.1f} MB/s" for k, v in figures.items()),
                            flush=True,
                        )
                medians = {k: statistics.median(v) for k, v in figures.items()}
                best_plain = max(medians["plain"], medians["plain-keepalive"])
                print(
                    f"{name}: {len(files)} files, {total / 1e6:.1f} MB; "
                    f"cli {medians['cli'] / 1e6:.1f} MB/s, "
                    f"plain {medians['plain'] / 1e6:.1f} MB/s, "
                    f"plain-keepalive {medians['plain-keepalive'] / 1e6:.1f} MB/s; "
                    f"cli / best plain = {medians['cli'] / best_plain:.2f}; "
                    f"keepalive+sha256 {medians['keepalive+sha256'] / 1e6:.1f} MB/s, "
                    f"cli / it = {medians['cli'] / medians['keepalive+sha256']:.2f}"
                )
                ratios = [
                    c / max(p, k)
                    for c, p, k in zip(
                        figures["cli"], figures["plain"], figures["plain-keepalive"], strict=True
                    )
                ]
                print(
                    "  cli / best plain per round: "
                    + ", ".join(f"{r:.2f}" for r in ratios)
                    + f" (median {statistics.median(ratios):.2f})"
                )
                print(
                    "  CPU s per run (median; client / S3 server / gunicorn): "
                    + "; ".join(
                        f"{k} " + " / ".join(f"{statistics.median(cpu[k][p]):.2f}" for p in cpu[k])
                        for k in methods
                    )
                )
                if args.profile:
                    with tempfile.TemporaryDirectory() as out:
                        stats = profiled(cli(Path(out)))
                    print(f"  profile of one cli run ({name}), all threads, by own time:")
                    stats.sort_stats("tottime").print_stats(18)
    return 0


if __name__ == "__main__":
    sys.exit(main())
