"""Near-duplicate detection (issue 28 item 5): recall on shifted, cropped, split, resampled,
frame-dropped and noisy copies, false positives on distinct episodes, and the QA time added.

    python bench/near_duplicate_bench.py [--indexed 1000] [--originals 200] [--distinct 1000]

Generates `--indexed` distinct episodes (datasets.episode_format.episode_table, 20-60 s at
30 fps, 8 elements: the Franka's), computes their signatures (datasets/qa_duplicates.py) and
indexes their stored keys in memory as the EpisodeFingerprint table does (key -> episode,
time). Then, looking up as datasets/services/duplicates.py does (the keys, the candidates
with most shared keys, the alignment check):
- recall: each variant of the first `--originals` episodes must be found as a duplicate of
  its original: shifted by 1, 2 and 10 frames, a crop (a random 40-80 % of it), each half, the
  same motion resampled at 20 fps and at 15 fps (every other frame), 2 % of its frames
  dropped, small noise (2 % of each element's spread), and the original followed by a new
  motion half as long (two thirds of it repeated);
- false positives: `--distinct` other generated episodes, and as many re-performances (the
  same sway with other phases, +-0.3 rad, and speeds, +-5 %), must match nothing.
With DATABASE_URL (PostgreSQL), the keys also go into a temporary table with the same index
and every lookup is timed there (the query the decision runs). Prints recall per variant,
false positives, and per episode the signature's time (in QA's sandbox) and the lookup's
and alignment's (in the decision); exits 1 when recall < 0.95 or any false positive.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from datasets.episode_format import episode_table  # noqa: E402
from datasets.qa_duplicates import (  # noqa: E402
    candidate_offsets,
    repeats,
    trajectory_signature,
)

FPS = 30
MAX_CANDIDATES = 5  # as datasets/services/duplicates.py
RECALL_GOAL = 0.95


def state(seed: int, frames: int | None = None) -> np.ndarray:
    frames = frames or int(np.random.default_rng(10_000 + seed).integers(600, 1800))
    return episode_table(frames=frames, fps=FPS, seed=seed)["observation.state"]


def resample(original: np.ndarray, fps: int) -> np.ndarray:
    """The same motion at another frame rate (linear interpolation on the clock)."""
    times = np.arange(int((len(original) - 1) / FPS * fps) + 1) / fps
    clock = np.arange(len(original)) / FPS
    return np.stack(
        [np.interp(times, clock, original[:, e]) for e in range(original.shape[1])], axis=1
    ).astype(np.float32)


def variants(original: np.ndarray, rng) -> dict:
    n = len(original)
    length = int(n * rng.uniform(0.4, 0.8))
    start = int(rng.integers(0, n - length))
    dropped = np.delete(original, rng.choice(n, n // 50, replace=False), axis=0)
    spread = original.std(axis=0)
    noisy = original + rng.normal(0, 1, original.shape) * 0.02 * spread
    fresh = state(int(rng.integers(1_000_000, 2_000_000)), n // 2)
    joined = np.concatenate([original, fresh - fresh[0] + original[-1]])
    return {
        "shift 1": (original[1:], FPS),
        "shift 2": (original[2:], FPS),
        "shift 10": (original[10:], FPS),
        "crop": (original[start : start + length], FPS),
        "first half": (original[: n // 2], FPS),
        "second half": (original[n // 2 :], FPS),
        "20 fps": (resample(original, 20), 20),
        "every other frame": (original[::2], FPS // 2),
        "2% frames dropped": (dropped, FPS),
        "noise": (noisy.astype(np.float32), FPS),
        "then half as much new": (joined.astype(np.float32), FPS),
    }


def reperformed(seed: int, rng) -> np.ndarray:
    """The same sway as episode `seed`, done again: other phases and speeds."""
    base = np.random.default_rng(seed)
    dim, frames = 8, int(rng.integers(600, 1800))
    t = np.arange(frames) / FPS
    phase = base.uniform(0, 2 * np.pi, dim) + rng.uniform(-0.3, 0.3, dim)
    amplitude = base.uniform(0.3, 0.6, dim)
    speed = base.uniform(0.5, 1.2, dim) * rng.uniform(0.95, 1.05, dim)
    centre = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04])
    amplitude[-1] = 0.03
    pose = centre + amplitude * np.sin(t[:, None] * speed + phase)
    return (pose + rng.normal(0, 0.001, pose.shape)).astype(np.float32)


class Index:
    """The EpisodeFingerprint table in memory (and in PostgreSQL with DATABASE_URL)."""

    def __init__(self, database_url: str = ""):
        self.keys: dict[int, list] = {}
        self.samples: dict[int, np.ndarray] = {}
        self.cursor = None
        if database_url.startswith("postgres"):
            import psycopg

            self.connection = psycopg.connect(database_url, autocommit=True)
            self.cursor = self.connection.cursor()
            self.cursor.execute("CREATE TEMP TABLE bench_fp (key bigint, episode int, at int)")
        self.rows = []

    def add(self, episode: int, signature) -> None:
        self.samples[episode] = signature.samples
        for key, at in zip(signature.keys.tolist(), signature.key_times.tolist(), strict=True):
            self.keys.setdefault(key, []).append((episode, key, at))
            self.rows.append((key, episode, at))

    def finish(self) -> None:
        if self.cursor is not None:
            with self.cursor.copy("COPY bench_fp (key, episode, at) FROM STDIN") as copy:
                for row in self.rows:
                    copy.write_row(row)
            self.cursor.execute("CREATE INDEX ON bench_fp (key)")
            self.cursor.execute("ANALYZE bench_fp")

    def hits(self, keys: list, exclude: int) -> tuple[list, float]:
        started = time.perf_counter()
        if self.cursor is not None:
            found = []
            for begin in range(0, len(keys), 900):
                self.cursor.execute(
                    "SELECT episode, key, at FROM bench_fp WHERE key = ANY(%s) AND episode <> %s",
                    [keys[begin : begin + 900], exclude],
                )
                found += self.cursor.fetchall()
            return found, time.perf_counter() - started
        found = [hit for key in keys for hit in self.keys.get(key, ()) if hit[0] != exclude]
        return found, time.perf_counter() - started


def duplicate_of(index: Index, signature, exclude: int = -1, timings=None):
    keys = sorted(set(signature.lookup.tolist()))
    hits, lookup_seconds = index.hits(keys, exclude)
    started = time.perf_counter()
    found = None
    for episode, offset, _ in candidate_offsets(signature, hits)[:MAX_CANDIDATES]:
        if repeats(signature.samples, index.samples[episode], offset):
            found = episode
            break
    if timings is not None:
        timings["lookup"].append(lookup_seconds)
        timings["align"].append(time.perf_counter() - started)
    return found


def timed_signature(values, fps, timings):
    started = time.perf_counter()
    signature = trajectory_signature(values, fps)
    timings["signature"].append(time.perf_counter() - started)
    return signature


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--indexed", type=int, default=1000)
    parser.add_argument("--originals", type=int, default=200)
    parser.add_argument("--distinct", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(28)
    index = Index(os.environ.get("DATABASE_URL", ""))
    timings = {"signature": [], "lookup": [], "align": [], "seconds": []}
    originals = {}
    for seed in range(args.indexed):
        values = state(seed)
        timings["seconds"].append(len(values) / FPS)
        index.add(seed, timed_signature(values, FPS, timings))
        if seed < args.originals:
            originals[seed] = values
    index.finish()

    found: dict[str, list[bool]] = {}
    for seed, values in originals.items():
        for name, (copy, fps) in variants(values, rng).items():
            signature = timed_signature(copy, fps, timings)
            found.setdefault(name, []).append(duplicate_of(index, signature, -1, timings) == seed)
    false_positives = {"distinct": 0, "re-performed": 0}
    for number in range(args.distinct):
        fresh = timed_signature(state(args.indexed + number), FPS, timings)
        false_positives["distinct"] += duplicate_of(index, fresh, -1, timings) is not None
        again = timed_signature(reperformed(number % args.indexed, rng), FPS, timings)
        false_positives["re-performed"] += duplicate_of(index, again, -1, timings) is not None
    return report(found, false_positives, timings, args, index.cursor is not None)


def report(found, false_positives, timings, args, on_postgres: bool) -> int:
    print(f"indexed {args.indexed} episodes (20-60 s at {FPS} fps, 8 elements)")
    worst = 1.0
    for name, hits in found.items():
        recall = sum(hits) / len(hits)
        worst = min(worst, recall)
        print(f"  recall {name:18s} {recall:.3f} ({sum(hits)}/{len(hits)})")
    total = sum(sum(hits) for hits in found.values()) / sum(len(hits) for hits in found.values())
    print(f"  recall overall            {total:.3f}")
    for name, count in false_positives.items():
        print(
            f"  false positives, {name:12s} {count}/{args.distinct} ({count / args.distinct:.2%})"
        )
    ms = {name: statistics.median(values) * 1000 for name, values in timings.items() if values}
    where = "PostgreSQL" if on_postgres else "in memory"
    print(
        f"per episode (median): signature {ms['signature']:.2f} ms (QA sandbox), lookup"
        f" {ms['lookup']:.2f} ms ({where}), alignment {ms['align']:.2f} ms; p95 signature"
        f" {np.percentile(timings['signature'], 95) * 1000:.2f} ms, lookup"
        f" {np.percentile(timings['lookup'], 95) * 1000:.2f} ms, alignment"
        f" {np.percentile(timings['align'], 95) * 1000:.2f} ms"
    )
    failed = worst < RECALL_GOAL or any(false_positives.values())
    print(
        "FAIL" if failed else "OK",
        f"(goal: recall >= {RECALL_GOAL} per variant, no false positive)",
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
