"""Reads: tenancy-scoped querysets for the fleet API, and the dispatcher's candidate search.

## The dispatch score (ranking eligible sites for a job)

Only *eligible* (fleet, site) pairs are ranked: the fleet is active; the site is active,
of a kind the job accepts, not already used by another environment of the same order
(diversity), and has an active robot with the job's embodiment and end effector and every
required sensor; the fleet has not declined, let expire or gone silent on this job before;
and its free capacity before the deadline covers the job:

    capacity_until_deadline = weekly_capacity_hours x weeks until the job's deadline
    free = capacity_until_deadline - hours still owed on jobs it holds (offered/assigned/running)
    eligible when free >= job.target_hours

    score = 0.50 x headroom + 0.35 x quality + 0.15 x cheapness  (+ 1.0 if same environment)
      headroom  = (free - target_hours) / capacity_until_deadline        in [0, 1]
      quality   = fleet.quality_score                                    in [0, 1]
      cheapness = 1 - payout_rate / highest payout_rate among candidates in [0, 1]
      same environment: the site already holds another job of this order's environment
      (an environment is one site; later jobs of it go back there when they can).

Ties break on the site id, so a dispatch is deterministic. Bids, when there are eligible
ones, win over the score: lowest price per hour, then earliest finish.

The batch dispatcher reads the same rules for many jobs at once (batch_candidates) and ranks
with the same score, the headroom taken as the batch's earlier placements leave it
(fleets/matching.py).
"""

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import numpy as np
from django.db import connection
from django.db.models import (
    Count,
    DecimalField,
    ExpressionWrapper,
    F,
    Q,
    QuerySet,
    Sum,
    TextField,
)
from django.db.models.functions import Cast

from fleets.matching import (
    SAME_ENVIRONMENT_BONUS,
    W_CHEAPNESS,
    W_HEADROOM,
    W_QUALITY,
    SitesById,
    id_order,
    site_order,
)
from fleets.models import (
    JOB_HOLDING_STATES,
    Assignment,
    Fleet,
    Job,
    JobEvent,
    Offer,
    Robot,
    Site,
)
from fleets.plan_sites import plan_sites
from fleets.services.pay_terms import job_pay_terms, offered_rate
from marketplace.models import Organization
from orders.models import Order

SECONDS_PER_WEEK = Decimal(7 * 24 * 3600)


def fleets_for(*, organization: Organization) -> QuerySet[Fleet]:
    return Fleet.objects.filter(organization=organization)


def sites_for(*, organization: Organization) -> QuerySet[Site]:
    return Site.objects.filter(fleet__organization=organization).select_related("fleet")


def robots_for(*, organization: Organization) -> QuerySet[Robot]:
    return Robot.objects.filter(fleet__organization=organization).select_related(
        "fleet", "site", "embodiment"
    )


def offers_for(*, organization: Organization) -> QuerySet[Offer]:
    return Offer.objects.filter(fleet__organization=organization).select_related(
        "job__embodiment", "job__order__task_type"
    )


def jobs_held_by(*, organization: Organization) -> QuerySet[Job]:
    return Job.objects.filter(fleet__organization=organization).select_related(
        "embodiment", "order__task_type"
    )


def jobs_open_for_bids() -> QuerySet[Job]:
    return Job.objects.filter(
        status__in=[Job.Status.OPEN, Job.Status.OFFERED, Job.Status.FLAGGED]
    ).select_related("embodiment", "order__task_type")


def committed_hours(*, fleet_ids) -> dict:
    """Hours still owed on jobs each fleet holds (offered, assigned or in progress)."""
    owed = ExpressionWrapper(
        F("target_hours") - F("progress_hours"),
        output_field=DecimalField(max_digits=12, decimal_places=2),
    )
    rows = (
        Job.objects.filter(fleet_id__in=list(fleet_ids), status__in=JOB_HOLDING_STATES)
        .values("fleet_id")
        .annotate(owed=Sum(owed))
    )
    return {row["fleet_id"]: row["owed"] or Decimal(0) for row in rows}


