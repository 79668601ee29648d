"""QA on hostile parquet files: time and peak memory, unbounded (what QA did before issue 14:
decode whole row groups, check the duration at the end) against bounded (QALimits, batches),
side by side in one run. Each check runs in its own forked child; its peak RSS comes from
wait4's rusage, less what the child inherited at fork (the file itself, in memory here), so
the figures are what checking cost.

    .venv/bin/python bench/qa_hostile_bench.py [--rows 10000000]

No database or storage: the files are checked from memory (the footer-first reads are the
same through storage.RangeReader).
"""

import argparse
import io
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
django.setup()

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from datasets.qa_checks import EpisodeExpectation, QALimits, check_episode_file  # noqa: E402
from datasets.qa_sandbox import run_in_sandbox  # noqa: E402

DIM = 8
UNBOUNDED = QALimits(
    max_footer_bytes=2**40,
    max_row_groups=2**40,
    max_columns=2**40,
    max_decoded_bytes=2**60,
    batch_rows=2**31,
    seconds=3600,
)


def table(rows: int) -> pa.Table:
    zeros = pa.array(np.zeros(rows * DIM, dtype=np.float32))
    vectors = pa.FixedSizeListArray.from_arrays(zeros, DIM)
    return pa.table(
        {
            "observation.state": vectors,
            "action": vectors,
            "timestamp": pa.array(np.arange(rows, dtype=np.float32) / 30),
            "frame_index": pa.array(np.arange(rows, dtype=np.int64)),
        }
    )


def with_columns(t: pa.Table, count: int) -> pa.Table:
    for index in range(count):
        t = t.append_column(f"extra_{index}", pa.array(np.zeros(t.num_rows, np.float32)))
    return t


def written(t: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    pq.write_table(t, sink, **options)
    return sink.getvalue()


def hostile_files(rows: int) -> dict:
    """name -> a function building the file (one file in memory at a time)."""
    return {
        f"{rows:,} rows of zeros (zstd)": lambda: written(table(rows), compression="zstd"),
        "20,000 row groups of 5 rows": lambda: written(table(100_000), row_group_size=5),
        "2,000 extra columns": lambda: written(with_columns(table(300), 2000)),
        "a 64 MiB footer": lambda: written(
            table(300).replace_schema_metadata({"p": "x" * 64 * 2**20})
        ),
    }


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(data: bytes, *, bounded: bool) -> tuple[float, int, str]:
    """(seconds, the checking child's peak RSS above what it inherited, verdict)."""
    expected = EpisodeExpectation(
        size=len(data),
        sha256_hex="0" * 64,
        fps=30,
        action_dim=DIM,
        max_duration_seconds=3600 if bounded else 10**9,
    )
    limits = None if bounded else UNBOUNDED
    inherited = rss_bytes()
    outcome = run_in_sandbox(
        lambda: check_episode_file(io.BytesIO(data), expected, limits=limits),
        memory_bytes=16 * 2**30,
        seconds=600,
    )
    codes = ",".join(sorted({f.code for f in outcome.result.failures})) or "passed"
    return outcome.seconds, max(0, outcome.peak_rss_bytes - inherited), codes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    args = parser.parse_args()
    print(f"{'file':34} {'bytes':>11}  {'mode':9} {'seconds':>8} {'+RSS MiB':>9}  verdict")
    for name, build in hostile_files(args.rows).items():
        data = build()
        for bounded in (False, True):
            seconds, peak, codes = measure(data, bounded=bounded)
            mode = "bounded" if bounded else "unbounded"
            print(
                f"{name:34} {len(data):>11,}  {mode:9} {seconds:>8.2f} {peak / 2**20:>9.0f}"
                f"  {codes}"
            )


if __name__ == "__main__":
    main()
