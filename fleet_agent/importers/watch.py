"""`fleet-agent watch DIR`: import recordings as they finish being written.

Every `poll_seconds` the folder is listed (every file under it, with its size and
modification time). A file is *settled* once its size and mtime have not changed for
`settle_seconds` (a file already there at start counts from its mtime). A recording is
imported once every file it was read from (`Recording.files`) is settled and still the same
after it was read; a reader that does not say its files (or a recording it cannot read)
waits until nothing under the folder changes any more, so a half-written file is never
taken for a corrupt recording. Choose a settle time longer than the recorder's longest
pause between two writes of one file.

A pass (the reader over the folder, skipping what the journal has completed) runs when the
listing or the set of settled files changed since the last pass, so an idle folder costs a
listing per poll. `once=True` waits until the folder is settled, runs one pass and returns.
A platform outage during a pass (past the client's retries) is reported and the pass tried
again after a pause; a refusal of the job or key ends the watch (`ImportStopped`).

A symbolic link under the folder that leads out of it is not watched (nor imported: the
readers refuse it, fleet_agent/importers/sources.py), so a file elsewhere on the machine
never becomes part of a recording.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fleet_agent.client import TransientError
from fleet_agent.importers.base import Recording, RecordingError
from fleet_agent.importers.journal import Journal
from fleet_agent.importers.mapping import ImportMapping
from fleet_agent.importers.pipeline import (
    ImportStopped,
    ImportSummary,
    Progress,
    import_recordings,
    resolve_target,
)
from fleet_agent.importers.sources import SourceRoot

OUTAGE_PAUSE_SECONDS = 10.0
log = logging.getLogger("fleet_agent")


def _log(event: str, info: dict) -> None:
    log.warning("watch: %s", info["message"])


class FolderState:
    """Sizes and mtimes of every file under a folder, and since when each is unchanged."""

    def __init__(
        self, directory: Path, settle_seconds: float, clock=time.monotonic, ignore: str = ""
    ):
        self.directory = Path(directory)
        self.settle_seconds = settle_seconds
        self.clock = clock
        self.ignore = ignore  # a path prefix not watched (a journal kept in the folder)
        self.root = SourceRoot(self.directory)
        self._files: dict[Path, tuple[tuple[int, int], float]] = {}  # path -> (sig, since)

    def scan(self) -> None:
        now, wall = self.clock(), time.time()
        seen = {}
        for root, _dirs, names in os.walk(self.directory):
            for name in names:
                path = Path(root) / name
                if self.ignore and str(path).startswith(self.ignore):
                    continue
                if path.is_symlink() and self.root.leads_out(path):
                    continue  # a file elsewhere: never watched
                signature = _signature(path)
                if signature is None:
                    continue  # gone between the listing and the stat
                known = self._files.get(path)
                if known is None:  # first seen: unchanged since its mtime (at most until now)
                    since = now - max(0.0, wall - signature[1] / 1e9)
                elif known[0] != signature:
                    since = now
                else:
                    since = known[1]
                seen[path] = (signature, since)
        self._files = seen

    def settled(self, path: Path) -> bool:
        known = self._files.get(Path(path))
        return known is not None and self.clock() - known[1] >= self.settle_seconds

    def all_settled(self) -> bool:
        return all(self.settled(path) for path in self._files)

    def unchanged(self, path: Path) -> bool:
        known = self._files.get(Path(path))
        return known is not None and _signature(Path(path)) == known[0]

    def fingerprint(self) -> frozenset:
        """What a pass depends on: the files, their signatures and which are settled."""
        return frozenset((p, sig, self.settled(p)) for p, (sig, _) in self._files.items())

    def ready(self, item: Recording | RecordingError) -> bool:
        if isinstance(item, Recording) and item.files:
            return all(self.settled(f) and self.unchanged(f) for f in item.files)
        return self.all_settled()


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def watch_folder(
    client,
    mapping: ImportMapping,
    directory: Path | str,
    journal: Journal,
    *,
    settle_seconds: float = 5.0,
    poll_seconds: float = 1.0,
    once: bool = False,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    on_pass: Callable[[ImportSummary], None] | None = None,
) -> ImportSummary:
    """Watch `directory` until `stop` is set (or, with `once`, for one settled pass); the
    outcomes of every pass (waiting ones left out) in one summary."""
    stop = stop or threading.Event()
    directory = Path(directory).resolve()  # the reader's paths and the listing's agree
    state = FolderState(directory, settle_seconds, ignore=str(journal.path.resolve()))
    target = resolve_target(client, mapping)
    total = ImportSummary()
    started, last = time.monotonic(), None
    while not stop.is_set():
        state.scan()
        fingerprint = state.fingerprint()
        if fingerprint != last and (not once or state.all_settled()):
            last = fingerprint
            try:
                summary = import_recordings(
                    client, mapping, directory, journal, progress, target=target, ready=state.ready
                )
            except ImportStopped as exc:
                if once or not isinstance(exc.__cause__, TransientError):
                    raise
                # The platform is down (past the client's retries): the journal keeps what
                # was done; try the whole pass again after a pause.
                (progress or _log)("error", {"message": f"{exc}; trying again"})
                last = None
                stop.wait(max(poll_seconds, OUTAGE_PAUSE_SECONDS))
                continue
            total.outcomes += [
                o for o in summary.outcomes if o.status not in ("waiting", "skipped")
            ]
            total.errors += summary.errors
            if on_pass is not None:
                on_pass(summary)
            if once:
                break
        stop.wait(poll_seconds)
    total.elapsed_seconds = time.monotonic() - started
    return total