def capacity_until(fleet: Fleet, deadline: datetime, now: datetime) -> Decimal:
    seconds = Decimal(max(0.0, (deadline - now).total_seconds()))
    return fleet.weekly_capacity_hours * seconds / SECONDS_PER_WEEK


def order_site_usage(*, job: Job) -> tuple[set, set]:
    """(sites used by the order's other environments, sites of this job's environment)."""
    rows = (
        Job.objects.filter(order_id=job.order_id, site_id__isnull=False)
        .filter(Q(status__in=JOB_HOLDING_STATES) | Q(status=Job.Status.COMPLETED))
        .exclude(pk=job.pk)
        .values_list("environment_index", "site_id")
    )
    others, same = set(), set()
    for environment_index, site_id in rows:
        (same if environment_index == job.environment_index else others).add(site_id)
    return others, same


def fleets_excluded_for(*, job: Job) -> set:
    """Fleets that already declined, let expire, or went silent on this job."""
    refused = set(
        Offer.objects.filter(
            job=job, status__in=[Offer.Status.DECLINED, Offer.Status.EXPIRED]
        ).values_list("fleet_id", flat=True)
    )
    dropped = set(
        Assignment.objects.filter(job=job, active=False).values_list("fleet_id", flat=True)
    )
    return refused | dropped


def _robot_matches(job: Job) -> QuerySet[Robot]:
    robots = Robot.objects.filter(
        active=True,
        embodiment_id=job.embodiment_id,
        end_effector=job.end_effector,
        site__active=True,
        fleet__status=Fleet.Status.ACTIVE,
    )
    if job.site_kinds:
        robots = robots.filter(site__kind__in=job.site_kinds)
    if job.sensor_slugs and connection.vendor == "postgresql":
        robots = robots.filter(sensor_slugs__contains=job.sensor_slugs)
    return robots


@dataclass
class Candidate:
    fleet_id: object
    site_id: object
    payout_rate: Decimal
    quality: Decimal
    free_hours: Decimal
    capacity: Decimal
    same_environment: bool
    score: float = 0.0


def dispatch_candidates(*, job: Job, now: datetime) -> list[Candidate]:
    """Eligible (fleet, site) pairs for a job, best first (see the module docstring).

    One query for the matching robots with their fleet's figures, one for the hours the
    fleets already hold: the cost does not grow with a Python loop over model instances.
    """
    other_env_sites, same_env_sites = order_site_usage(job=job)
    excluded_fleets = fleets_excluded_for(job=job)
    plan = _one_job_plan(job)
    if plan is not None and plan.scene_slots is not None:
        other_env_sites = set()  # scenes, not sites, are the environments (plan.allowed)
    required = set(job.sensor_slugs)
    weeks = Decimal(max(0.0, (job.deadline - now).total_seconds())) / SECONDS_PER_WEEK
    sites: dict = {}
    rows = _robot_matches(job).values_list(
        "site_id",
        "fleet_id",
        "sensor_slugs",
        "fleet__weekly_capacity_hours",
        "fleet__payout_rate_per_hour",
        "fleet__quality_score",
    )
    for site_id, fleet_id, sensors, weekly, rate, quality in rows:
        if site_id in sites or site_id in other_env_sites or fleet_id in excluded_fleets:
            continue
        if plan is not None and site_id not in plan.allowed:
            continue
        if required and not required.issubset(sensors or []):
            continue
        capacity = weekly * weeks
        if capacity < job.target_hours:
            continue
        sites[site_id] = (fleet_id, rate, quality, capacity)
    if not sites:
        return []
    owed = committed_hours(fleet_ids={fleet_id for fleet_id, *_ in sites.values()})
    candidates = []
    for site_id, (fleet_id, rate, quality, capacity) in sites.items():
        free = capacity - owed.get(fleet_id, Decimal(0))
        if free < job.target_hours:
            continue
        candidates.append(
            Candidate(
                fleet_id=fleet_id,
                site_id=site_id,
                payout_rate=rate,
                quality=quality,
                free_hours=free,
                capacity=capacity,
                same_environment=site_id in same_env_sites,
            )
        )
    score_candidates(job=job, candidates=candidates)
    candidates.sort(key=lambda c: (-c.score, str(c.site_id)))
    return candidates


