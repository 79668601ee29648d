"""Delivery assembly at scale, and signed-link issuing rate.

    python bench/assembly_bench.py [--episodes 1000] [--frames 1000] [--links 10000]

Starts the local S3 server on loopback, uploads --episodes episodes of --frames frames
(8-dim state and action at 30 fps, ~1M frames by default), then assembles them into a
LeRobot v3.0 delivery (reading each episode from S3 by byte range, writing data files,
metadata, card and manifest, uploading the tree) in a child process, twice: with a tenth
of the episodes and with all of them, printing wall time and the child's peak RSS for
each, so the memory bound shows as a ratio (goal: flat, at most 1.5x for 10x the episodes;
exits 1 otherwise, bench/gates.py). Finally presigns --links GET URLs and prints links/s.
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gates import Gates  # noqa: E402

FLAT_GOAL = 1.5  # peak RSS of all episodes / of a tenth of them


def setup_django(s3_settings: dict) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings")
    os.environ.update(s3_settings)
    import django

    django.setup()


def assemble(episodes: int, out_dir: str) -> None:
    """Child process: assemble the first `episodes` uploaded episodes; print wall time."""
    from decimal import Decimal

    from datasets import storage
    from datasets.lerobot import LeRobotWriter
    from datasets.packaging import DatasetCardFacts, upload_tree, write_delivery_files

    names = [f"joint_{i}" for i in range(8)]
    started = time.perf_counter()
    writer = LeRobotWriter(
        root=Path(out_dir), fps=30, robot_type="franka-fr3", state_names=names, action_names=names
    )
    for index in range(episodes):
        writer.add_episode(
            storage.RangeReader(f"bench/episodes/{index:05d}.parquet"), task="insert the peg"
        )
    writer.finish()
    facts = DatasetCardFacts(
        title="bench",
        task="insert the peg",
        embodiment="franka",
        robot_type="franka-fr3",
        fps=30,
        episodes=episodes,
        frames=writer.total_frames,
        hours=Decimal(writer.total_frames) / 108000,
        environments=1,
        objects=1,
        operators=1,
        success_rate=None,
        qa_accepted=episodes,
        qa_rejected=0,
    )
    write_delivery_files(Path(out_dir), facts)
    upload_tree(Path(out_dir), f"bench/deliveries/{episodes}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"{time.perf_counter() - started:.2f} {writer.total_frames} {peak_mb:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--links", type=int, default=10_000)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        setup_django({})
        assemble(int(args.child[0]), args.child[1])
        return 0

    from local_s3 import launcher

    with tempfile.TemporaryDirectory() as tmp, launcher.running(Path(tmp) / "s3") as s3:
        setup_django(s3.settings())
        from datasets import storage
        from datasets.episode_format import episode_table, parquet_bytes

        started = time.perf_counter()
        for index in range(args.episodes):
            data = parquet_bytes(episode_table(frames=args.frames, seed=index))
            storage.put_bytes(key=f"bench/episodes/{index:05d}.parquet", data=data)
        print(
            f"uploaded {args.episodes} episodes x {args.frames} frames"
            f" in {time.perf_counter() - started:.1f}s"
        )
        print(f"{'episodes':>9}{'frames':>10}{'wall s':>9}{'peak RSS MB':>13}")
        peaks = {}
        for count in (max(1, args.episodes // 10), args.episodes):
            out = Path(tmp) / f"out-{count}"
            result = subprocess.run(
                [sys.executable, __file__, "--child", str(count), str(out)],
                env={**os.environ, **s3.settings()},
                capture_output=True,
                text=True,
                check=True,
            )
            wall, frames, peak = result.stdout.split()
            peaks[count] = float(peak)
            print(f"{count:>9}{frames:>10}{float(wall):>9.2f}{peaks[count]:>13.1f}")
        small, large = peaks[max(1, args.episodes // 10)], peaks[args.episodes]
        print(
            f"peak memory ratio ({args.episodes} vs {max(1, args.episodes // 10)} episodes):"
            f" {large / small:.2f}"
        )

        started = time.perf_counter()
        for index in range(args.links):
            storage.presigned_get(
                key=f"bench/deliveries/{args.episodes}/data/chunk-000/file-{index % 7:03d}.parquet",
                expires_in=300,
            )
        elapsed = time.perf_counter() - started
        print(f"signed links: {args.links} in {elapsed:.2f}s = {args.links / elapsed:.0f} links/s")
    gates = Gates()
    gates.at_most(
        f"peak RSS {args.episodes} / {max(1, args.episodes // 10)} episodes",
        large / small,
        FLAT_GOAL,
        "x",
    )
    return gates.exit_code()


if __name__ == "__main__":
    sys.exit(main())
