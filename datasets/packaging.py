"""Turning a written dataset directory into a delivery: manifest, dataset card, upload.

`manifest.json` lists every file of the delivery with its size and SHA-256 (the card and
the dataset files; the manifest cannot list itself). `README.md` is the dataset card.
"""

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import numpy as np

from datasets import storage
from datasets.delivery_plan import NO_OBJECT, PlanGrid

HASH_CHUNK = 1024 * 1024
CALIBRATIONS_PATH = "meta/calibrations.json"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Provenance:
    fleet: str
    site: str
    site_kind: str
    episodes: int
    hours: Decimal


@dataclass(frozen=True)
class VideoFacts:
    """One camera of the delivery (lerobot_videos.CameraWriter.summary())."""

    key: str
    codec: str
    width: int
    height: int
    fps: int
    files: int

    @classmethod
    def of(cls, summary: dict) -> "VideoFacts":
        return cls(
            key=summary["key"],
            codec=summary["codec"],
            width=summary["width"],
            height=summary["height"],
            fps=summary["fps"],
            files=len(summary["files"]),
        )


@dataclass(frozen=True)
class CalibrationFacts:
    """One calibration shipped in meta/calibrations.json, as the card lists it."""

    id: str
    camera: str
    robot: str  # the robot's pseudonym within the order
    calibrated_at: str
    width: int
    height: int
    distortion_model: str
    reference_frame: str


QUALITY_BINS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass(frozen=True)
class QualityFacts:
    """The distribution of content QA's quality score over the delivered episodes."""

    scored: int  # episodes with a score (checked by content QA)
    minimum: float
    median: float
    mean: float
    maximum: float
    quartiles: tuple[float, float]  # 25th and 75th percentiles
    histogram: tuple[tuple[str, int], ...]  # ("0.8-0.9", episodes)
    mean_idle_fraction: float | None
    median_jerk: float | None

    @classmethod
    def of(cls, scores: list[float], idle: list[float], jerk: list[float]) -> "QualityFacts | None":
        if not scores:
            return None
        values = np.asarray(scores, dtype=np.float64)
        counts, _ = np.histogram(values, bins=QUALITY_BINS)
        labels = [f"{lo:.1f}-{hi:.1f}" for lo, hi in itertools.pairwise(QUALITY_BINS)]
        return cls(
            scored=len(scores),
            minimum=round(float(values.min()), 4),
            median=round(float(np.median(values)), 4),
            mean=round(float(values.mean()), 4),
            maximum=round(float(values.max()), 4),
            quartiles=tuple(round(float(q), 4) for q in np.percentile(values, [25, 75])),
            histogram=tuple(zip(labels, (int(c) for c in counts), strict=True)),
            mean_idle_fraction=round(float(np.mean(idle)), 4) if idle else None,
            median_jerk=round(float(np.median(jerk)), 4) if jerk else None,
        )


@dataclass(frozen=True)
class DatasetCardFacts:
    title: str
    task: str
    embodiment: str
    robot_type: str
    fps: int
    episodes: int
    frames: int
    hours: Decimal
    environments: int
    objects: int
    operators: int
    success_rate: float | None
    qa_accepted: int
    qa_rejected: int
    qa_rejections_by_reason: dict[str, int] = field(default_factory=dict)
    provenance: tuple[Provenance, ...] = ()
    collected_from: datetime | None = None
    collected_to: datetime | None = None
    license: str = "Proprietary: licensed to the ordering organization"
    order_id: str = ""
    videos: tuple[VideoFacts, ...] = ()
    vectors: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (feature, element names)
    quality: QualityFacts | None = None
    version: int = 1
    filters: dict = field(default_factory=dict)  # what this version keeps (see the manifest)
    plan: PlanGrid | None = None  # the collection plan's grid (planned orders only)
    calibrations: tuple[CalibrationFacts, ...] = ()


# Characters that make HTML, links, images, code, tables or headings of plain text (":" too:
# GFM turns "http://..." into links), escaped with a backslash (CommonMark allows it for any
# ASCII punctuation). "_" stays: inside words it is no emphasis, and emphasis is harmless.
MARKDOWN_SPECIAL = set("\\`*{}[]()<>#!|~&:")


def md(value) -> str:
    """Any value as inert Markdown text on one line: HTML and Markdown syntax escaped (so a
    fleet naming its site `<script>` or `[click](http://...)` renders just that text), control
    characters and line breaks turned into spaces (they could end a table row)."""
    text = "".join(" " if (ord(c) < 32 or ord(c) == 127) else c for c in str(value))
    return "".join(f"\\{c}" if c in MARKDOWN_SPECIAL else c for c in text)