def _one_job_plan(job: Job):
    """PlanSites for one job of an order planned by cell, else None."""
    if Job.order.is_cached(job):
        if not job.order.cells_planned:
            return None
    elif not Order.objects.filter(pk=job.order_id, cells_planned=True).exists():
        return None
    pairs = SitesById(
        sorted(set(_robot_matches(job).values_list("site_id", "fleet_id")), key=site_order)
    )
    return plan_sites(jobs=[job], usage=_batch_usage([job]), candidates={job.pk: pairs}).get(job.pk)


def score_candidates(*, job: Job, candidates: list[Candidate]) -> None:
    if not candidates:
        return
    top_rate = max(c.payout_rate for c in candidates)
    for c in candidates:
        headroom = float((c.free_hours - job.target_hours) / c.capacity) if c.capacity else 0.0
        cheapness = 1.0 - float(c.payout_rate / top_rate) if top_rate else 1.0
        c.score = (
            W_HEADROOM * max(0.0, min(1.0, headroom))
            + W_QUALITY * float(c.quality)
            + W_CHEAPNESS * cheapness
            + (SAME_ENVIRONMENT_BONUS if c.same_environment else 0.0)
        )


def order_dispatched_hours(order) -> Decimal:
    """Hours of an order's jobs that reached a fleet (ever assigned), for billing's refunds
    on cancellation: those hours were committed to a fleet, the rest can be refunded.
    Counted from assignments, which cancellation ends but never deletes."""
    assigned = Assignment.objects.filter(job__order=order).values("job_id")
    total = Job.objects.filter(order=order, pk__in=assigned).aggregate(hours=Sum("target_hours"))[
        "hours"
    ]
    return total or Decimal("0")


def fleet_overview(*, organization: Organization) -> QuerySet[Fleet]:
    """An operator's fleets, each with its number of sites, robots and pending offers."""
    return fleets_for(organization=organization).annotate(
        site_count=Count("sites", distinct=True),
        robot_count=Count("robots", distinct=True),
        pending_offers=Count(
            "offers", filter=Q(offers__status=Offer.Status.PENDING), distinct=True
        ),
    )


def fleet_sites(*, organization: Organization, fleet: Fleet) -> QuerySet[Site]:
    """A fleet's sites, each with its number of robots."""
    return (
        sites_for(organization=organization)
        .filter(fleet=fleet)
        .annotate(robot_count=Count("robots"))
    )


def job_events_visible_to(*, organization: Organization, job: Job) -> QuerySet[JobEvent]:
    """A job's timeline as its operator sees it: their own events and the system's, never
    another fleet's (who else was offered the job is not theirs to know)."""
    return JobEvent.objects.filter(job=job).filter(
        Q(fleet__isnull=True) | Q(fleet__organization=organization)
    )


# --- Appended by the portals work (issue 18): task cards and the staff dispatch board -----------


def job_pay_rate(*, job: Job, fleet: Fleet) -> Decimal:
    """The agreed rate per accepted hour for a job held by (or offered to) `fleet`: the rate
    its latest assignment fixed, else its pending offer's, else (neither yet) what the pay
    rule would offer it (services/pay_terms.py; 0 where the rule would offer it nothing)."""
    assignment = (
        Assignment.objects.filter(job=job, fleet=fleet)
        .order_by("-active", "-created_at")
        .values_list("rate_per_hour", flat=True)
        .first()
    )
    if assignment is not None:
        return assignment
    offered = (
        Offer.objects.filter(job=job, fleet=fleet, status=Offer.Status.PENDING)
        .values_list("rate_per_hour", flat=True)
        .first()
    )
    if offered is not None:
        return offered
    rate = offered_rate(
        terms=job_pay_terms(job),
        fleet_id=fleet.pk,
        fleet_currency=fleet.currency,
        fleet_rate=fleet.payout_rate_per_hour,
    )
    return Decimal(0) if rate is None else rate


