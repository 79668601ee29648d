"""`aloha-hdf5`: ALOHA / ACT episode files (h5py), one file per episode.

    /observations/qpos            (N, D) float   joint state  -> observation.state
    /observations/qvel            (N, D) float   optional     -> source.qvel_key, if set
    /observations/images/<cam>    (N, H, W, 3) uint8 RGB      -> source.cameras[<cam>]
    /action                       (N, D) float   commands     -> action
    attrs                         e.g. sim = True (recorded in simulation)

The files carry no clock: frame i is at i / source.fps. Each mapped camera's frames are
encoded (source.video_codec, h264 by default) into one MP4; a camera of the file that the
mapping does not name is left out, a named one the file lacks fails the file.

[source] options: fps (required), cameras (required when the job has cameras:
{cam_high = "observation.images.scene", ...}), qvel_key (e.g. "observation.velocity"),
video_codec, pattern (glob of episode files, default "*.hdf5").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import h5py
import numpy as np

from fleet_agent.importers.base import Recording, RecordingError, reader, recordings_of_files
from fleet_agent.importers.convert import (
    camera_map,
    encode_camera,
    episode_from_arrays,
    fps_option,
    video_codec,
)
from fleet_agent.importers.mapping import ImportMapping

CHUNK_FRAMES = 64  # camera frames read from the file at a time


def _dataset(handle: h5py.File, path: str, name: str) -> h5py.Dataset:
    node = handle.get(path)
    if not isinstance(node, h5py.Dataset):
        raise RecordingError(f"{name}: no dataset {path} (the ALOHA layout needs it)")
    return node


def _matrix(handle: h5py.File, path: str, name: str) -> np.ndarray:
    data = _dataset(handle, path, name)
    if data.ndim != 2 or not np.issubdtype(data.dtype, np.number):
        raise RecordingError(f"{name}: {path} must be (frames, D) numbers, not {data.shape}")
    return np.asarray(data[()], dtype=np.float64)


def _frames(data: h5py.Dataset):
    for start in range(0, data.shape[0], CHUNK_FRAMES):
        yield from data[start : start + CHUNK_FRAMES]


def read_file(path: Path, mapping: ImportMapping, source_id: str) -> Recording:
    """One episode file; RecordingError naming it if it cannot become an episode."""
    try:
        return _read(path, mapping, source_id)
    except OSError as exc:  # h5py: a damaged file found while reading it
        raise RecordingError(f"{source_id}: not a readable HDF5 file ({exc})") from exc


def _read(path: Path, mapping: ImportMapping, source_id: str) -> Recording:
    options = mapping.source
    fps, codec, cameras = fps_option(options), video_codec(options), camera_map(options)
    name = source_id
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise RecordingError(f"{name}: not a readable HDF5 file ({exc})") from exc
    with handle:
        state = _matrix(handle, "/observations/qpos", name)
        action = _matrix(handle, "/action", name)
        frames = len(state)
        if len(action) != frames:
            raise RecordingError(f"{name}: {frames} qpos rows but {len(action)} action rows")
        vectors = {}
        if options.get("qvel_key"):
            vectors[options["qvel_key"]] = _matrix(handle, "/observations/qvel", name)
        videos = {}
        for camera, key in cameras.items():
            images = _dataset(handle, f"/observations/images/{camera}", name)
            if images.ndim != 4 or images.shape[0] != frames:
                raise RecordingError(
                    f"{name}: camera {camera} has frames of shape {images.shape};"
                    f" ({frames}, height, width, 3) expected"
                )
            videos[key] = encode_camera(
                _frames(images), fps=fps, codec=codec, name=f"{name}: camera {camera}"
            )
        try:
            episode = episode_from_arrays(
                fps=fps, state=state, action=action, vectors=vectors, videos=videos
            )
        except RecordingError as exc:
            raise RecordingError(f"{name}: {exc}") from exc
    return Recording(
        source_id=source_id,
        episode=episode,
        task_instruction=mapping.task_instruction,
        operator=mapping.operator,
        success=mapping.success,
        video_modes=dict.fromkeys(videos, "encode"),
    )


@reader("aloha-hdf5", skips=True)
def read_aloha(
    source: Path, mapping: ImportMapping, skip: Callable[[str], bool] | None = None
) -> Iterator[Recording | RecordingError]:
    """Every episode file under `source` (a file or a folder), in name order."""
    fps_option(mapping.source)  # refuse a mapping without fps before reading any file
    return recordings_of_files(
        source, mapping.source.get("pattern", "*.hdf5"), read_file, mapping, skip
    )
