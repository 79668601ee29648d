"""Video QA (issue 15): the checks every camera's MP4 of an episode passes, on local files.

Pure: no storage, no database (datasets/qa_sandbox.py fetches each video to a temporary file,
verifying its size and SHA-256 on the way, and runs these in the bounded sandbox). Per file:
the container is an MP4/MOV of exactly one video stream and nothing else (its boxes read
first, datasets/qa_video_container.py; then FFmpeg's MP4 demuxer, forced), the codec is
allowed (H.264, HEVC, AV1), the frame rate is constant and equal to the episode's, the
resolution is at least the ordered one and at most the platform's maximum (from the stream's
header, before any frame decodes), every frame decodes, frame i sits at i/fps (lerobot's
1e-4 s tolerance), there are as many frames as parquet rows, and no stretch longer than the
allowed one is black, frozen, heavily under-exposed (dark) or over-exposed (blown out).
Across files: every camera has the same number of frames.

Bounded whatever the file claims (issue 28): decoding stops one frame past the parquet's rows
(the count is wrong by then), when the episode's CPU budget for decoding (proportional to its
declared duration, shared by its cameras: `with_decode_budget`) is spent, or at the wall-clock
deadline; the decoder refuses frames of more pixels than the maximum resolution, so a frame's
allocation is bounded too, and one that fails for memory is `qa_memory_limit` (the sandbox's
ceiling stops the rest).

Decoding streams: one frame at a time, of which only a subsampled luma grid is kept (the
previous one, for the difference measure). Every failure a stable reason code
(datasets.qa_checks.Reason) and a sentence.
"""

import time
from dataclasses import dataclass, field, replace

import av
import numpy as np

from datasets.qa_duplicates import VIDEO_LIMITS, trajectory_signature
from datasets.qa_format import QAResult, Reason
from datasets.qa_video_container import read_layout

ALLOWED_CODECS = {"h264": "h264", "hevc": "hevc", "h265": "hevc", "av1": "av1"}
AV1_DECODERS = {"libdav1d", "libaom-av1", "av1"}  # names PyAV may report for an AV1 stream
TIMESTAMP_TOLERANCE_S = 1e-4  # lerobot's: frame i must be within this of i / fps
MP4_DEMUXER = "mp4"  # forced when opening: FFmpeg never guesses the format from the bytes
MOV_DEMUXER_NAME = "mov,mp4,m4a,3gp,3g2,mj2"  # the demuxer that name opens, as PyAV reports it
DIGEST_SIDE = 4  # a measured frame's fingerprint digest: its luma in DIGEST_SIDE^2 blocks


@dataclass(frozen=True)
class VideoLimits:
    """Settings EPISODE_QA_VIDEO_* (datasets/qa_sandbox.py reads them)."""

    max_still_seconds: float = 3.0  # longest black or frozen stretch allowed
    black_luma: float = 24.0  # mean luma (0-255, limited range: black is 16) below: black
    dark_luma: float = 40.0  # mean luma below: heavily under-exposed (black counts too)
    bright_luma: float = 220.0  # mean luma above: blown out (limited range: white is 235)
    frozen_difference: float = 0.25  # mean absolute luma difference to the run's start: frozen
    grid_step: int = 8  # the difference measure reads every grid_step-th pixel of luma
    measures_per_second: int = 10  # frames measured for black/frozen (every frame decodes)
    max_width: int = 4096  # the largest resolution taken (and the decoder's pixel ceiling)
    max_height: int = 4096
    cpu_seconds_base: float = 1.0  # the episode's decode budget: this plus ...
    cpu_seconds_per_second: float = 0.3  # ... this per second of its declared duration
    deadline: float | None = None  # time.monotonic() after which decoding stops
    cpu_deadline: float | None = None  # time.process_time() after which decoding stops
    fingerprint: bool = False  # keep each measured frame's 4x4 luma digest (near-duplicates)


def with_decode_budget(limits: VideoLimits, *, frames: int, fps: int) -> VideoLimits:
    """`limits` with the episode's CPU budget for decoding all its cameras, starting now:
    proportional to its declared duration (frames / fps), whatever the files claim."""
    budget = limits.cpu_seconds_base + limits.cpu_seconds_per_second * frames / max(fps, 1)
    return replace(limits, cpu_deadline=time.process_time() + budget)