def fleet_capacity_impact(
    *, fleet: Fleet, job: Job, now: datetime, committed: dict | None = None
) -> dict:
    """What taking `job` does to `fleet`'s capacity until the job's deadline: hours free
    before, hours the job needs, hours free after (the dispatcher's own arithmetic).
    `committed`: committed_hours() of several fleets read once (a list of offers)."""
    if committed is None:
        committed = committed_hours(fleet_ids={fleet.pk})
    owed = committed.get(fleet.pk, Decimal(0))
    held = job.fleet_id == fleet.pk and job.status in JOB_HOLDING_STATES
    capacity = capacity_until(fleet, job.deadline, now)
    free_before = capacity - owed + (job.target_hours - job.progress_hours if held else 0)
    return {
        "weekly_capacity": fleet.weekly_capacity_hours,
        "capacity_until_deadline": capacity.quantize(Decimal("0.1")),
        "committed": (owed - (job.target_hours - job.progress_hours if held else 0)).quantize(
            Decimal("0.01")
        ),
        "job_hours": job.target_hours,
        "free_after": (free_before - job.target_hours).quantize(Decimal("0.1")),
    }


def dispatch_board() -> dict[str, QuerySet[Job]]:
    """Staff: the jobs that are not done, by where they stand in dispatch."""
    base = Job.objects.select_related("order", "order__task_type", "fleet", "site").order_by(
        "deadline", "pk"
    )
    return {
        "flagged": base.filter(status=Job.Status.FLAGGED),
        "open": base.filter(status=Job.Status.OPEN),
        "offered": base.filter(status=Job.Status.OFFERED).prefetch_related("offers"),
        "collecting": base.filter(status__in=(Job.Status.ASSIGNED, Job.Status.IN_PROGRESS)),
        "held": base.filter(status=Job.Status.HELD),
    }


# --- The batch dispatcher's reads (fleets/services/batch_dispatch.py) ----------------------


@dataclass
class BatchCandidates:
    """A job's eligible sites before capacity: capability, site kind, diversity, exclusions."""

    sites: SitesById  # (site_id, fleet_id), by site id; jobs alike share one tuple
    same_environment: set  # sites this job's environment already uses
    scene_slots: dict | None = None  # a scene-planned order's: site -> environments it can host


def _batch_usage(jobs: list[Job]) -> dict:
    """order_id -> [(job_id, environment_index, site_id)] of the sites its jobs hold or held."""
    usage: dict = {}
    rows = (
        Job.objects.filter(order_id__in={job.order_id for job in jobs}, site_id__isnull=False)
        .filter(Q(status__in=JOB_HOLDING_STATES) | Q(status=Job.Status.COMPLETED))
        .values_list("order_id", "pk", "environment_index", "site_id")
    )
    for order_id, job_id, environment_index, site_id in rows:
        usage.setdefault(order_id, []).append((job_id, environment_index, site_id))
    return usage


def _batch_exclusions(job_ids: list) -> dict:
    """job_id -> fleets that declined, let expire, or went silent on it (two set queries)."""
    excluded: dict = {}
    refused = Offer.objects.filter(
        job_id__in=job_ids, status__in=[Offer.Status.DECLINED, Offer.Status.EXPIRED]
    ).values_list("job_id", "fleet_id")
    dropped = Assignment.objects.filter(job_id__in=job_ids, active=False).values_list(
        "job_id", "fleet_id"
    )
    for job_id, fleet_id in [*refused, *dropped]:
        excluded.setdefault(job_id, set()).add(fleet_id)
    return excluded


