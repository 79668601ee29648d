"""Episode QA: the checks every uploaded episode passes before its hours count.

The episode file format (README, "Episode file format"): one parquet file per episode with
    observation.state  list<float32|float64>, length = the embodiment's action_dim
    action             list<float32|float64>, length = the embodiment's action_dim
    timestamp          float32|float64 seconds from the episode start, frame_index / fps
    frame_index        int32|int64, 0..n-1
Extra columns (other sensors) are allowed and never read by QA.

QA reads the parquet footer first and then only the four columns above, row group by row
group, through byte ranges (storage.RangeReader), so memory stays bounded and skipped
columns are never downloaded. Every failure has a machine-readable code and a message.
"""

import math
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datasets import storage

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

    @property
    def passed(self) -> bool:
        return not self.failures

    def fail(self, code: str, message: str) -> None:
        self.failures.append(QAFailure(code, message))


def check_stored_episode(key: str, expected: EpisodeExpectation) -> QAResult:
    """All checks on an uploaded object: presence, size, checksum, then the file itself."""
    result = QAResult()
    try:
        info = storage.head(key)
    except storage.ObjectMissing:
        result.fail(Reason.OBJECT_MISSING, "No file was uploaded for this episode.")
        return result
    if info.size != expected.size:
        result.fail(
            Reason.SIZE_MISMATCH, f"The file has {info.size} bytes; {expected.size} were declared."
        )
        return result
    if info.checksum_sha256 is not None:
        matches = info.checksum_sha256 == storage.sha256_hex_to_base64(expected.sha256_hex)
    else:
        matches = storage.object_sha256(key) == expected.sha256_hex.lower()
        result.checksum_bytes_read = info.size
    if not matches:
        result.fail(Reason.CHECKSUM_MISMATCH, "The file's SHA-256 differs from the declared one.")
        return result
    reader = storage.RangeReader(key, size=info.size)
    check_episode_file(reader, expected, result)
    result.bytes_read = reader.bytes_read
    return result


def check_episode_file(
    source, expected: EpisodeExpectation, result: QAResult | None = None
) -> QAResult:
    """Checks of the parquet content; `source` is a path or a seekable binary file."""
    result = result or QAResult()
    try:
        parquet = pq.ParquetFile(source)
    except (pa.ArrowInvalid, pa.ArrowException, OSError, ValueError) as exc:
        result.fail(Reason.NOT_PARQUET, f"Not a readable parquet file ({exc.__class__.__name__}).")
        return result

    schema = parquet.schema_arrow
    if not _check_schema(schema, result):
        return result
    frames = parquet.metadata.num_rows
    result.frames = frames
    if frames < expected.min_frames:
        result.fail(Reason.FRAME_COUNT, f"{frames} frames; at least {expected.min_frames} needed.")
        return result

    scan = _Scan(expected=expected, result=result)
    try:
        for group in range(parquet.num_row_groups):
            scan.feed(parquet.read_row_group(group, columns=list(QA_COLUMNS)))
            if len(result.failures) >= 5:
                break  # enough to tell the fleet what is wrong
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        result.fail(Reason.NOT_PARQUET, f"The file is corrupt ({exc.__class__.__name__}).")
        return result
    scan.finish()
    if result.passed:
        result.duration_seconds = (Decimal(frames) / Decimal(expected.fps)).quantize(
            Decimal("0.001")
        )
    return result


def _is_float_vector(arrow_type) -> bool:
    if (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ):
        return pa.types.is_floating(arrow_type.value_type)
    return False


def _check_schema(schema: pa.Schema, result: QAResult) -> bool:
    missing = [name for name in QA_COLUMNS if name not in schema.names]
    if missing:
        result.fail(Reason.MISSING_COLUMN, f"Missing column(s): {', '.join(missing)}.")
        return False
    for name in (STATE, ACTION):
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

    def fail_once(self, code: str, message: str) -> None:
        if code not in self.reported:
            self.reported.add(code)
            self.result.fail(code, message)

    def feed(self, table: pa.Table) -> None:
        for name in (STATE, ACTION):
            self._check_vectors(name, table.column(name).combine_chunks())
        self._check_frame_index(table.column(FRAME_INDEX).to_numpy())
        self._check_timestamps(table.column(TIMESTAMP).to_numpy(zero_copy_only=False))
        self.rows_seen += table.num_rows

    def _check_vectors(self, name: str, column) -> None:
        if column.null_count:
            self.fail_once(Reason.VECTOR_LENGTH, f"{name} has empty (null) rows.")
            return
        lengths = np.asarray(pc.list_value_length(column).to_numpy(zero_copy_only=False))
        if lengths.size and (lengths != self.expected.action_dim).any():
            bad = int(lengths[lengths != self.expected.action_dim][0])
            self.fail_once(
                Reason.VECTOR_LENGTH,
                f"{name} vectors must have {self.expected.action_dim} values (the embodiment's);"
                f" found {bad}.",
            )
            return
        values = column.flatten().to_numpy(zero_copy_only=False)
        if values.size and not np.isfinite(values).all():
            self.fail_once(Reason.NON_FINITE, f"{name} contains NaN or infinity.")

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
