"""QA throughput on uploaded episodes, and how little of each file QA reads, on a store that
keeps checksums and on one that does not.

    python bench/qa_bench.py [--frames 10000 30000 100000] [--camera-bytes 512]
                             [--part-bytes 5242880] [--rounds 3]

Starts both local S3 servers on loopback: the default one (keeps no checksum, like s3rver)
and the checksum-keeping one (local_s3/checksums.js: verifies each part's x-amz-checksum-sha256
and keeps the composite, as AWS S3 does). On each it uploads episodes of the given lengths
(each with a raw camera column of --camera-bytes per frame that QA skips, as real uploads
carry sensor data QA does not check) as multipart uploads begun with ChecksumAlgorithm=SHA256,
every part PUT to its presigned URL with its SHA-256 signed in, completed with the parts'
checksums: what the platform does for a fleet that declares its parts. Then it runs the
full QA of each (HEAD, checksum, footer and the four checked columns by byte range),
alternating stores, --rounds times. Prints per episode and store: file size, QA wall time
(median), MB/s of file validated, bytes read (range + checksum stream) against the checked
column chunks + 64 KiB, and the checksum bytes streamed; then per episode the ratio of MB/s
with the store's checksum to MB/s with QA's own checksum stream, measured in this run.
"""

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FOOTER_ALLOWANCE = 64 * 1024


def upload_in_parts(storage, key: str, data: bytes, part_bytes: int) -> list[str]:
    """Multipart with SHA-256 part checksums through presigned part URLs; the part hashes."""
    hashes = [
        hashlib.sha256(data[i : i + part_bytes]).hexdigest()
        for i in range(0, len(data), part_bytes)
    ]
    upload_id = storage.multipart_start(key=key, sha256_checksums=True)
    parts = []
    for number, digest in enumerate(hashes, start=1):
        chunk = data[(number - 1) * part_bytes : number * part_bytes]
        request = storage.presigned_part_put(
            key=key,
            upload_id=upload_id,
            part_number=number,
            content_length=len(chunk),
            sha256_hex=digest,
        )
        sent = urllib.request.Request(
            request.url, data=chunk, method="PUT", headers=request.headers
        )
        with urllib.request.urlopen(sent, timeout=60) as response:
            etag = response.headers["ETag"]
        checksum = storage.sha256_hex_to_base64(digest)
        parts.append({"PartNumber": number, "ETag": etag, "ChecksumSHA256": checksum})
    storage.multipart_complete(key=key, upload_id=upload_id, parts=parts)
    return hashes


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--frames", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--camera-bytes", type=int, default=512)
    parser.add_argument("--part-bytes", type=int, default=5 * 1024 * 1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings")
    import django

    django.setup()
    import numpy as np
    from django.conf import settings

    from datasets import storage
    from datasets.episode_format import column_chunk_bytes, episode_table, parquet_bytes, sha256
    from datasets.qa_checks import QA_COLUMNS, EpisodeExpectation, check_stored_episode
    from local_s3 import launcher

    def use(server) -> None:
        for name, value in server.settings().items():
            setattr(settings, name, value)

    with (
        tempfile.TemporaryDirectory() as tmp,
        launcher.running(Path(tmp) / "plain") as plain,
        launcher.running(Path(tmp) / "keeping", keep_checksums=True) as keeping,
    ):
        stores = {"keeping": keeping, "plain": plain}
        episodes = []
        for frames in args.frames:
            rng = np.random.default_rng(frames)
            camera = rng.integers(0, 255, (frames, args.camera_bytes), dtype=np.uint8)
            data = parquet_bytes(episode_table(frames=frames, extra_columns={"camera_raw": camera}))
            key = f"bench/qa/{frames}.parquet"
            for server in stores.values():
                use(server)
                hashes = upload_in_parts(storage, key, data, args.part_bytes)
            expected = EpisodeExpectation(
                size=len(data),
                sha256_hex=sha256(data),
                fps=30,
                action_dim=8,
                max_duration_seconds=7200,
                part_bytes=args.part_bytes,
                part_sha256s=tuple(hashes),
            )
            episodes.append((frames, key, data, expected))

        times = {(frames, name): [] for frames, *_ in episodes for name in stores}
        results = {}
        for _ in range(args.rounds):
            for frames, key, _data, expected in episodes:
                for name, server in stores.items():
                    use(server)
                    started = time.perf_counter()
                    result = check_stored_episode(key, expected)
                    times[frames, name].append(time.perf_counter() - started)
                    assert result.passed, result.failures
                    results[frames, name] = result

        print(
            f"{'frames':>8}  {'store':<8}{'file MB':>9}{'QA s':>8}{'MB/s':>8}{'read KB':>10}"
            f"{'chunks+64K KB':>15}{'within':>8}{'checksum MB':>13}  checksum"
        )
        for frames, _key, data, _expected in episodes:
            bound = column_chunk_bytes(data, QA_COLUMNS) + FOOTER_ALLOWANCE
            for name in stores:
                result = results[frames, name]
                read = result.bytes_read + result.checksum_bytes_read
                elapsed = statistics.median(times[frames, name])
                mb = len(data) / 1e6
                print(
                    f"{frames:>8}  {name:<8}{mb:>9.2f}{elapsed:>8.3f}{mb / elapsed:>8.1f}"
                    f"{read / 1e3:>10.1f}{bound / 1e3:>15.1f}{'yes' if read <= bound else 'no':>8}"
                    f"{result.checksum_bytes_read / 1e6:>13.2f}  {result.checksum_source}"
                )
        print()
        for frames, *_ in episodes:
            with_store = statistics.median(times[frames, "keeping"])
            streamed = statistics.median(times[frames, "plain"])
            print(
                f"{frames:>8} frames: MB/s with the store's checksum / with QA's checksum stream"
                f" = {streamed / with_store:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
