"""Episode QA: the checks every uploaded episode passes before its hours count (pure).

No storage, no database, no Django: the fleet agent runs these same checks on a recording
before uploading it (fleet_agent/importers/local_checks.py). datasets/qa_checks.py adds the
stored object's checks (presence, size, checksum) and re-exports every name here.

The episode file format (README, "Episode file format"): one parquet file per episode with
    observation.state  list<float32|float64>, length = the embodiment's action_dim
    action             list<float32|float64>, length = the embodiment's action_dim
    timestamp          float32|float64 seconds from the episode start, frame_index / fps
    frame_index        int32|int64, 0..n-1
Extra columns (other sensors) are allowed and never read by QA.

QA reads the parquet footer first and then only the four columns above, in bounded batches,
through byte ranges (storage.RangeReader), so skipped columns are never downloaded. Whatever
a file claims, QA stays within limits (QALimits): the footer's size is read from its last
8 bytes before the footer itself; row count, row groups, columns and the decoded size of the
checked columns are refused from the footer before any data is decoded; decoding stops at a
deadline. (datasets/qa_sandbox.py adds a memory ceiling around all of it.) Every failure has
a machine-readable code and a message.
"""

import math
import time
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datasets.qa_content import ContentReason, ContentThresholds, check_content
from datasets.qa_duplicates import trajectory_signature

STATE, ACTION, TIMESTAMP, FRAME_INDEX = "observation.state", "action", "timestamp", "frame_index"
QA_COLUMNS = (STATE, ACTION, TIMESTAMP, FRAME_INDEX)
MAX_GAP_FRAME_PERIODS = 1.5


class Reason:
    """Reason codes, stable for clients."""

    OBJECT_MISSING = "object_missing"
    SIZE_MISMATCH = "size_mismatch"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    NOT_PARQUET = "not_parquet"
    MISSING_COLUMN = "missing_column"
    BAD_DTYPE = "bad_dtype"
    VECTOR_LENGTH = "vector_length"
    FRAME_COUNT = "frame_count"
    FRAME_INDEX = "frame_index"
    TIMESTAMPS_NOT_MONOTONIC = "timestamps_not_monotonic"
    TIMESTAMP_GAP = "timestamp_gap"
    FPS_MISMATCH = "fps_mismatch"
    NON_FINITE = "non_finite"
    DURATION_OUT_OF_BOUNDS = "duration_out_of_bounds"
    STORAGE_ERROR = "storage_error"
    # Limits: refused from the footer, before any data is decoded (as is a row count beyond
    # the longest duration allowed: DURATION_OUT_OF_BOUNDS).
    FOOTER_TOO_LARGE = "footer_too_large"
    TOO_MANY_ROW_GROUPS = "too_many_row_groups"
    TOO_MANY_COLUMNS = "too_many_columns"
    DATA_TOO_LARGE = "data_too_large"
    QA_TIME_LIMIT = "qa_time_limit"
    QA_MEMORY_LIMIT = "qa_memory_limit"
    QA_FAILED = "qa_failed"
    # Camera videos (datasets/qa_video_checks.py), one MP4 per ordered camera.
    SENSOR_MISSING = "sensor_missing"  # an ordered vector stream's column (force/torque, ...)
    VIDEO_MISSING = "video_missing"
    VIDEO_CONTAINER = "video_container"  # not an MP4/MOV (ftyp, index) FFmpeg's MP4 demuxer reads
    VIDEO_STREAMS = "video_streams"  # not exactly one video stream (audio, data, more video)
    VIDEO_RESOLUTION_TOO_HIGH = "video_resolution_too_high"  # over EPISODE_QA_VIDEO_MAX_*
    VIDEO_RESOLUTION_CHANGED = "video_resolution_changed"  # a frame of another size mid-stream
    VIDEO_DECODE_BUDGET = "video_decode_budget"  # the episode's CPU budget for decoding spent
    VIDEO_UNREADABLE = "video_unreadable"
    VIDEO_DECODE_ERROR = "video_decode_error"
    VIDEO_CODEC = "video_codec"
    VIDEO_FPS_MISMATCH = "video_fps_mismatch"
    VIDEO_VARIABLE_FRAME_RATE = "video_variable_frame_rate"
    VIDEO_TIMESTAMPS = "video_timestamps"
    VIDEO_FRAME_COUNT = "video_frame_count"
    VIDEO_RESOLUTION = "video_resolution"
    VIDEO_LENGTHS_DIFFER = "video_lengths_differ"
    VIDEO_BLACK = "video_black"
    VIDEO_FROZEN = "video_frozen"
    VIDEO_UNDEREXPOSED = "video_underexposed"
    VIDEO_OVEREXPOSED = "video_overexposed"
    # Content (datasets/qa_content.py): the file is well formed, the demonstration is not.
    STATE_OUT_OF_LIMITS = ContentReason.STATE_OUT_OF_LIMITS
    STATE_JUMP = ContentReason.STATE_JUMP
    IDLE_EPISODE = ContentReason.IDLE_EPISODE
    FROZEN_SIGNAL = ContentReason.FROZEN_SIGNAL
    ACTION_STATE_MISMATCH = ContentReason.ACTION_STATE_MISMATCH
    NEAR_DUPLICATE = ContentReason.NEAR_DUPLICATE
    # Countable: the file is fine, but it cannot count (datasets/services/qa.py).
    DUPLICATE = "duplicate"
    SURPLUS = "surplus"
    JOB_CANCELLED = "job_cancelled"
    UPLOAD_ABANDONED = "upload_abandoned"
    # The collection plan (datasets/qa_plan.py, issue 30): the episode does not fit the
    # order's (environment, object) cells, or its cameras' calibrations do not hold.
    OBJECT_NOT_IN_PLAN = "object_not_in_plan"
    SCENE_NOT_IN_PLAN = "scene_not_in_plan"
    CELL_FULL = "cell_full"
    CALIBRATION_MISSING = "calibration_missing"
    CALIBRATION_STALE = "calibration_stale"


