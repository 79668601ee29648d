"""QA throughput on uploaded episodes, and how little of each file QA reads.

    python bench/qa_bench.py [--frames 10000 30000 100000] [--camera-bytes 512]

Starts the local S3 server on loopback, uploads episodes of the given lengths through
presigned PUTs (each with a raw camera column of --camera-bytes per frame that QA skips,
as real uploads carry sensor data QA does not check), then runs the full QA of each:
HEAD, checksum, footer and the four checked columns by byte range. Prints per episode:
file size, QA wall time, MB/s of file validated, parquet bytes read by range and their
share of the file, and the bytes streamed for the checksum (the local store keeps no
checksum; AWS S3 returns it on HEAD, so there that cost is zero).
"""

import argparse
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--frames", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--camera-bytes", type=int, default=512)
    args = parser.parse_args()

    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings")
    import django

    django.setup()
    import numpy as np
    from django.conf import settings

    from datasets import storage
    from datasets.episode_format import episode_table, parquet_bytes, sha256
    from datasets.qa_checks import EpisodeExpectation, check_stored_episode
    from local_s3 import launcher

    with tempfile.TemporaryDirectory() as tmp, launcher.running(Path(tmp)) as s3:
        for name, value in s3.settings().items():
            setattr(settings, name, value)
        print(
            f"{'frames':>8}{'file MB':>9}{'QA s':>8}{'MB/s':>8}{'range MB':>10}{'share':>7}"
            f"{'checksum MB':>13}"
        )
        for frames in args.frames:
            rng = np.random.default_rng(frames)
            camera = rng.integers(0, 255, (frames, args.camera_bytes), dtype=np.uint8)
            data = parquet_bytes(episode_table(frames=frames, extra_columns={"camera_raw": camera}))
            key = f"bench/qa/{frames}.parquet"
            request = storage.presigned_put(
                key=key, content_length=len(data), sha256_hex=sha256(data)
            )
            urllib.request.urlopen(
                urllib.request.Request(
                    request.url, data=data, method="PUT", headers=request.headers
                ),
                timeout=60,
            ).close()
            expected = EpisodeExpectation(
                size=len(data),
                sha256_hex=sha256(data),
                fps=30,
                action_dim=8,
                max_duration_seconds=7200,
            )
            started = time.perf_counter()
            result = check_stored_episode(key, expected)
            elapsed = time.perf_counter() - started
            assert result.passed, result.failures
            mb = len(data) / 1e6
            print(
                f"{frames:>8}{mb:>9.2f}{elapsed:>8.3f}{mb / elapsed:>8.1f}"
                f"{result.bytes_read / 1e6:>10.2f}{result.bytes_read / len(data):>7.1%}"
                f"{result.checksum_bytes_read / 1e6:>13.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
