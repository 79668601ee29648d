"""The collection plan's QA checks (issue 30), decided from plain values: no Django, no storage.

For an order planned by cell (`Order.cells_planned`), an episode that passed the file's checks
is checked against the order's (environment, object) cells and, when the order asks for
calibrated cameras, its cameras' calibrations. `datasets/services/cells.py` reads the values
under the order's lock, calls `decide`, and writes the bindings it returns.

The rules (the shared semantics of issue 30):
- the episode's environment is its job's `environment_index`; its cells bind the episode's
  site on first acceptance (and its scene when the order counts scenes: the episode must name
  one, and no other environment of the order may use it -> `scene_not_in_plan`); an
  environment bound to a site takes no episode of another site;
- the episode's first object must be an active object of its site, within the order's object
  categories (if any); new in its environment, it binds the next free object slot; no slot
  free, or reusing an object bound elsewhere would leave the `distinct_objects` target out of
  reach -> `object_not_in_plan`; a job collecting one cell's shortfall takes that cell's
  object only;
- calibrated cameras: every camera of the order needs a calibration of the episode's robot
  (`calibration_missing`), made within `max_age_days` before the episode's registration and
  not before its scene was arranged (`calibration_stale`);
- the cell's accepted time plus this episode's may not exceed its target x the maximum share
  (`cell_full`).
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

OBJECT_NOT_IN_PLAN = "object_not_in_plan"
SCENE_NOT_IN_PLAN = "scene_not_in_plan"
CELL_FULL = "cell_full"
CALIBRATION_MISSING = "calibration_missing"
CALIBRATION_STALE = "calibration_stale"
CODES = (OBJECT_NOT_IN_PLAN, SCENE_NOT_IN_PLAN, CELL_FULL, CALIBRATION_MISSING, CALIBRATION_STALE)


@dataclass(frozen=True)
class Cell:
    environment_index: int
    object_slot: int
    target_seconds: Decimal
    accepted_seconds: Decimal = Decimal(0)
    site_id: object = None
    scene_id: object = None
    object_id: object = None


@dataclass(frozen=True)
class PlanRules:
    environment_unit: str = "site"  # "site" or "scene"
    distinct_objects: int | None = None  # over the whole plan; None: no overall target
    object_categories: tuple = ()  # empty: any category
    max_share_percent: Decimal = Decimal(150)
    calibrated_cameras: bool = False
    cameras: tuple = ()  # the order's camera keys
    calibration_max_age_days: int = 30


@dataclass(frozen=True)
class SiteObject:
    id: object
    name: str
    category: str = ""
    active: bool = True


@dataclass(frozen=True)
class Calibration:
    id: object
    robot_id: object
    camera: str
    calibrated_at: datetime


@dataclass(frozen=True)
class EpisodeFacts:
    environment_index: int
    site_id: object
    robot_id: object
    duration_seconds: Decimal
    registered_at: datetime
    first_object: str | None = None  # the name the fleet sent first (None: none sent)
    site_object: SiteObject | None = None  # that name's object at the episode's site, if any
    scene_id: object = None
    scene_site_id: object = None
    scene_arranged_at: datetime | None = None
    calibrations: dict = field(default_factory=dict)  # camera -> Calibration (known ids only)
    only_slot: int | None = None  # a shortfall job's cell slot: that cell's object only


@dataclass(frozen=True)
class Decision:
    code: str = ""  # "" when the episode fits the plan
    message: str = ""
    cell: tuple | None = None  # (environment_index, object_slot) it counts in
    bind_site: bool = False  # the environment's cells take the episode's site (and scene)
    bind_scene: bool = False
    bind_object: bool = False  # the cell takes the episode's object

    @property
    def passed(self) -> bool:
        return not self.code


def _refuse(code: str, message: str) -> Decision:
    return Decision(code=code, message=message)


def decide(*, rules: PlanRules, cells: list[Cell], episode: EpisodeFacts) -> Decision:
    """Where the episode counts in the plan, what it binds, or why it is refused."""
    mine = sorted(
        (c for c in cells if c.environment_index == episode.environment_index),
        key=lambda c: c.object_slot,
    )
    if not mine:
        return _refuse(
            OBJECT_NOT_IN_PLAN,
            f"The order's plan has no environment {episode.environment_index + 1}.",
        )
    refused = _place(rules, cells, mine, episode)
    if refused is not None:
        return refused
    bind_site = mine[0].site_id is None
    bind_scene = rules.environment_unit == "scene" and mine[0].scene_id is None
    refused = _check_object(rules, cells, mine, episode)
    if isinstance(refused, Decision):
        return refused
    cell, bind_object = refused
    refused = _check_calibrations(rules, episode)
    if refused is not None:
        return refused
    ceiling = cell.target_seconds * rules.max_share_percent / 100
    if cell.accepted_seconds + episode.duration_seconds > ceiling:
        return _refuse(
            CELL_FULL,
            f"The cell of environment {cell.environment_index + 1}, object "
            f"{episode.first_object!r} is full: {cell.accepted_seconds} s accepted of at most "
            f"{ceiling.quantize(Decimal('0.001'))} s; this {episode.duration_seconds} s episode "
            "would exceed it.",
        )
    return Decision(
        cell=(cell.environment_index, cell.object_slot),
        bind_site=bind_site,
        bind_scene=bind_scene,
        bind_object=bind_object,
    )


def _place(rules: PlanRules, cells, mine, episode: EpisodeFacts) -> Decision | None:
    """The episode's site (and scene) against its environment's binding."""
    bound_site = mine[0].site_id
    scenes = rules.environment_unit == "scene"
    env = episode.environment_index + 1
    if bound_site is not None and bound_site != episode.site_id:
        return _refuse(
            SCENE_NOT_IN_PLAN if scenes else OBJECT_NOT_IN_PLAN,
            f"Environment {env} of this order is collected at another site.",
        )
    if bound_site is None and not scenes:
        taken = {c.site_id for c in cells if c.environment_index != episode.environment_index}
        if episode.site_id in taken:
            return _refuse(
                OBJECT_NOT_IN_PLAN,
                f"This site is already another environment of the order (environment {env} "
                "must be a distinct site).",
            )
    if not scenes:
        return None
    if episode.scene_id is None:
        return _refuse(
            SCENE_NOT_IN_PLAN, "The order counts scenes: each episode must name its scene."
        )
    if episode.scene_site_id != episode.site_id:
        return _refuse(SCENE_NOT_IN_PLAN, "The episode's scene is not one of its site's.")
    bound_scene = mine[0].scene_id
    if bound_scene is not None and bound_scene != episode.scene_id:
        return _refuse(
            SCENE_NOT_IN_PLAN, f"Environment {env} of this order is collected in another scene."
        )
    others = {c.scene_id for c in cells if c.environment_index != episode.environment_index}
    if bound_scene is None and episode.scene_id in others:
        return _refuse(
            SCENE_NOT_IN_PLAN,
            "This scene is already another environment of the order (each environment is a "
            "distinct scene).",
        )
    return None


def _check_object(rules: PlanRules, cells, mine, episode: EpisodeFacts):
    """(cell, binds) for the episode's first object, or a refusal."""
    name = episode.first_object
    obj = episode.site_object
    if not name:
        return _refuse(OBJECT_NOT_IN_PLAN, "The episode names no object it handled.")
    if obj is None or not obj.active:
        return _refuse(
            OBJECT_NOT_IN_PLAN, f"{name!r} is not an active object registered at this site."
        )
    if rules.object_categories and obj.category not in rules.object_categories:
        return _refuse(
            OBJECT_NOT_IN_PLAN,
            f"{name!r} is of category {obj.category or 'none'!r}; the order takes "
            f"{', '.join(rules.object_categories)} only.",
        )
    cell = next((c for c in mine if c.object_id == obj.id), None)
    if episode.only_slot is not None:
        wanted = next((c for c in mine if c.object_slot == episode.only_slot), None)
        if (
            wanted is None
            or (wanted.object_id is not None and wanted.object_id != obj.id)
            or (wanted.object_id is None and cell is not None)
        ):
            return _refuse(OBJECT_NOT_IN_PLAN, "This job collects another object's shortfall.")
        if wanted.object_id is not None:
            return wanted, False
        free = wanted
    elif cell is not None:
        return cell, False
    else:
        free = next((c for c in mine if c.object_id is None), None)
    if free is None:
        return _refuse(
            OBJECT_NOT_IN_PLAN,
            f"{name!r} is not one of the objects of environment "
            f"{episode.environment_index + 1}, whose object slots are all taken.",
        )
    bound = {c.object_id for c in cells if c.object_id is not None}
    if obj.id in bound and rules.distinct_objects:
        target = min(rules.distinct_objects, len(cells))
        unbound = sum(1 for c in cells if c.object_id is None)
        if len(bound) + unbound - 1 < target:
            return _refuse(
                OBJECT_NOT_IN_PLAN,
                f"{name!r} is already used in another environment, and the plan needs "
                f"{target} distinct objects: this slot needs a new object.",
            )
    return free, True


def _check_calibrations(rules: PlanRules, episode: EpisodeFacts) -> Decision | None:
    if not rules.calibrated_cameras:
        return None
    oldest = episode.registered_at - timedelta(days=rules.calibration_max_age_days)
    for camera in rules.cameras:
        calibration = episode.calibrations.get(camera)
        if (
            calibration is None
            or calibration.robot_id != episode.robot_id
            or calibration.camera != camera
        ):
            return _refuse(
                CALIBRATION_MISSING, f"Camera {camera!r} has no calibration of this robot."
            )
        if calibration.calibrated_at < oldest:
            return _refuse(
                CALIBRATION_STALE,
                f"Camera {camera!r} was calibrated {calibration.calibrated_at:%Y-%m-%d}, more "
                f"than {rules.calibration_max_age_days} days before the episode.",
            )
        arranged = episode.scene_arranged_at
        if arranged is not None and calibration.calibrated_at < arranged:
            return _refuse(
                CALIBRATION_STALE,
                f"Camera {camera!r} was calibrated before the scene was last arranged "
                f"({arranged:%Y-%m-%d %H:%M}).",
            )
    return None
