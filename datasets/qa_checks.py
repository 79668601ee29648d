"""Episode QA on a stored object: presence, size and checksum, then the file's own checks.

The file checks themselves are pure and live in datasets/qa_format.py (the fleet agent runs
them before uploading, fleet_agent/importers/local_checks.py); their names are re-exported
here, so `datasets.qa_checks` stays the one place the platform imports QA from.
"""

import contextlib

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
    key: str,
    expected: EpisodeExpectation,
    limits: QALimits | None = None,
    *,
    uploaded_key: str = "",
) -> QAResult:
    """All checks on an uploaded object: presence, size, checksum, then the file itself.

    `key` is the platform's copy; `uploaded_key` (when given) the object the fleet uploaded,
    whose checksum the store verified and kept (a server-side copy need not keep it)."""
    result = QAResult()
    try:
        info = storage.head(key)
    except storage.ObjectMissing:
        result.fail(Reason.OBJECT_MISSING, "No file was uploaded for this episode.")
        return result
    kept = info
    if uploaded_key and uploaded_key != key:
        with contextlib.suppress(storage.ObjectMissing):  # gone since: the copy's own, if any
            kept = storage.head(uploaded_key)
    if info.size != expected.size:
        result.fail(
            Reason.SIZE_MISMATCH, f"The file has {info.size} bytes; {expected.size} were declared."
        )
        return result
    if not _checksum_matches(key, kept.checksum_sha256, expected, result):
        result.fail(Reason.CHECKSUM_MISMATCH, "The file's SHA-256 differs from the declared one.")
        return result
    reader = storage.RangeReader(key, size=info.size)
    check_episode_file(reader, expected, result, limits=limits)
    result.bytes_read = reader.bytes_read
    return result


def _checksum_matches(
    key: str, kept: str | None, expected: EpisodeExpectation, result: QAResult
) -> bool:
    """Are the stored bytes the declared ones? A checksum the store kept answers without
    reading them: a single PUT's is the file's SHA-256; a multipart upload's composite
    ("<b64>-<N>") proves the bytes are the declared parts (the store verified each part
    against its signed checksum), not the declared whole-file SHA-256, which is why the
    duplicate checks also go by the parts (`parts_sha256`). Otherwise QA streams the object
    once, checking the file's SHA-256 and, for a multipart file, computing its parts'."""
    declared_parts = expected.part_sha256s
    if kept is not None and "-" not in kept:
        result.checksum_source = "store"
        return kept == storage.sha256_hex_to_base64(expected.sha256_hex)
    if kept is not None and declared_parts:
        result.checksum_source = "store"
        result.parts_sha256 = storage.parts_digest(declared_parts)
        return kept == storage.composite_sha256(declared_parts)
    result.checksum_source = "stream"
    whole, parts = storage.object_sha256_parts(key, expected.part_bytes)
    result.checksum_bytes_read = expected.size
    if expected.part_bytes:
        result.parts_sha256 = storage.parts_digest(parts)
    matches_parts = not declared_parts or list(declared_parts) == parts
    return whole == expected.sha256_hex.lower() and matches_parts
