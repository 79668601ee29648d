"""Video QA throughput against a bare PyAV decode loop of the same file (issue 15).

    python bench/video_qa_bench.py [--frames 3000] [--sizes 320x240 640x480] [--codecs h264 av1]

Encodes one synthetic camera video per size and codec (moving scene, PyAV), then times on
the same local file, best of --repeat alternating runs: the bare loop (open, decode every
frame, nothing else) and the full per-file video QA (qa_video_checks.check_video_file:
header checks, every frame decoded, timestamps, black/frozen measure). Prints decoded
frames/s of each and their ratio (goal: QA >= 0.8x the bare decode; exits 1 below it, see
bench/gates.py). One process, one worker.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gates import Gates  # noqa: E402

GOAL = 0.8  # QA decodes at least this share of the bare loop's frames/s


def bare_decode(path: Path) -> int:
    import av

    frames = 0
    with av.open(str(path)) as container:
        for _ in container.decode(container.streams.video[0]):
            frames += 1
    return frames


def qa_decode(path: Path, frames: int, fps: int) -> int:
    from datasets.qa_checks import QAResult
    from datasets.qa_video_checks import VideoExpectation, VideoLimits, check_video_file

    result = QAResult()
    expected = VideoExpectation(camera_key="observation.images.scene", fps=fps, frames=frames)
    measure = check_video_file(path, expected, result, VideoLimits())
    if not result.passed:
        raise SystemExit(f"QA refused the bench video: {result.failures}")
    return measure.frames


def best_rates(bare, qa, repeat: int) -> tuple[float, float]:
    """Best frames/s of each, the two runs alternating (a busy machine slows both alike)."""
    best = [0.0, 0.0]
    for _ in range(repeat):
        for slot, run in enumerate((bare, qa)):
            started = time.perf_counter()
            frames = run()
            best[slot] = max(best[slot], frames / (time.perf_counter() - started))
    return best[0], best[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--sizes", nargs="+", default=["320x240", "640x480"])
    parser.add_argument("--codecs", nargs="+", default=["h264", "av1"])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from tests.datasets.videos import encode_mp4

    print(f"{'video':<22} {'bare fps':>10} {'QA fps':>10} {'ratio':>7}")
    worst = None
    with tempfile.TemporaryDirectory() as folder:
        for codec in args.codecs:
            for size in args.sizes:
                width, height = (int(n) for n in size.split("x"))
                path = Path(folder) / f"{codec}-{size}.mp4"
                path.write_bytes(
                    encode_mp4(
                        count=args.frames, fps=args.fps, width=width, height=height, codec=codec
                    )
                )
                bare, qa = best_rates(
                    lambda p=path: bare_decode(p),
                    lambda p=path: qa_decode(p, args.frames, args.fps),
                    args.repeat,
                )
                ratio = qa / bare
                worst = ratio if worst is None else min(worst, ratio)
                label = f"{codec} {size} x{args.frames}"
                print(f"{label:<22} {bare:>10.0f} {qa:>10.0f} {ratio:>6.2f}x")
    gates = Gates()
    gates.at_least("worst QA / bare decode ratio", worst, GOAL, "x")
    return gates.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
