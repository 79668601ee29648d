"""Import throughput: `fleet-agent import` against a plain copy of the same bytes to S3.

    python bench/import_bench.py [--episodes 20] [--seconds 10] [--rounds 3]

Starts the local S3 server and gunicorn (2 workers, bench.settings) on loopback against
PostgreSQL (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/mk_import_bench,
created and migrated if needed; Celery's broker is a filesystem queue in a temporary folder,
no worker: QA is queued, not run, so what is timed is the import alone). It writes a folder
of `--episodes` recordings in the episode-folder format (a FR3 parquet and two 320x240 H.264
cameras each, `--seconds` long), then, alternately in the same run, `--rounds` times (after
one warm-up round of each):

- `import`: `import_recordings` (what `fleet-agent import` runs) into a fresh job of a fresh
  order with a fresh journal: per recording, read and hash the files, register with an
  Idempotency-Key, PUT the parquet and both videos to their presigned URLs, note each in
  the journal (fsync), complete; one listing of the job's episodes at the end;
- `process`: the same through the `fleet-agent import` command in a subprocess (its start,
  ~1 s of imports, included);
- `plain`: boto3 `put_object` of the same files, one after the other like the importer,
  to fresh keys of the same bucket (the bytes read from disk inside the timing too).

It prints episodes/s and MB/s (medians) and the ratios import / plain and process / plain.
"""

import argparse
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

from bench.loadgen import ensure_database, gunicorn  # noqa: E402
from local_s3 import launcher  # noqa: E402


def write_folder(folder: Path, episodes: int, seconds: float) -> int:
    from fleet_agent.cameras import render_camera_videos
    from fleet_agent.episodes import make_episode
    from orders.models import Embodiment

    fr3 = Embodiment.objects.get(slug="franka-fr3")
    folder.mkdir(parents=True)
    total = 0
    for index in range(episodes):
        episode = make_episode(
            action_dim=fr3.action_dim, seconds=seconds, seed=index, state_limits=fr3.state_limits
        )
        cameras = [
            {"key": f"observation.images.{name}", "min_width": 320, "min_height": 240}
            for name in ("scene", "wrist")
        ]
        videos = render_camera_videos({"observation.state": episode.state}, cameras, 30, seed=index)
        (folder / f"ep{index:04d}.parquet").write_bytes(episode.data)
        total += len(episode.data)
        for key, data in videos.items():
            (folder / f"ep{index:04d}.{key.rsplit('.', 1)[1]}.mp4").write_bytes(data)
            total += len(data)
    return total


def fresh_job(fleet, site):
    from decimal import Decimal

    from fleets.models import Job
    from orders.models import Order
    from orders.streams import build_stream_spec
    from tests.factories import JobFactory, OrderFactory

    order = OrderFactory(organization=bench_customer(), status=Order.Status.IN_COLLECTION)
    order.stream_spec = build_stream_spec(
        embodiment=order.embodiment, sensor_slugs=["wrist-camera"]
    )
    order.save(update_fields=["stream_spec"])
    job = JobFactory(order=order, site=site, target_hours=Decimal("100"))
    assert job.fleet_id == fleet.id and job.status == Job.Status.ASSIGNED
    return str(job.id)


def bench_customer():
    from marketplace.models import Organization

    return Organization.objects.get_or_create(name="bench customer", kind="customer")[0]


def plain_copy(folder: Path) -> int:
    from datasets import storage

    client, bucket, sent = storage.client(), storage.bucket(), 0
    prefix = f"bench/plain/{uuid.uuid4().hex}"
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        client.put_object(Bucket=bucket, Key=f"{prefix}/{path.name}", Body=data)
        sent += len(data)
    return sent


def timing_client(base_url, key, spent: dict):
    """The importer's client, adding up the wall time of each kind of request."""
    from fleet_agent.client import ApiClient

    class Timed(ApiClient):
        def send(self, method, url, **kwargs):
            last = url.split("?", 1)[0].rsplit("/", 1)[-1]
            kind = {"PUT": "PUT storage", "POST": f"POST {last}"}.get(method, f"GET {last}")
            started = time.perf_counter()
            try:
                return super().send(method, url, **kwargs)
            finally:
                spent[kind] = spent.get(kind, 0.0) + time.perf_counter() - started

    return Timed(base_url, key)


