"""`lerobot`: a local LeRobot v3.0 dataset folder (pyarrow + PyAV), one recording per episode.

    meta/info.json                 codebase_version "v3.0", fps, features, data_path, video_path
    meta/episodes/*/*.parquet      per episode: tasks, length, its data file, and per camera
                                   its video file and from/to timestamps in it
    meta/tasks.parquet             task strings (the pandas index), task_index
    data/chunk-*/file-*.parquet    the frames of many episodes (episode_index, frame_index, ...)
    videos/<key>/chunk-*/file-*.mp4  each camera's episodes, concatenated

Each episode becomes one recording (`source_id` "episode_000003"): observation.state and
action as they are, the frames' own timestamps (from the episode's first), the other float
vector features named `observation.*` (or those `source.vectors` lists), and per camera
feature the episode's clip cut out of the concatenated file (fleet_agent/importers/clips.py:
packets copied when the file is already in the order's codec and the cut is clean, else
re-encoded; `Recording.video_modes` says which). The episode's task string is its
instruction (the mapping's task_instruction when it has none).

[source] options: video_codec (the order's; without it the dataset's codec is kept, so the
clips are copied wherever the cut allows and re-encoded in it, or h264, elsewhere), cameras
(rename: dataset key -> job key; default every video feature under its own key), vectors
(feature names to carry), episodes (episode indices to import; default all).
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fleet_agent.importers.base import Recording, RecordingError, reader, recording_or_error
from fleet_agent.importers.clips import cut_clip
from fleet_agent.importers.convert import (
    CAMERA_PREFIX,
    camera_map,
    episode_from_arrays,
    video_codec,
)
from fleet_agent.importers.mapping import ImportMapping
from fleet_agent.importers.sources import SourceRoot

STATE, ACTION = "observation.state", "action"
FLOATS = ("float32", "float64")
INFO = "meta/info.json"
# The fields LeRobot's path patterns take, and how it writes them (lerobot/datasets/utils.py:
# DEFAULT_DATA_PATH "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
# DEFAULT_VIDEO_PATH "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"):
# nothing else is formatted (a width of 400000000 would build a 400 MB string).
PATTERN_FIELDS = {
    "data_path": {"chunk_index": "03d", "file_index": "03d"},
    "video_path": {"video_key": "", "chunk_index": "03d", "file_index": "03d"},
}


@dataclass
class Dataset:
    root: SourceRoot
    info: dict
    episodes: list[dict]
    tasks: dict[int, str]
    vectors: list[str]
    cameras: dict[str, str]  # dataset video key -> job camera key
    _data: tuple = field(default=(None, None))  # (path, table) of the data file last read

    @property
    def fps(self) -> int:
        return int(self.info["fps"])

    def data_rows(self, row: dict) -> pa.Table:
        relative = self.info["data_path"].format(
            chunk_index=int(row["data/chunk_index"]), file_index=int(row["data/file_index"])
        )
        path = self.root.inside(relative, what=f"{INFO} data_path")
        if self._data[0] != path:
            columns = [STATE, ACTION, *self.vectors, "timestamp", "frame_index", "episode_index"]
            columns += ["task_index"] if "task_index" in self.info["features"] else []
            try:
                self._data = (path, pq.read_table(path, columns=columns))
            except (OSError, pa.ArrowException) as exc:
                raise RecordingError(f"{self.root.shown(path)}: unreadable ({exc})") from exc
        table = self._data[1]
        rows = table.filter(pc.equal(table["episode_index"], int(row["episode_index"])))
        return rows.sort_by("frame_index")


def _pattern(root: SourceRoot, info: dict, key: str) -> None:
    """info[key] formats only LeRobot's fields, as LeRobot writes them."""
    fields, pattern = PATTERN_FIELDS[key], info[key]
    where = f"{root}: {INFO} {key} {pattern[:200]!r}"
    try:
        parsed = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        raise RecordingError(f"{where}: not a path pattern ({exc})") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in fields:
            known = ", ".join(f"{{{field}}}" for field in fields)
            raise RecordingError(f"{where}: {{{name}}} is not one of LeRobot's fields ({known})")
        if conversion or spec not in ("", fields[name]):
            written = f"{{{name}:{fields[name]}}}" if fields[name] else f"{{{name}}}"
            how = f"!{conversion}" if conversion else repr(spec[:40])
            raise RecordingError(
                f"{where}: {{{name}}} formatted as {how} is not how LeRobot writes it"
                f" ({written}); not read"
            )


