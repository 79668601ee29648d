"""The mapping file: which job the recordings go to, in which format they are, the format's own
options (topics, joint names, cameras, the alignment's maximum age), and what each recording
declares about the collection plan (issue 30): its scene, the objects it handled, each
camera's calibration.

    job = "7f1c..."                     # the job id the episodes are registered to
    format = "lerobot"                  # a reader's name (fleet_agent/importers/base.py)
    operator = "op-1"                   # optional defaults for every recording
    task_instruction = "pick the peg"
    success = true
    robot = "fr3-01"                    # optional: the robot's name (or id) at the job's site;
                                        # default: the first by name of the job's embodiment
    scene = "bench-a-window"            # optional: a scene of the job's site, by name
    objects = ["peg-8mm"]               # optional: the objects handled; the first one's cell
                                        # is the one the episode counts in
    [calibrations]                      # optional: per camera of the job (its name)
    scene = "5b0e0c1a-..."              # a calibration id (GET /api/v1/fleet/calibrations)
    wrist = { file = "wrist.json" }     # or a file, registered first (fleet_agent/calibration.py)

    [[recordings]]                      # optional overrides; every rule that matches applies,
    match = ["day2/*"]                  # in file order, a later one over an earlier one
    episodes = [0, 1, 2]                # (lerobot: episode indices)
    scene = "bench-a-evening"           # also: objects, operator, task_instruction, success,
    [recordings.calibrations]           # calibrations (merged per camera)
    wrist = { file = "wrist-day2.json" }

    [source]                            # the reader's options, documented per reader
    ...

A recording's value is its matching rules' (the last that sets it), else what the recording
says about itself (an episode folder's sidecar), else the file's default. `load_mapping(path)`
raises `MappingError` naming the offending key; a misspelt key names the known ones. A
calibration file's path is relative to the mapping file; it is read and checked here, so a
bad one fails before anything is sent.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fleet_agent.calibration import CalibrationError, check_calibration, unknown_keys_message

CAMERA_PREFIX = "observation.images."
NAME_MAX = 100  # a scene's or an object's name (the platform's limit)
CALIBRATION_FILE_MAX_BYTES = 1 << 20
TOP_KEYS = (
    "job",
    "format",
    "operator",
    "task_instruction",
    "success",
    "source",
    "robot",
    "scene",
    "objects",
    "calibrations",
    "recordings",
)
PER_RECORDING = ("operator", "task_instruction", "success", "scene", "objects", "calibrations")
RULE_KEYS = ("match", "episodes", *PER_RECORDING)
CALIBRATION_REF_KEYS = ("id", "file")
# The [source] options each built-in reader takes (a misspelt one would be ignored by the
# reader): checked here, naming the known ones. The episode-folder reader checks its own.
STREAM_KEYS = ("topic", "names", "field", "indices")
SOURCE_OPTIONS = {
    "lerobot": ("video_codec", "cameras", "episodes", "vectors"),
    "aloha-hdf5": ("fps", "video_codec", "cameras", "qvel_key", "pattern"),
    "mcap": (
        "fps",
        "max_age_frames",
        "clock",
        "video_codec",
        "state",
        "action",
        "cameras",
        "vectors",
    ),
}


class MappingError(ValueError):
    pass


@dataclass(frozen=True)
class CalibrationRef:
    """A camera's calibration: a registered one's `id`, or a `file` the importer registers
    first (its checked content in `body`)."""

    id: str | None = None
    file: str | None = None
    body: dict | None = field(default=None, compare=False, hash=False)

    def describe(self) -> str:
        return f"calibration {self.id}" if self.id else f"calibration file {self.file}"


@dataclass(frozen=True)
class RecordingRule:
    """One `[[recordings]]` table: the recordings it matches and what it sets for them."""

    match: tuple[str, ...] = ()
    episodes: tuple[int, ...] = ()
    values: dict = field(default_factory=dict, compare=False, hash=False)

    def matches(self, source_id: str) -> bool:
        if any(fnmatch.fnmatchcase(source_id, pattern) for pattern in self.match):
            return True
        return any(source_id == f"episode_{index:06d}" for index in self.episodes)


@dataclass(frozen=True)
class ImportMapping:
    job: str
    format: str
    operator: str | None = None
    task_instruction: str | None = None
    success: bool | None = None
    source: dict = field(default_factory=dict)  # the reader's own options
    robot: str | None = None  # the recording robot's name or id (the import pipeline's)
    scene: str | None = None
    objects: tuple[str, ...] | None = None
    calibrations: dict = field(default_factory=dict)  # camera name -> CalibrationRef
    recordings: tuple[RecordingRule, ...] = ()

    def overrides(self, source_id: str) -> dict:
        """What the `[[recordings]]` rules matching `source_id` set (calibrations merged per
        camera); a key no rule sets is absent."""
        values: dict = {}
        for rule in self.recordings:
            if not rule.matches(source_id):
                continue
            for key, value in rule.values.items():
                if key == "calibrations":
                    values["calibrations"] = {**values.get("calibrations", {}), **value}
                else:
                    values[key] = value
        return values

    def calibration_refs(self) -> list[tuple[str, CalibrationRef]]:
        """Every (camera, calibration) the mapping names, defaults and rules, once each."""
        seen, refs = set(), []
        for calibrations in [self.calibrations] + [
            rule.values.get("calibrations", {}) for rule in self.recordings
        ]:
            for camera, ref in calibrations.items():
                if (camera, ref) not in seen:
                    seen.add((camera, ref))
                    refs.append((camera, ref))
        return refs


def _unknown(data: dict, where: str, known) -> None:
    unknown = [key for key in data if key not in known]
    if unknown:
        raise MappingError(unknown_keys_message(where, unknown, known))


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _name(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > NAME_MAX:
        raise MappingError(f"{where}: a name of 1-{NAME_MAX} characters")
    return value.strip()


def _objects(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise MappingError(f"{where}: a list of object names, the first the one handled")
    names = [_name(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return tuple(dict.fromkeys(names))  # in order, once each


def _camera(name: str, where: str) -> str:
    camera = name[len(CAMERA_PREFIX) :] if name.startswith(CAMERA_PREFIX) else name
    if not camera or "." in camera or "/" in camera:
        raise MappingError(f"{where}: {name!r} is not a camera name (e.g. wrist)")
    return camera


def _calibration_ref(value, where: str, base: Path) -> CalibrationRef:
    if isinstance(value, str):
        value = {"id": value}
    if not isinstance(value, dict):
        raise MappingError(f'{where}: a calibration id, or {{ file = "calibration.json" }}')
    _unknown(value, where, CALIBRATION_REF_KEYS)
    if len(value) != 1:
        raise MappingError(f"{where}: either id or file, not both")
    if "id" in value:
        try:
            return CalibrationRef(id=str(uuid.UUID(str(value["id"]))))
        except ValueError:
            raise MappingError(
                f"{where}: {value['id']!r} is not a calibration id (a UUID); for a file, "
                f'write {{ file = "{value["id"]}" }}'
            ) from None
    if not isinstance(value["file"], str) or not value["file"].strip():
        raise MappingError(f"{where}.file: the path of a calibration JSON file")
    path = (base / value["file"]).resolve()
    return CalibrationRef(file=str(path), body=read_calibration_file(path, f"{where}.file"))


def read_calibration_file(path: Path, where: str) -> dict:
    """A calibration JSON file's content, checked (fleet_agent/calibration.py)."""
    try:
        if path.stat().st_size > CALIBRATION_FILE_MAX_BYTES:
            raise MappingError(f"{where}: {path} is over {CALIBRATION_FILE_MAX_BYTES} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MappingError(f"{where}: {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise MappingError(f"{where}: {path} is not JSON ({exc})") from None
    try:
        body = check_calibration(data, f"{where}: {path.name}")
    except CalibrationError as exc:
        raise MappingError(str(exc)) from None
    if "camera" in data:
        body["camera"] = data["camera"].strip()
    return body


def _calibrations(value, where: str, base: Path) -> dict:
    if not isinstance(value, dict):
        raise MappingError(f"{where}: a table of camera name = calibration")
    calibrations = {}
    for name, ref in value.items():
        camera = _camera(name, f"{where}.{name}")
        calibration = _calibration_ref(ref, f"{where}.{name}", base)
        declared = (calibration.body or {}).get("camera")
        if declared is not None and declared != camera:
            raise MappingError(
                f"{where}.{name}: the file {calibration.file} is camera {declared!r}'s"
            )
        calibrations[camera] = calibration
    return calibrations


def _recording_values(data: dict, where: str, base: Path) -> dict:
    """The per-recording keys of a table (the file's top level or a [[recordings]] rule)."""
    values = {}
    for key in ("operator", "task_instruction"):
        if key in data:
            if not isinstance(data[key], str):
                raise MappingError(f"{_key(where, key)}: must be a string")
            values[key] = data[key]
    if "success" in data:
        if not isinstance(data["success"], bool):
            raise MappingError(f"{_key(where, 'success')}: must be true or false")
        values["success"] = data["success"]
    if "scene" in data:
        values["scene"] = _name(data["scene"], _key(where, "scene"))
    if "objects" in data:
        values["objects"] = _objects(data["objects"], _key(where, "objects"))
    if "calibrations" in data:
        values["calibrations"] = _calibrations(
            data["calibrations"], _key(where, "calibrations"), base
        )
    return values


def _rule(data, where: str, base: Path, fmt: str) -> RecordingRule:
    if not isinstance(data, dict):
        raise MappingError(f"{where}: a [[recordings]] table")
    _unknown(data, where, RULE_KEYS)
    match = data.get("match", [])
    if isinstance(match, str):
        match = [match]
    if not isinstance(match, list) or not all(isinstance(m, str) and m for m in match):
        raise MappingError(f"{where}.match: a glob or a list of globs over the recording's id")
    episodes = data.get("episodes", [])
    if not isinstance(episodes, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in episodes
    ):
        raise MappingError(f"{where}.episodes: a list of episode indices (0, 1, ...)")
    if episodes and fmt != "lerobot":
        raise MappingError(
            f"{where}.episodes: episode indices are LeRobot's; for {fmt} use match"
            " (globs over the file names)"
        )
    if not match and not episodes:
        raise MappingError(f"{where}: match (or, for lerobot, episodes) is required")
    values = _recording_values(data, where, base)
    if not values:
        raise MappingError(f"{where}: sets nothing (one of {', '.join(PER_RECORDING)})")
    return RecordingRule(match=tuple(match), episodes=tuple(episodes), values=values)


def _source_options(source: dict, fmt: str) -> None:
    if fmt not in SOURCE_OPTIONS:
        return
    _unknown(source, "source", SOURCE_OPTIONS[fmt])
    if fmt != "mcap":
        return
    for key in ("state", "action"):
        if isinstance(source.get(key), dict):
            _unknown(source[key], f"source.{key}", STREAM_KEYS)
    vectors = source.get("vectors")
    for i, vector in enumerate(vectors if isinstance(vectors, list) else []):
        if isinstance(vector, dict):
            _unknown(vector, f"source.vectors[{i}]", ("key", *STREAM_KEYS))


def parse_mapping(data: dict, base: str | Path | None = None) -> ImportMapping:
    """`base`: the folder calibration files are relative to (the mapping file's)."""
    base = Path(base) if base is not None else Path.cwd()
    _unknown(data, "", TOP_KEYS)
    for key in ("job", "format"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise MappingError(f"{key}: required, a non-empty string")
    if "robot" in data and not isinstance(data["robot"], str):
        raise MappingError("robot: must be a string")
    source = data.get("source", {})
    if not isinstance(source, dict):
        raise MappingError("source: must be a table")
    fmt = data["format"].strip()
    _source_options(source, fmt)
    values = _recording_values(data, "", base)
    rules = data.get("recordings", [])
    if not isinstance(rules, list):
        raise MappingError("recordings: [[recordings]] tables")
    return ImportMapping(
        job=data["job"].strip(),
        format=fmt,
        operator=values.get("operator"),
        task_instruction=values.get("task_instruction"),
        success=values.get("success"),
        source=source,
        robot=data.get("robot"),
        scene=values.get("scene"),
        objects=values.get("objects"),
        calibrations=values.get("calibrations", {}),
        recordings=tuple(
            _rule(rule, f"recordings[{i}]", base, fmt) for i, rule in enumerate(rules)
        ),
    )


def load_mapping(path: str | Path) -> ImportMapping:
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MappingError(f"{path}: {exc}") from exc
    try:
        return parse_mapping(data, base=Path(path).resolve().parent)
    except MappingError as exc:
        raise MappingError(f"{path}: {exc}") from None
