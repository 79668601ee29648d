"""Ingest capacity (issue 29, item 7): the time from a fleet's `complete` to QA's verdict, and
the episodes QA checks per worker core, for 45 s episodes with two 640x480 30 fps cameras and
a force/torque stream, against a bare PyAV decode of the same videos.

    .venv/bin/python bench/ingest_bench.py [--episodes 6] [--rounds 3] [--seconds 45]
                                           [--folder DIR] [--profile FILE]

The production configuration, started on loopback: PostgreSQL (BENCH_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/mk_ingest_bench, created and migrated), RabbitMQ (a vhost
of its own, deleted at the end), Redis as the cache (BENCH_REDIS_URL, default
redis://127.0.0.1:6379/12), the local S3 server, gunicorn (2 workers) for the fleet API, and
one Celery worker on the "qa" queue: prefork, concurrency 1 (one QA worker core), QA in its
sandbox (EPISODE_QA_SANDBOX, the default). The episodes are the fleet agent's own
(fleet_agent/episodes.py: a Franka FR3 trajectory with a force/torque column;
fleet_agent/cameras.py: the scene and wrist cameras rendered from it, H.264), made once and
kept in --folder if given; each round uses a fresh job and deletes its episodes afterwards
(a platform-wide duplicate check would refuse them the next round).

Per round, alternating in the same run:
- QA: each episode registered through the API, its parquet and two videos PUT to their
  presigned URLs, then `complete` (the fleet API call) timed to the verdict, polled in the
  database every 5 ms; one episode at a time, the worker idle before each. The worker's CPU
  for it: its processes' user + system time from /proc, QA's sandbox children (waited for)
  included, split into the sandbox's and the worker's own;
- bare: the same two videos decoded by a bare PyAV loop (open, decode every frame) in a forked
  child: its CPU (wait4) and wall time.

Prints each round, then the medians: complete-to-verdict seconds, worker CPU per episode,
bare decode CPU and wall per episode, the ratio bare CPU / QA CPU (gate: >= 0.8, exit 1
below) and the capacity in episodes per day per core (86,400 s / QA CPU per episode).
`--profile FILE`: py-spy (pip install py-spy) samples the worker and its sandbox children
over one more round, written to FILE (speedscope format).
"""

import argparse
import contextlib
import hashlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gates import Gates  # noqa: E402
from bench.loadgen import ensure_database, gunicorn  # noqa: E402
from local_s3 import launcher  # noqa: E402

GATE = 0.8  # QA's episodes per core at least this share of a bare decode's
FPS = 30
SIZE = (640, 480)
CAMERAS = ("scene", "wrist")
SENSORS = ["force-torque", "wrist-camera"]
CELERY = Path(sys.executable).with_name("celery")


# --- The episodes ------------------------------------------------------------------------


def make_episodes(folder: Path, count: int, seconds: float) -> list[Path]:
    """`count` episode folders (episode.parquet, scene.mp4, wrist.mp4), made if missing."""
    from fleet_agent.cameras import render_camera_videos
    from fleet_agent.episodes import make_episode
    from orders.models import Embodiment
    from orders.streams import build_stream_spec, vectors_of

    fr3 = Embodiment.objects.get(slug="franka-fr3")
    vectors = vectors_of(build_stream_spec(embodiment=fr3, sensor_slugs=SENSORS))
    cameras = [
        {"key": f"observation.images.{n}", "width": SIZE[0], "height": SIZE[1]} for n in CAMERAS
    ]
    made = []
    for index in range(count):
        place = folder / f"{seconds:g}s-{index:03d}"
        if not (place / "wrist.mp4").exists():
            started = time.perf_counter()
            place.mkdir(parents=True, exist_ok=True)
            episode = make_episode(
                action_dim=fr3.action_dim,
                seconds=seconds,
                seed=1000 + index,
                state_limits=fr3.state_limits,
                vectors=vectors,
            )
            videos = render_camera_videos(
                {"observation.state": episode.state}, cameras, FPS, seed=1000 + index
            )
            for key, data in videos.items():
                (place / f"{key.rsplit('.', 1)[1]}.mp4").write_bytes(data)
            (place / "episode.parquet").write_bytes(episode.data)
            print(f"  made {place.name} in {time.perf_counter() - started:.1f} s", flush=True)
        made.append(place)
    return made


