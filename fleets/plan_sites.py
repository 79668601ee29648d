"""The collection plan in dispatch (issue 30): which sites offer an order's plan.

Read by the dispatcher's candidate search (fleets/selectors.py: batch_candidates and
dispatch_candidates) for the jobs of orders planned by cell (`Order.cells_planned`); jobs of
other orders are left out and dispatched as before.
"""

from dataclasses import dataclass

from django.db.models import Count

from fleets.models import Job, OrderCell, Scene, SiteObject
from orders.models import EnvironmentUnit, Order


@dataclass(frozen=True)
class PlanSites:
    """What an environment of an order planned by cell may use: `allowed` sites (its bound
    site once bound; else sites with at least objects_per_environment active objects within
    the order's categories and, counting scenes, a scene no other environment uses), and in
    scene mode `scene_slots`: site -> how many more of the order's environments it can host
    (its unused active scenes less the other environments already there without one)."""

    allowed: frozenset
    scene_slots: dict | None = None


def plan_sites(
    *, jobs: list[Job], usage: dict, candidates: dict, planned_orders: set | None = None
) -> dict:
    """job_id -> PlanSites for the jobs of orders planned by cell (others are left out).
    `usage`: _batch_usage's rows; `candidates`: job_id -> its capable (site_id, fleet_id)
    pairs; `planned_orders`: which of the jobs' orders are planned by cell, if known. A few
    set queries per batch, none when the caller knows no order is planned by cell."""
    order_ids = {job.order_id for job in jobs}
    if planned_orders is not None:
        order_ids &= set(planned_orders)
        if not order_ids:
            return {}
    planned = {
        row[0]: row
        for row in Order.objects.filter(pk__in=order_ids, cells_planned=True).values_list(
            "pk", "environment_unit", "objects_per_environment", "object_categories"
        )
    }
    if not planned:
        return {}
    planned_jobs = [job for job in jobs if job.order_id in planned]
    site_ids = {s for job in planned_jobs for s, _ in candidates[job.pk]}
    bound: dict = {}  # order_id -> {environment_index: (site_id, scene_id)}
    for order_id, env, site_id, scene_id in OrderCell.objects.filter(
        order_id__in=list(planned), site__isnull=False
    ).values_list("order_id", "environment_index", "site_id", "scene_id"):
        bound.setdefault(order_id, {})[env] = (site_id, scene_id)
    objects = _object_counts(site_ids, {tuple(row[3] or ()) for row in planned.values()})
    scene_orders = [pk for pk, row in planned.items() if row[1] == EnvironmentUnit.SCENE]
    scenes: dict = {}
    if scene_orders:
        for site_id, scene_id in Scene.objects.filter(
            active=True, site_id__in=site_ids
        ).values_list("site_id", "pk"):
            scenes.setdefault(site_id, set()).add(scene_id)
    result = {}
    for job in planned_jobs:
        _, unit, per_environment, categories = planned[job.order_id]
        envs = bound.get(job.order_id, {})
        counts = objects[tuple(categories or ())]
        mine = envs.get(job.environment_index)
        capable = {s for s, _ in candidates[job.pk]}
        if unit != EnvironmentUnit.SCENE:
            allowed = (
                {mine[0]} & capable
                if mine
                else {s for s in capable if counts.get(s, 0) >= per_environment}
            )
            result[job.pk] = PlanSites(allowed=frozenset(allowed))
            continue
        if mine:
            # its scene is its own: whoever else the batch places there
            result[job.pk] = PlanSites(
                allowed=frozenset({mine[0]} & capable), scene_slots={mine[0]: float("inf")}
            )
            continue
        used = {scene for env, (_, scene) in envs.items() if env != job.environment_index}
        waiting: dict = {}  # site -> other environments holding it without a bound scene
        for _, env, site_id in usage.get(job.order_id, ()):
            if env != job.environment_index and env not in envs:
                waiting.setdefault(site_id, set()).add(env)
        slots = {
            s: len(scenes.get(s, set()) - used) - len(waiting.get(s, ()))
            for s in capable
            if counts.get(s, 0) >= per_environment
        }
        slots = {s: n for s, n in slots.items() if n >= 1}
        result[job.pk] = PlanSites(allowed=frozenset(slots), scene_slots=slots)
    return result


def _object_counts(site_ids: set, category_sets: set) -> dict:
    """categories (a tuple; empty: any) -> {site_id: active objects of those categories}."""
    counts = {}
    for categories in category_sets:
        rows = SiteObject.objects.filter(active=True, site_id__in=site_ids)
        if categories:
            rows = rows.filter(category__in=[str(c).lower() for c in categories])
        counts[categories] = dict(
            rows.values("site_id").annotate(n=Count("pk")).values_list("site_id", "n")
        )
    return counts