def _info(root: SourceRoot) -> dict:
    try:
        info = json.loads(root.inside(INFO, what=INFO).read_text())
    except (OSError, ValueError) as exc:
        raise RecordingError(f"{root}: no readable meta/info.json ({exc})") from exc
    if not isinstance(info, dict) or info.get("codebase_version") != "v3.0":
        version = info.get("codebase_version") if isinstance(info, dict) else None
        raise RecordingError(f"{root}: a LeRobot v3.0 dataset is needed (this one is {version!r})")
    fps, features = info.get("fps"), info.get("features")
    if not isinstance(fps, int) or fps < 1 or not isinstance(features, dict):
        raise RecordingError(f"{root}: meta/info.json lacks fps or features")
    if not all(isinstance(feature, dict) for feature in features.values()):
        raise RecordingError(f"{root}: meta/info.json's features must be tables")
    for name in (STATE, ACTION):
        if features.get(name, {}).get("dtype") not in FLOATS:
            raise RecordingError(f"{root}: the dataset has no float feature {name}")
    if not isinstance(info.get("data_path"), str):
        raise RecordingError(f"{root}: meta/info.json lacks data_path")
    if not isinstance(info.get("video_path"), str | None):
        raise RecordingError(f"{root}: meta/info.json's video_path must be a string or null")
    for key in ("data_path", "video_path") if info.get("video_path") else ("data_path",):
        _pattern(root, info, key)
    return info


def _vectors(features: dict, options: dict) -> list[str]:
    wanted = options.get("vectors")
    if wanted is None:
        return [
            name
            for name, feature in features.items()
            if name.startswith("observation.")
            and name != STATE
            and not name.startswith(CAMERA_PREFIX)
            and feature.get("dtype") in FLOATS
        ]
    if not isinstance(wanted, list) or any(
        features.get(n, {}).get("dtype") not in FLOATS for n in wanted
    ):
        raise RecordingError("source.vectors: a list of the dataset's float features")
    return list(wanted)


def _episode_rows(root: SourceRoot) -> list[dict]:
    folder = root.inside("meta/episodes", what="meta/episodes")
    files = sorted(folder.rglob("*.parquet"))
    if not files:
        raise RecordingError(f"{root}: no meta/episodes/*.parquet")
    rows = []
    for path in files:
        path = root.contained(path)
        try:
            parquet = pq.ParquetFile(path)
            names = [n for n in parquet.schema_arrow.names if not n.startswith("stats/")]
            rows += parquet.read(columns=names).to_pylist()
        except (OSError, pa.ArrowException) as exc:
            raise RecordingError(f"{root.shown(path)}: unreadable ({exc})") from exc
    needed = ("episode_index", "length", "data/chunk_index", "data/file_index")
    for row in rows:
        missing = [name for name in needed if row.get(name) is None]
        if missing:
            raise RecordingError(f"{root}: meta/episodes lacks {', '.join(missing)}")
    return sorted(rows, key=lambda row: row["episode_index"])


def _tasks(root: SourceRoot) -> dict[int, str]:
    path = root.inside("meta/tasks.parquet", what="meta/tasks.parquet")
    if not path.exists():
        return {}
    table = pq.read_table(path)
    names = [n for n in table.column_names if n != "task_index"]
    if "task_index" not in table.column_names or not names:
        return {}
    column = "task" if "task" in names else names[0]  # the pandas index, stored as a column
    return dict(zip(table["task_index"].to_pylist(), table[column].to_pylist(), strict=True))


def open_dataset(source: Path, options: dict) -> Dataset:
    root = SourceRoot(source)
    info = _info(root)
    features = info["features"]
    videos = [name for name, feature in features.items() if feature.get("dtype") == "video"]
    cameras = camera_map(options) if options.get("cameras") else {}
    unknown = sorted(set(cameras) - set(videos))
    if unknown:
        raise RecordingError(f"source.cameras: {unknown[0]} is not a video feature of the dataset")
    return Dataset(
        root=root,
        info=info,
        episodes=_episode_rows(root),
        tasks=_tasks(root),
        vectors=_vectors(features, options),
        cameras={key: cameras.get(key, key) for key in videos},
    )


