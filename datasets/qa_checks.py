"""Episode QA on a stored object: presence, size and checksum, then the file's own checks.

The file checks themselves are pure and live in datasets/qa_format.py (the fleet agent runs
them before uploading, fleet_agent/importers/local_checks.py); their names are re-exported
here, so `datasets.qa_checks` stays the one place the platform imports QA from.
"""

from datasets import storage
from datasets.qa_format import (
    ACTION,
    FRAME_INDEX,
    MAX_GAP_FRAME_PERIODS,
    PARQUET_MAGIC,
    QA_COLUMNS,
    STATE,
    TIMESTAMP,
    EpisodeExpectation,
    QAFailure,
    QALimits,
    QAResult,
    Reason,
    check_episode_file,
)

__all__ = [
    "ACTION",
    "FRAME_INDEX",
    "MAX_GAP_FRAME_PERIODS",
    "PARQUET_MAGIC",
    "QA_COLUMNS",
    "STATE",
    "TIMESTAMP",
    "EpisodeExpectation",
    "QAFailure",
    "QALimits",
    "QAResult",
    "Reason",
    "check_episode_file",
    "check_stored_episode",
]


def check_stored_episode(
    key: str, expected: EpisodeExpectation, limits: QALimits | None = None
) -> QAResult:
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
    check_episode_file(reader, expected, result, limits=limits)
    result.bytes_read = reader.bytes_read
    return result
