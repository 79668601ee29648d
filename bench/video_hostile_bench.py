"""Video QA on hostile camera files (issue 28, item 6): CPU time and peak RSS per file, each
checked as the QA worker checks it (in the sandbox, production's memory and time settings, the
episode's decode budget), against the episode's declared duration.

    .venv/bin/python bench/video_hostile_bench.py [--seconds 20] [--folder DIR] [--code DIR]

The files (tests/datasets/hostile_videos.py; made once in a child process, kept in --folder
if given) stand for a 20 s episode at 30 fps (600 parquet rows) of one camera ordered at
320x240 at least:

- 1,000,001 frames in 15 MB (a P frame that changes nothing, muxed again and again);
- 14336x14336: one I frame and 600 such P frames (615 KB);
- 4096x4096 (the largest resolution taken), 2,000 frames, fragmented (its index lists none);
- a fragmented MP4 of 100,000 frames (320x240);
- an MPEG-TS of 1,000 video streams; an MP4 of 1,000 video tracks (600 frames each);
- a sound moving picture (600 frames) in Matroska, in an MP4 with an AAC audio stream, in a MOV
  with a timecode data track;
- garbage; an MP4 cut at 60 % (its index at the end, gone).

Each runs in the sandbox (datasets.qa_sandbox.run_in_sandbox, EPISODE_QA_MEMORY_BYTES) from
this process, which holds none of the files' memory; CPU is the child's user + system time
(RUSAGE_CHILDREN around it), RSS its peak resident size (wait4), the verdict its reason codes.
Gate: every file's CPU <= 0.5x the declared duration and peak RSS < 400 MB, else exit 1.

`--code DIR`: import the QA modules from another checkout (main's, for the "before" figures:
`git archive main | tar -x -C DIR`), which misses the gate: exit 1.
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

RSS_LIMIT_BYTES = 400 * 1024**2
CPU_SHARE_LIMIT = 0.5
FPS = 30


FILES = {  # what the table calls each file -> its file name
    "1,000,001 frames": "million.mp4",
    "14336x14336, 601 frames": "huge.mp4",
    "4096x4096 fragmented, 2,000 frames": "max.mp4",
    "fragmented, 100,000 frames": "fragments.mp4",
    "Matroska": "matroska.mp4",
    "MPEG-TS, 1,000 video streams": "ts.mp4",
    "MP4, 1,000 video tracks": "tracks.mp4",
    "MP4 + AAC audio": "audio.mp4",
    "MOV + timecode data track": "timecode.mp4",
    "garbage": "garbage.mp4",
    "cut at 60 %": "cut.mp4",
}


def makers(rows: int) -> dict:
    """file name -> a function writing it to the path it is given."""
    from tests.datasets import hostile_videos as hostile
    from tests.datasets.videos import encode_mp4

    def write(make):
        return lambda path: path.write_bytes(make())

    def sink(**kwargs):
        return lambda path: hostile.repeated_frames(sink=str(path), **kwargs)

    fragmented = {"movflags": "frag_keyframe+empty_moov"}
    cut = encode_mp4(count=rows, fps=FPS)
    return {
        "million.mp4": sink(frames=1_000_001),
        "huge.mp4": sink(frames=rows + 1, width=14336, height=14336),
        "max.mp4": sink(frames=2000, width=4096, height=4096, options=fragmented),
        "fragments.mp4": sink(frames=100_000, options=fragmented),
        "matroska.mp4": write(lambda: hostile.in_container(rows, format="matroska")),
        "ts.mp4": sink(frames=rows, format="mpegts", streams=1000),
        "tracks.mp4": sink(frames=rows, streams=1000),
        "audio.mp4": write(lambda: hostile.with_audio(rows)),
        "timecode.mp4": write(lambda: hostile.with_timecode(rows)),
        "garbage.mp4": write(lambda: os.urandom(4 * 1024**2)),
        "cut.mp4": write(lambda: cut[: len(cut) * 6 // 10]),
    }


def make_files(folder: Path, rows: int) -> None:
    """Write the files that are not there yet (run in a child: encoding 14336x14336 takes 2 GB,
    which the checks' sandbox would otherwise inherit)."""
    write = makers(rows)
    for name, file_name in FILES.items():
        path = folder / file_name
        if not path.exists():
            started = time.perf_counter()
            write[file_name](path)
            seconds = time.perf_counter() - started
            print(f"  made {name}: {path.stat().st_size:,} bytes in {seconds:.1f} s")


def checker(path: Path, rows: int):
    """The check QA runs on one camera's fetched file, as this checkout has it."""
    from django.conf import settings

    from datasets import qa_sandbox
    from datasets.qa_checks import QAResult
    from datasets.qa_video_checks import VideoExpectation, check_video_file

    def check():
        result = QAResult()
        deadline = time.monotonic() + settings.EPISODE_QA_TIME_LIMIT_SECONDS
        limits = qa_sandbox.video_limits(deadline)
        if hasattr(qa_sandbox, "check_video_files"):  # issue 28: the episode's decode budget
            video = qa_sandbox.StoredVideo(
                "observation.images.scene", key="", min_width=320, min_height=240
            )
            qa_sandbox.check_video_files(
                [(video, path)], fps=FPS, frames=rows, result=result, limits=limits
            )
        else:
            expected = VideoExpectation("observation.images.scene", FPS, rows, 320, 240)
            check_video_file(path, expected, result, limits)
        return result

    return check


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(folder: Path, rows: int) -> list[tuple]:
    from django.conf import settings

    from datasets.qa_sandbox import run_in_sandbox

    rows_out = []
    for name, file_name in FILES.items():
        path = folder / file_name
        before = children_cpu()
        outcome = run_in_sandbox(
            checker(path, rows),
            memory_bytes=settings.EPISODE_QA_MEMORY_BYTES,
            seconds=settings.EPISODE_QA_TIME_LIMIT_SECONDS + 5,
        )
        cpu = children_cpu() - before
        codes = ", ".join(f.code for f in outcome.result.failures) or "ACCEPTED"
        rows_out.append(
            (name, path.stat().st_size, cpu, outcome.seconds, outcome.peak_rss_bytes, codes)
        )
        print(
            f"{name:<36} {path.stat().st_size / 1e6:>9.2f} {cpu:>8.2f} {outcome.seconds:>8.2f}"
            f" {outcome.peak_rss_bytes / 2**20:>8.0f}  {codes}",
            flush=True,
        )
    return rows_out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="the episode's declared duration"
    )
    parser.add_argument("--folder", type=Path, help="keep the files here (made if missing)")
    parser.add_argument("--code", type=Path, help="import the QA modules from this checkout")
    parser.add_argument("--make-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(args.code or ROOT))
    if args.code:
        sys.path.insert(1, str(ROOT))  # the file makers (tests/) come from here
        os.chdir(args.code)  # Celery's app puts the working folder first on the path
    rows = round(args.seconds * FPS)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        if args.make_only:
            make_files(folder, rows)
            return 0
        command = [
            sys.executable,
            __file__,
            "--make-only",
            "--folder",
            str(folder),
            "--seconds",
            str(args.seconds),
        ]
        subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings")
        import django

        django.setup()
        from datasets import qa_video_checks

        print(f"QA code: {qa_video_checks.__file__}")
        print(f"an episode of {args.seconds:g} s: {rows} rows at {FPS} fps")
        print(f"{'file':<36} {'MB':>9} {'CPU s':>8} {'wall s':>8} {'RSS MB':>8}  verdict")
        results = measure(folder, rows)
    gates = Gates()
    for name, _, cpu, _, rss, *_ in results:
        gates.at_most(f"{name} CPU", cpu, CPU_SHARE_LIMIT * args.seconds, " s")
        gates.at_most(f"{name} peak RSS", rss / 2**20, RSS_LIMIT_BYTES / 2**20, " MB")
    return gates.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
