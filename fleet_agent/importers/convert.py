"""What every reader does last: frame-aligned arrays and camera frames into an `Episode`.

    episode_from_arrays(fps=, state=, action=, vectors=, videos=, timestamps=)
        the parquet of the episode file format (README, "Episode file format"):
        observation.state / action / each vector as fixed_size_list<float32>, timestamp
        float32 (the recording's, from its first frame; frame_index / fps by default),
        frame_index int64 0..n-1
    encode_camera(frames, fps=, codec=)
        RGB frames (H, W, 3) uint8 as MP4 bytes in the order's codec, frame i at i/fps
        (fleet_agent.cameras.encode_frames: libx264 or libsvtav1 through PyAV)

The reader options every reader shares (`[source]` of the mapping file) are read here too:
`video_codec` (the codec camera frames are encoded in: the order's, "av1" or "h264"; h264 by
default) and `cameras` (the recording's camera name -> the job's camera key).
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fleet_agent.cameras import ENCODERS, encode_frames
from fleet_agent.episodes import Episode
from fleet_agent.importers.base import RecordingError

CAMERA_PREFIX = "observation.images."
RESERVED_COLUMNS = ("observation.state", "action", "timestamp", "frame_index")


def video_codec(options: dict) -> str:
    codec = options.get("video_codec", "h264")
    if codec not in ENCODERS:
        raise RecordingError(
            f"source.video_codec: {codec!r} is not one of {', '.join(sorted(ENCODERS))}"
        )
    return codec


def camera_map(options: dict, *, required: bool = False) -> dict[str, str]:
    """source.cameras: {recording's camera name: job camera key "observation.images.<n>"}."""
    cameras = options.get("cameras", {})
    if not isinstance(cameras, dict) or (required and not cameras):
        raise RecordingError(
            'source.cameras: a table of camera name = "observation.images.<name>" is required'
            if required
            else "source.cameras: must be a table of camera name = camera key"
        )
    for name, key in cameras.items():
        if not isinstance(key, str) or not key.startswith(CAMERA_PREFIX) or "/" in key:
            raise RecordingError(
                f"source.cameras.{name}: {key!r} is not a camera key (observation.images.<name>)"
            )
    if len(set(cameras.values())) != len(cameras):
        raise RecordingError("source.cameras: two cameras are mapped to the same key")
    return dict(cameras)


def fps_option(options: dict) -> int:
    fps = options.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, int) or not 1 <= fps <= 1000:
        raise RecordingError("source.fps: required, the episode's frame rate (an integer 1-1000)")
    return fps


def _vector_column(name: str, matrix: np.ndarray, frames: int) -> pa.FixedSizeListArray:
    matrix = np.asarray(matrix)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    if matrix.ndim != 2 or len(matrix) != frames or matrix.shape[1] < 1:
        raise RecordingError(
            f"{name}: expected {frames} rows of a vector, got an array of shape {matrix.shape}"
        )
    if not np.issubdtype(matrix.dtype, np.number):
        raise RecordingError(f"{name}: not numbers ({matrix.dtype})")
    values = matrix.astype(np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def episode_from_arrays(
    *,
    fps: int,
    state: np.ndarray,
    action: np.ndarray,
    vectors: dict[str, np.ndarray] | None = None,
    videos: dict[str, bytes] | None = None,
    timestamps: np.ndarray | None = None,
) -> Episode:
    """The episode's parquet (and its videos) from frame-aligned arrays, frames x D."""
    frames = len(state)
    if frames < 1:
        raise RecordingError("the recording has no frames")
    columns = {
        "observation.state": _vector_column("observation.state", state, frames),
        "action": _vector_column("action", action, frames),
    }
    for key, matrix in (vectors or {}).items():
        if key in RESERVED_COLUMNS or key.startswith(CAMERA_PREFIX):
            raise RecordingError(f"{key}: a sensor vector cannot take this column name")
        columns[key] = _vector_column(key, matrix, frames)
    if timestamps is None:
        timestamps = np.arange(frames) / fps
    timestamps = np.asarray(timestamps, dtype=np.float64)
    columns["timestamp"] = pa.array((timestamps - timestamps[0]).astype(np.float32))
    columns["frame_index"] = pa.array(np.arange(frames, dtype=np.int64))
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    data = sink.getvalue()
    return Episode(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        fps=fps,
        frames=frames,
        action_dim=columns["observation.state"].type.list_size,
        videos=dict(videos or {}),
        state=np.asarray(state, dtype=np.float64),
    )


def encode_camera(frames, *, fps: int, codec: str, name: str) -> bytes:
    """MP4 bytes of RGB frames (an iterable of (H, W, 3) uint8), frame i at i/fps. An odd
    width or height loses its last pixel row or column (yuv420p wants even sizes)."""
    iterator = iter(frames)
    try:
        first = np.asarray(next(iterator))
    except StopIteration:
        raise RecordingError(f"{name}: no camera frames") from None
    if first.ndim != 3 or first.shape[2] != 3 or first.dtype != np.uint8:
        raise RecordingError(
            f"{name}: camera frames must be (height, width, 3) uint8 RGB, got {first.shape}"
            f" {first.dtype}"
        )
    height, width = first.shape[0] // 2 * 2, first.shape[1] // 2 * 2
    if height < 2 or width < 2:
        raise RecordingError(f"{name}: camera frames of {first.shape[1]}x{first.shape[0]} px")

    def even(image):
        image = np.asarray(image)
        if image.shape != first.shape:
            raise RecordingError(
                f"{name}: a frame of shape {image.shape} among frames of {first.shape}"
            )
        return np.ascontiguousarray(image[:height, :width])

    def images():
        yield even(first)
        for image in iterator:
            yield even(image)

    return encode_frames(images(), fps=fps, width=width, height=height, codec=codec)