def run_import(base_url, key, job_id, folder, journal_dir, spent: dict) -> int:
    from fleet_agent.importers import parse_mapping
    from fleet_agent.importers.journal import Journal
    from fleet_agent.importers.pipeline import import_recordings

    mapping = parse_mapping({"job": job_id, "format": "episode-folder", "operator": "op-1"})
    client = timing_client(base_url, key, spent)
    with Journal.open(Path(journal_dir) / f"{job_id}.sqlite3", job_id) as journal:
        summary = import_recordings(client, mapping, folder, journal)
    assert summary.count("imported") == len(summary.outcomes), summary.as_dict()
    return summary.bytes_sent


def run_process(base_url, key, job_id, folder, work: Path) -> None:
    config, mapping = work / f"{job_id}.toml", work / f"{job_id}.map.toml"
    config.write_text(
        f'base_url = "{base_url}"\napi_key = "{key}"\n[fleet]\nname = "x"\n'
        'weekly_capacity_hours = 1\npayout_rate_per_hour = 1\n[[sites]]\nname = "s"\n'
        'kind = "lab_bench"\n'
    )
    mapping.write_text(f'job = "{job_id}"\nformat = "episode-folder"\noperator = "op-1"\n')
    command = [str(Path(sys.executable).with_name("fleet-agent")), "import", "--config"]
    command += [str(config), "--mapping", str(mapping), "--journal", str(work / f"{job_id}.j")]
    subprocess.run([*command, str(folder)], check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    database_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mk_import_bench"
    )
    ensure_database(database_url)
    with tempfile.TemporaryDirectory() as tmp, launcher.running(Path(tmp) / "s3") as s3:
        env = {
            **os.environ,
            **s3.settings(),
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "MARKETPLACE_DATA_DIR": str(Path(tmp) / "var"),
            "PYTHONPATH": str(ROOT),
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        os.environ.update({k: v for k, v in env.items() if k != "PYTHONPATH"})
        import django

        django.setup()
        return measure(args, env, Path(tmp))


def measure(args, env, tmp: Path) -> int:
    from marketplace import services
    from marketplace.models import Organization
    from tests.factories import FleetFactory, RobotFactory, SiteFactory

    operator = Organization.objects.create(name="bench fleet", kind="fleet_operator")
    key = services.api_key_create(organization=operator, name="bench", role="owner").raw_key
    fleet = FleetFactory(organization=operator)
    site = SiteFactory(fleet=fleet)
    RobotFactory(site=site, fleet=fleet)
    folder = tmp / "recordings"
    total = write_folder(folder, args.episodes, args.seconds)
    shape = f"{args.episodes} recordings of {args.seconds:g} s (parquet + 2 cameras)"
    print(f"{shape}: {total / 1e6:.1f} MB")
    times = {"import": [], "process": [], "plain": []}
    with gunicorn(env) as port:
        base_url = f"http://127.0.0.1:{port}"
        for round_index in range(-1, args.rounds):  # round -1: warm-up, not counted
            started = time.perf_counter()
            assert plain_copy(folder) == total
            times["plain"].append(time.perf_counter() - started)
            job_id = fresh_job(fleet, site)
            started = time.perf_counter()
            spent = {}
            assert run_import(base_url, key, job_id, folder, tmp, spent) == total
            times["import"].append(time.perf_counter() - started)
            job_id = fresh_job(fleet, site)
            started = time.perf_counter()
            run_process(base_url, key, job_id, folder, tmp)
            times["process"].append(time.perf_counter() - started)
            if round_index < 0:
                times = {k: [] for k in times}
                continue
            print(
                f"  round {round_index + 1}: "
                + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items())
                + "; import's requests: "
                + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(spent.items())),
                flush=True,
            )
    medians = {k: statistics.median(v) for k, v in times.items()}
    for name, seconds in medians.items():
        rate = args.episodes / seconds
        print(f"{name:>8}: {rate:7.1f} episodes/s, {total / 1e6 / seconds:6.1f} MB/s")
    print(
        f"import / plain = {medians['plain'] / medians['import']:.2f}, "
        f"process / plain = {medians['plain'] / medians['process']:.2f} (throughput ratios)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
