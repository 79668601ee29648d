"""`aloha-hdf5`: ALOHA / ACT episode files (h5py), one file per episode.

    /observations/qpos            (N, D) float   joint state  -> observation.state
    /observations/qvel            (N, D) float   optional     -> source.qvel_key, if set
    /observations/images/<cam>    (N, H, W, 3) uint8 RGB      -> source.cameras[<cam>]
    /action                       (N, D) float   commands     -> action
    attrs                         e.g. sim = True (recorded in simulation)

The files carry no clock: frame i is at i / source.fps.

Only the file itself is read: a file with an external link (to another file), or whose
datasets are virtual or keep their data in external files, is refused. Each dataset's
declared shape is checked before it is read (frames within QA's longest episode, a vector
array within MAX_VECTOR_BYTES, camera frames within MAX_FRAME_SIDE, chunks within
READ_BYTES), then it is read in pieces of at most READ_BYTES. Each mapped camera's frames are
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

from fleet_agent.importers.base import Recording, RecordingError, reader
from fleet_agent.importers.convert import (
    camera_map,
    encode_camera,
    episode_from_arrays,
    fps_option,
    video_codec,
)
from fleet_agent.importers.mapping import ImportMapping
from fleet_agent.importers.sources import (
    MAX_EPISODE_SECONDS,
    MAX_FRAME_SIDE,
    MAX_VECTOR_BYTES,
    READ_BYTES,
    declared_bytes,
    max_frames,
    recordings_of_files,
)


def _refuse_links_out(handle: h5py.File, name: str) -> None:
    """Refuse a file with a link into another file (h5py would follow it on access)."""

    def external(path: str, link) -> str | None:
        if isinstance(link, h5py.ExternalLink):
            return f"/{path} -> {link.filename}:{link.path}"
        return None

    found = handle.visititems_links(external)
    if found:
        raise RecordingError(f"{name}: external link {found}: only the file itself is read")


def _dataset(handle: h5py.File, path: str, name: str) -> h5py.Dataset:
    node = handle.get(path)
    if not isinstance(node, h5py.Dataset):
        raise RecordingError(f"{name}: no dataset {path} (the ALOHA layout needs it)")
    if node.is_virtual:
        raise RecordingError(f"{name}: {path} is a virtual dataset (data in other files)")
    if node.external:
        raise RecordingError(f"{name}: {path} keeps its data in external files")
    if node.chunks:
        declared_bytes(node.chunks, node.dtype.itemsize, READ_BYTES, what=f"{name}: {path} chunk")
    return node


def _frame_count(data: h5py.Dataset, path: str, name: str, fps: int) -> int:
    frames = int(data.shape[0])
    if frames > max_frames(fps):
        raise RecordingError(
            f"{name}: {path} declares {frames} frames, {frames / fps:,.0f} s at {fps} fps:"
            f" longer than QA accepts ({MAX_EPISODE_SECONDS} s); not read"
        )
    return frames


def _matrix(handle: h5py.File, path: str, name: str, fps: int) -> np.ndarray:
    data = _dataset(handle, path, name)
    if data.ndim != 2 or data.dtype.kind not in "iuf":
        raise RecordingError(f"{name}: {path} must be (frames, D) numbers, not {data.shape}")
    rows, width = _frame_count(data, path, name, fps), int(data.shape[1])
    declared_bytes(data.shape, 8, MAX_VECTOR_BYTES, what=f"{name}: {path}")
    matrix = np.empty((rows, width), dtype=np.float64)
    step = max(1, READ_BYTES // max(1, width * data.dtype.itemsize))
    for start in range(0, rows, step):
        matrix[start : start + step] = data[start : start + step]
    return matrix


def _camera(handle: h5py.File, camera: str, frames: int, name: str) -> h5py.Dataset:
    path = f"/observations/images/{camera}"
    images = _dataset(handle, path, name)
    if images.ndim != 4 or images.shape[0] != frames or images.shape[3] != 3:
        raise RecordingError(
            f"{name}: camera {camera} has frames of shape {images.shape};"
            f" ({frames}, height, width, 3) expected"
        )
    height, width = int(images.shape[1]), int(images.shape[2])
    if images.dtype != np.uint8 or max(height, width) > MAX_FRAME_SIDE:
        raise RecordingError(
            f"{name}: camera {camera}: frames must be (height, width, 3) uint8 RGB up to"
            f" {MAX_FRAME_SIDE}x{MAX_FRAME_SIDE} px, not {width}x{height} {images.dtype}"
        )
    return images


def _frames(data: h5py.Dataset):
    """The frames, read a bounded piece at a time."""
    step = max(1, READ_BYTES // max(1, int(np.prod(data.shape[1:])) * data.dtype.itemsize))
    for start in range(0, data.shape[0], step):
        yield from data[start : start + step]


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
        _refuse_links_out(handle, name)
        state = _matrix(handle, "/observations/qpos", name, fps)
        action = _matrix(handle, "/action", name, fps)
        frames = len(state)
        if len(action) != frames:
            raise RecordingError(f"{name}: {frames} qpos rows but {len(action)} action rows")
        vectors = {}
        if options.get("qvel_key"):
            vectors[options["qvel_key"]] = _matrix(handle, "/observations/qvel", name, fps)
        videos = {}
        for camera, key in cameras.items():
            images = _camera(handle, camera, frames, name)
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
