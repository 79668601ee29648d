"""The collection plan in QA (issue 30): an order's (environment, object) cells, locked.

`plan_check` reads, under the order's lock (taken by QA before it: episode -> order -> job ->
cells), the values `datasets/qa_plan.py` decides from and writes the bindings it returns;
`cell_accrue` adds an accepted episode's counted time to its cell; `cells_recount` takes
excluded episodes' time off their cells; `cells_collect_shortfall` opens a job for each cell
left short once its environment's jobs are done (fleets/services/planning.py creates it).
Orders not planned by cell (`cells_planned=False`) never reach this module.
"""

import uuid
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils import timezone

from datasets import qa_plan
from datasets.models import Episode
from datasets.qa_checks import QAResult
from fleets.models import CameraCalibration, Job, OrderCell, SiteObject
from fleets.services.planning import job_collect_shortfall
from marketplace.audit import system_label
from orders.models import Order
from orders.streams import camera_names

SYSTEM = system_label("qa")
MS = Decimal("0.001")


def _rules(order: Order) -> qa_plan.PlanRules:
    return qa_plan.PlanRules(
        environment_unit=order.environment_unit,
        distinct_objects=order.distinct_objects,
        object_categories=tuple(str(c).lower() for c in order.object_categories or ()),
        max_share_percent=order.cell_max_share_percent,
        calibrated_cameras=order.calibrated_cameras,
        cameras=tuple(camera_names(order.stream_spec)),
        calibration_max_age_days=settings.CALIBRATION_MAX_AGE_DAYS,
    )


def _view(cell: OrderCell) -> qa_plan.Cell:
    return qa_plan.Cell(
        environment_index=cell.environment_index,
        object_slot=cell.object_slot,
        target_seconds=cell.target_seconds,
        accepted_seconds=cell.accepted_seconds,
        site_id=cell.site_id,
        scene_id=cell.scene_id,
        object_id=cell.site_object_id,
    )


def _first_object(episode: Episode) -> str | None:
    objects = episode.objects_handled
    if isinstance(objects, list) and objects and isinstance(objects[0], str) and objects[0]:
        return objects[0]
    return None


def _calibrations(episode: Episode) -> dict:
    """camera -> qa_plan.Calibration for the ids the episode names (unknown ids left out)."""
    named = episode.camera_calibrations if isinstance(episode.camera_calibrations, dict) else {}
    ids = {}
    for camera, value in named.items():
        try:
            ids[str(camera)] = uuid.UUID(str(value))
        except ValueError:
            continue
    rows = {
        row.pk: row
        for row in CameraCalibration.objects.filter(pk__in=set(ids.values())).only(
            "pk", "robot_id", "camera", "calibrated_at"
        )
    }
    return {
        camera: qa_plan.Calibration(row.pk, row.robot_id, row.camera, row.calibrated_at)
        for camera, pk in ids.items()
        if (row := rows.get(pk)) is not None
    }


def _facts(episode: Episode, job: Job, duration: Decimal) -> qa_plan.EpisodeFacts:
    name = _first_object(episode)
    row = (
        SiteObject.objects.filter(site_id=episode.site_id, name=name).first()
        if name is not None
        else None
    )
    scene = episode.scene
    shortfall = job.shortfall_cell
    return qa_plan.EpisodeFacts(
        environment_index=job.environment_index,
        site_id=episode.site_id,
        robot_id=episode.robot_id,
        duration_seconds=duration,
        registered_at=episode.created_at,
        first_object=name,
        site_object=None
        if row is None
        else qa_plan.SiteObject(row.pk, row.name, (row.category or "").lower(), row.active),
        scene_id=episode.scene_id,
        scene_site_id=scene.site_id if scene is not None else None,
        scene_arranged_at=scene.arranged_at if scene is not None else None,
        calibrations=_calibrations(episode),
        only_slot=shortfall.object_slot if shortfall is not None else None,
    )


