"""Video QA stays bounded on hostile camera files (issue 28, item 6): the container is an
MP4/MOV of one video stream (read from its boxes before FFmpeg), the resolution is bounded
before decoding and in the decoder, decoding stops one frame past the parquet's rows and when
the episode's CPU budget is spent, and the sandbox's memory ceiling covers the decoder's
frames. Files made with PyAV in the test (tests/datasets/hostile_videos.py) or as raw boxes."""

import json
import struct
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from datasets.qa_checks import QAResult, Reason
from datasets.qa_sandbox import StoredVideo, check_video_files
from datasets.qa_video_checks import (
    VideoExpectation,
    VideoLimits,
    check_video_file,
    with_decode_budget,
)
from datasets.qa_video_container import INDEX_BASE_BYTES, read_layout
from tests.datasets.hostile_videos import (
    FTYP,
    box,
    repeated_frames,
    size_switch,
    with_audio,
    with_timecode,
)

CAMERA = "observation.images.scene"
ROOT = Path(__file__).resolve().parents[2]


def check(tmp_path, data: bytes, *, frames=30, limits=None):
    path = tmp_path / "video.mp4"
    path.write_bytes(data)
    result = QAResult()
    expected = VideoExpectation(CAMERA, fps=30, frames=frames, min_width=320, min_height=240)
    measure = check_video_file(path, expected, result, limits or VideoLimits())
    return [failure.code for failure in result.failures], result, measure


def test_the_hostile_files_baseline_passes(tmp_path):
    """The files below are refused for their defect alone: the same trick, sound, passes."""
    codes, result, measure = check(tmp_path, repeated_frames(30))
    assert codes == [], result.failures
    assert measure.frames == 30


ONE_TRACK = box(b"moov", box(b"trak"))  # what FFmpeg would open (as a data stream)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        pytest.param(lambda: repeated_frames(30, format="matroska"), "ftyp", id="matroska"),
        pytest.param(
            lambda: repeated_frames(30, format="mpegts", streams=20), "ftyp", id="mpeg-ts"
        ),
        pytest.param(lambda: b"\x00\x01not a video" * 100, "ftyp", id="garbage"),
        pytest.param(
            lambda: box(b"ftyp", b"heic\0\0\0\0mif1heic") + ONE_TRACK,
            "brand 'heic' is not an MP4 or QuickTime one",
            id="heif-brand",
        ),
        pytest.param(
            lambda: FTYP + box(b"mdat", b"x" * 64, large=2**62), "no index", id="no-index"
        ),
        pytest.param(
            lambda: FTYP + box(b"moov", box(b"trak") + box(b"cmov", b"z" * 64)),
            "compressed",
            id="compressed-index",
        ),
        pytest.param(lambda: FTYP + ONE_TRACK + ONE_TRACK, "two indexes", id="two-indexes"),
        pytest.param(
            lambda: FTYP + box(b"free") * 200 + ONE_TRACK, "top-level boxes", id="many-boxes"
        ),
        pytest.param(
            lambda: FTYP + box(b"moov", box(b"trak") + box(b"free") * 65),
            "more than 64 boxes",
            id="crowded-index",
        ),
        pytest.param(
            lambda: FTYP + box(b"moov", box(b"trak") + struct.pack(">I4s", 4, b"free")),
            "malformed box",
            id="malformed-index",
        ),
    ],
)
def test_anything_but_an_mp4_or_mov_is_refused_before_ffmpeg(tmp_path, data, why):
    codes, result, measure = check(tmp_path, data())
    assert codes == [Reason.VIDEO_CONTAINER], result.failures
    message = result.failures[0].message
    assert CAMERA in message and "MP4/MOV" in message and why in message
    assert measure.codec == ""  # FFmpeg never opened it


def test_an_index_larger_than_the_frames_need_is_refused(tmp_path):
    """An index (moov) is at most INDEX_BASE_BYTES plus a little per frame: FFmpeg's index
    memory and parse time are bounded by the parquet's rows, not by the file."""
    bloated = FTYP + box(b"moov", box(b"trak") + box(b"free", bytes(INDEX_BASE_BYTES + 4096)))
    codes, result, _ = check(tmp_path, bloated)
    assert codes == [Reason.VIDEO_CONTAINER], result.failures
    assert "index (moov box) has 1,052,688 bytes; 30 frames need at most 1,050,496" in (
        result.failures[0].message
    )
    path = tmp_path / "index.mp4"
    path.write_bytes(bloated)
    assert read_layout(path, 30_000).problem == ""  # enough frames: that size is fine


