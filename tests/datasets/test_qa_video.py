"""Video QA (issue 15, item 3) on real MP4 files encoded with PyAV in the test: one test per
reason code of datasets/qa_video_checks.py, on local files (the pure checks)."""

import struct
import time

import numpy as np
import pytest

from datasets.qa_checks import QAResult, Reason
from datasets.qa_video_checks import (
    VideoExpectation,
    VideoLimits,
    VideoMeasure,
    check_camera_lengths,
    check_video_file,
)
from portal.wording import QA_REASONS
from tests.datasets.hostile_videos import FTYP, box
from tests.datasets.videos import encode_mp4, moving_frames

CAMERA = "observation.images.scene"


def check(tmp_path, data: bytes, *, frames=30, fps=30, limits=None, **expected):
    path = tmp_path / "video.mp4"
    path.write_bytes(data)
    result = QAResult()
    expectation = VideoExpectation(
        camera_key=CAMERA,
        fps=fps,
        frames=frames,
        min_width=expected.get("min_width", 320),
        min_height=expected.get("min_height", 240),
    )
    measure = check_video_file(path, expectation, result, limits or VideoLimits())
    return result, measure


def codes(result: QAResult) -> list[str]:
    return [failure.code for failure in result.failures]


@pytest.mark.parametrize("codec", ["h264", "hevc", "av1"])
def test_a_good_video_passes_and_is_measured(tmp_path, codec):
    result, measure = check(tmp_path, encode_mp4(count=30, codec=codec))
    assert result.passed, result.failures
    assert measure.codec == codec
    assert (measure.width, measure.height, measure.frames, measure.fps) == (320, 240, 30, 30)
    assert measure.pix_fmt == "yuv420p"


def test_a_file_ffmpeg_cannot_open_is_unreadable(tmp_path):
    # the boxes an MP4 has (datasets/qa_video_container.py passes it), a sample description
    # declaring 2^31 entries: FFmpeg's MP4 demuxer refuses it
    broken = box(b"stsd", struct.pack(">II", 0, 2**31))
    index = box(b"moov", box(b"trak", box(b"mdia", box(b"minf", box(b"stbl", broken)))))
    result, _ = check(tmp_path, FTYP + index)
    assert codes(result) == [Reason.VIDEO_UNREADABLE]
    assert CAMERA in result.failures[0].message


def test_a_file_that_is_not_a_video_is_not_an_mp4_container(tmp_path):
    result, _ = check(tmp_path, b"\x00\x01not an mp4 at all" * 100)
    assert codes(result) == [Reason.VIDEO_CONTAINER]
    assert CAMERA in result.failures[0].message


