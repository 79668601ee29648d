"""What content QA adds to QA time per episode: format-only QA against format + content QA,
side by side in one run (issue 16's goal: at most 1.3x).

    python bench/qa_content_bench.py [--frames 3000 18000 54000] [--rounds 5]

Starts the local S3 server on loopback and uploads one episode per length through a
presigned PUT (30 fps, 8 elements: the Franka's, a raw camera column of 512 bytes per frame
that QA skips, as real uploads carry sensor data QA does not check). Then, per episode and
round, runs the full QA of the stored object (HEAD, checksum, footer, the four checked
columns by byte range) once without and once with content checks (Franka limits, the
settings' thresholds), alternating which goes first, two ways: the checks in this process,
and as the QA worker runs them (datasets/qa_sandbox.py: a forked child per episode, with a
memory ceiling and a deadline; its fresh pages make the same numpy work dearer there).
Prints per length the median wall time of each and their ratio, and the ratio over all
episodes (sum of medians); all of it on the local S3 server as it runs by default (it keeps
no checksum, so QA streams the object to verify its SHA-256) and in its checksum-keeping
mode (as AWS S3: QA streams nothing). The same for CPU time (this process's and the QA
child's: the steadier figure on a busy machine; it leaves out the waits on the store).
Exits 0 when every episode's wall-time ratio, both ways on both stores, is at most 1.3.
"""

import argparse
import resource
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gates import Gates  # noqa: E402

GOAL = 1.3  # format + content QA time / format-only, per episode, at worst

FR3 = (
    (-2.7437, 2.7437),
    (-1.7837, 1.7837),
    (-2.9007, 2.9007),
    (-3.0421, -0.1518),
    (-2.8065, 2.8065),
    (0.5445, 4.5169),
    (-3.0159, 3.0159),
    (0.0, 0.08),
)


def _upload(storage, key: str, data: bytes, sha256) -> None:
    request = storage.presigned_put(key=key, content_length=len(data), sha256_hex=sha256(data))
    urllib.request.urlopen(
        urllib.request.Request(request.url, data=data, method="PUT", headers=request.headers),
        timeout=60,
    ).close()


def _cpu_seconds() -> float:
    """This process's CPU time and that of its children waited for (the QA sandbox's)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _timed(check, key, expected) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and the QA child): on a busy machine the
    CPU time is the steadier figure; both leave out the S3 server's own work."""
    started, cpu = time.perf_counter(), _cpu_seconds()
    result = check(key, expected)
    elapsed, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
    assert result.passed, result.failures
    return elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--frames", type=int, nargs="+", default=[3_000, 18_000, 54_000])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings")
    import django

    django.setup()
    from django.conf import settings

    from datasets import storage
    from datasets.qa_content import ContentThresholds
    from local_s3 import launcher

    content = ContentThresholds(
        state_limits=FR3,
        limit_tolerance=settings.EPISODE_QA_LIMIT_TOLERANCE,
        max_speed=settings.EPISODE_QA_MAX_SPEED,
        jump_tolerance=settings.EPISODE_QA_JUMP_TOLERANCE,
        idle_speed=settings.EPISODE_QA_IDLE_SPEED,
        max_idle_fraction=settings.EPISODE_QA_MAX_IDLE_FRACTION,
        idle_edge_flag_seconds=settings.EPISODE_QA_IDLE_EDGE_FLAG_SECONDS,
        frozen_epsilon=settings.EPISODE_QA_FROZEN_EPSILON,
        min_action_correlation=settings.EPISODE_QA_MIN_ACTION_CORRELATION,
        max_action_lag_seconds=settings.EPISODE_QA_MAX_ACTION_LAG_SECONDS,
        jerk_reference=settings.EPISODE_QA_JERK_REFERENCE,
    )
    verdicts = []
    for keep_checksums in (False, True):
        store = (
            "a store that keeps SHA-256 checksums (local_s3/checksums.js): no checksum stream"
            if keep_checksums
            else "the local S3 server, which keeps no checksum: QA streams the object once"
        )
        print(f"\n== {store}")
        with (
            tempfile.TemporaryDirectory() as tmp,
            launcher.running(Path(tmp), keep_checksums=keep_checksums) as s3,
        ):
            for name, value in s3.settings().items():
                setattr(settings, name, value)
            verdicts.extend(_one_store(args, content, storage))
    gates = Gates()
    for verdict in verdicts:
        gates.at_most("worst episode's content QA time ratio", verdict, GOAL, "x")
    return gates.exit_code()


