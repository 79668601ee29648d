"""What a reader may read: files inside the source it was given, of sizes declared first.

Every path a reader opens goes through `SourceRoot` (issue 28): a path built from the
recording's own metadata (LeRobot's `data_path` and `video_path`) through `inside`, a path
found by listing the source folder through `contained`. Either is resolved (symbolic links
followed) and must stay under the source root: an absolute path, a `..` part, or a symbolic
link that leads out is refused with a `RecordingError` naming the file, so a recording never
brings in a file from elsewhere on the fleet's machine. `recordings_of_files` (one recording
per file: ALOHA HDF5, MCAP) lists through it.

`declared_bytes` checks an array's declared shape x item size against a limit before any of
it is read (a tiny HDF5 or MCAP file can declare gigabytes); readers then read it in pieces
of at most `READ_BYTES`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import fields
from functools import partial
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from datasets.qa_format import EpisodeExpectation
from fleet_agent.importers.base import Recording, RecordingError, recording_or_error

if TYPE_CHECKING:
    from fleet_agent.importers.mapping import ImportMapping

# QA's longest episode by default: a recording declaring more frames than that at its frame
# rate cannot be accepted, so it is not read.
MAX_EPISODE_SECONDS = round(
    next(f.default for f in fields(EpisodeExpectation) if f.name == "max_duration_seconds")
)
MAX_VECTOR_BYTES = 256 * 2**20  # one low-dim array (frames x D), as float64
MAX_FRAME_SIDE = 4096  # camera frames up to 4096 x 4096 px
READ_BYTES = 64 * 2**20  # what one read of a declared array takes at most


class SourceRoot:
    """The folder (or the one file) an import reads; paths under it, and only those."""

    def __init__(self, source: Path | str):
        self.given = Path(source)
        resolved = self.given.resolve()
        self.folder = resolved if resolved.is_dir() else resolved.parent

    def __str__(self) -> str:
        return str(self.given)

    def inside(self, relative: str, *, what: str) -> Path:
        """`relative` (a path a recording's metadata names) under the root, resolved;
        RecordingError unless it stays there (`what`: the file and key that named it)."""
        text = str(relative)
        pure = PurePosixPath(text)
        if not text or "\x00" in text or pure.is_absolute():
            raise RecordingError(f"{what}: {text!r} is not a relative path inside the source")
        if ".." in pure.parts:
            raise RecordingError(f"{what}: {text!r} climbs out with '..' (not followed)")
        return self.contained(self.folder / pure, what=what)

    def contained(self, path: Path, *, what: str | None = None) -> Path:
        """`path` (listed under the root, or built by `inside`) resolved; RecordingError if it
        is a symbolic link (or under one) that leads out of the root."""
        shown = self.shown(path)
        prefix = f"{what}: " if what and what != shown else ""
        try:
            resolved = Path(path).resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of links
            raise RecordingError(f"{prefix}{shown} cannot be resolved ({exc})") from exc
        if not resolved.is_relative_to(self.folder):
            raise RecordingError(
                f"{prefix}{shown} is a symbolic link to {resolved}, outside the source"
                " (not followed)"
            )
        return resolved

    def leads_out(self, path: Path) -> bool:
        try:
            self.contained(path)
        except RecordingError:
            return True
        return False

    def shown(self, path: Path) -> str:
        """`path` as the user knows it: relative to the source folder when under it."""
        for base in (self.given if self.given.is_dir() else self.given.parent, self.folder):
            try:
                return Path(path).relative_to(base).as_posix()
            except ValueError:
                continue
        return str(path)


def recordings_of_files(
    source: Path, pattern: str, read_file, mapping: ImportMapping, skip=None
) -> Iterator[Recording | RecordingError]:
    """One recording per file: `source` itself, or each file under it matching `pattern`, in
    path order (one whose symbolic link leads out of `source` is refused in its place);
    `read_file(path, mapping, source_id)` reads one."""
    if source.is_file():
        paths = [(source, source.name)]
    else:
        paths = [(path, str(path.relative_to(source))) for path in sorted(source.rglob(pattern))]
    root = SourceRoot(source)
    for path, source_id in paths:
        if skip is None or not skip(source_id):
            yield recording_or_error(
                partial(_confined, root, read_file, path, mapping, source_id), source_id, (path,)
            )


def _confined(root: SourceRoot, read_file, path: Path, mapping, source_id: str) -> Recording:
    return read_file(root.contained(path), mapping, source_id)


def declared_bytes(shape: tuple, itemsize: int, limit: int, *, what: str) -> int:
    """shape x itemsize, refused (RecordingError naming `what`) over `limit`, before a read."""
    size = math.prod(int(n) for n in shape) * int(itemsize)
    if size > limit:
        raise RecordingError(
            f"{what}: declares {' x '.join(map(str, shape))} items of {itemsize} bytes"
            f" ({size / 2**20:,.0f} MiB), over the {limit / 2**20:,.0f} MiB read at most"
        )
    return size


def max_frames(fps: int) -> int:
    """The most frames an episode QA can accept has at `fps`."""
    return MAX_EPISODE_SECONDS * fps