def plan_check(*, episode: Episode, order: Order, job: Job, result: QAResult) -> OrderCell | None:
    """Check a passed episode against the order's plan (the caller holds the episode's, the
    order's and the job's locks): a refusal fails `result` with its code; a fit writes the
    environment's and the cell's bindings and returns the cell (locked) it counts in."""
    cells = list(OrderCell.objects.select_for_update().filter(order=order))
    decision = qa_plan.decide(
        rules=_rules(order),
        cells=[_view(cell) for cell in cells],
        episode=_facts(episode, job, result.duration_seconds),
    )
    if not decision.passed:
        result.fail(decision.code, decision.message)
        return None
    environment, slot = decision.cell
    now = timezone.now()
    if decision.bind_site or decision.bind_scene:
        for cell in cells:
            if cell.environment_index != environment:
                continue
            fields = ["bound_at"]
            if decision.bind_site:
                cell.site_id = episode.site_id
                fields.append("site")
            if decision.bind_scene:
                cell.scene_id = episode.scene_id
                fields.append("scene")
            cell.bound_at = cell.bound_at or now
            cell.save(update_fields=fields)
    cell = next(c for c in cells if (c.environment_index, c.object_slot) == (environment, slot))
    if decision.bind_object:
        cell.site_object = SiteObject.objects.get(
            site_id=episode.site_id, name=_first_object(episode)
        )
        cell.bound_at = cell.bound_at or now
        cell.save(update_fields=["site_object", "bound_at"])
    return cell


def cell_accrue(*, episode: Episode, cell: OrderCell, seconds: Decimal) -> None:
    """The accepted episode counts `seconds` (what its job counted) in its cell."""
    cell.accepted_seconds += seconds
    cell.accepted_episodes += 1
    cell.save(update_fields=["accepted_seconds", "accepted_episodes"])
    Episode.objects.filter(pk=episode.pk).update(cell=cell)
    episode.cell = cell


def cells_recount(*, cell_ids) -> Decimal:
    """Excluded episodes stop counting in their cells: each cell's accepted time and episodes
    re-counted from its accepted episodes (never up: QA may have counted less than an
    episode's duration at its job's target). Returns the seconds the cells lost. The caller
    holds the order's lock."""
    lost = Decimal(0)
    cells = OrderCell.objects.select_for_update().filter(pk__in=list(cell_ids)).order_by("pk")
    for cell in cells:
        left = Episode.objects.filter(cell=cell, status=Episode.Status.ACCEPTED).aggregate(
            seconds=Sum("duration_seconds"), episodes=Count("pk")
        )
        kept = min(left["seconds"] or Decimal(0), cell.accepted_seconds)
        if kept != cell.accepted_seconds or left["episodes"] != cell.accepted_episodes:
            lost += cell.accepted_seconds - kept
            cell.accepted_seconds = kept
            cell.accepted_episodes = left["episodes"]
            cell.save(update_fields=["accepted_seconds", "accepted_episodes"])
    return lost


def cell_minimum(cell: OrderCell, order: Order) -> Decimal:
    """The least a cell must hold not to be short: its target x the minimum share."""
    return (cell.target_seconds * order.cell_min_share_percent / 100).quantize(MS)


def cells_collect_shortfall(*, order: Order, environment_index: int) -> list[Job]:
    """An environment's jobs are all done (completed or cancelled, one at least completed):
    each of its cells below its minimum share gets a job collecting the difference (once: a
    cell with an open shortfall job gets none). The caller holds the order's lock."""
    if not order.cells_planned or order.status != Order.Status.IN_COLLECTION:
        return []
    jobs = Job.objects.filter(order=order, environment_index=environment_index)
    if jobs.exclude(status__in=[Job.Status.COMPLETED, Job.Status.CANCELLED]).exists():
        return []
    if not jobs.filter(status=Job.Status.COMPLETED).exists():
        return []
    created = []
    cells = OrderCell.objects.filter(
        Q(order=order) & Q(environment_index=environment_index)
    ).order_by("object_slot")
    for cell in cells:
        short = cell_minimum(cell, order) - cell.accepted_seconds
        if short > 0:
            job = job_collect_shortfall(cell_id=cell.pk, seconds=short, actor_label=SYSTEM)
            if job is not None:
                created.append(job)
    return created
