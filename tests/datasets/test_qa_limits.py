"""QA that no file can exhaust (issue 14): hostile parquet files are refused from their footer
before anything is decoded, within bounded time and memory, through the real QA service on
the local S3 server; the sandbox bounds what the footer cannot tell; unfinished runs are
counted and given up instead of looped."""

import io
import os
import resource
import signal
import time
from datetime import timedelta
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.utils import timezone

from datasets import storage, tasks
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode
from datasets.qa_checks import EpisodeExpectation, QALimits, Reason, check_episode_file
from datasets.qa_sandbox import run_in_sandbox
from datasets.services.qa import episode_run_qa
from datasets.services.sweep import qa_sweep
from tests.datasets.helpers import Collection, put, upload_episode
from tests.faults.s3_proxy import FaultyS3Proxy

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]

DIM = 8


def vectors(rows: int, dim: int = DIM, value: float = 0.0):
    flat = pa.array(np.full(rows * dim, value, dtype=np.float32))
    return pa.FixedSizeListArray.from_arrays(flat, dim)


def table(rows: int, **extra) -> pa.Table:
    return pa.table(
        {
            "observation.state": vectors(rows),
            "action": vectors(rows),
            "timestamp": pa.array(np.arange(rows, dtype=np.float32) / 30),
            "frame_index": pa.array(np.arange(rows, dtype=np.int64)),
            **extra,
        }
    )


def written(t: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    pq.write_table(t, sink, **options)
    return sink.getvalue()


def huge_declared_rows() -> bytes:
    """200,000 rows of zeros (1.85 h at 30 fps): a small file, compressed."""
    return written(table(200_000), compression="zstd")


def many_row_groups() -> bytes:
    return written(table(3000), row_group_size=5)  # 600 row groups of 5 frames


def many_columns() -> bytes:
    extra = {f"extra_{i}": pa.array(np.zeros(300, dtype=np.float32)) for i in range(400)}
    return written(table(300, **extra))


def huge_footer() -> bytes:
    t = table(300).replace_schema_metadata({"padding": "x" * (3 * 1024 * 1024)})
    return written(t)


def lying_vectors() -> bytes:
    """Vectors of 1,000 values where the embodiment has 8: refused from the footer's counts."""
    wide = vectors(300, dim=1000)
    return written(table(300).set_column(0, "observation.state", wide))


HOSTILE = [
    (huge_declared_rows, Reason.DURATION_OUT_OF_BOUNDS),
    (many_row_groups, Reason.TOO_MANY_ROW_GROUPS),
    (many_columns, Reason.TOO_MANY_COLUMNS),
    (huge_footer, Reason.FOOTER_TOO_LARGE),
    (lying_vectors, Reason.VECTOR_LENGTH),
]


@pytest.mark.parametrize(("build", "code"), HOSTILE, ids=[b.__name__ for b, _ in HOSTILE])
def test_hostile_files_are_refused_by_qa_within_bounds(
    build, code, fleet_operator, customer, django_capture_on_commit_callbacks
):
    # given: a hostile file, registered as at most an ordinary 100 s episode (a fleet may lie)
    data = build()
    footer = int.from_bytes(data[-8:-4], "little")
    declared = min(pq.ParquetFile(io.BytesIO(data)).metadata.num_rows, 3000)
    collection = Collection(fleet_operator, customer, target_hours="10")
    started = time.monotonic()
    # when: it is uploaded and goes through QA (the sandboxed check on the local S3 server)
    episode = upload_episode(collection, data, django_capture_on_commit_callbacks, frames=declared)
    seconds = time.monotonic() - started
    # then: rejected for what it is, quickly, having read nothing beyond its footer (and the
    # one checksum pass over the file, which the local S3 server does not verify for us)
    assert episode.status == Episode.Status.REJECTED
    assert code in [f["code"] for f in episode.qa_failures], episode.qa_failures
    assert seconds < 10
    # (pyarrow reads the last 64 KiB, then the rest of a longer footer; we read 8 bytes first)
    assert episode.qa_bytes_read <= len(data) + min(footer, 1024**2) + 64 * 1024 + 8


def test_a_huge_footer_is_refused_after_reading_its_last_8_bytes():
    data = huge_footer()
    reader = CountingReader(data)
    expected = EpisodeExpectation(size=len(data), sha256_hex="0" * 64, fps=30, action_dim=DIM)
    result = check_episode_file(reader, expected)
    assert [f.code for f in result.failures] == [Reason.FOOTER_TOO_LARGE]
    assert reader.bytes_read == 8


class CountingReader(io.BytesIO):
    def __init__(self, data: bytes):
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size=-1):
        chunk = super().read(size)
        self.bytes_read += len(chunk)
        return chunk


def test_decoding_stops_at_the_deadline():
    data = parquet_bytes(episode_table(frames=3000))
    expected = EpisodeExpectation(size=len(data), sha256_hex="0" * 64, fps=30, action_dim=DIM)
    result = check_episode_file(
        io.BytesIO(data), expected, limits=QALimits(batch_rows=10, seconds=0.0)
    )
    assert [f.code for f in result.failures] == [Reason.QA_TIME_LIMIT]


