"""What a delivery says about the collection plan (issue 30), pure (no Django, no storage).

- Per episode, the meta/episodes columns `scene_id` (the scene's id, "" when none), `site` (a
  pseudonym stable within the order, "site-01", never the site's name or id), `objects` (the
  names the fleet sent, in its order: the first is the one whose cell the episode counts in)
  and `calibration_id` (a JSON object {camera: calibration id}, "{}" when none: lerobot
  0.6.1 reads meta/episodes through Hugging Face `datasets`, where a string column loads as
  is whatever its content; a map or a struct of the order's cameras would not).
- The delivered counts the true-up credits by: distinct environments (sites, or scenes when
  the order counts scenes) and distinct objects (the first object of each episode, its
  identity being its site and its name).
- The grid of the dataset card: environments x objects, episodes and minutes per cell.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

NO_OBJECT = "(no object named)"


def pseudonyms(keys: Iterable, prefix: str) -> dict:
    """`prefix-01`, `prefix-02`, ... in the order the keys are given (first seen first); past
    99, `prefix-100` (a label never changes when more keys come)."""
    ordered = list(dict.fromkeys(keys))
    return {key: f"{prefix}-{number:02d}" for number, key in enumerate(ordered, start=1)}


@dataclass(frozen=True)
class PlanEpisode:
    """One delivered episode as the plan sees it."""

    site_id: str
    scene_id: str  # "" when the episode names no scene
    objects: tuple[str, ...]
    calibrations: dict  # {camera: calibration id}
    seconds: Decimal

    @property
    def first_object(self) -> str | None:
        return self.objects[0] if self.objects else None

    def environment(self, unit: str):
        """The environment it counts in: its site, or its scene when the order counts
        scenes (None: a scene order's episode without a scene)."""
        if unit == "scene":
            return self.scene_id or None
        return self.site_id

    def columns(self, site_label: str) -> dict:
        return {
            "scene_id": self.scene_id,
            "site": site_label,
            "objects": list(self.objects),
            "calibration_id": calibration_column(self.calibrations),
        }


def calibration_column(calibrations: dict) -> str:
    return json.dumps({str(k): str(v) for k, v in sorted(calibrations.items())})


def clean_calibrations(raw) -> dict[str, str]:
    """An episode's {camera: calibration id} as recorded, keeping only well-formed pairs."""
    if not isinstance(raw, dict):
        return {}
    return {
        camera: value
        for camera, value in raw.items()
        if isinstance(camera, str) and isinstance(value, str) and camera and value
    }


def clean_objects(raw) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(dict.fromkeys(name for name in raw if isinstance(name, str) and name))


@dataclass(frozen=True)
class DeliveredPlan:
    """Distinct environments and objects delivered (what the true-up compares to the plan)."""

    environments: int
    objects: int

    @classmethod
    def of(cls, episodes: Iterable[PlanEpisode], unit: str) -> "DeliveredPlan":
        episodes = list(episodes)
        environments = {e.environment(unit) for e in episodes} - {None}
        objects = {(e.site_id, e.first_object) for e in episodes if e.first_object is not None}
        return cls(environments=len(environments), objects=len(objects))

    def as_json(self) -> dict:
        return {"environments": self.environments, "objects": self.objects}


@dataclass(frozen=True)
class GridCell:
    environment: str  # its label
    object: str
    episodes: int
    minutes: Decimal


@dataclass(frozen=True)
class PlanGrid:
    """The card's grid and coverage: planned against delivered."""

    unit: str  # "site" or "scene"
    environments_planned: int
    objects_planned: int
    delivered: DeliveredPlan
    environments: tuple[str, ...]  # row labels, in order
    objects: tuple[str, ...]  # column labels, in order
    cells: tuple[GridCell, ...]

    @classmethod
    def of(
        cls,
        episodes: list[PlanEpisode],
        *,
        unit: str,
        environments_planned: int,
        objects_planned: int,
        site_labels: dict,
        scene_labels: dict,
    ) -> "PlanGrid":
        def row(episode: PlanEpisode) -> str:
            site = site_labels[episode.site_id]
            if unit != "scene":
                return site
            scene = scene_labels.get(episode.scene_id)
            return f"{site}, {scene}" if scene else f"{site}, no scene"

        tally: dict[tuple[str, str], list] = {}
        for episode in episodes:
            key = (row(episode), episode.first_object or NO_OBJECT)
            counted = tally.setdefault(key, [0, Decimal(0)])
            counted[0] += 1
            counted[1] += episode.seconds
        rows = tuple(dict.fromkeys(row(e) for e in episodes))
        columns = tuple(dict.fromkeys(e.first_object or NO_OBJECT for e in episodes))
        cells = tuple(
            GridCell(
                environment=env,
                object=obj,
                episodes=count,
                minutes=(seconds / 60).quantize(Decimal("0.1")),
            )
            for (env, obj), (count, seconds) in tally.items()
        )
        return cls(
            unit=unit,
            environments_planned=environments_planned,
            objects_planned=objects_planned,
            delivered=DeliveredPlan.of(episodes, unit),
            environments=rows,
            objects=columns,
            cells=cells,
        )

    def cell(self, environment: str, obj: str) -> GridCell | None:
        for cell in self.cells:
            if cell.environment == environment and cell.object == obj:
                return cell
        return None


def calibration_record(calibration, robot_label: str) -> dict:
    """One entry of meta/calibrations.json (`calibration` has CameraCalibration's fields)."""
    return {
        "camera": calibration.camera,
        "robot": robot_label,
        "calibrated_at": calibration.calibrated_at.isoformat(),
        "width": calibration.width,
        "height": calibration.height,
        "fx": calibration.fx,
        "fy": calibration.fy,
        "cx": calibration.cx,
        "cy": calibration.cy,
        "distortion_model": calibration.distortion_model,
        "distortion_coefficients": list(calibration.distortion_coefficients or []),
        "extrinsics": calibration.extrinsics,
        "reference_frame": calibration.reference_frame,
    }
