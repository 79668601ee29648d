"""Delivery assembly with camera videos: memory flat in the number of episodes, remux vs
re-encode.

    python bench/video_bench.py [--episodes 1000] [--frames 60] [--width 128] [--height 96]
                                [--reencode 100]

Starts the local S3 server on loopback and uploads --episodes episodes: a parquet of --frames
frames (8-dim state and action at 30 fps) and two H.264 camera videos each (a few distinct
PyAV-encoded videos, uploaded under every episode's keys). Then, each in a child process
(so peak RSS is the assembly's own), assembles what datasets.services.deliveries does for a
camera order (videos streamed from S3 to temporary files, lerobot_videos, LeRobotWriter,
card, manifest, upload): a tenth of the episodes and all of them with an H.264 order
(videos remuxed), and --reencode episodes with an AV1 order (videos re-encoded). Prints wall
time and peak RSS per run, the memory ratio (goal: flat, at most 1.5x for 10x the episodes,
and under 600 MB; exits 1 otherwise, bench/gates.py) and the re-encode / remux time ratio
over the same episodes.
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

PEAK_MB_GOAL = 600  # the largest assembly's peak RSS
FLAT_GOAL = 1.5  # peak RSS of all episodes / of a tenth of them

CAMERAS = ["observation.images.scene", "observation.images.wrist"]
DISTINCT_VIDEOS = 4
FPS = 30


def setup_django(s3_settings: dict) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings")
    os.environ.update(s3_settings)
    import django

    django.setup()


def assemble(episodes: int, codec: str, out_dir: str) -> None:
    """Child process: assemble the first `episodes` episodes for a `codec` order."""
    from decimal import Decimal

    from datasets import storage
    from datasets.lerobot import LeRobotWriter
    from datasets.lerobot_videos import DatasetVideos
    from datasets.packaging import (
        DatasetCardFacts,
        VideoFacts,
        upload_tree,
        write_delivery_files,
    )

    root = Path(out_dir)
    names = [f"joint_{i}" for i in range(8)]
    started = time.perf_counter()
    writer = LeRobotWriter(
        root=root, fps=FPS, robot_type="franka-fr3", state_names=names, action_names=names
    )
    videos = DatasetVideos(root=root, fps=FPS, codec=codec, keys=CAMERAS)
    with tempfile.TemporaryDirectory(prefix="bench-sources-") as sources:
        for index in range(episodes):
            record = writer.add_episode(
                storage.RangeReader(f"bench/episodes/{index:05d}.parquet"), task="insert the peg"
            )
            paths = {}
            for key in CAMERAS:
                paths[key] = Path(sources) / f"{key}.mp4"
                with paths[key].open("wb") as handle:
                    for block in storage.stream(f"bench/episodes/{index:05d}/{key}.mp4"):
                        handle.write(block)
            record.extra.update(videos.add_episode(paths, record.length))
    features, stats, summaries = videos.finish()
    writer.finish(video_features=features, video_stats=stats)
    facts = DatasetCardFacts(
        title="bench",
        task="insert the peg",
        embodiment="franka",
        robot_type="franka-fr3",
        fps=FPS,
        episodes=episodes,
        frames=writer.total_frames,
        hours=Decimal(writer.total_frames) / (3600 * FPS),
        environments=1,
        objects=1,
        operators=1,
        success_rate=None,
        qa_accepted=episodes,
        qa_rejected=0,
        videos=tuple(VideoFacts.of(s) for s in summaries),
    )
    write_delivery_files(root, facts, extra={"videos": summaries})
    upload_tree(root, f"bench/deliveries/{codec}-{episodes}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    remuxed = sum(s["episodes_remuxed"] for s in summaries)
    files = sum(len(s["files"]) for s in summaries)
    print(
        f"{time.perf_counter() - started:.2f} {writer.total_frames} {peak_mb:.1f} {remuxed} {files}"
    )


def upload(episodes: int, frames: int, width: int, height: int) -> None:
    from datasets import storage
    from datasets.episode_format import episode_table, parquet_bytes
    from fleet_agent.cameras import encode_frames
    from tests.datasets.videos import square_frames

    sources = {
        (key, n): encode_frames(
            square_frames(frames, width=width, height=height, seed=7 * number + n),
            fps=FPS,
            width=width,
            height=height,
        )
        for number, key in enumerate(CAMERAS)
        for n in range(DISTINCT_VIDEOS)
    }
    for index in range(episodes):
        data = parquet_bytes(episode_table(frames=frames, seed=index))
        storage.put_bytes(key=f"bench/episodes/{index:05d}.parquet", data=data)
        for key in CAMERAS:
            storage.put_bytes(
                key=f"bench/episodes/{index:05d}/{key}.mp4",
                data=sources[(key, index % DISTINCT_VIDEOS)],
            )
    size = sum(len(v) for v in sources.values()) / len(sources)
    print(f"  (videos {width}x{height}, {frames} frames, ~{size / 1024:.0f} KiB each)")


def run_child(count: int, codec: str, tmp: str, s3) -> dict:
    out = Path(tmp) / f"out-{codec}-{count}"
    result = subprocess.run(
        [sys.executable, __file__, "--child", str(count), codec, str(out)],
        env={**os.environ, **s3.settings()},
        capture_output=True,
        text=True,
        check=True,
    )
    wall, frames, peak, remuxed, files = result.stdout.split()[-5:]
    return {
        "wall": float(wall),
        "frames": int(frames),
        "peak": float(peak),
        "remuxed": int(remuxed),
        "files": int(files),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--reencode", type=int, default=100)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        setup_django({})
        assemble(int(args.child[0]), args.child[1], args.child[2])
        return 0

    from local_s3 import launcher

    with tempfile.TemporaryDirectory() as tmp, launcher.running(Path(tmp) / "s3") as s3:
        setup_django(s3.settings())
        started = time.perf_counter()
        upload(args.episodes, args.frames, args.width, args.height)
        print(
            f"uploaded {args.episodes} episodes x {args.frames} frames x {len(CAMERAS)} cameras"
            f" in {time.perf_counter() - started:.1f}s"
        )
        small = max(1, args.episodes // 10)
        reencode = min(args.reencode, args.episodes)
        runs = [(small, "h264"), (args.episodes, "h264"), (reencode, "av1")]
        if (reencode, "h264") not in runs:
            runs.insert(2, (reencode, "h264"))
        print(
            f"{'episodes':>9}{'order':>7}{'frames':>9}{'remuxed':>9}{'files':>7}"
            f"{'wall s':>9}{'peak RSS MB':>13}"
        )
        results = {}
        for count, codec in runs:
            r = results[(count, codec)] = run_child(count, codec, tmp, s3)
            print(
                f"{count:>9}{codec:>7}{r['frames']:>9}{r['remuxed']:>9}{r['files']:>7}"
                f"{r['wall']:>9.2f}{r['peak']:>13.1f}"
            )
        low, high = results[(small, "h264")], results[(args.episodes, "h264")]
        print(
            f"peak RSS {args.episodes} vs {small} episodes: x{high['peak'] / low['peak']:.2f}"
            f" ({high['peak']:.0f} MB; goal < 600 MB, flat);"
            f" wall x{high['wall'] / low['wall']:.2f} for x{args.episodes / small:.0f} episodes"
        )
        remux, encode = results[(reencode, "h264")], results[(reencode, "av1")]
        print(
            f"re-encode (H.264 -> AV1) / remux time over {reencode} episodes x"
            f" {len(CAMERAS)} cameras: x{encode['wall'] / remux['wall']:.1f}"
            f" ({encode['wall']:.1f} s vs {remux['wall']:.1f} s)"
        )
    gates = Gates()
    gates.at_most(f"peak RSS, {args.episodes} episodes", high["peak"], PEAK_MB_GOAL, " MB")
    gates.at_most(
        f"peak RSS {args.episodes} / {small} episodes", high["peak"] / low["peak"], FLAT_GOAL, "x"
    )
    return gates.exit_code()


if __name__ == "__main__":
    sys.exit(main())