# --- Production's services ---------------------------------------------------------------


@contextlib.contextmanager
def rabbitmq_vhost():
    vhost = f"mk_ingest_bench_{uuid.uuid4().hex[:8]}"
    subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], check=True, capture_output=True)
    subprocess.run(
        ["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        subprocess.run(["rabbitmqctl", "-q", "delete_vhost", vhost], capture_output=True)


@contextlib.contextmanager
def qa_worker(env: dict, log: Path, code: Path):
    """One Celery worker on the "qa" queue, concurrency 1, running the checkout at `code`;
    yields its name (in every one of its processes' command lines)."""
    name = f"ingestbench-{uuid.uuid4().hex[:8]}"
    command = [str(CELERY), "-A", "marketplace", "worker", "-Q", "qa", "--pool", "prefork"]
    command += ["-c", "1", "-n", f"{name}@%h", "--without-gossip", "--without-mingle"]
    with log.open("wb") as handle:
        worker = subprocess.Popen(
            [*command, "--loglevel", "INFO"],
            cwd=code,  # Celery puts its working folder first on the path
            env={**env, "PYTHONPATH": str(code)},
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while b" ready." not in log.read_bytes():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the QA worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield name
    finally:
        os.kill(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


def worker_cpu(marker: str) -> tuple[float, float]:
    """(own, children) CPU seconds of the processes whose command line holds `marker`: user +
    system time, and that of their children they waited for (QA's sandbox)."""
    own = children = 0
    for proc in Path("/proc").iterdir():
        try:
            if marker.encode() not in (proc / "cmdline").read_bytes():
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        own += int(fields[11]) + int(fields[12])  # utime, stime
        children += int(fields[13]) + int(fields[14])  # cutime, cstime
    tick = os.sysconf("SC_CLK_TCK")
    return own / tick, children / tick


def worker_pids(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
    return pids


# --- One round ---------------------------------------------------------------------------


def fresh_job(fleet, site):
    from decimal import Decimal

    from marketplace.models import Organization
    from orders.models import Order
    from orders.streams import build_stream_spec
    from tests.factories import JobFactory, OrderFactory

    customer = Organization.objects.get_or_create(name="bench customer", kind="customer")[0]
    order = OrderFactory(organization=customer, status=Order.Status.IN_COLLECTION)
    order.stream_spec = build_stream_spec(embodiment=order.embodiment, sensor_slugs=SENSORS)
    order.sensor_slugs = SENSORS
    order.save(update_fields=["stream_spec", "sensor_slugs"])
    return JobFactory(order=order, site=site, target_hours=Decimal("100"))


def register_and_upload(client, job, robot, place: Path) -> str:
    """Register the episode with its videos, PUT its three files; its id (not completed)."""
    from fleet_agent import uploads

    data = (place / "episode.parquet").read_bytes()
    videos = {f"observation.images.{n}": (place / f"{n}.mp4").read_bytes() for n in CAMERAS}
    frames = int(place.name.split("s-")[0]) * FPS
    body = {
        "site": str(job.site_id),
        "robot": str(robot.id),
        "operator": "op-1",
        "task_instruction": "insert the peg",
        "success": True,
        "fps": FPS,
        "size_bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "frames": frames,
        "objects_handled": ["peg"],
        "videos": uploads.declarations(videos),
    }
    registered = uploads.register(client, str(job.id), body, data)
    parts, video_parts = uploads.put_all(
        client, registered["id"], registered["upload"], data, videos
    )
    assert parts is None and not video_parts, "45 s episodes go up in single PUTs"
    return registered["id"]


def verdict_after_complete(client, episode_id: str, marker: str) -> tuple[float, float, float, str]:
    """`complete`, then poll until QA decided: (wall seconds, the worker's own CPU, its
    sandbox's CPU, the status)."""
    from datasets.models import Episode

    own, children = worker_cpu(marker)
    started = time.perf_counter()
    client.complete_episode(episode_id)
    decided = Episode.objects.filter(pk=episode_id).exclude(status__in=["registered", "uploaded"])
    while not decided.exists():
        if time.perf_counter() - started > 600:
            raise SystemExit(f"no verdict for {episode_id} in 600 s")
        time.sleep(0.005)
    wall = time.perf_counter() - started
    time.sleep(0.05)  # the task's last bookkeeping after its commit
    own_after, children_after = worker_cpu(marker)
    status = Episode.objects.values_list("status", flat=True).get(pk=episode_id)
    return wall, own_after - own, children_after - children, status


def bare_decode(place: Path) -> tuple[float, float]:
    """(CPU, wall) of decoding both videos with a bare PyAV loop, in a forked child."""
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: decode, nothing else
        code = 1
        try:
            import av

            for name in CAMERAS:
                with av.open(str(place / f"{name}.mp4")) as container:
                    for _ in container.decode(container.streams.video[0]):
                        pass
            code = 0
        finally:
            os._exit(code)
    _, status, usage = os.wait4(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the bare decode failed"
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started


def run_round(client, fleet, site, robot, places: list[Path], marker: str) -> dict:
    from datasets.models import Episode

    job = fresh_job(fleet, site)
    rows = []
    for place in places:
        episode_id = register_and_upload(client, job, robot, place)
        wall, own, sandbox, status = verdict_after_complete(client, episode_id, marker)
        if status != "accepted":
            failures = Episode.objects.get(pk=episode_id).qa_failures
            raise SystemExit(f"QA refused a bench episode ({status}): {failures}")
        bare_cpu, bare_wall = bare_decode(place)
        rows.append(
            {
                "wall": wall,
                "cpu": own + sandbox,
                "sandbox": sandbox,
                "bare_cpu": bare_cpu,
                "bare_wall": bare_wall,
            }
        )
    Episode.objects.filter(job=job).delete()
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


# --- The run -----------------------------------------------------------------------------


def report(rounds: list[dict], seconds: float) -> float:
    print(
        f"{'round':>5} {'complete->verdict s':>20} {'QA CPU s':>9} {'(sandbox)':>9}"
        f" {'bare CPU s':>10} {'bare wall s':>11} {'bare/QA':>8}"
    )
    for number, r in enumerate(rounds, 1):
        print(
            f"{number:>5} {r['wall']:>20.3f} {r['cpu']:>9.3f} {r['sandbox']:>9.3f}"
            f" {r['bare_cpu']:>10.3f} {r['bare_wall']:>11.3f} {r['bare_cpu'] / r['cpu']:>7.2f}x"
        )
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    ratio = statistics.median(r["bare_cpu"] / r["cpu"] for r in rounds)
    print(
        f"median: complete -> verdict {median['wall']:.3f} s for a {seconds:g} s episode;"
        f" QA {median['cpu']:.3f} CPU s per episode ({median['sandbox']:.3f} in the sandbox),"
        f" bare decode {median['bare_cpu']:.3f} CPU s ({median['bare_wall']:.3f} s wall)"
    )
    per_day, bare_per_day = 86400 / median["cpu"], 86400 / median["bare_cpu"]
    print(
        f"capacity: {per_day:,.0f} episodes/day per QA worker core ({per_day / 24:,.0f}/hour;"
        f" {per_day * seconds / 3600:,.0f} h of recording/day); a bare decode"
        f" {bare_per_day:,.0f}/day"
    )
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=45)
    parser.add_argument("--folder", type=Path, help="keep the generated episodes here")
    parser.add_argument("--profile", type=Path, help="py-spy the worker over one more round")
    parser.add_argument(
        "--compare", type=Path, help="another checkout's QA worker, alternating rounds"
    )
    args = parser.parse_args()
    database_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mk_ingest_bench"
    )
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
    ensure_database(database_url)
    with (
        tempfile.TemporaryDirectory() as tmp,
        launcher.running(Path(tmp) / "s3") as s3,
        rabbitmq_vhost() as broker_url,
    ):
        env = {
            **os.environ,
            **s3.settings(),
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": broker_url,
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "DJANGO_SETTINGS_MODULE": "marketplace.settings",
            "MARKETPLACE_DATA_DIR": str(Path(tmp) / "var"),
            "PYTHONPATH": str(ROOT),
        }
        migrate = [sys.executable, "manage.py", "migrate", "-v0"]
        subprocess.run(migrate, cwd=ROOT, env=env, check=True)
        os.environ.update({k: v for k, v in env.items() if k != "PYTHONPATH"})
        import django

        django.setup()
        places = make_episodes(args.folder or Path(tmp) / "episodes", args.episodes, args.seconds)
        codes = {"this checkout": ROOT} | (
            {str(args.compare): args.compare} if args.compare else {}
        )
        rounds = measure(args, env, places, codes, Path(tmp))
    ratios = {}
    for label, measured in rounds.items():
        print(f"== QA worker: {label}")
        ratios[label] = report(measured, args.seconds)
    gates = Gates()
    gates.at_least("this checkout: QA / bare decode, per core", ratios["this checkout"], GATE, "x")
    return gates.exit_code()


def measure(args, env: dict, places: list[Path], codes: dict, tmp: Path) -> dict:
    """Rounds of each checkout's QA worker, alternating: {label: [round medians]}."""
    from fleet_agent.client import ApiClient
    from marketplace import services
    from marketplace.models import Organization
    from tests.factories import FleetFactory, RobotFactory, SiteFactory

    operator = Organization.objects.create(name="bench fleet", kind="fleet_operator")
    key = services.api_key_create(organization=operator, name="bench", role="owner").raw_key
    fleet = FleetFactory(organization=operator)
    site = SiteFactory(fleet=fleet)
    robot = RobotFactory(site=site, fleet=fleet)
    rounds = {label: [] for label in codes}
    with gunicorn({**env, "DJANGO_SETTINGS_MODULE": "bench.settings"}) as port:
        client = ApiClient(f"http://127.0.0.1:{port}", key)
        for number in range(args.rounds):
            for label, code in codes.items():
                log = tmp / f"worker-{number}-{len(rounds[label])}-{code.name}.log"
                with qa_worker(env, log, code) as marker:
                    run_round(client, fleet, site, robot, places[:1], marker)  # warm-up
                    r = run_round(client, fleet, site, robot, places, marker)
                    if args.profile and number == args.rounds - 1 and code == ROOT:
                        profile_round(args.profile, client, fleet, site, robot, places, marker)
                rounds[label].append(r)
                print(
                    f"  round {number + 1}, {label}: complete -> verdict {r['wall']:.3f} s,"
                    f" QA {r['cpu']:.3f} CPU s, bare {r['bare_cpu']:.3f} CPU s",
                    flush=True,
                )
    return rounds


def profile_round(out: Path, client, fleet, site, robot, places, marker: str) -> None:
    """One more round with py-spy sampling the pool child and its sandbox children."""
    spy = Path(sys.executable).with_name("py-spy")
    pool = max(worker_pids(marker))  # the pool child: forked after the main process
    command = [str(spy), "record", "--pid", str(pool), "--subprocesses", "--rate", "250"]
    command += ["--format", "speedscope", "--output", str(out), "--nonblocking"]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    run_round(client, fleet, site, robot, places, marker)
    recorder.send_signal(signal.SIGINT)
    recorder.wait(timeout=60)
    print(f"profile of one round: {out}")


if __name__ == "__main__":
    sys.exit(main())