def test_a_truncated_video_does_not_decode(tmp_path):
    data = encode_mp4(count=90, faststart=True)
    result, _ = check(tmp_path, data[: len(data) * 2 // 3], frames=90)
    assert codes(result) == [Reason.VIDEO_DECODE_ERROR], result.failures


def test_another_codec_is_refused(tmp_path):
    result, measure = check(tmp_path, encode_mp4(count=30, codec="mpeg4"))
    assert codes(result) == [Reason.VIDEO_CODEC]
    assert measure.codec == "mpeg4"


def test_another_frame_rate_is_refused(tmp_path):
    result, _ = check(tmp_path, encode_mp4(count=30, fps=25), fps=30)
    assert Reason.VIDEO_FPS_MISMATCH in codes(result)


def test_unevenly_spaced_frames_are_a_variable_frame_rate(tmp_path):
    data = encode_mp4(count=30, pts_of=lambda i: i * 100 + (40 if i % 2 else 0))
    result, _ = check(tmp_path, data)
    assert Reason.VIDEO_VARIABLE_FRAME_RATE in codes(result), result.failures


def test_frames_off_their_timestamps_are_refused(tmp_path):
    data = encode_mp4(count=30, pts_of=lambda i: i * 100 + 50)  # evenly spaced, 1/60 s late
    result, _ = check(tmp_path, data)
    assert codes(result) == [Reason.VIDEO_TIMESTAMPS], result.failures


def test_a_frame_count_other_than_the_parquets_is_refused(tmp_path):
    result, measure = check(tmp_path, encode_mp4(count=29), frames=30)
    assert codes(result) == [Reason.VIDEO_FRAME_COUNT]
    assert measure.frames == 29


def test_a_resolution_below_the_ordered_one_is_refused(tmp_path):
    result, _ = check(tmp_path, encode_mp4(count=30, width=160, height=120))
    assert codes(result) == [Reason.VIDEO_RESOLUTION]
    assert "160x120" in result.failures[0].message and "320x240" in result.failures[0].message


def test_cameras_of_different_lengths_are_refused():
    result = QAResult()
    check_camera_lengths(
        {
            "observation.images.scene": VideoMeasure(frames=30),
            "observation.images.wrist": VideoMeasure(frames=29),
        },
        result,
    )
    assert codes(result) == [Reason.VIDEO_LENGTHS_DIFFER]
    same = QAResult()
    check_camera_lengths({"a": VideoMeasure(frames=30), "b": VideoMeasure(frames=30)}, same)
    assert same.passed


def _with_stretch(count: int, start: int, stop: int, make) -> list[np.ndarray]:
    frames = list(moving_frames(count, 320, 240))
    for index in range(start, stop):
        frames[index] = make(frames, index)
    return frames


def test_a_long_black_stretch_is_refused_and_a_short_one_allowed(tmp_path):
    limits = VideoLimits(max_still_seconds=1.0)
    black = np.zeros((240, 320, 3), np.uint8)
    long = _with_stretch(90, 20, 60, lambda frames, i: black)  # 40 frames: 1.3 s
    result, _ = check(tmp_path, encode_mp4(long), frames=90, limits=limits)
    assert codes(result) == [Reason.VIDEO_BLACK], result.failures
    short = _with_stretch(90, 20, 40, lambda frames, i: black)  # 0.7 s
    result, _ = check(tmp_path, encode_mp4(short), frames=90, limits=limits)
    assert result.passed, result.failures


def test_a_long_frozen_stretch_is_refused_and_a_short_one_allowed(tmp_path):
    limits = VideoLimits(max_still_seconds=1.0)
    long = _with_stretch(90, 20, 75, lambda frames, i: frames[19])  # 1.8 s
    result, _ = check(tmp_path, encode_mp4(long), frames=90, limits=limits)
    assert codes(result) == [Reason.VIDEO_FROZEN], result.failures
    short = _with_stretch(90, 20, 40, lambda frames, i: frames[19])
    result, _ = check(tmp_path, encode_mp4(short), frames=90, limits=limits)
    assert result.passed, result.failures


def test_long_dark_or_blown_out_stretches_are_refused_and_short_ones_allowed(tmp_path):
    limits = VideoLimits(max_still_seconds=1.0)

    def lit(scale: float, offset: int):
        # the moving scene, dimmed or blown out: it still moves, so it is not frozen
        return lambda frames, i: np.clip(frames[i] * scale + offset, 0, 255).astype(np.uint8)

    dark, bright = lit(0.08, 8), lit(0.2, 225)  # mean luma about 31 and 229
    for make, code in ((dark, Reason.VIDEO_UNDEREXPOSED), (bright, Reason.VIDEO_OVEREXPOSED)):
        long = _with_stretch(90, 20, 60, make)  # 40 frames: 1.3 s
        result, _ = check(tmp_path, encode_mp4(long), frames=90, limits=limits)
        assert codes(result) == [code], result.failures
        assert "1.3 s" in result.failures[0].message
        short = _with_stretch(90, 20, 40, make)  # 0.7 s
        result, _ = check(tmp_path, encode_mp4(short), frames=90, limits=limits)
        assert result.passed, result.failures


def test_a_black_stretch_is_named_black_not_also_dark(tmp_path):
    limits = VideoLimits(max_still_seconds=1.0)
    black = np.zeros((240, 320, 3), np.uint8)
    result, _ = check(
        tmp_path,
        encode_mp4(_with_stretch(90, 20, 60, lambda f, i: black)),
        frames=90,
        limits=limits,
    )
    assert codes(result) == [Reason.VIDEO_BLACK], result.failures


def test_decoding_stops_at_the_deadline(tmp_path):
    limits = VideoLimits(deadline=time.monotonic() - 1)
    result, _ = check(tmp_path, encode_mp4(count=30), limits=limits)
    assert codes(result) == [Reason.QA_TIME_LIMIT]


def test_every_video_reason_has_words_for_the_pages():
    video_codes = [value for name, value in vars(Reason).items() if name.startswith("VIDEO_")]
    assert len(video_codes) == 19
    for code in [*video_codes, Reason.SENSOR_MISSING]:
        assert code in QA_REASONS, code
