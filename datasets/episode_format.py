"""The episode file format fleets upload, and a reference writer for it.

One parquet file per episode:
    observation.state  fixed_size_list<float32>[D] (float64 and plain lists also accepted)
    action             fixed_size_list<float32>[D], D = the embodiment's action_dim
    timestamp          float32 seconds from the start: frame_index / fps
    frame_index        int64 0..n-1
Other columns (extra sensors) may follow; QA skips them. `episode_table` makes plausible
synthetic trajectories (tests, benchmarks, the demo fleets); `parquet_bytes` writes them.
"""

import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# A Franka-like ready pose (rad) the joints move around; the last element is a gripper (m).
HOME_POSE = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785)
GRIPPER_MID_M, GRIPPER_SWING_M = 0.04, 0.03
STATE_NOISE = 0.001  # encoder noise, rad or m


def episode_table(
    frames: int = 300,
    fps: int = 30,
    dim: int = 8,
    extra_columns: dict | None = None,
    seed: int = 0,
) -> dict:
    """A clean demonstration that passes content QA: every joint sways smoothly around a ready
    pose (within every seeded embodiment's limits), the last element is a gripper opening in
    metres, the state carries encoder noise and the action is the target one frame ahead."""
    rng = np.random.default_rng(seed)
    t = np.arange(frames) / fps
    phase = rng.uniform(0, 2 * np.pi, dim)
    amplitude = rng.uniform(0.3, 0.6, dim)
    speed = rng.uniform(0.5, 1.2, dim)  # rad/s of the sway
    centre = np.array([HOME_POSE[index % len(HOME_POSE)] for index in range(dim)])
    amplitude[-1], centre[-1] = GRIPPER_SWING_M, GRIPPER_MID_M

    def pose(at):
        return centre + amplitude * np.sin(at[:, None] * speed + phase)

    state = pose(t) + rng.normal(0, STATE_NOISE, (frames, dim))
    action = pose(t + 1 / fps) + rng.normal(0, STATE_NOISE / 2, (frames, dim))  # leader noise
    columns = {
        "observation.state": state.astype(np.float32),
        "action": action.astype(np.float32),
        "timestamp": t.astype(np.float32),
        "frame_index": np.arange(frames, dtype=np.int64),
    }
    columns.update(extra_columns or {})
    return columns


def to_arrow(columns: dict) -> pa.Table:
    arrays = {}
    for name, values in columns.items():
        if isinstance(values, pa.Array | pa.ChunkedArray):
            arrays[name] = values
        elif isinstance(values, np.ndarray) and values.ndim == 2:
            flat = pa.array(values.reshape(-1))
            arrays[name] = pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
        else:
            arrays[name] = pa.array(values)
    return pa.table(arrays)


def parquet_bytes(columns: dict, row_group_size: int | None = None) -> bytes:
    """The file's bytes. Noisy float vectors are plain-encoded (a dictionary gains nothing on
    them), so a file's size depends on its shape only, never on its seed."""
    sink = io.BytesIO()
    table = to_arrow(columns)
    dictionary = [
        name for name in table.column_names if name not in ("observation.state", "action")
    ]
    pq.write_table(table, sink, row_group_size=row_group_size, use_dictionary=dictionary)
    return sink.getvalue()


def column_chunk_bytes(data: bytes, columns) -> int:
    """Bytes of these columns' chunks over every row group of a parquet file: what a reader
    fetching only them must read, besides the footer."""
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    wanted = set(columns)
    return sum(
        chunk.total_compressed_size
        for group in range(metadata.num_row_groups)
        for chunk in (
            metadata.row_group(group).column(index)
            for index in range(metadata.row_group(group).num_columns)
        )
        if chunk.path_in_schema.split(".list.")[0] in wanted
    )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
