"""Load a LeRobot v3.0 directory the way lerobot 0.6.1 does offline, and check invariants.

Camera frames are decoded as lerobot's PyAV path does (`decode_video_frames_torchvision`):
row i of an episode asks its camera file for `from_timestamp + timestamp[i]`; the reader
seeks to the first asked time (key frames only), decodes up to the last, takes the closest
frame per query (float32 distances) and refuses any farther than 1e-4 s.

lerobot itself needs Python >= 3.12, so this mirrors its loading path (shared/notes/
lerobot-v3.md): version check, tasks from the pandas index, episodes metadata, data files
with exactly the declared non-video features, cast to the declared dtypes.
"""

import json
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
ARROW_TYPES = {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64()}


class BackwardCompatibilityError(Exception):
    pass


def load(root: Path) -> dict:
    root = Path(root)
    info = json.loads((root / "meta/info.json").read_text())
    if info["codebase_version"] != "v3.0":
        raise BackwardCompatibilityError(info["codebase_version"])
    tasks = pd.read_parquet(root / "meta/tasks.parquet")
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    stats = json.loads((root / "meta/stats.json").read_text())
    features = info["features"]
    non_video = {k: v for k, v in features.items() if v["dtype"] != "video"}
    fields = []
    for name, feature in non_video.items():
        base = ARROW_TYPES[feature["dtype"]]
        shape = feature["shape"]
        fields.append((name, pa.list_(base, shape[0]) if shape != [1] else base))
    schema = pa.schema(fields)
    files = sorted({(e["data/chunk_index"], e["data/file_index"]) for e in episodes})
    tables = []
    for chunk_index, file_index in files:
        path = root / info["data_path"].format(chunk_index=chunk_index, file_index=file_index)
        table = pq.read_table(path)
        assert set(table.column_names) == set(non_video), (table.column_names, list(non_video))
        tables.append(table.select(schema.names).cast(schema))
    data = pa.concat_tables(tables)
    return {
        "info": info,
        "tasks": tasks,
        "episodes": episodes,
        "stats": stats,
        "data": data,
        "files": files,
    }


def check_invariants(dataset: dict) -> None:
    info, data, episodes = dataset["info"], dataset["data"], dataset["episodes"]
    n = data.num_rows
    index = data.column("index").to_numpy()
    assert np.array_equal(index, np.arange(n)), "index must be 0..N-1"
    assert info["total_frames"] == n
    assert info["total_episodes"] == len(episodes)
    assert info["total_tasks"] == len(dataset["tasks"])
    assert info["splits"] == {"train": f"0:{len(episodes)}"}
    fps = info["fps"]
    frame_index = data.column("frame_index").to_numpy()
    timestamp = data.column("timestamp").to_numpy()
    episode_index = data.column("episode_index").to_numpy()
    for episode in episodes:
        start, end = episode["dataset_from_index"], episode["dataset_to_index"]
        assert end - start == episode["length"]
        assert (episode_index[start:end] == episode["episode_index"]).all()
        assert np.array_equal(frame_index[start:end], np.arange(episode["length"]))
        assert np.allclose(timestamp[start:end], frame_index[start:end] / fps, atol=1e-4)
        task = episode["tasks"][0]
        assert int(dataset["tasks"].loc[task, "task_index"]) in set(
            data.column("task_index").to_numpy()[start:end]
        )
    stat_keys = {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    for name, feature in info["features"].items():
        assert set(dataset["stats"][name]) == stat_keys, name
        if feature["dtype"] == "video":
            _check_video_feature(dataset, name, feature)
            continue
        for key in stat_keys - {"count"}:
            assert len(dataset["stats"][name][key]) == feature["shape"][0], (name, key)


def _check_video_feature(dataset: dict, name: str, feature: dict) -> None:
    """lerobot's image stats are per channel, shape [3, 1, 1], in [0, 1]; each episode says
    where its frames are."""
    assert dataset["info"]["video_path"], "a video feature needs video_path"
    assert feature["names"] == ["height", "width", "channels"] and feature["shape"][2] == 3
    for key, values in dataset["stats"][name].items():
        if key == "count":
            assert len(values) == 1 and values[0] > 0
            continue
        array = np.asarray(values, dtype=np.float64)
        assert array.shape == (3, 1, 1), (name, key, array.shape)
        assert ((array >= 0) & (array <= 1)).all(), (name, key)
    for episode in dataset["episodes"]:
        for column in VIDEO_COLUMNS:
            assert f"videos/{name}/{column}" in episode, (name, column)
        start = episode[f"videos/{name}/from_timestamp"]
        end = episode[f"videos/{name}/to_timestamp"]
        assert abs(end - start - episode["length"] / dataset["info"]["fps"]) < 1e-6


TOLERANCE_S = 1e-4


class ToleranceViolation(AssertionError):
    """lerobot: "One or several query timestamps unexpectedly violate the tolerance"."""


def camera_frames(root: Path, dataset: dict, key: str) -> list[np.ndarray]:
    """Every frame of camera `key`, per episode: uint8 [length, H, W, 3] (lerobot hands out
    the same pixels as float32 [3, H, W] / 255)."""
    root = Path(root)
    info = dataset["info"]
    timestamps = dataset["data"].column("timestamp").to_numpy()
    episodes = []
    for episode in dataset["episodes"]:
        path = root / info["video_path"].format(
            video_key=key,
            chunk_index=episode[f"videos/{key}/chunk_index"],
            file_index=episode[f"videos/{key}/file_index"],
        )
        rows = timestamps[episode["dataset_from_index"] : episode["dataset_to_index"]]
        start = episode[f"videos/{key}/from_timestamp"]
        episodes.append(decode_at(path, [start + float(ts) for ts in rows]))
    return episodes


def decode_at(path: Path, timestamps: list[float], tolerance_s: float = TOLERANCE_S):
    """The frames of `path` closest to `timestamps` (seconds), as lerobot's PyAV reader."""
    first, last = min(timestamps), max(timestamps)
    loaded, loaded_ts = [], []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        container.seek(int(first / stream.time_base), stream=stream, backward=True)
        for frame in container.decode(stream):
            loaded.append(frame.to_ndarray(format="rgb24"))
            loaded_ts.append(float(frame.time))
            if frame.time >= last:
                break
    if not loaded:
        raise ToleranceViolation(f"No frame decoded from {path} around {first}..{last}.")
    query = np.asarray(timestamps, dtype=np.float32)[:, None]
    distances = np.abs(query - np.asarray(loaded_ts, dtype=np.float32)[None, :])
    closest = distances.argmin(axis=1)
    worst = distances[np.arange(len(query)), closest]
    if not (worst < tolerance_s).all():
        raise ToleranceViolation(
            f"One or several query timestamps unexpectedly violate the tolerance"
            f" ({worst.max()} > {tolerance_s}) in {path}."
        )
    return np.stack([loaded[i] for i in closest])
