"""A LeRobot v3.0 dataset writer that streams episode by episode (bounded memory).

Layout (as lerobot 0.6 reads it; see README "Delivered dataset format"):
    meta/info.json                               version, fps, features, totals, paths
    meta/stats.json                              min/max/mean/std/count/q01..q99 per feature
    meta/tasks.parquet                           task strings as the pandas index, task_index
    meta/episodes/chunk-000/file-000.parquet     one row per episode, global row ranges
    data/chunk-CCC/file-FFF.parquet              one row group per episode, rolled over by size

Each data file holds exactly one column per declared feature; `index` is global and
contiguous; `timestamp = frame_index / fps` (rewritten from frame_index, so uploads with
jitter within QA's tolerance come out exact). Quantiles come from a fixed-size, seeded
reservoir sample per feature, so memory does not grow with the number of episodes.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from datasets.lerobot_videos import VIDEO_PATH
from datasets.qa_checks import ACTION, FRAME_INDEX, STATE

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
SCALAR_FEATURES = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}


class _FeatureStats:
    """Running min/max/mean/std and a reservoir sample for quantiles, per dimension."""

    def __init__(self, dim: int, reservoir_size: int, rng: np.random.Generator):
        self.dim = dim
        self.count = 0
        self.min = np.full(dim, np.inf)
        self.max = np.full(dim, -np.inf)
        self.sum = np.zeros(dim)
        self.sum_sq = np.zeros(dim)
        self.reservoir = np.empty((reservoir_size, dim))
        self.filled = 0
        self.rng = rng

    def update(self, values: np.ndarray) -> None:
        values = values.astype(np.float64).reshape(-1, self.dim)
        n = len(values)
        if n == 0:
            return
        self.min = np.minimum(self.min, values.min(axis=0))
        self.max = np.maximum(self.max, values.max(axis=0))
        self.sum += values.sum(axis=0)
        self.sum_sq += np.square(values).sum(axis=0)
        capacity = len(self.reservoir)
        take = min(n, capacity - self.filled)
        if take:
            self.reservoir[self.filled : self.filled + take] = values[:take]
            self.filled += take
        rest = values[take:]
        if len(rest):
            # Algorithm R, vectorised: row i of the stream replaces a random slot w.p. cap/i.
            seen = self.count + take + np.arange(1, len(rest) + 1)
            slots = (self.rng.random(len(rest)) * seen).astype(np.int64)
            keep = slots < capacity
            self.reservoir[slots[keep]] = rest[keep]
        self.count += n

    def as_json(self) -> dict:
        mean = self.sum / self.count
        variance = np.maximum(self.sum_sq / self.count - np.square(mean), 0.0)
        sample = self.reservoir[: self.filled]
        stats = {
            "min": self.min.tolist(),
            "max": self.max.tolist(),
            "mean": mean.tolist(),
            "std": np.sqrt(variance).tolist(),
            "count": [int(self.count)],
        }
        for name, q in QUANTILES.items():
            stats[name] = np.quantile(sample, q, axis=0).tolist()
        return stats


def _extra_column(name: str, values: list) -> pa.Array:
    """One more meta/episodes column (LeRobot loads extra columns there): the videos' indexes
    (int64) and timestamps (float64), the curation columns: text (the operator) or
    measurements (float64; null where nothing was measured), and the plan's (text: scene_id,
    site, calibration_id; a list of strings: objects, typed like `tasks`)."""
    if name.endswith("timestamp"):
        return pa.array(values, pa.float64())
    if any(isinstance(v, list | tuple) for v in values):
        return pa.array([[str(x) for x in v or ()] for v in values], pa.list_(pa.string()))
    if any(isinstance(v, str) for v in values):
        return pa.array([None if v is None else str(v) for v in values], pa.string())
    if any(isinstance(v, float) for v in values) or any(v is None for v in values):
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    return pa.array(values, pa.int64())


@dataclass
class EpisodeRecord:
    episode_index: int
    task: str
    length: int
    chunk_index: int
    file_index: int
    from_index: int
    to_index: int
    extra: dict = field(default_factory=dict)  # more meta/episodes columns (the videos')


@dataclass
class LeRobotWriter:
    """Write episodes (already QA'd) into a LeRobot v3.0 directory at `root`."""

    root: Path
    fps: int
    robot_type: str
    state_names: list[str]
    action_names: list[str]
    # More frame-aligned float vectors of the episodes (force/torque, tactile): key -> names.
    vector_names: dict[str, list[str]] = field(default_factory=dict)
    data_file_size_limit: int = 100 * 1024 * 1024
    video_file_size_limit: int = 200 * 1024 * 1024  # info.json's; the videos roll over at it
    reservoir_size: int = 100_000
    seed: int = 0
    episodes: list[EpisodeRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.tasks: dict[str, int] = {}
        self.total_frames = 0
        self.video_features: dict = {}
        self.chunk_index = 0
        self.file_index = 0
        self._writer: pq.ParquetWriter | None = None
        self._file = None
        rng = np.random.default_rng(self.seed)
        self.stats = {
            STATE: _FeatureStats(len(self.state_names), self.reservoir_size, rng),
            ACTION: _FeatureStats(len(self.action_names), self.reservoir_size, rng),
            **{
                key: _FeatureStats(len(names), self.reservoir_size, rng)
                for key, names in self.vector_names.items()
            },
            **{name: _FeatureStats(1, self.reservoir_size, rng) for name in SCALAR_FEATURES},
        }
        self.schema = pa.schema(
            [
                (STATE, pa.list_(pa.float32(), len(self.state_names))),
                (ACTION, pa.list_(pa.float32(), len(self.action_names))),
                *(
                    (key, pa.list_(pa.float32(), len(names)))
                    for key, names in self.vector_names.items()
                ),
                ("timestamp", pa.float32()),
                ("frame_index", pa.int64()),
                ("episode_index", pa.int64()),
                ("index", pa.int64()),
                ("task_index", pa.int64()),
            ]
        )

    # --- episodes ------------------------------------------------------------------------

    def add_episode(self, source, *, task: str, extra: dict | None = None) -> EpisodeRecord:
        """Append one episode from an uploaded parquet file (path or seekable file); `extra`:
        more columns of its meta/episodes row (the videos')."""
        parquet = pq.ParquetFile(source)
        vectors = self.vector_names
        table = parquet.read(columns=[STATE, ACTION, *vectors, FRAME_INDEX])
        length = table.num_rows
        matrices = {
            key: _as_matrix(table.column(key), len(names)).astype(np.float32)
            for key, names in {
                STATE: self.state_names,
                ACTION: self.action_names,
                **vectors,
            }.items()
        }
        frame_index = np.arange(length, dtype=np.int64)
        episode_index = len(self.episodes)
        task_index = self.tasks.setdefault(task, len(self.tasks))
        start = self.total_frames
        columns = {
            **matrices,
            "timestamp": (frame_index / self.fps).astype(np.float32),
            "frame_index": frame_index,
            "episode_index": np.full(length, episode_index, dtype=np.int64),
            "index": np.arange(start, start + length, dtype=np.int64),
            "task_index": np.full(length, task_index, dtype=np.int64),
        }
        writer = self._data_writer()
        writer.write_table(
            pa.table(
                {
                    **{
                        key: pa.FixedSizeListArray.from_arrays(
                            pa.array(matrix.reshape(-1)), matrix.shape[1]
                        )
                        for key, matrix in matrices.items()
                    },
                    **{name: pa.array(columns[name]) for name in SCALAR_FEATURES},
                },
                schema=self.schema,
            ),
            row_group_size=max(length, 1),
        )
        for name, values in columns.items():
            self.stats[name].update(values)
        record = EpisodeRecord(
            episode_index=episode_index,
            task=task,
            length=length,
            chunk_index=self.chunk_index,
            file_index=self.file_index,
            from_index=start,
            to_index=start + length,
            extra=dict(extra or {}),
        )
        self.episodes.append(record)
        self.total_frames += length
        if self._file.tell() >= self.data_file_size_limit:
            self._close_data_file()
            self._advance_file()
        return record

    def _data_writer(self) -> pq.ParquetWriter:
        if self._writer is None:
            path = self.root / DATA_PATH.format(
                chunk_index=self.chunk_index, file_index=self.file_index
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("wb")
            self._writer = pq.ParquetWriter(self._file, self.schema)
        return self._writer

    def _close_data_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._file.close()
            self._writer = None
            self._file = None

    def _advance_file(self) -> None:
        self.file_index += 1
        if self.file_index >= CHUNKS_SIZE:
            self.chunk_index += 1
            self.file_index = 0

    # --- metadata ------------------------------------------------------------------------

    def finish(
        self, *, video_features: dict | None = None, video_stats: dict | None = None
    ) -> list[str]:
        """Close the data files and write the metadata, with the cameras' features and image
        stats when there are videos (lerobot_videos.DatasetVideos). Returns every file."""
        if not self.episodes:
            raise ValueError("A dataset needs at least one episode.")
        self.video_features = dict(video_features or {})
        self._close_data_file()
        self._write_episodes()
        self._write_tasks()
        stats = {name: s.as_json() for name, s in self.stats.items()} | (video_stats or {})
        self._write_json("meta/stats.json", stats)
        self._write_json("meta/info.json", self.info())
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

    def features(self) -> dict:
        features = {
            STATE: {
                "dtype": "float32",
                "shape": [len(self.state_names)],
                "names": self.state_names,
            },
            ACTION: {
                "dtype": "float32",
                "shape": [len(self.action_names)],
                "names": self.action_names,
            },
        }
        for key, names in self.vector_names.items():
            features[key] = {"dtype": "float32", "shape": [len(names)], "names": list(names)}
        features |= self.video_features
        for name, dtype in SCALAR_FEATURES.items():
            features[name] = {"dtype": dtype, "shape": [1], "names": None}
        return features

    def info(self) -> dict:
        return {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": self.robot_type,
            "total_episodes": len(self.episodes),
            "total_frames": self.total_frames,
            "total_tasks": len(self.tasks),
            "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": max(1, round(self.data_file_size_limit / (1024 * 1024))),
            "video_files_size_in_mb": max(1, round(self.video_file_size_limit / (1024 * 1024))),
            "fps": self.fps,
            "splits": {"train": f"0:{len(self.episodes)}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if self.video_features else None,
            "features": self.features(),
        }

    def _write_episodes(self) -> None:
        table = pa.table(
            {
                "episode_index": pa.array([e.episode_index for e in self.episodes], pa.int64()),
                "tasks": pa.array([[e.task] for e in self.episodes], pa.list_(pa.string())),
                "length": pa.array([e.length for e in self.episodes], pa.int64()),
                "data/chunk_index": pa.array([e.chunk_index for e in self.episodes], pa.int64()),
                "data/file_index": pa.array([e.file_index for e in self.episodes], pa.int64()),
                "dataset_from_index": pa.array([e.from_index for e in self.episodes], pa.int64()),
                "dataset_to_index": pa.array([e.to_index for e in self.episodes], pa.int64()),
                "meta/episodes/chunk_index": pa.array([0] * len(self.episodes), pa.int64()),
                "meta/episodes/file_index": pa.array([0] * len(self.episodes), pa.int64()),
                **{
                    name: _extra_column(name, [e.extra.get(name) for e in self.episodes])
                    for name in self.episodes[0].extra
                },
            }
        )
        path = self.root / EPISODES_PATH
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)

    def _write_tasks(self) -> None:
        # lerobot reads the task strings from the pandas index; as a plain column they
        # would silently come back as integers.
        frame = pd.DataFrame(
            {"task_index": list(self.tasks.values())},
            index=pd.Index(list(self.tasks), name="task"),
        )
        path = self.root / "meta/tasks.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(path)

    def _write_json(self, relative: str, payload: dict) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2))


def _as_matrix(column: pa.ChunkedArray, dim: int) -> np.ndarray:
    flat = (
        pa.concat_arrays([chunk.flatten() for chunk in column.chunks])
        if column.num_chunks
        else pa.array([])
    )
    return flat.to_numpy(zero_copy_only=False).reshape(-1, dim)