def _one_store(args, content, storage) -> list[float]:
    """Format-only against format + content QA on the configured store, run both ways QA
    runs: the checks in this process, and as the QA worker runs them (a forked,
    memory-capped child per episode: datasets/qa_sandbox.py); the worst episode's wall-time
    ratio of each (the issue's goal: at most 1.3x QA time per episode)."""
    import dataclasses

    import numpy as np

    from datasets.episode_format import episode_table, parquet_bytes, sha256
    from datasets.qa_checks import EpisodeExpectation, check_stored_episode
    from datasets.qa_sandbox import check_stored_episode_bounded

    episodes = []

    for frames in args.frames:
        camera = np.random.default_rng(frames).integers(0, 255, (frames, 512), dtype=np.uint8)
        data = parquet_bytes(
            episode_table(frames=frames, seed=frames, extra_columns={"camera_raw": camera})
        )
        key = f"bench/qa-content/{frames}.parquet"
        _upload(storage, key, data, sha256)
        plain = EpisodeExpectation(
            size=len(data),
            sha256_hex=sha256(data),
            fps=30,
            action_dim=8,
            max_duration_seconds=7200,
        )
        episodes.append(
            (frames, len(data), key, plain, dataclasses.replace(plain, content=content))
        )
    ways = (
        ("the checks in this process", check_stored_episode),
        (
            "as the QA worker runs them: a forked, memory-capped child each",
            check_stored_episode_bounded,
        ),
    )
    return [_one_way(label, check, episodes, args.rounds) for label, check in ways]


def _one_way(label, check, episodes, rounds) -> float:
    totals = {"format": 0.0, "content": 0.0}
    cpu_totals = {"format": 0.0, "content": 0.0}
    per_episode, per_episode_cpu = [], []
    print(f"-- {label}")
    print(
        f"{'frames':>8}{'file MB':>9}{'format s':>10}{'+content s':>12}{'ratio':>8}"
        f"{'format cpu':>12}{'+content cpu':>14}{'ratio':>8}"
    )
    for frames, size, key, plain, full in episodes:
        times = {"format": [], "content": []}
        for round_ in range(rounds):
            order = [("format", plain), ("content", full)]
            for name, expected in order if round_ % 2 == 0 else order[::-1]:
                times[name].append(_timed(check, key, expected))
        wall = {name: statistics.median(v[0] for v in values) for name, values in times.items()}
        cpu = {name: statistics.median(v[1] for v in values) for name, values in times.items()}
        for name in wall:
            totals[name] += wall[name]
            cpu_totals[name] += cpu[name]
        per_episode.append(wall["content"] / wall["format"])
        per_episode_cpu.append(cpu["content"] / cpu["format"])
        print(
            f"{frames:>8}{size / 1e6:>9.1f}{wall['format']:>10.3f}"
            f"{wall['content']:>12.3f}{wall['content'] / wall['format']:>8.2f}"
            f"{cpu['format']:>12.3f}{cpu['content']:>14.3f}"
            f"{cpu['content'] / cpu['format']:>8.2f}"
        )
    ratio = totals["content"] / totals["format"]
    cpu_ratio = cpu_totals["content"] / cpu_totals["format"]
    print(
        f"all episodes: format + content QA takes {ratio:.2f}x format-only QA in wall time,"
        f" {cpu_ratio:.2f}x in CPU time"
    )
    worst, worst_cpu = max(per_episode), max(per_episode_cpu)
    print(
        f"per episode, at worst: {worst:.2f}x in wall time (the QA time; goal <= {GOAL}x),"
        f" {worst_cpu:.2f}x in CPU time"
    )
    return worst


if __name__ == "__main__":
    sys.exit(main())
