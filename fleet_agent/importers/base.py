"""What every reader yields, and how a format's reader is found.

A reader is a function `(source: Path, mapping: ImportMapping) -> Iterator[Recording]`
registered under its format name with `@reader("<format>")`. It converts each finished
recording under `source` into the platform's episode format (fleet_agent/episodes.py: one
parquet of frame-aligned low-dim streams, one MP4 per camera) and raises `RecordingError`
with a clear message for a recording it cannot convert (before anything is uploaded).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fleet_agent.episodes import Episode

if TYPE_CHECKING:
    from fleet_agent.importers.mapping import ImportMapping


class RecordingError(ValueError):
    """A recording that cannot become an episode; the message says which and why."""


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
    # camera key -> "remux" (the recording's packets copied, frames exact) or "encode"
    # (decoded and encoded again in source.video_codec, or encoded from raw frames)
    video_modes: dict[str, str] = field(default_factory=dict)


Reader = Callable[[Path, "ImportMapping"], Iterator[Recording]]
READERS: dict[str, Reader] = {}
# format name -> module that registers it (imported on first use, so a reader's library,
# e.g. h5py or mcap, is needed only when that format is read)
READER_MODULES: dict[str, str] = {
    "lerobot": "fleet_agent.importers.lerobot",
    "aloha-hdf5": "fleet_agent.importers.aloha_hdf5",
    "mcap": "fleet_agent.importers.ros2_mcap",
}


def reader(fmt: str) -> Callable[[Reader], Reader]:
    def register(function: Reader) -> Reader:
        READERS[fmt] = function
        return function

    return register


def read_recordings(source: Path, mapping: ImportMapping) -> Iterator[Recording]:
    """Every recording under `source`, in a stable order, read as `mapping.format` says."""
    if mapping.format not in READERS and mapping.format in READER_MODULES:
        importlib.import_module(READER_MODULES[mapping.format])
    try:
        read = READERS[mapping.format]
    except KeyError:
        known = ", ".join(sorted(set(READERS) | set(READER_MODULES)))
        raise RecordingError(f"unknown format {mapping.format!r} (known: {known})") from None
    return read(Path(source), mapping)
