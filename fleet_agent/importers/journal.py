"""The import journal: what this machine has done for each recording of one job.

One SQLite file per job (stdlib `sqlite3`). Why SQLite rather than JSON lines: each step is
one transaction, committed with `synchronous=FULL` (fsync before the call returns), so a
crash leaves either the step or nothing, never a torn line to repair; a renewed upload
replaces the instructions and forgets the parts sent to the old ones in one transaction; and
the importer looks rows up by source id instead of replaying a growing log. An exclusive
`flock` on `<journal>.lock` keeps a second importer (an `import` next to a `watch`) off the
same journal: it stops with `JournalBusy` instead of uploading the same bytes twice.

Per source id it keeps: the recording's SHA-256 and its registration's `Idempotency-Key`;
the episode the platform registered and its upload instructions (the presigned URLs, which
stay valid for a resumed upload until they expire); each file sent (a single PUT, or each
multipart part with its ETag); `completed`; the QA verdict and reasons; or the error that
made it fail (retried on the next run).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

REGISTERED, COMPLETED, FAILED = "registered", "completed", "failed"
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS recordings (
    source_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    sha256 TEXT NOT NULL DEFAULT '',
    idempotency_key TEXT NOT NULL DEFAULT '',
    episode_id TEXT,
    declared TEXT,
    upload TEXT,
    verdict TEXT,
    reasons TEXT,
    error TEXT,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sent (
    source_id TEXT NOT NULL,
    file TEXT NOT NULL,
    part_number INTEGER NOT NULL,
    etag TEXT NOT NULL,
    PRIMARY KEY (source_id, file, part_number)
);
"""


class JournalBusy(RuntimeError):
    """Another importer holds this journal."""


class JournalMismatch(ValueError):
    """The journal belongs to another job."""


def idempotency_key(job_id: str, source_id: str, sha256: str) -> str:
    """The registration's key: the same recording (same bytes) of the same job always asks
    for the same episode, so a re-run after a crash gets that episode back."""
    digest = hashlib.sha256(f"{job_id}\n{source_id}\n{sha256}".encode()).hexdigest()
    return f"import-{digest[:48]}"


@dataclass(frozen=True)
class Entry:
    source_id: str
    state: str
    sha256: str
    idempotency_key: str
    episode_id: str | None
    declared: dict | None
    upload: dict | None
    verdict: str | None
    reasons: list
    error: str | None


def default_path(job_id: str) -> Path:
    """$FLEET_AGENT_STATE_DIR, else $XDG_STATE_HOME/fleet-agent, else ~/.local/state/..."""
    base = os.environ.get("FLEET_AGENT_STATE_DIR")
    if not base:
        state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
        base = Path(state) / "fleet-agent"
    return Path(base) / "imports" / f"{job_id}.sqlite3"


class Journal:
    """Open with `Journal.open(path, job_id)` (a context manager); every method commits."""

    def __init__(self, path: Path, job_id: str):
        self.path = Path(path)
        self.job_id = job_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(f"{self.path}.lock", "a")  # noqa: SIM115 (held until close)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise JournalBusy(f"{self.path} is in use by another import or watch") from None
        # Used by one thread at a time (the importer's), not necessarily the opener's.
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        with self._tx():
            row = self._db.execute("SELECT value FROM meta WHERE key='job'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO meta VALUES ('job', ?)", (job_id,))
        if row is not None and row[0] != job_id:
            self.close()
            raise JournalMismatch(f"{self.path} is the journal of job {row[0]}, not {job_id}")

    @classmethod
    def open(cls, path: Path | str, job_id: str) -> Journal:
        return cls(Path(path), job_id)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(sqlite3.ProgrammingError):
            self._db.close()
        self._lock.close()

    @contextlib.contextmanager
    def _tx(self):
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # --- reading ---------------------------------------------------------------------------

    def get(self, source_id: str) -> Entry | None:
        row = self._db.execute(
            "SELECT source_id, state, sha256, idempotency_key, episode_id, declared, upload,"
            " verdict, reasons, error FROM recordings WHERE source_id=?",
            (source_id,),
        ).fetchone()
        if row is None:
            return None
        return Entry(
            *row[:5],
            declared=_loads(row[5]),
            upload=_loads(row[6]),
            verdict=row[7],
            reasons=_loads(row[8]) or [],
            error=row[9],
        )

    def entries(self) -> list[Entry]:
        ids = [r[0] for r in self._db.execute("SELECT source_id FROM recordings ORDER BY 1")]
        return [self.get(source_id) for source_id in ids]

    def is_completed(self, source_id: str) -> bool:
        row = self._db.execute(
            "SELECT 1 FROM recordings WHERE source_id=? AND state=?", (source_id, COMPLETED)
        ).fetchone()
        return row is not None

    def sent(self, source_id: str) -> dict[tuple[str, int], str]:
        """{(file, part number): etag} of what went up to the current instructions (a single
        PUT is part 0; `file` is "parquet" or the camera key)."""
        rows = self._db.execute(
            "SELECT file, part_number, etag FROM sent WHERE source_id=?", (source_id,)
        )
        return {(file, number): etag for file, number, etag in rows}

    # --- writing ---------------------------------------------------------------------------

    def registered(
        self,
        source_id: str,
        *,
        sha256: str,
        key: str,
        episode_id: str,
        declared: dict,
        upload: dict,
    ) -> None:
        with self._tx():
            self._db.execute("DELETE FROM sent WHERE source_id=?", (source_id,))
            self._db.execute(
                "INSERT OR REPLACE INTO recordings (source_id, state, sha256, idempotency_key,"
                " episode_id, declared, upload, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    source_id,
                    REGISTERED,
                    sha256,
                    key,
                    episode_id,
                    json.dumps(declared, sort_keys=True),
                    json.dumps(upload, default=str),
                    time.time(),
                ),
            )

    def renewed(self, source_id: str, upload: dict) -> None:
        """New instructions (fresh keys): nothing sent to the old ones counts any more."""
        with self._tx():
            self._db.execute("DELETE FROM sent WHERE source_id=?", (source_id,))
            self._db.execute(
                "UPDATE recordings SET upload=?, updated_at=? WHERE source_id=?",
                (json.dumps(upload, default=str), time.time(), source_id),
            )

    def mark_sent(self, source_id: str, file: str, part_number: int, etag: str) -> None:
        with self._tx():
            self._db.execute(
                "INSERT OR REPLACE INTO sent VALUES (?, ?, ?, ?)",
                (source_id, file, part_number, etag),
            )

    def completed(self, source_id: str, *, verdict: str | None, reasons: list) -> None:
        with self._tx():
            self._db.execute(
                "UPDATE recordings SET state=?, verdict=?, reasons=?, error=NULL, updated_at=?"
                " WHERE source_id=?",
                (COMPLETED, verdict, json.dumps(reasons), time.time(), source_id),
            )

    def failed(self, source_id: str, message: str) -> None:
        """The recording could not be imported this time (kept: a registered episode stays
        its episode, so fixing the cause and running again resumes it)."""
        with self._tx():
            updated = self._db.execute(
                "UPDATE recordings SET error=?, updated_at=? WHERE source_id=? AND state=?",
                (message, time.time(), source_id, REGISTERED),
            ).rowcount
            if not updated:
                self._db.execute(
                    "INSERT OR REPLACE INTO recordings (source_id, state, error, updated_at)"
                    " VALUES (?, ?, ?, ?)",
                    (source_id, FAILED, message, time.time()),
                )


def _loads(text: str | None):
    return None if text is None else json.loads(text)
