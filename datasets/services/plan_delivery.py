"""What a delivery carries of the collection plan (issue 30), read from the database: the
per-episode columns with the order's pseudonyms, the calibrations shipped in
meta/calibrations.json, the card's grid, and the delivered counts billing credits by. The
rules themselves are pure, in datasets/delivery_plan.py."""

import json
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.db.models import Min

from datasets.delivery_plan import (
    DeliveredPlan,
    PlanEpisode,
    PlanGrid,
    calibration_record,
    clean_calibrations,
    clean_objects,
    pseudonyms,
)
from datasets.models import Episode
from datasets.packaging import CALIBRATIONS_PATH, CalibrationFacts
from fleets.models import CameraCalibration
from orders.models import Order

# Episodes that were accepted once (excluded ones included): the order's pseudonyms of sites
# and robots follow the first acceptance at each, so every version of a delivery (filtered or
# re-collected) calls the same site by the same label.
ONCE_ACCEPTED = (Episode.Status.ACCEPTED, Episode.Status.EXCLUDED)


def plan_episode(episode: Episode) -> PlanEpisode:
    return PlanEpisode(
        site_id=str(episode.site_id),
        scene_id=str(episode.scene_id) if episode.scene_id else "",
        objects=clean_objects(episode.objects_handled),
        calibrations=clean_calibrations(episode.camera_calibrations),
        seconds=episode.duration_seconds or Decimal(0),
    )


def _labels_by_first_acceptance(order: Order, field: str, prefix: str) -> dict[str, str]:
    rows = (
        Episode.objects.filter(order=order, status__in=ONCE_ACCEPTED)
        .exclude(**{f"{field}__isnull": True})
        .values(field)
        .annotate(first=Min("decided_at"))
        .order_by("first", field)
    )
    return pseudonyms((str(row[field]) for row in rows), prefix)


def _uuid_or_none(value: str):
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return None


@dataclass(frozen=True)
class PlanFacts:
    """What the delivery carries of the collection plan: per-episode columns, the
    calibrations file, the card's grid (planned orders only)."""

    site_labels: dict[str, str]
    scene_labels: dict[str, str]
    calibrations: dict[str, dict]  # id -> meta/calibrations.json entry
    references: set[tuple[str, str, str]]  # (calibration id, robot id, camera) shipped
    grid: PlanGrid | None

    @classmethod
    def of(cls, order: Order, episodes: list[Episode]) -> "PlanFacts":
        plans = [plan_episode(e) for e in episodes]
        site_labels = _labels_by_first_acceptance(order, "site_id", "site")
        for plan in plans:  # an accepted episode always is; kept whole for safety
            site_labels.setdefault(plan.site_id, f"site-{len(site_labels) + 1:02d}")
        # A scene is named by the start of its id (the scene_id column has it whole).
        scene_labels = {p.scene_id: f"scene {p.scene_id[:8]}" for p in plans if p.scene_id}
        robot_labels = _labels_by_first_acceptance(order, "robot_id", "robot")
        wanted = {
            (parsed, episode.robot_id, camera)
            for episode, plan in zip(episodes, plans, strict=True)
            for camera, value in plan.calibrations.items()
            if (parsed := _uuid_or_none(value)) is not None
        }
        found = CameraCalibration.objects.filter(pk__in={ref[0] for ref in wanted})
        # Only a calibration of the episode's robot and camera (as registration checks).
        found = [c for c in found.order_by("id") if (c.id, c.robot_id, c.camera) in wanted]
        calibrations = {
            str(c.id): calibration_record(c, robot_labels.get(str(c.robot_id), "robot"))
            for c in found
        }
        references = {(str(c.id), str(c.robot_id), c.camera) for c in found}
        grid = None
        if order.cells_planned:
            grid = PlanGrid.of(
                plans,
                unit=order.environment_unit,
                environments_planned=order.environments,
                objects_planned=planned_objects(order),
                site_labels=site_labels,
                scene_labels=scene_labels,
            )
        return cls(
            site_labels=site_labels,
            scene_labels=scene_labels,
            calibrations=calibrations,
            references=references,
            grid=grid,
        )

    def columns(self, episode: Episode) -> dict:
        plan = plan_episode(episode)
        robot = str(episode.robot_id)
        known = {
            camera: value
            for camera, value in plan.calibrations.items()
            if (str(_uuid_or_none(value)), robot, camera) in self.references
        }
        return PlanEpisode(
            site_id=plan.site_id,
            scene_id=plan.scene_id,
            objects=plan.objects,
            calibrations=known,
            seconds=plan.seconds,
        ).columns(self.site_labels[plan.site_id])

    def write_calibrations(self, root: Path) -> bool:
        """meta/calibrations.json, keyed by calibration id (only when there are any)."""
        if not self.calibrations:
            return False
        path = root / CALIBRATIONS_PATH
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(sorted(self.calibrations.items())), indent=2))
        return True

    def card_calibrations(self) -> tuple[CalibrationFacts, ...]:
        return tuple(
            CalibrationFacts(
                id=key,
                camera=c["camera"],
                robot=c["robot"],
                calibrated_at=c["calibrated_at"],
                width=c["width"],
                height=c["height"],
                distortion_model=c["distortion_model"],
                reference_frame=c["reference_frame"],
            )
            for key, c in sorted(
                self.calibrations.items(), key=lambda kv: (kv[1]["robot"], kv[1]["camera"], kv[0])
            )
        )


def planned_objects(order: Order) -> int:
    """Distinct objects the plan asks for (null distinct_objects: one environment's)."""
    return order.distinct_objects or order.objects_per_environment


def delivered_plan(order: Order) -> DeliveredPlan:
    """The distinct environments and objects of every accepted episode of the order (a
    filtered version is the customer's choice: the true-up counts them all)."""
    episodes = Episode.objects.filter(order=order, status=Episode.Status.ACCEPTED).only(
        "site_id", "scene_id", "objects_handled", "camera_calibrations", "duration_seconds"
    )
    return DeliveredPlan.of((plan_episode(e) for e in episodes), order.environment_unit)
