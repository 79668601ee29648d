"""What every reader yields, and how a format's reader is found.

A reader is a function `(source: Path, mapping: ImportMapping) -> Iterator[Recording]`
registered under its format name with `@reader("<format>")`. It converts each finished
recording under `source` into the platform's episode format (fleet_agent/episodes.py: one
parquet of frame-aligned low-dim streams, one MP4 per camera) and raises `RecordingError`
with a clear message for a recording it cannot convert (before anything is uploaded).

One bad recording need not end the batch: a reader may *yield* `RecordingError(message,
source_id=...)` in that recording's place and go on with the next (the import pipeline
records it and continues); a raised one ends the reading of that source (the pipeline
records it as the source's error). A reader registered with `@reader("<format>",
skips=True)` also takes `skip`, a `source_id -> bool` predicate, and does not convert the
recordings it names (the import journal's finished ones), so a re-run or a watch pass
costs a listing, not a conversion; for other readers `read_recordings` filters afterwards.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from fleet_agent.episodes import Episode

if TYPE_CHECKING:
    from fleet_agent.importers.mapping import ImportMapping


class RecordingError(ValueError):
    """A recording that cannot become an episode; the message says which and why.
    `source_id`: the recording's, when the error is one recording's (see the docstring)."""

    def __init__(self, message: str, *, source_id: str | None = None):
        super().__init__(message)
        self.source_id = source_id


@dataclass(frozen=True)
class Recording:
    """One finished recording, converted, ready to register and upload."""

    # Stable within its source across runs (e.g. "episode_000003", "ep_12.hdf5"): the import
    # journal's key, so a restarted import neither loses nor re-uploads a recording.
    source_id: str
    episode: Episode  # parquet bytes, SHA-256, fps, frames, videos (camera key -> MP4 bytes)
    task_instruction: str | None = None
    operator: str | None = None
    success: bool | None = None
    # What the recording says about the collection plan (an episode folder's sidecar): its
    # scene's name, the objects handled (the first one's cell counts it), {camera name:
    # calibration id}. The mapping's `[[recordings]]` rules override them, its defaults fill in.
    scene: str | None = None
    objects: tuple[str, ...] | None = None
    calibrations: dict[str, str] = field(default_factory=dict)
    # camera key -> "remux" (the recording's packets copied, frames exact) or "encode"
    # (decoded and encoded again in source.video_codec, or encoded from raw frames)
    video_modes: dict[str, str] = field(default_factory=dict)
    # The files it was read from: the watch mode imports it once they have all stopped
    # changing (empty: once nothing under the watched folder changes any more).
    files: tuple[Path, ...] = ()


Reader = Callable[..., Iterator[Recording | RecordingError]]
READERS: dict[str, Reader] = {}
SKIPPING: set[str] = set()  # formats whose reader takes `skip` (see the docstring)
# format name -> module that registers it (imported on first use, so a reader's library,
# e.g. h5py or mcap, is needed only when that format is read)
READER_MODULES: dict[str, str] = {
    "episode-folder": "fleet_agent.importers.episode_folder",
    "lerobot": "fleet_agent.importers.lerobot",
    "aloha-hdf5": "fleet_agent.importers.aloha_hdf5",
    "mcap": "fleet_agent.importers.ros2_mcap",
}


def reader(fmt: str, *, skips: bool = False) -> Callable[[Reader], Reader]:
    def register(function: Reader) -> Reader:
        READERS[fmt] = function
        if skips:
            SKIPPING.add(fmt)
        return function

    return register


def recording_or_error(
    read: Callable[[], Recording], source_id: str, files: tuple[Path, ...] = ()
) -> Recording | RecordingError:
    """One recording, read (with the files it came from); if it cannot be converted, a
    RecordingError in its place, so a reader goes on with the next one."""
    try:
        recording = read()
    except RecordingError as exc:
        message = str(exc) if str(exc).startswith(source_id) else f"{source_id}: {exc}"
        return RecordingError(message, source_id=source_id)
    return replace(recording, files=tuple(files)) if files else recording


def read_recordings(
    source: Path, mapping: ImportMapping, skip: Callable[[str], bool] | None = None
) -> Iterator[Recording | RecordingError]:
    """Every recording under `source`, in a stable order, read as `mapping.format` says; a
    yielded `RecordingError` stands for one recording that could not be converted. The
    recordings `skip(source_id)` names are left out."""
    if mapping.format not in READERS and mapping.format in READER_MODULES:
        importlib.import_module(READER_MODULES[mapping.format])
    try:
        read = READERS[mapping.format]
    except KeyError:
        known = ", ".join(sorted(set(READERS) | set(READER_MODULES)))
        raise RecordingError(f"unknown format {mapping.format!r} (known: {known})") from None
    if skip is None:
        return read(Path(source), mapping)
    if mapping.format in SKIPPING:
        return read(Path(source), mapping, skip=skip)
    return (
        item
        for item in read(Path(source), mapping)
        if not skip(item.source_id if isinstance(item, Recording) else item.source_id or "")
    )