def _capable_sites(jobs: list[Job]) -> dict:
    """(embodiment, end effector, sensors, site kinds) -> SitesById [(site_id, fleet_id)]:
    active sites of active fleets with an active robot that has all of it. One query.

    Per batch, whatever its jobs: the robots are grouped once by what a job can ask of them
    (embodiment, end effector, site kind, sensor set: a few dozen profiles however many
    robots), each profile holding its sites as positions in one site-id order; a signature's
    sites are then the union of its matching profiles' positions, already in that order."""
    rows = Robot.objects.filter(
        active=True,
        site__active=True,
        fleet__status=Fleet.Status.ACTIVE,
        embodiment_id__in={job.embodiment_id for job in jobs},
        end_effector__in={job.end_effector for job in jobs},
    ).values_list(
        "site_id",
        "fleet_id",
        "embodiment_id",
        "end_effector",
        Cast("sensor_slugs", TextField()),  # the JSON text: decoded once per distinct list
        "site__kind",
    )
    sensor_sets: dict = {}
    fleet_of: dict = {}
    profiles: dict = {}  # (embodiment, end effector, kind, sensors) -> {site_id}
    for site_id, fleet_id, embodiment_id, end_effector, sensors_text, kind in rows:
        sensors = sensor_sets.get(sensors_text)
        if sensors is None:
            sensors = sensor_sets[sensors_text] = frozenset(
                json.loads(sensors_text or "null") or ()
            )
        fleet_of[site_id] = fleet_id
        profiles.setdefault((embodiment_id, end_effector, kind, sensors), set()).add(site_id)
    ordered = sorted(fleet_of, key=id_order)
    position = {site_id: i for i, site_id in enumerate(ordered)}
    pairs = [(site_id, fleet_of[site_id]) for site_id in ordered]
    profile_positions = {
        profile: np.array([position[s] for s in sites], dtype=np.int64)
        for profile, sites in profiles.items()
    }
    signatures: dict = {}
    for job in jobs:
        key = _signature(job)
        if key in signatures:
            continue
        embodiment_id, end_effector, required, kinds = key
        required = frozenset(required)
        matching = [
            positions
            for (emb, effector, kind, sensors), positions in profile_positions.items()
            if emb == embodiment_id
            and effector == end_effector
            and (not kinds or kind in kinds)
            and required <= sensors
        ]
        # positions in site-id order: their union, sorted and each once
        union = np.unique(np.concatenate(matching)).tolist() if matching else []
        signatures[key] = SitesById(pairs[i] for i in union)
    return signatures


def _signature(job: Job) -> tuple:
    return (
        job.embodiment_id,
        job.end_effector,
        tuple(sorted(job.sensor_slugs or [])),
        tuple(sorted(job.site_kinds or [])),
    )


def batch_candidates(*, jobs: list[Job], planned_orders: set | None = None) -> dict:
    """job_id -> BatchCandidates for a batch of jobs, in four set queries whatever its size
    (the same rules as dispatch_candidates, without the capacity: the matcher checks that
    as it places jobs); a few more for orders planned by cell (plan_sites). `planned_orders`:
    the batch's orders planned by cell, when the caller read them (else one query)."""
    if not jobs:
        return {}
    usage = _batch_usage(jobs)
    excluded = _batch_exclusions([job.pk for job in jobs])
    signatures = _capable_sites(jobs)
    plans = plan_sites(
        jobs=jobs,
        usage=usage,
        candidates={job.pk: signatures[_signature(job)] for job in jobs},
        planned_orders=planned_orders,
    )
    result = {}
    for job in jobs:
        other, same = set(), set()
        for job_id, environment_index, site_id in usage.get(job.order_id, ()):
            if job_id != job.pk:
                (same if environment_index == job.environment_index else other).add(site_id)
        refused = excluded.get(job.pk, set())
        sites = signatures[_signature(job)]
        plan = plans.get(job.pk)
        if plan is not None:
            if plan.scene_slots is not None:
                other = set()  # scenes, not sites, are the environments (plan.allowed)
            sites = SitesById((s, f) for s, f in sites if s in plan.allowed)
        if other or refused:  # a subsequence keeps the site-id order
            sites = SitesById((s, f) for s, f in sites if s not in other and f not in refused)
        result[job.pk] = BatchCandidates(
            sites=sites,
            same_environment=same,
            scene_slots=None if plan is None else plan.scene_slots,
        )
    return result