def render_dataset_card(facts: DatasetCardFacts) -> str:
    success = "n/a" if facts.success_rate is None else f"{facts.success_rate:.1%}"
    window = "n/a"
    if facts.collected_from and facts.collected_to:
        window = f"{facts.collected_from:%Y-%m-%d} to {facts.collected_to:%Y-%m-%d}"
    lines = [
        f"# {md(facts.title)}",
        "",
        "A teleoperated robot motion dataset in LeRobot v3.0 format. Load it offline with",
        "`LeRobotDataset(repo_id, root=<this folder>)`.",
        "",
        "| | |",
        "|---|---|",
        f"| Task | {md(facts.task)} |",
        f"| Embodiment | {md(facts.embodiment)} (`robot_type` {md(facts.robot_type)}) |",
        f"| Frames per second | {facts.fps} |",
        f"| Hours | {facts.hours} |",
        f"| Episodes | {facts.episodes} |",
        f"| Frames | {facts.frames} |",
        f"| Environments | {facts.environments} |",
        f"| Distinct objects | {facts.objects} |",
        f"| Operators | {facts.operators} |",
        f"| Success rate (operator labels) | {success} |",
        f"| Collected | {window} |",
        f"| License | {md(facts.license)} |",
        f"| Order | {md(facts.order_id)} |",
        "",
        "## Quality assurance",
        "",
        "Every episode was checked before it counted: file size and SHA-256, schema and dtypes,",
        "vector lengths, frame count, monotonic timestamps without gaps over 1.5 frame periods,",
        "frame rate within tolerance, no NaN or infinity, duration within bounds.",
        "",
        f"- accepted: {facts.qa_accepted}",
        f"- rejected: {facts.qa_rejected}",
    ]
    for reason, count in sorted(facts.qa_rejections_by_reason.items()):
        lines.append(f"  - {md(reason)}: {count}")
    lines += _quality_lines(facts)
    lines += _stream_lines(facts)
    lines += _plan_lines(facts)
    lines += _calibration_lines(facts)
    lines += ["", "## Provenance", ""]
    if facts.provenance:
        lines += ["| Fleet | Site | Site kind | Episodes | Hours |", "|---|---|---|---|---|"]
        lines += [
            f"| {md(p.fleet)} | {md(p.site)} | {md(p.site_kind)} | {p.episodes} | {p.hours} |"
            for p in facts.provenance
        ]
    else:
        lines.append("No provenance recorded.")
    lines += ["", "`manifest.json` lists every file with its size and SHA-256.", ""]
    return "\n".join(lines)


def _quality_lines(facts: DatasetCardFacts) -> list[str]:
    lines = []
    if facts.version > 1 or facts.filters:
        lines += ["", f"Version {facts.version} of this dataset."]
        if facts.filters.get("min_quality") is not None:
            lines.append(
                f"Only episodes with a quality score of at least {facts.filters['min_quality']}."
            )
        if facts.filters.get("exclude_operators"):
            names = ", ".join(md(n) for n in facts.filters["exclude_operators"])
            lines.append(f"Without the episodes of operators {names}.")
    quality = facts.quality
    if quality is None:
        return lines
    lines += [
        "",
        "## Quality",
        "",
        "Content QA scores every episode from 0 to 1 (the mean of activity, action-state",
        "consistency and smoothness); `meta/episodes` carries each episode's `quality_score`,",
        "`idle_fraction`, `jerk` and `operator` (a pseudonym).",
        "",
        f"- scored episodes: {quality.scored}",
        f"- quality score: min {quality.minimum}, 25 % {quality.quartiles[0]}, median "
        f"{quality.median}, 75 % {quality.quartiles[1]}, max {quality.maximum} (mean "
        f"{quality.mean})",
    ]
    if quality.mean_idle_fraction is not None:
        lines.append(f"- mean idle fraction: {quality.mean_idle_fraction}")
    if quality.median_jerk is not None:
        lines.append(f"- median jerk (RMS, state units/s^3): {quality.median_jerk}")
    lines += ["", "| Quality score | Episodes |", "|---|---|"]
    lines += [f"| {label} | {count} |" for label, count in quality.histogram]
    return lines