@dataclass(frozen=True)
class VideoExpectation:
    camera_key: str
    fps: int
    frames: int  # the parquet's rows
    min_width: int = 0
    min_height: int = 0


@dataclass
class VideoMeasure:
    """What QA measured (recorded on EpisodeVideo)."""

    codec: str = ""
    pix_fmt: str = ""
    width: int = 0
    height: int = 0
    frames: int = 0  # decoded (when decoding stopped early: up to there)
    fps: int = 0
    stopped: str = ""  # why decoding stopped before the end ("" when it did not)

    def as_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Still:
    """The longest run of black (or frozen) frames so far."""

    run: int = 0
    longest: int = 0

    def see(self, still: bool, frames: int = 1) -> None:
        self.run = self.run + frames if still else 0
        self.longest = max(self.longest, self.run)


@dataclass
class _Decoded:
    frames: int = 0
    timestamp_error: float = 0.0
    steps: set = field(default_factory=set)
    black: _Still = field(default_factory=_Still)
    frozen: _Still = field(default_factory=_Still)
    dark: _Still = field(default_factory=_Still)
    bright: _Still = field(default_factory=_Still)
    stopped: str = ""  # why decoding stopped early: one of STOPPED's keys
    size: tuple[int, int] = (0, 0)  # the header's width and height
    other_size: tuple[int, int] = (0, 0)  # a frame's size other than the header's
    digests: list = field(default_factory=list)  # each measured frame's 4x4 luma means / 255


def _codec_name(stream) -> str:
    name = stream.codec_context.name
    if name in AV1_DECODERS:
        return "av1"
    return ALLOWED_CODECS.get(name, name)