def _matrix(table: pa.Table, name: str) -> np.ndarray:
    column = table[name].combine_chunks()
    if not pa.types.is_fixed_size_list(column.type) and not pa.types.is_list(column.type):
        raise RecordingError(f"{name}: not a vector column ({column.type})")
    flat = column.flatten().to_numpy(zero_copy_only=False)
    width = len(flat) // max(1, len(column))
    if width * len(column) != len(flat):
        raise RecordingError(f"{name}: rows of different lengths")
    return flat.reshape(len(column), width)


def _clip(dataset: Dataset, row: dict, key: str, length: int, codec: str, name: str):
    columns = [f"videos/{key}/{part}" for part in ("chunk_index", "file_index", "from_timestamp")]
    if any(row.get(column) is None for column in columns) or not dataset.info.get("video_path"):
        raise RecordingError(f"{name}: meta/episodes does not say where its {key} video is")
    relative = dataset.info["video_path"].format(
        video_key=key, chunk_index=int(row[columns[0]]), file_index=int(row[columns[1]])
    )
    path = dataset.root.inside(relative, what=f"{name}: {INFO} video_path")
    if not path.exists():
        raise RecordingError(f"{name}: {dataset.root.shown(path)} is missing")
    start = round(float(row[columns[2]]) * dataset.fps)
    return cut_clip(path, start=start, length=length, fps=dataset.fps, codec=codec, name=name)


def read_episode(dataset: Dataset, row: dict, mapping: ImportMapping) -> Recording:
    index = int(row["episode_index"])
    name = f"episode_{index:06d}"
    table = dataset.data_rows(row)
    length = int(row.get("length") or table.num_rows)
    if table.num_rows != length:
        raise RecordingError(f"{name}: {table.num_rows} frames in data/, {length} in meta/episodes")
    videos, modes = {}, {}
    # without source.video_codec, each clip keeps the dataset's codec (copied when it can be)
    codec = video_codec(mapping.source) if "video_codec" in mapping.source else None
    for key, job_key in dataset.cameras.items():
        videos[job_key], modes[job_key] = _clip(dataset, row, key, length, codec, f"{name} {key}")
    try:
        episode = episode_from_arrays(
            fps=dataset.fps,
            state=_matrix(table, STATE),
            action=_matrix(table, ACTION),
            vectors={key: _matrix(table, key) for key in dataset.vectors},
            videos=videos,
            timestamps=table["timestamp"].to_numpy(),
        )
    except RecordingError as exc:
        raise RecordingError(f"{name}: {exc}") from exc
    tasks = list(row.get("tasks") or [])
    if not tasks and "task_index" in table.column_names and table.num_rows:
        tasks = [dataset.tasks.get(table["task_index"][0].as_py())]
    return Recording(
        source_id=name,
        episode=episode,
        task_instruction=(tasks[0] if tasks else None) or mapping.task_instruction,
        operator=mapping.operator,
        success=mapping.success,
        video_modes=modes,
    )


@reader("lerobot", skips=True)
def read_lerobot(
    source: Path, mapping: ImportMapping, skip: Callable[[str], bool] | None = None
) -> Iterator[Recording | RecordingError]:
    """Every episode of the dataset at `source` (or those source.episodes lists), in order."""
    if "video_codec" in mapping.source:
        video_codec(mapping.source)  # a bad option refuses the source, before any episode
    dataset = open_dataset(source, mapping.source)
    wanted = mapping.source.get("episodes")
    if wanted is not None and not (
        isinstance(wanted, list) and all(isinstance(i, int) for i in wanted)
    ):
        raise RecordingError("source.episodes: a list of episode indices")
    known = {int(row["episode_index"]) for row in dataset.episodes}
    missing = sorted(set(wanted or ()) - known)
    if missing:
        raise RecordingError(f"source.episodes: the dataset has no episode {missing[0]}")
    for row in dataset.episodes:
        index = int(row["episode_index"])
        source_id = f"episode_{index:06d}"
        if (wanted is None or index in wanted) and (skip is None or not skip(source_id)):
            yield recording_or_error(partial(read_episode, dataset, row, mapping), source_id)