def _stream_lines(facts: DatasetCardFacts) -> list[str]:
    lines = []
    if facts.videos:
        lines += ["", "## Cameras", ""]
        lines += [
            "Videos under `videos/<camera>/chunk-CCC/file-FFF.mp4`, episodes concatenated"
            " (`meta/episodes` gives each episode's file and time range); frame i of an episode"
            " is at from_timestamp + i / fps.",
            "",
            "| Camera | Codec | Resolution | Frames per second | Files |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {md(v.key)} | {md(v.codec)} | {v.width}x{v.height} | {v.fps} | {v.files} |"
            for v in facts.videos
        ]
    if facts.vectors:
        lines += ["", "## Other sensors", "", "| Feature | Values |", "|---|---|"]
        lines += [
            f"| {md(key)} | {len(names)}: {md(', '.join(names))} |" for key, names in facts.vectors
        ]
    return lines


def _plan_lines(facts: DatasetCardFacts) -> list[str]:
    """The grid (environments x objects: episodes and minutes per cell) and the coverage."""
    grid = facts.plan
    if grid is None:
        return []
    unit = "scenes" if grid.unit == "scene" else "sites"
    lines = [
        "",
        "## Collection plan",
        "",
        f"Environments are distinct {unit}. `meta/episodes` carries each episode's `site` (a"
        " pseudonym, the same in every version of this order's dataset), `scene_id` (empty"
        " when none), `objects` (the objects handled, in the fleet's order: an episode counts"
        " in the cell of its first object) and `calibration_id` (a JSON object"
        " {camera: calibration id}).",
        "",
        "| Coverage | Planned | Delivered |",
        "|---|---|---|",
        f"| Environments | {grid.environments_planned} | {grid.delivered.environments} |",
        f"| Distinct objects | {grid.objects_planned} | {grid.delivered.objects} |",
        "",
        "Episodes and minutes per cell (environment x first object):",
        "",
        "| Environment | " + " | ".join(md(o) for o in grid.objects) + " |",
        "|---|" + "---|" * len(grid.objects),
    ]
    for environment in grid.environments:
        cells = []
        for obj in grid.objects:
            cell = grid.cell(environment, obj)
            cells.append(f"{cell.episodes} ep, {cell.minutes} min" if cell else "-")
        lines.append(f"| {md(environment)} | " + " | ".join(cells) + " |")
    if NO_OBJECT in grid.objects:
        lines += ["", f"{md(NO_OBJECT)}: episodes whose fleet named no object."]
    return lines


def _calibration_lines(facts: DatasetCardFacts) -> list[str]:
    if not facts.calibrations:
        return []
    lines = [
        "",
        "## Camera calibrations",
        "",
        f"`{CALIBRATIONS_PATH}` holds each camera calibration the episodes reference, keyed by"
        " its id (an episode's `calibration_id` names one per camera): `camera`, `robot` (a"
        " pseudonym), `calibrated_at` (UTC), `width`, `height`, intrinsics `fx`, `fy`, `cx`,"
        " `cy` (pixels), `distortion_model` (none, plumb_bob, rational_polynomial or"
        " equidistant, as ROS and OpenCV name them) with its `distortion_coefficients`,"
        " `extrinsics` (a 4x4 row-major homogeneous transform from the camera frame to"
        " `reference_frame`) and `reference_frame`.",
        "",
        "| Calibration | Camera | Robot | Calibrated at | Resolution | Distortion | Frame |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {md(c.id)} | {md(c.camera)} | {md(c.robot)} | {md(c.calibrated_at)} |"
        f" {c.width}x{c.height} | {md(c.distortion_model)} | {md(c.reference_frame)} |"
        for c in facts.calibrations
    ]
    return lines


def build_manifest(root: Path, *, extra: dict | None = None) -> dict:
    root = Path(root)
    files = [
        {
            "path": str(path.relative_to(root)),
            "size": path.stat().st_size,
            "sha256": file_sha256(path),
        }
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != "manifest.json"
    ]
    return {"version": 1, **(extra or {}), "files": files}


def write_delivery_files(root: Path, card: DatasetCardFacts, *, extra: dict | None = None) -> dict:
    """Add README.md and manifest.json beside the dataset; returns the manifest."""
    root = Path(root)
    (root / "README.md").write_text(render_dataset_card(card))
    manifest = build_manifest(root, extra=extra)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def upload_tree(root: Path, prefix: str) -> list[str]:
    """Upload every file under root to prefix/..., data files first, manifest last."""
    root = Path(root)
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    paths.sort(key=lambda p: p.name == "manifest.json")
    keys = []
    for path in paths:
        key = f"{prefix.rstrip('/')}/{path.relative_to(root)}"
        storage.upload_file(key=key, path=path)
        keys.append(key)
    return keys