def check_video_file(
    path, expected: VideoExpectation, result: QAResult, limits: VideoLimits | None = None
) -> VideoMeasure:
    """All per-file checks of one camera's video; failures go to `result`, named by camera."""
    limits = limits or VideoLimits()
    measure = VideoMeasure()
    camera = expected.camera_key
    layout = read_layout(path, expected.frames)
    if layout.problem:
        result.fail(
            Reason.VIDEO_CONTAINER, f"{camera}: not an MP4/MOV file QA reads: {layout.problem}."
        )
        return measure
    if layout.tracks != 1:
        result.fail(
            Reason.VIDEO_STREAMS,
            f"{camera}: the file has {layout.tracks} tracks; a"
            " camera's file holds one video stream and nothing else.",
        )
        return measure
    decoder = {"max_pixels": str(limits.max_width * limits.max_height)}
    try:  # the options bound the frames FFmpeg decodes while probing the stream
        container = av.open(str(path), mode="r", format=MP4_DEMUXER, options=decoder)
    except MemoryError:
        result.fail(
            Reason.QA_MEMORY_LIMIT, f"{camera}: opening it needed more memory than QA allows."
        )
        return measure
    except (av.FFmpegError, OSError, ValueError) as exc:
        result.fail(Reason.VIDEO_UNREADABLE, f"{camera}: not a readable video ({_why(exc)}).")
        return measure
    with container:
        if not _stream_checks(container, camera, result):
            return measure
        stream = container.streams.video[0]
        if not _header_checks(stream, expected, limits, measure, result):
            return measure
        stream.codec_context.options = decoder  # and those the checks decode
        declared = stream.frames  # the container's index: 0 when it does not say
        if declared > expected.frames:
            result.fail(
                Reason.VIDEO_FRAME_COUNT,
                f"{camera}: the file's index lists {declared}"
                f" frames; the parquet has {expected.frames} rows.",
            )
            return measure
        decoded = _decode(container, stream, expected, limits)
    if not decoded.stopped and declared and decoded.frames < declared:
        decoded.stopped = "decode"  # the index lists frames the file no longer holds: cut
    measure.frames, measure.stopped = decoded.frames, decoded.stopped
    failures = len(result.failures)
    _decoded_checks(decoded, expected, limits, result)
    if limits.fingerprint and len(result.failures) == failures and len(decoded.digests) > 1:
        # the digests as a 16-element "state" at the measured rate: the trajectory's signature
        rate = expected.fps / max(1, expected.fps // max(1, limits.measures_per_second))
        result.video_signatures[camera] = trajectory_signature(
            np.array(decoded.digests), rate, VIDEO_LIMITS
        )
    return measure


def _why(exc: Exception) -> str:
    return exc.__class__.__name__


def _stream_checks(container, camera: str, result: QAResult) -> bool:
    """FFmpeg's MP4 demuxer read the file, and found one video stream and nothing else."""
    demuxer = container.format.input.name if container.format.input else container.format.name
    if demuxer != MOV_DEMUXER_NAME:
        result.fail(
            Reason.VIDEO_CONTAINER,
            f"{camera}: not an MP4/MOV file QA reads: FFmpeg read it as {demuxer}.",
        )
        return False
    kinds = [stream.type for stream in container.streams]
    if kinds != ["video"]:
        listed = ", ".join(kinds) or "none"
        result.fail(
            Reason.VIDEO_STREAMS,
            f"{camera}: the file's streams are {listed}; a"
            " camera's file holds one video stream and nothing else.",
        )
        return False
    return True


def _header_checks(
    stream, expected, limits: VideoLimits, measure: VideoMeasure, result: QAResult
) -> bool:
    """Codec, frame rate and resolution, from the stream's header; False: do not decode."""
    camera = expected.camera_key
    context = stream.codec_context
    if context is None:  # a codec FFmpeg has no decoder for (an unknown sample entry)
        result.fail(
            Reason.VIDEO_CODEC, f"{camera}: an unknown codec; videos are H.264, HEVC or AV1."
        )
        return False
    measure.codec = _codec_name(stream)
    measure.pix_fmt = context.pix_fmt or ""
    measure.width, measure.height = context.width, context.height
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    measure.fps = round(float(rate)) if rate else 0
    if measure.codec not in set(ALLOWED_CODECS.values()):
        result.fail(
            Reason.VIDEO_CODEC,
            f"{camera}: codec {measure.codec}; videos are H.264, HEVC or AV1.",
        )
        return False
    if measure.width > limits.max_width or measure.height > limits.max_height:
        result.fail(
            Reason.VIDEO_RESOLUTION_TOO_HIGH,
            _too_high(camera, measure.width, measure.height, limits),
        )
        return False
    if rate is None or abs(float(rate) - expected.fps) > 1e-3:
        result.fail(
            Reason.VIDEO_FPS_MISMATCH,
            f"{camera}: {float(rate or 0):.3f} fps; the episode is recorded at {expected.fps} fps.",
        )
    if measure.width < expected.min_width or measure.height < expected.min_height:
        result.fail(
            Reason.VIDEO_RESOLUTION,
            f"{camera}: {measure.width}x{measure.height}; the order asks for at least"
            f" {expected.min_width}x{expected.min_height}.",
        )
    return True


def _too_high(camera: str, width: int, height: int, limits: VideoLimits) -> str:
    return (
        f"{camera}: {width}x{height}; the platform takes at most"
        f" {limits.max_width}x{limits.max_height}."
    )


def _decode(container, stream, expected: VideoExpectation, limits: VideoLimits) -> _Decoded:
    """Every frame, streaming: timestamps against i/fps, steps between them, still runs; one
    frame past the parquet's rows at most, within the CPU budget and the deadline."""
    decoded = _Decoded()
    stills = _StillMeasure(expected.fps, limits)
    decoded.size = size = (stream.codec_context.width, stream.codec_context.height)
    last_time = None
    try:
        for frame in container.decode(stream):
            if frame.time is None:
                raise av.InvalidDataError(0, "a frame without a timestamp")
            if (frame.width, frame.height) != size:  # another SPS in the stream
                decoded.stopped, decoded.other_size = "size", (frame.width, frame.height)
                break
            index = decoded.frames
            decoded.timestamp_error = max(
                decoded.timestamp_error, abs(frame.time - index / expected.fps)
            )
            if last_time is not None:
                decoded.steps.add(round(frame.time - last_time, 6))
            last_time = frame.time
            stills.see(frame, index, decoded)
            decoded.frames += 1
            decoded.stopped = _stop_reason(decoded.frames, expected.frames, limits)
            if decoded.stopped:
                break
    except MemoryError:  # the decoder's (av.error.MemoryError is one) or ours
        decoded.stopped = "memory"
    except (av.FFmpegError, ValueError, EOFError):
        decoded.stopped = "decode"
    return decoded


def _stop_reason(frames: int, rows: int, limits: VideoLimits) -> str:
    if frames > rows:
        return "frames"  # one past the parquet's rows: the count is wrong already
    if limits.cpu_deadline is not None and time.process_time() > limits.cpu_deadline:
        return "budget"
    if limits.deadline is not None and time.monotonic() > limits.deadline:
        return "time"
    return ""


class _StillMeasure:
    """Black, dark, blown-out and frozen runs, measured on every `every`-th frame's luma grid."""

    def __init__(self, fps: int, limits: VideoLimits):
        self.every = max(1, fps // max(1, limits.measures_per_second))
        self.step = limits.grid_step
        # per sample; compared as sums below (no mean() per frame)
        self.black_sum, self.dark_sum = limits.black_luma, limits.dark_luma
        self.bright_sum, self.frozen_sum = limits.bright_luma, limits.frozen_difference
        self.anchor = None
        self.fingerprint = limits.fingerprint

    def see(self, frame, index: int, decoded: _Decoded) -> None:
        if index % self.every:
            return
        every = self.every
        grid = _luma_grid(frame, self.step)
        samples = grid.size
        total = int(np.add.reduce(grid, axis=None))
        black = total < self.black_sum * samples
        decoded.black.see(black, every)
        decoded.dark.see(total < self.dark_sum * samples, every)
        decoded.bright.see(total > self.bright_sum * samples, every)
        # Frozen: the picture stays within frozen_difference of the run's first frame (an
        # anchor, not the previous frame: slow motion adds up, a frozen one not).
        still = (
            self.anchor is not None
            and not black
            and int(np.add.reduce(np.abs(grid - self.anchor), axis=None))
            < self.frozen_sum * samples
        )
        decoded.frozen.see(still, every)
        if not still:
            self.anchor = grid
        if self.fingerprint:
            decoded.digests.append(_digest(grid))


def _luma_grid(frame, step: int) -> np.ndarray:
    """Every step-th luma sample of the frame, as int32 (a few hundred values)."""
    plane = frame.planes[0]
    if frame.format.name not in ("yuv420p", "yuvj420p", "yuv422p", "yuv444p", "nv12", "gray"):
        frame = frame.reformat(format="gray")
        plane = frame.planes[0]
    rows = np.frombuffer(plane, dtype=np.uint8).reshape(-1, plane.line_size)
    return rows[: frame.height : step, : frame.width : step].astype(np.int32)


def _digest(grid: np.ndarray) -> np.ndarray:
    """The luma grid's means over DIGEST_SIDE x DIGEST_SIDE blocks of the picture (values in
    [0, 1]): what a re-encode or noise barely changes, and the picture's motion does."""
    tall, wide = grid.shape[0] // DIGEST_SIDE, grid.shape[1] // DIGEST_SIDE
    if not tall or not wide:
        return np.zeros(DIGEST_SIDE * DIGEST_SIDE)
    blocks = grid[: tall * DIGEST_SIDE, : wide * DIGEST_SIDE].reshape(
        DIGEST_SIDE, tall, DIGEST_SIDE, wide
    )  # sums, not means (half the cost), scaled once
    sums = np.add.reduce(np.add.reduce(blocks, axis=3), axis=1).ravel()
    return sums * (1 / (255.0 * tall * wide))


def _stopped_failure(decoded: _Decoded, expected, limits: VideoLimits) -> tuple[str, str]:
    """The reason and sentence for decoding that stopped early."""
    camera, frames = expected.camera_key, decoded.frames
    return {
        "time": (Reason.QA_TIME_LIMIT, f"{camera}: decoding took too long; the check was stopped."),
        "budget": (
            Reason.VIDEO_DECODE_BUDGET,
            f"{camera}: decoding needed more CPU time than an episode of"
            f" {expected.frames / max(expected.fps, 1):g} s may take; stopped at frame {frames}.",
        ),
        "memory": (
            Reason.QA_MEMORY_LIMIT,
            f"{camera}: decoding needed more memory than QA allows; stopped at frame {frames}.",
        ),
        "size": (
            Reason.VIDEO_RESOLUTION_CHANGED,
            f"{camera}: frame {frames} is {decoded.other_size[0]}x{decoded.other_size[1]}; the"
            " stream's header and the frames before it are"
            f" {decoded.size[0]}x{decoded.size[1]} (one size throughout).",
        ),
        "decode": (
            Reason.VIDEO_DECODE_ERROR,
            f"{camera}: frame {frames} does not decode (the file is damaged or cut).",
        ),
        "frames": (
            Reason.VIDEO_FRAME_COUNT,
            f"{camera}: more than {expected.frames} frames; the parquet has {expected.frames}"
            " rows.",
        ),
    }[decoded.stopped]


def _decoded_checks(decoded: _Decoded, expected, limits: VideoLimits, result: QAResult) -> None:
    camera = expected.camera_key
    if decoded.stopped:
        result.fail(*_stopped_failure(decoded, expected, limits))
        return
    if decoded.frames != expected.frames:
        result.fail(
            Reason.VIDEO_FRAME_COUNT,
            f"{camera}: {decoded.frames} frames; the parquet has {expected.frames} rows.",
        )
    period = round(1 / expected.fps, 6)
    if len(decoded.steps) > 1 or (decoded.steps and abs(next(iter(decoded.steps)) - period) > 1e-4):
        result.fail(
            Reason.VIDEO_VARIABLE_FRAME_RATE,
            f"{camera}: frames are not evenly spaced at 1/{expected.fps} s (variable frame rate"
            " or dropped frames).",
        )
    elif decoded.timestamp_error > TIMESTAMP_TOLERANCE_S:
        result.fail(
            Reason.VIDEO_TIMESTAMPS,
            f"{camera}: a frame is {decoded.timestamp_error:.4f} s from i/fps (tolerance"
            f" {TIMESTAMP_TOLERANCE_S:g} s).",
        )
    longest_allowed = limits.max_still_seconds * expected.fps
    if decoded.black.longest > longest_allowed:
        result.fail(
            Reason.VIDEO_BLACK,
            f"{camera}: {decoded.black.longest / expected.fps:.1f} s of black frames (at most"
            f" {limits.max_still_seconds:g} s).",
        )
    elif decoded.dark.longest > longest_allowed:  # dark, not black: its own words
        result.fail(
            Reason.VIDEO_UNDEREXPOSED,
            f"{camera}: {decoded.dark.longest / expected.fps:.1f} s too dark to see (mean luma"
            f" under {limits.dark_luma:g}; at most {limits.max_still_seconds:g} s).",
        )
    if decoded.bright.longest > longest_allowed:
        result.fail(
            Reason.VIDEO_OVEREXPOSED,
            f"{camera}: {decoded.bright.longest / expected.fps:.1f} s blown out (mean luma over"
            f" {limits.bright_luma:g}; at most {limits.max_still_seconds:g} s).",
        )
    if decoded.frozen.longest > longest_allowed:
        result.fail(
            Reason.VIDEO_FROZEN,
            f"{camera}: the picture is frozen for {decoded.frozen.longest / expected.fps:.1f} s"
            f" (at most {limits.max_still_seconds:g} s).",
        )


def check_camera_lengths(measures: dict[str, VideoMeasure], result: QAResult) -> None:
    """Every camera has the same number of frames (of those decoded to the end)."""
    lengths = {key: m.frames for key, m in measures.items() if m.frames and not m.stopped}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{key} {frames}" for key, frames in sorted(lengths.items()))
        result.fail(
            Reason.VIDEO_LENGTHS_DIFFER, f"The cameras have different frame counts: {listed}."
        )