@dataclass(frozen=True)
class QALimits:
    """What QA spends on one file at most, whatever the file claims (settings EPISODE_QA_*)."""

    max_footer_bytes: int = 1024 * 1024
    max_row_groups: int = 512
    max_columns: int = 256
    max_decoded_bytes: int = 1024**3  # checked columns, uncompressed, as the footer declares
    batch_rows: int = 65536
    seconds: float = 300.0


@dataclass(frozen=True)
class EpisodeExpectation:
    """What the fleet declared when registering the episode, and the order's bounds."""

    size: int
    sha256_hex: str
    fps: int
    action_dim: int
    min_duration_seconds: float = 1.0
    max_duration_seconds: float = 3600.0
    fps_tolerance: float = 0.05  # relative
    min_frames: int = 2
    declared_frames: int | None = None  # rows the fleet said the file has (registration)
    # The order's low-dim sensor streams (stream spec "vectors"): (column, length), checked
    # like the state: present, float vectors of that length, finite.
    vectors: tuple[tuple[str, int], ...] = ()
    # A multipart upload's part size and the parts' SHA-256 (hex) the fleet declared, if any.
    part_bytes: int = 0
    part_sha256s: tuple[str, ...] = ()

    @property
    def vector_dims(self) -> dict[str, int]:
        return {STATE: self.action_dim, ACTION: self.action_dim, **dict(self.vectors)}

    content: ContentThresholds | None = None  # None: format checks only

    @property
    def max_frames(self) -> int:
        return math.floor(self.fps * self.max_duration_seconds) + 1


