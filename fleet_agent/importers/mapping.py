"""The mapping file: which job the recordings go to, in which format they are, and the
format's own options (topics, joint names, cameras, the alignment's maximum age).

    job = "7f1c..."                     # the job id the episodes are registered to
    format = "lerobot"                  # a reader's name (fleet_agent/importers/base.py)
    operator = "op-1"                   # optional defaults for every recording
    task_instruction = "pick the peg"
    success = true
    robot = "fr3-01"                    # optional: the robot's name (or id) at the job's site;
                                        # default: the first by name of the job's embodiment

    [source]                            # the reader's options, documented per reader
    ...

`load_mapping(path)` raises `MappingError` naming the offending key.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path


class MappingError(ValueError):
    pass


@dataclass(frozen=True)
class ImportMapping:
    job: str
    format: str
    operator: str | None = None
    task_instruction: str | None = None
    success: bool | None = None
    source: dict = field(default_factory=dict)  # the reader's own options
    robot: str | None = None  # the recording robot's name or id (the import pipeline's)


def parse_mapping(data: dict) -> ImportMapping:
    for key in ("job", "format"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise MappingError(f"{key}: required, a non-empty string")
    for key in ("operator", "task_instruction", "robot"):
        if key in data and not isinstance(data[key], str):
            raise MappingError(f"{key}: must be a string")
    if "success" in data and not isinstance(data["success"], bool):
        raise MappingError("success: must be true or false")
    source = data.get("source", {})
    if not isinstance(source, dict):
        raise MappingError("source: must be a table")
    unknown = set(data) - {
        "job",
        "format",
        "operator",
        "task_instruction",
        "success",
        "source",
        "robot",
    }
    if unknown:
        raise MappingError(f"{sorted(unknown)[0]}: unknown key")
    return ImportMapping(
        job=data["job"].strip(),
        format=data["format"].strip(),
        operator=data.get("operator"),
        task_instruction=data.get("task_instruction"),
        success=data.get("success"),
        source=source,
        robot=data.get("robot"),
    )


def load_mapping(path: str | Path) -> ImportMapping:
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MappingError(f"{path}: {exc}") from exc
    return parse_mapping(data)
