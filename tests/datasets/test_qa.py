"""Every QA check rejects a file broken its way, with its reason code; a good file passes."""

import io

import numpy as np
import pyarrow as pa
import pytest

from datasets.episode_format import episode_table, parquet_bytes, sha256
from datasets.qa_checks import EpisodeExpectation, Reason, check_episode_file

FPS, DIM = 30, 8


def expectation(data: bytes, **overrides) -> EpisodeExpectation:
    values = {"size": len(data), "sha256_hex": sha256(data), "fps": FPS, "action_dim": DIM}
    return EpisodeExpectation(**{**values, **overrides})


def check(columns: dict, **overrides):
    data = parquet_bytes(columns)
    return check_episode_file(io.BytesIO(data), expectation(data, **overrides))


def test_a_good_episode_passes_with_its_duration():
    result = check(episode_table(frames=300))
    assert result.passed, result.failures
    assert result.frames == 300
    assert str(result.duration_seconds) == "10.000"


def test_float64_vectors_and_int32_frame_index_are_accepted():
    columns = episode_table()
    columns["observation.state"] = columns["observation.state"].astype(np.float64)
    columns["frame_index"] = columns["frame_index"].astype(np.int32)
    assert check(columns).passed


def test_extra_columns_are_allowed():
    columns = episode_table(extra_columns={"observation.force": np.zeros(300, dtype=np.float32)})
    assert check(columns).passed


def broken(mutate):
    columns = episode_table(frames=300)
    mutate(columns)
    return columns


def _nan_in_action(c):
    c["action"][10, 3] = np.nan


def _inf_in_state(c):
    c["observation.state"][5, 0] = np.inf


def _swap_timestamps(c):
    c["timestamp"][[50, 51]] = c["timestamp"][[51, 50]]


def _gap(c):
    c["timestamp"][100:] += 0.2  # six frame periods at 30 fps


def _wrong_fps(c):
    c["timestamp"] = (np.arange(300) / 25).astype(np.float32)


def _nan_timestamp(c):
    c["timestamp"][7] = np.nan


def _short_vectors(c):
    c["action"] = c["action"][:, :7]


def _ragged_vectors(c):
    rows = [list(map(float, row)) for row in c["observation.state"]]
    rows[3] = rows[3][:5]
    c["observation.state"] = pa.array(rows, type=pa.list_(pa.float32()))


def _null_vector(c):
    rows = [list(map(float, row)) for row in c["action"]]
    rows[3] = None
    c["action"] = pa.array(rows, type=pa.list_(pa.float32()))


def _int_vectors(c):
    c["action"] = pa.array([[1] * DIM] * 300, type=pa.list_(pa.int64()))


def _string_timestamps(c):
    c["timestamp"] = pa.array([str(x) for x in c["timestamp"]])


def _float_frame_index(c):
    c["frame_index"] = c["frame_index"].astype(np.float64)


def _frame_index_skips(c):
    c["frame_index"][200:] += 1


def _missing_action(c):
    del c["action"]


def _missing_timestamp(c):
    del c["timestamp"]


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (_nan_in_action, Reason.NON_FINITE),
        (_inf_in_state, Reason.NON_FINITE),
        (_nan_timestamp, Reason.NON_FINITE),
        (_swap_timestamps, Reason.TIMESTAMPS_NOT_MONOTONIC),
        (_gap, Reason.TIMESTAMP_GAP),
        (_wrong_fps, Reason.FPS_MISMATCH),
        (_short_vectors, Reason.VECTOR_LENGTH),
        (_ragged_vectors, Reason.VECTOR_LENGTH),
        (_null_vector, Reason.VECTOR_LENGTH),
        (_int_vectors, Reason.BAD_DTYPE),
        (_string_timestamps, Reason.BAD_DTYPE),
        (_float_frame_index, Reason.BAD_DTYPE),
        (_frame_index_skips, Reason.FRAME_INDEX),
        (_missing_action, Reason.MISSING_COLUMN),
        (_missing_timestamp, Reason.MISSING_COLUMN),
    ],
)
def test_each_broken_file_is_rejected_with_its_reason(mutate, code):
    result = check(broken(mutate))
    assert not result.passed
    assert code in [failure.code for failure in result.failures], result.failures
    assert all(failure.message for failure in result.failures)


def test_too_few_frames_is_rejected():
    result = check(episode_table(frames=1))
    assert [f.code for f in result.failures] == [Reason.FRAME_COUNT]


@pytest.mark.parametrize(
    ("frames", "bounds"),
    [(30, {"min_duration_seconds": 2.0}), (300, {"max_duration_seconds": 5.0})],
)
def test_durations_out_of_bounds_are_rejected(frames, bounds):
    result = check(episode_table(frames=frames), **bounds)
    assert [f.code for f in result.failures] == [Reason.DURATION_OUT_OF_BOUNDS]


@pytest.mark.parametrize("data", [b"", b"not parquet at all", b"PAR1" + b"\0" * 100 + b"PAR1"])
def test_a_corrupt_file_is_rejected_not_a_crash(data):
    result = check_episode_file(io.BytesIO(data), expectation(data))
    assert [f.code for f in result.failures] == [Reason.NOT_PARQUET]


def test_a_truncated_parquet_file_is_rejected():
    data = parquet_bytes(episode_table())
    truncated = data[: len(data) // 2] + data[-2000:]
    result = check_episode_file(io.BytesIO(truncated), expectation(truncated))
    assert not result.passed
    assert result.failures[0].code == Reason.NOT_PARQUET


def test_checks_carry_across_row_groups():
    columns = episode_table(frames=300)
    columns["timestamp"][150:] += 0.2  # the gap sits exactly on a row-group boundary
    data = parquet_bytes(columns, row_group_size=150)
    result = check_episode_file(io.BytesIO(data), expectation(data))
    assert Reason.TIMESTAMP_GAP in [f.code for f in result.failures]