@dataclass(frozen=True)
class QAFailure:
    code: str
    message: str

    def as_json(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass
class QAResult:
    failures: list[QAFailure] = field(default_factory=list)
    frames: int = 0
    duration_seconds: Decimal = Decimal("0")
    bytes_read: int = 0  # parquet bytes fetched by range (footer + checked columns)
    checksum_bytes_read: int = 0  # bytes streamed to verify the checksum, if the store has none
    checksum_source: str = ""  # "store" (the checksum it kept) or "stream" (read by QA)
    parts_sha256: str = ""  # a multipart file's verified identity (hex sha256 of part digests)
    videos: dict = field(default_factory=dict)  # camera_key -> what video QA measured
    # Content QA (when the expectation asks for it and the format checks passed).
    measurements: dict = field(default_factory=dict)
    quality_score: float | None = None
    fingerprints: tuple = ("", "")
    signature: object = None  # datasets.qa_duplicates.Signature of a passing trajectory
    video_signatures: dict = field(default_factory=dict)  # camera_key -> Signature (its digests)

    @property
    def passed(self) -> bool:
        return not self.failures

    def fail(self, code: str, message: str) -> None:
        self.failures.append(QAFailure(code, message))


def check_episode_file(
    source, expected: EpisodeExpectation, result: QAResult | None = None, *, limits=None
) -> QAResult:
    """Checks of the parquet content; `source` is a path or a seekable binary file."""
    result = result or QAResult()
    limits = limits or QALimits()
    deadline = time.monotonic() + limits.seconds
    metadata = _footer(source, limits, result)
    if metadata is None:
        return result
    try:
        parquet = pq.ParquetFile(source, metadata=metadata)
    except (pa.ArrowInvalid, pa.ArrowException, OSError, ValueError) as exc:
        result.fail(Reason.NOT_PARQUET, f"Not a readable parquet file ({exc.__class__.__name__}).")
        return result

    schema = parquet.schema_arrow
    if not _check_schema(schema, result, expected):
        return result
    frames = parquet.metadata.num_rows
    result.frames = frames
    if frames < expected.min_frames:
        result.fail(Reason.FRAME_COUNT, f"{frames} frames; at least {expected.min_frames} needed.")
        return result
    if not _layout_within_limits(parquet, expected, limits, result):
        return result

    scan = _Scan(expected=expected, result=result)
    try:
        columns = [*QA_COLUMNS, *(name for name, _ in expected.vectors)]
        for batch in parquet.iter_batches(batch_size=limits.batch_rows, columns=columns):
            scan.feed(pa.Table.from_batches([batch]))
            if len(result.failures) >= 5:
                break  # enough to tell the fleet what is wrong
            if time.monotonic() > deadline:
                result.fail(
                    Reason.QA_TIME_LIMIT,
                    f"Checking the file took longer than {limits.seconds:g} s; it was stopped.",
                )
                return result
    except pa.ArrowMemoryError as exc:
        raise MemoryError(str(exc)) from exc  # the sandbox's verdict: a memory limit
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        result.fail(Reason.NOT_PARQUET, f"The file is corrupt ({exc.__class__.__name__}).")
        return result
    scan.finish()
    if result.passed and expected.content is not None:
        _check_content(scan, expected, result)
    if result.passed:
        result.duration_seconds = (Decimal(frames) / Decimal(expected.fps)).quantize(
            Decimal("0.001")
        )
    return result


def _check_content(scan: "_Scan", expected: EpisodeExpectation, result: QAResult) -> None:
    dim = expected.action_dim
    state = _joined(scan.states).reshape(-1, dim)
    action = _joined(scan.actions).reshape(-1, dim)
    report = check_content(state, action, fps=expected.fps, thresholds=expected.content)
    for code, message in report.failures:
        result.fail(code, message)
    result.measurements = report.measurements
    result.quality_score = report.quality_score
    result.fingerprints = report.fingerprints
    # whatever the content checks found: the backfill stores an accepted episode's signature
    # even when today's thresholds would refuse it (QA stores only an accepted one's)
    result.signature = trajectory_signature(state, expected.fps, expected.content.state_limits)


def _joined(parts: list) -> np.ndarray:
    """The batches' values as one array; a file read in one batch is used as it is (a view
    of Arrow's buffer, which content QA only reads), not copied."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


PARQUET_MAGIC = b"PAR1"


def _footer(source, limits: QALimits, result: QAResult):
    """The file's metadata, reading only its footer: its length from the last 8 bytes, then
    (within the limit) exactly those bytes, instead of pyarrow's speculative 64 KiB read.
    None (and a failure recorded) when the file is no parquet or its footer is too large."""
    if isinstance(source, str | bytes) or hasattr(source, "__fspath__"):
        with open(source, "rb") as handle:
            return _footer(handle, limits, result)
    try:
        size = source.seek(0, 2)
        if size < 12:
            raise ValueError("too short")
        source.seek(size - 8)
        tail = source.read(8)
        source.seek(0)
    except (OSError, ValueError):
        result.fail(Reason.NOT_PARQUET, "Not a readable parquet file (too short).")
        return None
    if tail[4:] != PARQUET_MAGIC:
        result.fail(Reason.NOT_PARQUET, "Not a parquet file (no PAR1 marker at its end).")
        return None
    footer = int.from_bytes(tail[:4], "little")
    if footer > limits.max_footer_bytes or footer > size - 12:
        result.fail(
            Reason.FOOTER_TOO_LARGE,
            f"The parquet footer declares {footer} bytes; at most"
            f" {limits.max_footer_bytes} are read.",
        )
        return None
    try:
        source.seek(size - 8 - footer)
        blob = source.read(footer + 8)
        source.seek(0)
        return pq.read_metadata(pa.BufferReader(PARQUET_MAGIC + blob))
    except (pa.ArrowInvalid, pa.ArrowException, OSError, ValueError) as exc:
        result.fail(Reason.NOT_PARQUET, f"Not a readable parquet file ({exc.__class__.__name__}).")
        return None


def _layout_within_limits(
    parquet: pq.ParquetFile, expected: EpisodeExpectation, limits: QALimits, result: QAResult
) -> bool:
    """Row count, row groups, columns and declared sizes, from the footer alone."""
    meta = parquet.metadata
    rows = meta.num_rows
    if meta.num_row_groups > limits.max_row_groups:
        result.fail(
            Reason.TOO_MANY_ROW_GROUPS,
            f"{meta.num_row_groups} row groups; at most {limits.max_row_groups}.",
        )
    if meta.num_columns > limits.max_columns:
        result.fail(
            Reason.TOO_MANY_COLUMNS, f"{meta.num_columns} columns; at most {limits.max_columns}."
        )
    if rows > expected.max_frames:
        result.fail(
            Reason.DURATION_OUT_OF_BOUNDS,
            f"{rows} frames at {expected.fps} fps last more than the"
            f" {expected.max_duration_seconds:g} s an episode may last.",
        )
    elif expected.declared_frames is not None and rows != expected.declared_frames:
        result.fail(
            Reason.FRAME_COUNT,
            f"The file has {rows} frames; {expected.declared_frames} were declared.",
        )
    if not result.passed:
        return False
    return _declared_sizes_within_limits(meta, expected, limits, result)


def _declared_sizes_within_limits(meta, expected, limits: QALimits, result: QAResult) -> bool:
    leaf_of = {}
    dims = expected.vector_dims
    for index in range(meta.num_columns):
        path = meta.schema.column(index).path
        for name in (*QA_COLUMNS, *(name for name, _ in expected.vectors)):
            if path == name or path.startswith(name + "."):
                leaf_of[index] = name
    group_rows = 0
    decoded = 0
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        group_rows += row_group.num_rows
        for index, name in leaf_of.items():
            chunk = row_group.column(index)
            decoded += chunk.total_uncompressed_size
            per_row = dims.get(name, 1)
            if chunk.num_values > row_group.num_rows * per_row:
                result.fail(
                    Reason.VECTOR_LENGTH,
                    f"{name} declares {chunk.num_values} values for {row_group.num_rows} rows"
                    f" (at most {per_row} per row).",
                )
                return False
    if group_rows != meta.num_rows:
        result.fail(Reason.NOT_PARQUET, "The file's row groups do not add up to its row count.")
        return False
    if decoded > limits.max_decoded_bytes:
        result.fail(
            Reason.DATA_TOO_LARGE,
            f"The checked columns decode to {decoded} bytes; at most {limits.max_decoded_bytes}.",
        )
        return False
    return True


def _is_float_vector(arrow_type) -> bool:
    if (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ):
        return pa.types.is_floating(arrow_type.value_type)
    return False


def _check_schema(schema: pa.Schema, result: QAResult, expected: EpisodeExpectation) -> bool:
    missing = [name for name in QA_COLUMNS if name not in schema.names]
    if missing:
        result.fail(Reason.MISSING_COLUMN, f"Missing column(s): {', '.join(missing)}.")
        return False
    sensors = [name for name, _ in expected.vectors if name not in schema.names]
    if sensors:
        result.fail(
            Reason.SENSOR_MISSING, f"The ordered sensor column(s) {', '.join(sensors)} are missing."
        )
        return False
    for name in (STATE, ACTION, *(name for name, _ in expected.vectors)):
        if not _is_float_vector(schema.field(name).type):
            result.fail(
                Reason.BAD_DTYPE,
                f"{name} must be a list of float32/float64, not {schema.field(name).type}.",
            )
    if not pa.types.is_floating(schema.field(TIMESTAMP).type):
        result.fail(
            Reason.BAD_DTYPE,
            f"timestamp must be float32/float64, not {schema.field(TIMESTAMP).type}.",
        )
    if not pa.types.is_integer(schema.field(FRAME_INDEX).type):
        result.fail(
            Reason.BAD_DTYPE,
            f"frame_index must be an integer, not {schema.field(FRAME_INDEX).type}.",
        )
    return result.passed


@dataclass
class _Scan:
    """Streaming checks over row groups, carrying what crosses group boundaries."""

    expected: EpisodeExpectation
    result: QAResult
    rows_seen: int = 0
    first_timestamp: float | None = None
    last_timestamp: float | None = None
    reported: set = field(default_factory=set)
    states: list = field(default_factory=list)  # decoded values, kept for content QA
    actions: list = field(default_factory=list)

    def fail_once(self, code: str, message: str) -> None:
        if code not in self.reported:
            self.reported.add(code)
            self.result.fail(code, message)

    def feed(self, table: pa.Table) -> None:
        keep = self.expected.content is not None
        kept = {STATE: self.states, ACTION: self.actions}
        for name, dim in self.expected.vector_dims.items():
            values = self._check_vectors(name, table.column(name).combine_chunks(), dim)
            if keep and values is not None and name in kept:
                kept[name].append(values)
        self._check_frame_index(table.column(FRAME_INDEX).to_numpy())
        self._check_timestamps(table.column(TIMESTAMP).to_numpy(zero_copy_only=False))
        self.rows_seen += table.num_rows

    def _check_vectors(self, name: str, column, dim: int):
        if column.null_count:
            self.fail_once(Reason.VECTOR_LENGTH, f"{name} has empty (null) rows.")
            return None
        lengths = np.asarray(pc.list_value_length(column).to_numpy(zero_copy_only=False))
        if lengths.size and (lengths != dim).any():
            bad = int(lengths[lengths != dim][0])
            whose = "the embodiment's" if name in (STATE, ACTION) else "the sensor's"
            self.fail_once(
                Reason.VECTOR_LENGTH,
                f"{name} vectors must have {dim} values ({whose}); found {bad}.",
            )
            return None
        values = column.flatten().to_numpy(zero_copy_only=False)
        if values.size and not np.isfinite(values).all():
            self.fail_once(Reason.NON_FINITE, f"{name} contains NaN or infinity.")
        return values

    def _check_frame_index(self, frame_index) -> None:
        expected = np.arange(self.rows_seen, self.rows_seen + len(frame_index))
        if not np.array_equal(frame_index, expected):
            self.fail_once(Reason.FRAME_INDEX, "frame_index must count 0, 1, 2, ... without gaps.")

    def _check_timestamps(self, timestamps) -> None:
        if timestamps.size == 0:
            return
        if not np.isfinite(timestamps).all():
            self.fail_once(Reason.NON_FINITE, "timestamp contains NaN or infinity.")
            return
        series = (
            timestamps
            if self.last_timestamp is None
            else np.concatenate(([self.last_timestamp], timestamps))
        )
        steps = np.diff(series)
        if steps.size and (steps <= 0).any():
            self.fail_once(Reason.TIMESTAMPS_NOT_MONOTONIC, "timestamps must strictly increase.")
        period = 1.0 / self.expected.fps
        if steps.size and (steps > MAX_GAP_FRAME_PERIODS * period).any():
            gap = float(steps.max())
            self.fail_once(
                Reason.TIMESTAMP_GAP,
                f"A gap of {gap:.4f} s between frames exceeds {MAX_GAP_FRAME_PERIODS} frame periods"
                f" ({MAX_GAP_FRAME_PERIODS * period:.4f} s).",
            )
        if self.first_timestamp is None:
            self.first_timestamp = float(timestamps[0])
        self.last_timestamp = float(timestamps[-1])

    def finish(self) -> None:
        expected = self.expected
        frames = self.rows_seen
        if self.first_timestamp is None or self.last_timestamp is None or not self.result.passed:
            return
        span = self.last_timestamp - self.first_timestamp
        measured_fps = (frames - 1) / span if span > 0 else math.inf
        if abs(measured_fps - expected.fps) > expected.fps_tolerance * expected.fps:
            self.fail_once(
                Reason.FPS_MISMATCH,
                f"Timestamps give {measured_fps:.2f} fps; {expected.fps} fps was declared"
                f" (tolerance {expected.fps_tolerance:.0%}).",
            )
        duration = frames / expected.fps
        if not (expected.min_duration_seconds <= duration <= expected.max_duration_seconds):
            self.fail_once(
                Reason.DURATION_OUT_OF_BOUNDS,
                f"The episode lasts {duration:.1f} s; episodes must last"
                f" {expected.min_duration_seconds:g} to {expected.max_duration_seconds:g} s.",
            )
