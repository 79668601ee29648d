"""Format `episode-folder`: a folder of recordings already in the platform's episode format.

    recordings/
      pick_001.parquet          the episode (README, "Episode file format")
      pick_001.wrist.mp4        one MP4 per camera: camera key observation.images.wrist
      pick_001.scene.mp4
      pick_001.json             optional: {"operator", "task_instruction", "success", "fps",
                                "scene", "objects", "calibrations": {camera: id}}

A recording is a `<name>.parquet`; its cameras are the `<name>.<camera>.mp4` files next to
it (`<camera>` without dots), its source id is `<name>`. The frame rate is the sidecar's
`fps`, else `[source] fps` of the mapping, else 1 / the median step of `timestamp`. Options
(`[source]`): `fps` (int), `recursive` (false: look in sub-folders too; the source id is then
the path under the folder, e.g. `day2/pick_001`).

A recording that cannot be read (not parquet, no `timestamp`, a sidecar that is not JSON)
is yielded as a `RecordingError` in its place, so the rest of the folder is still imported.
The bytes are sent as they are: what QA checks is exactly the file on disk.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fleet_agent.calibration import unknown_keys_message
from fleet_agent.episodes import Episode
from fleet_agent.importers.base import Recording, RecordingError, reader
from fleet_agent.importers.mapping import ImportMapping, MappingError, parse_mapping
from fleet_agent.importers.sources import SourceRoot

CAMERA_PREFIX = "observation.images."
SIDECAR_KEYS = {
    "operator",
    "task_instruction",
    "success",
    "fps",
    "scene",
    "objects",
    "calibrations",
}


@reader("episode-folder", skips=True)
def read_episode_folder(
    source: Path, mapping: ImportMapping, skip: Callable[[str], bool] | None = None
) -> Iterator[Recording | RecordingError]:
    if not source.is_dir():
        raise RecordingError(f"{source}: not a folder (format episode-folder reads a folder)")
    options = mapping.source
    unknown = sorted(set(options) - {"fps", "recursive"})
    if unknown:
        raise RecordingError(
            f"[source] {unknown[0]}: unknown option for episode-folder (known: fps, recursive)"
        )
    fps = options.get("fps")
    if fps is not None and (not isinstance(fps, int) or isinstance(fps, bool) or fps < 1):
        raise RecordingError("[source] fps: a whole number of frames per second >= 1")
    pattern = "**/*.parquet" if options.get("recursive") else "*.parquet"
    root = SourceRoot(source)
    for path in sorted(source.glob(pattern)):
        source_id = path.relative_to(source).with_suffix("").as_posix()
        if skip is not None and skip(source_id):
            continue
        try:
            yield read_one(path, source_id, default_fps=fps, root=root)
        except RecordingError as exc:
            yield RecordingError(f"{source_id}: {exc}", source_id=source_id)


def files_of(parquet: Path) -> tuple[Path, dict[str, Path], Path | None]:
    """(parquet, {camera key: mp4}, sidecar or None) of the recording `parquet` names."""
    stem = parquet.name[: -len(".parquet")]
    videos = {}
    for candidate in parquet.parent.glob(f"{_glob_escape(stem)}.*.mp4"):
        camera = candidate.name[len(stem) + 1 : -len(".mp4")]
        if camera and "." not in camera:
            videos[CAMERA_PREFIX + camera] = candidate
    sidecar = parquet.with_name(f"{stem}.json")
    return parquet, dict(sorted(videos.items())), sidecar if sidecar.exists() else None


def read_one(
    path: Path, source_id: str, *, default_fps: int | None = None, root: SourceRoot | None = None
) -> Recording:
    """One recording; with `root`, each of its files must stay inside it (RecordingError)."""
    parquet, videos, sidecar = files_of(path)
    root = root or SourceRoot(path.parent)
    opened = {file: root.contained(file) for file in (parquet, *videos.values(), sidecar) if file}
    meta = _sidecar(opened[sidecar], sidecar.name) if sidecar else {}
    data = opened[parquet].read_bytes()
    try:
        table = pq.read_table(io.BytesIO(data), columns=["timestamp"])
        width = _state_width(pq.read_schema(io.BytesIO(data)))
    except (pa.ArrowException, OSError) as exc:
        raise RecordingError(f"{parquet.name} is not a readable parquet file ({exc})") from None
    except KeyError:
        raise RecordingError(f"{parquet.name} has no timestamp column") from None
    frames = table.num_rows
    if frames < 2:
        raise RecordingError(f"{parquet.name} holds {frames} frame(s): an episode needs 2 or more")
    fps = meta.get("fps") or default_fps or _fps_of(table.column("timestamp"), parquet.name)
    episode = Episode(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        fps=int(fps),
        frames=frames,
        action_dim=width,
        videos={key: opened[video].read_bytes() for key, video in videos.items()},
    )
    return Recording(
        source_id=source_id,
        episode=episode,
        task_instruction=meta.get("task_instruction"),
        operator=meta.get("operator"),
        success=meta.get("success"),
        scene=meta.get("scene"),
        objects=tuple(meta["objects"]) if "objects" in meta else None,
        calibrations=dict(meta.get("calibrations") or {}),
        files=(parquet, *videos.values(), *([sidecar] if sidecar else [])),
    )


def _sidecar(path: Path, name: str) -> dict:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RecordingError(f"{name} is not JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise RecordingError(f"{name}: a JSON object is expected")
    unknown = set(meta) - SIDECAR_KEYS
    if unknown:
        raise RecordingError(unknown_keys_message(name, sorted(unknown), SIDECAR_KEYS))
    calibrations = meta.get("calibrations", {})
    if not isinstance(calibrations, dict) or not all(
        isinstance(v, str) for v in calibrations.values()
    ):  # a file named by a recording is never read: files go in the mapping
        raise RecordingError(f"{name}: calibrations: {{camera name: calibration id}}")
    try:  # the plan's keys, as a mapping's [[recordings]] rule takes them
        plan = parse_mapping(
            {"job": "-", "format": "episode-folder"}
            | {k: meta[k] for k in ("scene", "objects") if k in meta}
            | ({"calibrations": meta["calibrations"]} if "calibrations" in meta else {})
        )
    except MappingError as exc:
        raise RecordingError(f"{name}: {exc}") from None
    meta = {**meta, "calibrations": {k: ref.id for k, ref in plan.calibrations.items()}}
    if plan.objects is not None:
        meta["objects"] = plan.objects
    for key in ("operator", "task_instruction"):
        if key in meta and not isinstance(meta[key], str):
            raise RecordingError(f"{name}: {key} must be a string")
    if "success" in meta and not isinstance(meta["success"], bool):
        raise RecordingError(f"{name}: success must be true or false")
    fps = meta.get("fps")
    if fps is not None and (not isinstance(fps, int) or isinstance(fps, bool) or fps < 1):
        raise RecordingError(f"{name}: fps must be a whole number >= 1")
    return meta


def _state_width(schema: pa.Schema) -> int:
    if "observation.state" not in schema.names:
        return 0  # QA names the missing column; the width is only informative here
    kind = schema.field("observation.state").type
    return kind.list_size if isinstance(kind, pa.FixedSizeListType) else 0


def _fps_of(timestamps: pa.ChunkedArray, name: str) -> int:
    values = timestamps.to_numpy().astype(np.float64)
    steps = np.diff(values)
    step = float(np.median(steps)) if steps.size else 0.0
    if not np.isfinite(step) or step <= 0:
        raise RecordingError(
            f"{name}: the frame rate cannot be told from its timestamps; give fps in the "
            "sidecar or in the mapping's [source]"
        )
    return max(1, round(1.0 / step))


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)