@pytest.mark.parametrize(
    ("data", "tracks"),
    [
        pytest.param(lambda: with_audio(30), 2, id="audio"),
        pytest.param(lambda: with_timecode(30), 2, id="timecode-data-track"),
        pytest.param(lambda: repeated_frames(30, streams=3), 3, id="three-videos"),
        pytest.param(lambda: FTYP + box(b"moov", box(b"trak") * 100), 100, id="100-tracks"),
        pytest.param(lambda: FTYP + box(b"moov"), 0, id="no-track"),
    ],
)
def test_a_file_of_other_than_one_track_is_refused_before_ffmpeg(tmp_path, data, tracks):
    codes, result, measure = check(tmp_path, data())
    assert codes == [Reason.VIDEO_STREAMS], result.failures
    assert f"has {tracks} tracks" in result.failures[0].message
    assert measure.frames == 0


def test_a_track_ffmpeg_reads_as_data_is_refused(tmp_path):
    """One track, but not a video one (the stream check after FFmpeg opened the file)."""
    codes, result, _ = check(tmp_path, FTYP + box(b"moov", box(b"trak", b"garbage" * 10)))
    assert codes == [Reason.VIDEO_STREAMS], result.failures
    assert "streams are data" in result.failures[0].message


def test_a_stream_of_a_codec_ffmpeg_does_not_know_is_refused(tmp_path):
    """An H.264 file whose sample entry says `zzzz`: no decoder, a verdict (not a crash)."""
    data = repeated_frames(30)
    entry = data.index(b"avc1", len(FTYP))
    codes, result, _ = check(tmp_path, data[:entry] + b"zzzz" + data[entry + 4 :])
    assert codes == [Reason.VIDEO_CODEC], result.failures
    assert "unknown codec" in result.failures[0].message


def test_a_resolution_above_the_maximum_is_refused_before_decoding(tmp_path):
    limits = VideoLimits(max_width=640, max_height=480)
    codes, result, measure = check(
        tmp_path, repeated_frames(30, width=704, height=576), limits=limits
    )
    assert codes == [Reason.VIDEO_RESOLUTION_TOO_HIGH], result.failures
    assert "704x576" in result.failures[0].message and "640x480" in result.failures[0].message
    assert measure.frames == 0  # not one frame decoded
    at_most, _, _ = check(tmp_path, repeated_frames(30, width=640, height=480), limits=limits)
    assert at_most == []
    assert VideoLimits().max_width == VideoLimits().max_height == 4096


def test_the_decoder_refuses_frames_larger_than_the_maximum_mid_stream(tmp_path):
    """The header says 320x240; new parameter sets in the stream switch to 1280x720. Over the
    maximum's pixels the decoder itself refuses the frame (no allocation of it)."""
    data = size_switch((320, 240), (1280, 720), frames=10)
    limits = VideoLimits(max_width=640, max_height=480)
    codes, result, measure = check(tmp_path, data, frames=20, limits=limits)
    assert codes == [Reason.VIDEO_DECODE_ERROR], result.failures
    assert measure.frames == 10
    # within the maximum, the frame decodes and is refused for changing size
    roomy = VideoLimits(max_width=1280, max_height=960)
    codes, result, measure = check(tmp_path, data, frames=20, limits=roomy)
    assert codes == [Reason.VIDEO_RESOLUTION_CHANGED], result.failures
    assert "frame 10 is 1280x720" in result.failures[0].message
    assert measure.frames == 10


def test_an_index_of_more_frames_than_rows_is_refused_before_decoding(tmp_path):
    codes, result, measure = check(tmp_path, repeated_frames(20_000), frames=30)
    assert codes == [Reason.VIDEO_FRAME_COUNT], result.failures
    assert "index lists 20000 frames" in result.failures[0].message
    assert measure.frames == 0


def test_decoding_stops_one_frame_past_the_rows(tmp_path):
    """A fragmented MP4's index lists no frames: decoding finds them, and stops at rows + 1."""
    fragmented = repeated_frames(3000, options={"movflags": "frag_keyframe+empty_moov"})
    codes, result, measure = check(tmp_path, fragmented, frames=30)
    assert codes == [Reason.VIDEO_FRAME_COUNT], result.failures
    assert "more than 30 frames" in result.failures[0].message
    assert measure.frames == 31