def test_a_legitimate_file_still_passes_in_bounded_batches():
    data = parquet_bytes(episode_table(frames=3000))
    expected = EpisodeExpectation(
        size=len(data), sha256_hex="0" * 64, fps=30, action_dim=DIM, declared_frames=3000
    )
    result = check_episode_file(io.BytesIO(data), expected, limits=QALimits(batch_rows=64))
    assert result.passed, result.failures


# --- The sandbox ---------------------------------------------------------------------------


def test_the_sandbox_stops_a_check_at_its_memory_ceiling_and_the_worker_does_not_grow():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def greedy():
        blocks = []
        for _ in range(64):
            blocks.append(np.ones(64 * 1024 * 1024 // 8))  # 64 MiB each, touched
        return blocks

    outcome = run_in_sandbox(greedy, memory_bytes=256 * 1024**2, seconds=30)
    assert [f.code for f in outcome.result.failures] == [Reason.QA_MEMORY_LIMIT]
    # the child stopped near its ceiling (256 MiB over its size at fork); we did not grow
    assert outcome.peak_rss_bytes < before * 1024 + 300 * 1024**2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < before + 50 * 1024


def test_the_sandbox_kills_a_check_at_its_deadline():
    outcome = run_in_sandbox(lambda: time.sleep(60), memory_bytes=256 * 1024**2, seconds=1)
    assert [f.code for f in outcome.result.failures] == [Reason.QA_TIME_LIMIT]
    assert outcome.seconds < 5


def test_a_checker_crash_is_a_verdict_not_a_worker_crash():
    outcome = run_in_sandbox(
        lambda: os.kill(os.getpid(), signal.SIGSEGV), memory_bytes=256 * 1024**2, seconds=10
    )
    assert [f.code for f in outcome.result.failures] == [Reason.QA_FAILED]


def test_storage_errors_in_the_sandbox_come_back_as_retryable():
    def down():
        raise storage.StorageUnavailable("SlowDown")

    with pytest.raises(storage.StorageUnavailable):
        run_in_sandbox(down, memory_bytes=256 * 1024**2, seconds=10)


# --- Unfinished runs ---------------------------------------------------------------------


def uploaded(collection) -> Episode:
    data = parquet_bytes(episode_table(frames=300, seed=41))
    body = collection.register(data).json()
    assert put(body["upload"], data) == 200
    Episode.objects.filter(pk=body["id"]).update(
        status=Episode.Status.UPLOADED, uploaded_at=timezone.now() - timedelta(hours=1)
    )
    return Episode.objects.get(pk=body["id"])


def test_runs_that_died_unfinished_are_counted_and_then_given_up(
    fleet_operator, customer, settings
):
    settings.EPISODE_QA_MAX_ATTEMPTS = 3
    collection = Collection(fleet_operator, customer, target_hours="1")
    episode = uploaded(collection)
    # given: three runs started and never finished (their workers were killed): two counted,
    # the last one still marked as started
    Episode.objects.filter(pk=episode.pk).update(
        qa_started_at=timezone.now() - timedelta(hours=1), qa_unfinished_runs=2
    )
    # when: QA runs again
    decided = episode_run_qa(episode_id=episode.pk)
    # then: rejected after the third unfinished run, not tried forever
    assert decided.status == Episode.Status.REJECTED
    assert [f["code"] for f in decided.qa_failures] == [Reason.QA_FAILED]


def test_a_transient_storage_error_does_not_count_as_an_unfinished_run(
    fleet_operator, customer, settings, s3_server
):
    collection = Collection(fleet_operator, customer, target_hours="1")
    episode = uploaded(collection)
    proxy = FaultyS3Proxy(s3_server.endpoint_url)
    try:
        settings.S3_ENDPOINT_URL = proxy.url
        proxy.fail_next = 1000  # storage answers 503 SlowDown (after boto3's own retries)
        with pytest.raises(storage.StorageError):
            episode_run_qa(episode_id=episode.pk)
    finally:
        proxy.close()
    episode.refresh_from_db()
    assert episode.status == Episode.Status.UPLOADED
    assert episode.qa_started_at is None and episode.qa_unfinished_runs == 0


def test_the_sweep_leaves_episodes_whose_qa_is_running_alone(fleet_operator, customer):
    collection = Collection(fleet_operator, customer, target_hours="1")
    running, stuck = uploaded(collection), uploaded_second(collection)
    Episode.objects.filter(pk=running.pk).update(qa_started_at=timezone.now())
    Episode.objects.filter(pk=stuck.pk).update(qa_started_at=timezone.now() - timedelta(hours=2))
    with mock.patch.object(tasks.qa_episode, "delay") as delay:
        assert qa_sweep() == 1
    assert [call.args for call in delay.call_args_list] == [(str(stuck.pk),)]


def uploaded_second(collection) -> Episode:
    data = parquet_bytes(episode_table(frames=300, seed=42))
    body = collection.register(data).json()
    Episode.objects.filter(pk=body["id"]).update(
        status=Episode.Status.UPLOADED, uploaded_at=timezone.now() - timedelta(hours=1)
    )
    return Episode.objects.get(pk=body["id"])
