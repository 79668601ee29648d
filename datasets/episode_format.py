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


def episode_table(
    frames: int = 300,
    fps: int = 30,
    dim: int = 8,
    extra_columns: dict | None = None,
    seed: int = 0,
) -> dict:
    """Plausible joint trajectories: smooth sines plus noise, action leading state a little."""
    rng = np.random.default_rng(seed)
    t = np.arange(frames) / fps
    phase = rng.uniform(0, 2 * np.pi, dim)
    state = np.sin(t[:, None] * 0.8 + phase) + rng.normal(0, 0.01, (frames, dim))
    action = np.sin((t[:, None] + 1 / fps) * 0.8 + phase)
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
    sink = io.BytesIO()
    pq.write_table(to_arrow(columns), sink, row_group_size=row_group_size)
    return sink.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