def test_the_decode_budget_is_proportional_to_the_declared_duration():
    limits = VideoLimits(cpu_seconds_base=1.0, cpu_seconds_per_second=0.3)
    started = time.process_time()
    budget = with_decode_budget(limits, frames=45 * 30, fps=30).cpu_deadline - started
    assert 14.5 <= budget < 14.6  # 1 s + 0.3 x 45 s
    longer = with_decode_budget(limits, frames=90 * 30, fps=30).cpu_deadline - started
    assert 28.0 <= longer < 28.1


def test_decoding_stops_when_the_episodes_budget_is_spent(tmp_path):
    spent = VideoLimits(cpu_deadline=time.process_time() - 1)
    codes, result, measure = check(tmp_path, repeated_frames(300), frames=300, limits=spent)
    assert codes == [Reason.VIDEO_DECODE_BUDGET], result.failures
    assert "10 s may take" in result.failures[0].message
    assert measure.frames == 1


def test_the_budget_is_shared_by_the_episodes_cameras(tmp_path):
    """One budget for the episode (check_video_files), not one per camera: a budget of 1.5x
    what one camera's file takes lets one camera finish, never both."""
    data = repeated_frames(1500)
    paths = []
    for name in ("scene", "wrist"):
        path = tmp_path / f"{name}.mp4"
        path.write_bytes(data)
        paths.append((StoredVideo(camera_key=f"observation.images.{name}", key=""), path))
    still = VideoLimits(max_still_seconds=3600)  # the picture never moves: not the point here
    one_camera = 0.0
    for _ in range(2):
        started = time.process_time()
        codes, _, _ = check(tmp_path, data, frames=1500, limits=still)
        one_camera = max(one_camera, time.process_time() - started)
    assert codes == []
    result = QAResult()
    limits = replace(still, cpu_seconds_base=1.5 * one_camera, cpu_seconds_per_second=0.0)
    check_video_files(paths, fps=30, frames=1500, result=result, limits=limits)
    stopped = [f.message.split(":")[0] for f in result.failures]
    assert [f.code for f in result.failures] == [Reason.VIDEO_DECODE_BUDGET], result.failures
    assert stopped == ["observation.images.wrist"]  # the second camera, on what was left
    assert result.videos["observation.images.wrist"]["frames"] < 1500


SANDBOXED = """
import json, sys
from datasets.qa_checks import QAResult
from datasets.qa_sandbox import run_in_sandbox
from datasets.qa_video_checks import VideoExpectation, VideoLimits, check_video_file

def check():
    result = QAResult()
    expected = VideoExpectation("cam", fps=30, frames=int(sys.argv[2]))
    check_video_file(sys.argv[1], expected, result, VideoLimits())
    return result

outcome = run_in_sandbox(check, memory_bytes=int(sys.argv[3]), seconds=60)
print(json.dumps([failure.code for failure in outcome.result.failures]))
"""


def sandboxed_codes(path: Path, frames: int, memory_bytes: int) -> list[str]:
    """The check in the QA sandbox, from a fresh interpreter: this test process has freed
    memory the sandbox's child would reuse without growing."""
    done = subprocess.run(
        [sys.executable, "-c", SANDBOXED, str(path), str(frames), str(memory_bytes)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_sandboxs_memory_ceiling_covers_the_decoders_frames(tmp_path):
    """A frame of 2896x2896 (12.6 MB, within the maximum resolution) in a sandbox allowed
    16 MiB: a memory verdict, not a crash; a 320x240 file passes the same sandbox."""
    giant, small = tmp_path / "giant.mp4", tmp_path / "small.mp4"
    giant.write_bytes(repeated_frames(60, width=2896, height=2896))
    small.write_bytes(repeated_frames(60))
    assert sandboxed_codes(small, 60, 16 * 2**20) == []
    assert sandboxed_codes(giant, 60, 16 * 2**20) == [Reason.QA_MEMORY_LIMIT]


def test_a_cut_index_is_never_read_past_the_file(tmp_path):
    path = tmp_path / "cut.mp4"
    path.write_bytes(FTYP + struct.pack(">I4s", 10**9, b"moov") + b"\0" * 32)
    assert read_layout(path, 30).problem == "its index (moov box) is cut short"
