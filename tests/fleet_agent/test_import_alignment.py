"""The alignment rule (fleet_agent/importers/alignment.py): frames from the latest first
sample, each stream's latest sample at or before the frame, a maximum age."""

import numpy as np
import pytest

from fleet_agent.importers.alignment import NS, align, frame_clock
from fleet_agent.importers.base import RecordingError

MS = 1_000_000


def test_the_clock_starts_at_the_latest_first_sample_and_ends_within_every_stream():
    streams = {
        "fast": np.arange(0, 1000 * MS, 10 * MS),  # 0 .. 990 ms at 100 Hz
        "late": np.arange(25 * MS, 1000 * MS, 20 * MS),  # starts at 25 ms, last 985 ms
    }
    frames = frame_clock(streams, 30)
    assert frames[0] == 25 * MS
    assert frames[-1] <= 985 * MS < frames[-1] + NS // 30
    assert np.array_equal(np.diff(frames) // 1000, np.full(len(frames) - 1, 33333))
    assert len(frames) == (985 - 25) * 30 // 1000 + 1


def test_each_frame_takes_the_latest_sample_at_or_before_it_never_a_later_one():
    times = np.array([0, 10, 20, 30, 40]) * MS
    frames = np.array([0, 9, 10, 11, 29, 40]) * MS
    index = align("s", times, frames, max_age_ns=10 * MS)
    assert index.tolist() == [0, 0, 1, 1, 2, 4]  # 9 ms -> the 0 ms sample, not the 10 ms one


def test_a_sample_exactly_at_the_maximum_age_is_allowed_and_one_nanosecond_over_is_not():
    times = np.array([0, 100]) * MS
    assert align("s", times, np.array([50 * MS]), max_age_ns=50 * MS).tolist() == [0]
    with pytest.raises(RecordingError) as error:
        align("/camera", times, np.array([50 * MS + 1]), max_age_ns=50 * MS, origin=0)
    message = str(error.value)
    assert message.startswith("/camera: at 0.050 s")
    assert "50.0 ms old, over the 50.0 ms allowed" in message


def test_a_gap_names_the_stream_the_time_from_the_origin_and_the_age():
    origin = 1_700_000_000 * NS
    times = origin + np.array([0, 10, 20, 200, 210]) * MS  # 180 ms without a sample
    frames = origin + np.arange(0, 210 * MS, 33 * MS)
    with pytest.raises(RecordingError, match=r"^/joint_states: at 0\.066 s .* 46\.0 ms old"):
        align("/joint_states", times, frames, max_age_ns=40 * MS, origin=origin)


def test_no_sample_before_a_frame_and_unsorted_times_are_refused():
    with pytest.raises(RecordingError, match=r"no sample at or before the frame at 0\.000 s"):
        align("s", np.array([5 * MS]), np.array([0]), max_age_ns=NS)
    with pytest.raises(RecordingError, match="sorted"):
        align("s", np.array([2, 1]), np.array([3]), max_age_ns=NS)


def test_streams_that_never_overlap_or_are_empty_are_refused():
    with pytest.raises(RecordingError, match="do not overlap"):
        frame_clock({"a": np.array([0, MS]), "b": np.array([5 * MS, 6 * MS])}, 30)
    with pytest.raises(RecordingError, match="b: no message"):
        frame_clock({"a": np.array([0]), "b": np.array([], dtype=np.int64)}, 30)
    with pytest.raises(RecordingError, match="no stream"):
        frame_clock({}, 30)


def test_a_single_common_instant_gives_one_frame():
    assert frame_clock({"a": np.array([7]), "b": np.array([0, 7])}, 30).tolist() == [7]
