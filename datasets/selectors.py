"""Reads: coverage of an order against what was ordered, and per-operator figures."""

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Avg, Count, Min, OuterRef, Q, QuerySet, Subquery, Sum

from datasets.delivery_plan import pseudonyms
from datasets.models import Delivery, Episode
from fleets.models import Job, OrderCell
from marketplace.models import Organization
from orders.models import Order

HOUR = Decimal(3600)


def episodes_of_fleet(*, organization: Organization) -> QuerySet[Episode]:
    return Episode.objects.filter(fleet__organization=organization).select_related(
        "job", "site", "robot", "scene", "cell"
    )


def _hours(seconds) -> Decimal:
    return (Decimal(seconds or 0) / HOUR).quantize(Decimal("0.001"))


@dataclass
class Coverage:
    ordered_hours: Decimal
    accepted_hours: Decimal
    environments_ordered: int
    environments: list[dict] = field(default_factory=list)
    site_kinds: list[dict] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    operators: list[dict] = field(default_factory=list)
    episodes: dict = field(default_factory=dict)
    qa_rejections: dict[str, int] = field(default_factory=dict)
    success_rate: float | None = None
    cells: list[dict] = field(default_factory=list)  # the plan's cells (order_cells)


def order_coverage(*, order: Order) -> Coverage:
    """Hours per environment and site kind, objects, operators, success and QA figures.

    A fixed number of aggregate queries, whatever the number of episodes (objects and QA
    reasons are folded in Python from one values() query each).
    """
    episodes = Episode.objects.filter(order=order)
    accepted = episodes.filter(status=Episode.Status.ACCEPTED)
    environments = _environments(order, accepted)
    kinds: dict[str, dict] = {}
    for environment in environments:
        kind = kinds.setdefault(
            environment["site_kind"],
            {"site_kind": environment["site_kind"], "accepted_hours": Decimal(0), "sites": 0},
        )
        kind["accepted_hours"] += environment["accepted_hours"]
        kind["sites"] += 1
    objects = sorted(
        {name for names in accepted.values_list("objects_handled", flat=True) for name in names}
    )
    counts = episodes.aggregate(
        registered=Count("id", filter=Q(status=Episode.Status.REGISTERED)),
        uploaded=Count("id", filter=Q(status=Episode.Status.UPLOADED)),
        accepted=Count("id", filter=Q(status=Episode.Status.ACCEPTED)),
        rejected=Count("id", filter=Q(status=Episode.Status.REJECTED)),
        succeeded=Count("id", filter=Q(status=Episode.Status.ACCEPTED, success=True)),
    )
    reasons = Counter(
        failure["code"]
        for failures in episodes.filter(status=Episode.Status.REJECTED).values_list(
            "qa_failures", flat=True
        )
        for failure in failures
    )
    succeeded = counts.pop("succeeded")
    return Coverage(
        ordered_hours=order.hours,
        accepted_hours=_hours(order.accepted_seconds),
        environments_ordered=order.environments,
        environments=environments,
        site_kinds=sorted(kinds.values(), key=lambda k: k["site_kind"]),
        objects=objects,
        operators=_operators(episodes),
        episodes=counts,
        qa_rejections=dict(sorted(reasons.items())),
        success_rate=round(succeeded / counts["accepted"], 4) if counts["accepted"] else None,
        cells=order_cells(order=order),
    )


def site_labels(order: Order) -> dict:
    """site id -> the order's pseudonym of it ("site-01", ...), numbered by each site's first
    acceptance, as the delivery labels them (datasets/services/plan_delivery.py): the grid and
    the dataset call a site by the same name, never its fleet's name for it."""
    rows = (
        Episode.objects.filter(
            order=order, status__in=[Episode.Status.ACCEPTED, Episode.Status.EXCLUDED]
        )
        .values("site_id")
        .annotate(first=Min("decided_at"))
        .order_by("first", "site_id")
    )
    return pseudonyms((row["site_id"] for row in rows), "site")


def order_cells(*, order: Order) -> list[dict]:
    """The plan's (environment, object) cells of an order planned by cell ([] otherwise), in
    grid order: where each environment is (site pseudonym, scene name once bound), its object
    once bound, accepted episodes and seconds against the target and the share bounds, and
    its state: "short" below the minimum share, "full" at the maximum, else "ok". Two
    queries."""
    if not order.cells_planned:
        return []
    low, high = order.cell_min_share_percent / 100, order.cell_max_share_percent / 100
    rows = []
    labels = None
    for cell in OrderCell.objects.filter(order=order).select_related("scene", "site_object"):
        if cell.site_id is not None:
            labels = site_labels(order) if labels is None else labels
            # bound without an acceptance left (all excluded since): numbered after, as the
            # delivery does
            labels.setdefault(cell.site_id, f"site-{len(labels) + 1:02d}")
        minimum = (cell.target_seconds * low).quantize(Decimal("0.001"))
        maximum = (cell.target_seconds * high).quantize(Decimal("0.001"))
        accepted = cell.accepted_seconds
        rows.append(
            {
                "environment_index": cell.environment_index,
                "object_slot": cell.object_slot,
                "site": labels[cell.site_id] if cell.site_id else None,
                "scene": cell.scene.name if cell.scene_id else None,
                "object": cell.site_object.name if cell.site_object_id else None,
                "target_seconds": cell.target_seconds,
                "minimum_seconds": minimum,
                "maximum_seconds": maximum,
                "accepted_seconds": accepted,
                "accepted_episodes": cell.accepted_episodes,
                "state": "short" if accepted < minimum else "full" if accepted >= maximum else "ok",
            }
        )
    return rows


def _environments(order: Order, accepted) -> list[dict]:
    """Accepted hours per site, beside the hours planned for it."""
    by_site = (
        accepted.values("site_id", "site__name", "site__kind")
        .annotate(seconds=Sum("duration_seconds"), count=Count("id"))
        .order_by("site__name")
    )
    # Target hours per environment come from the jobs planned for it.
    planned = {
        row["site_id"]: row["target"]
        for row in Job.objects.filter(order=order)
        .exclude(status=Job.Status.CANCELLED)
        .exclude(site_id=None)
        .values("site_id")
        .annotate(target=Sum("target_hours"))
    }
    return [
        {
            "site": str(row["site_id"]),
            "site_name": row["site__name"],
            "site_kind": row["site__kind"],
            "accepted_hours": _hours(row["seconds"]),
            "target_hours": planned.get(row["site_id"]),
            "episodes": row["count"],
        }
        for row in by_site
    ]


def _operators(episodes) -> list[dict]:
    """Per operator pseudonym: decided, accepted and successful episodes, hours, mean length."""
    per_operator = (
        episodes.exclude(status=Episode.Status.REGISTERED)
        .exclude(status=Episode.Status.UPLOADED)
        .values("operator")
        .annotate(
            decided=Count("id"),
            accepted=Count("id", filter=Q(status=Episode.Status.ACCEPTED)),
            succeeded=Count("id", filter=Q(status=Episode.Status.ACCEPTED, success=True)),
            seconds=Sum("duration_seconds", filter=Q(status=Episode.Status.ACCEPTED)),
            mean_seconds=Avg("duration_seconds", filter=Q(status=Episode.Status.ACCEPTED)),
        )
        .order_by("operator")
    )
    return [
        {
            "operator": row["operator"],
            "episodes_checked": row["decided"],
            "episodes_accepted": row["accepted"],
            "acceptance_rate": round(row["accepted"] / row["decided"], 4),
            "success_rate": round(row["succeeded"] / row["accepted"], 4)
            if row["accepted"]
            else None,
            "accepted_hours": _hours(row["seconds"]),
            "mean_episode_seconds": (
                Decimal(row["mean_seconds"]).quantize(Decimal("0.1"))
                if row["mean_seconds"]
                else None
            ),
        }
        for row in per_operator
    ]


def order_environment_hours(order: Order) -> list[Decimal]:
    """Accepted hours per environment (by the jobs' environment index), for the order chart."""
    rows = (
        Job.objects.filter(order=order)
        .values("environment_index")
        .annotate(seconds=Sum("accepted_seconds"))
        .order_by("environment_index")
    )
    hours = [Decimal(0)] * order.environments
    for row in rows:
        if row["environment_index"] < len(hours):
            hours[row["environment_index"]] = Decimal(row["seconds"] or 0) / HOUR
    return hours


def order_deliveries(*, order: Order) -> QuerySet[Delivery]:
    """An order's deliveries (pilot and final, every version, newest first) with their files,
    for the order page."""
    return (
        Delivery.objects.filter(order=order)
        .order_by("kind", "-version", "-created_at")
        .prefetch_related("files")
    )


def latest_deliveries(*, order: Order) -> QuerySet[Delivery]:
    """The newest version of each kind of an order's deliveries (a failed attempt only when no
    later one exists), for the API's default listing and the order page."""
    # a correlated subquery, not DISTINCT ON: the embedded default is SQLite
    newest = (
        Delivery.objects.filter(order=order, kind=OuterRef("kind"))
        .order_by("-version", "-created_at")
        .values("pk")[:1]
    )
    return Delivery.objects.filter(order=order, pk=Subquery(newest)).order_by("kind")


def deliveries_of(*, organization: Organization) -> QuerySet[Delivery]:
    """Deliveries of a customer's orders; another organization's do not exist for them."""
    return Delivery.objects.filter(order__organization=organization)


def job_episodes(*, job: Job) -> QuerySet[Episode]:
    """A job's episodes, newest first (the fleet operator's job page)."""
    return Episode.objects.filter(job=job).order_by("-created_at", "-id")


# --- Collection status and ETA (the order page, the staff console) ----------------------------

# Share of recorded time assumed to pass QA before any episode of the order was checked.
ETA_PRIOR_ACCEPTANCE = Decimal("0.85")
CUSTOMER_JOB_STATUS = {
    Job.Status.HELD: "Waiting for your pilot approval",
    Job.Status.OPEN: "Looking for a fleet",
    Job.Status.OFFERED: "Offered to a fleet",
    Job.Status.ASSIGNED: "Accepted by a fleet",
    Job.Status.IN_PROGRESS: "Collecting",
    Job.Status.COMPLETED: "Done",
    Job.Status.FLAGGED: "No fleet free yet: our staff are on it",
    Job.Status.CANCELLED: "Cancelled",
}
COLLECTING = (Job.Status.ASSIGNED, Job.Status.IN_PROGRESS)
UNASSIGNED = (Job.Status.OPEN, Job.Status.OFFERED, Job.Status.FLAGGED)


@dataclass
class JobProgress:
    id: str
    sequence: int
    is_pilot: bool
    status: str
    status_text: str
    site_name: str
    site_kind: str
    target_hours: Decimal
    accepted_hours: Decimal
    percent: int
    deadline: object
    finish: object = None  # estimated finish (datetime) or None


@dataclass
class CollectionStatus:
    """Per-job progress of an order and when it should be done, with the basis in words."""

    jobs: list[JobProgress]
    eta: object  # datetime or None
    basis: list[str]
    state: str  # not_started, estimating, after_pilot, done, closed
    deadline: object  # the latest deadline promised (datetime) or None
    late: bool
    acceptance_rate: Decimal | None
    remaining_hours: Decimal

    @property
    def pilot_jobs(self) -> list[JobProgress]:
        return [job for job in self.jobs if job.is_pilot]


def _acceptance(order: Order) -> tuple[Decimal | None, int, int]:
    counts = Episode.objects.filter(order=order).aggregate(
        accepted=Count("id", filter=Q(status=Episode.Status.ACCEPTED)),
        rejected=Count("id", filter=Q(status=Episode.Status.REJECTED)),
    )
    decided = counts["accepted"] + counts["rejected"]
    rate = (Decimal(counts["accepted"]) / decided) if decided else None
    return rate, counts["accepted"], decided


def _job_rows(jobs, held_per_fleet, used_rate, now) -> tuple[list[JobProgress], dict]:
    """Each job's progress and estimated finish; totals for the basis."""
    from django.utils import timezone

    rows: list[JobProgress] = []
    totals = {"remaining": Decimal(0), "capacity": Decimal(0), "unassigned": 0}
    for job in jobs:
        accepted = (job.accepted_seconds / HOUR).quantize(Decimal("0.01"))
        target = job.target_hours
        remaining = max(Decimal(0), target - job.accepted_seconds / HOUR)
        row = JobProgress(
            id=str(job.id),
            sequence=job.sequence,
            is_pilot=job.is_pilot,
            status=job.status,
            status_text=CUSTOMER_JOB_STATUS.get(job.status, job.get_status_display()),
            site_name=job.site.name if job.site_id else "",
            site_kind=job.site.get_kind_display() if job.site_id else "",
            target_hours=target,
            accepted_hours=accepted,
            percent=int(min(Decimal(100), accepted / target * 100)) if target else 0,
            deadline=job.deadline,
        )
        if job.status in COLLECTING and job.fleet_id:
            share = job.fleet.weekly_capacity_hours / max(1, held_per_fleet.get(job.fleet_id, 1))
            totals["capacity"] += share
            totals["remaining"] += remaining
            if share > 0:
                weeks = remaining / used_rate / share
                row.finish = now + timezone.timedelta(days=float(weeks * 7))
        elif job.status in UNASSIGNED:
            totals["remaining"] += remaining
            totals["unassigned"] += 1
            row.finish = job.deadline
        rows.append(row)
    return rows, totals


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def _collecting_basis(jobs, rows, totals) -> tuple[list[str], str, bool]:
    """Basis lines for an order being collected; (lines, state, estimate finishes?)."""
    basis: list[str] = []
    collecting = [row for row in rows if row.status in COLLECTING]
    if collecting:
        fleets = len({job.fleet_id for job in jobs if job.status in COLLECTING})
        capacity = totals["capacity"].quantize(Decimal("0.1"))
        basis.append(
            f"{_plural(len(collecting), 'job')} held by {_plural(fleets, 'fleet')}, with "
            f"{capacity} h/week of capacity for this order."
        )
    if totals["unassigned"]:
        basis.append(
            f"{_plural(totals['unassigned'], 'job')} not taken by a fleet yet: counted at the "
            "deadline."
        )
    basis.append(f"{totals['remaining'].quantize(Decimal('0.01'))} h still to be accepted.")
    held = [row for row in rows if row.status == Job.Status.HELD]
    others = [row for row in rows if row.status not in (Job.Status.HELD, Job.Status.COMPLETED)]
    if held and not others:
        basis.append("The rest of the order starts when you approve the pilot.")
        return basis, "after_pilot", False
    if held:
        basis.append("This estimate covers the pilot; the rest starts when you approve it.")
    return basis, "estimating", True


def order_collection_status(*, order: Order, now=None) -> CollectionStatus:
    """ETA = the latest estimated finish of the jobs still to do in the current phase:
    a job a fleet holds finishes when the hours it still needs, divided by the share of
    recorded time QA accepts (so far on this order; 85 % before anything was checked), are
    recorded at the fleet's weekly capacity shared over the jobs it holds; a job no fleet holds
    yet counts at its deadline. Four queries whatever the number of jobs."""
    from django.utils import timezone

    now = now or timezone.now()
    jobs = list(
        Job.objects.filter(order=order)
        .exclude(status=Job.Status.CANCELLED)
        .select_related("site", "fleet")
        .order_by("sequence")
    )
    fleet_ids = {job.fleet_id for job in jobs if job.fleet_id and job.status in COLLECTING}
    held_per_fleet = {
        row["fleet_id"]: row["count"]
        for row in Job.objects.filter(fleet_id__in=fleet_ids, status__in=COLLECTING)
        .values("fleet_id")
        .annotate(count=Count("id"))
    }
    rate, accepted_count, decided = _acceptance(order)
    rows, totals = _job_rows(jobs, held_per_fleet, rate or ETA_PRIOR_ACCEPTANCE, now)
    if rate is not None:
        basis = [
            f"{int(rate * 100)} % of checked episodes passed QA so far "
            f"({accepted_count} of {decided})."
        ]
    else:
        basis = [
            f"No episode checked yet: {int(ETA_PRIOR_ACCEPTANCE * 100)} % of recorded time is "
            "assumed to pass QA."
        ]
    estimate = True
    if order.status in (Order.Status.DRAFT, Order.Status.AWAITING_PAYMENT):
        state, estimate, basis = "not_started", False, ["Collection starts when the order is paid."]
    elif order.status in (Order.Status.CANCELLED, Order.Status.REFUNDED, Order.Status.CLOSED):
        state, estimate, basis = "closed", False, []
    elif order.status == Order.Status.DELIVERED:
        state, estimate, basis = "done", False, ["Delivered."]
    elif not jobs:
        state = "estimating"
        basis.append("Jobs are being planned.")
    else:
        more, state, estimate = _collecting_basis(jobs, rows, totals)
        basis += more
    finishes = [row.finish for row in rows if row.finish is not None] if estimate else []
    eta = max(finishes) if finishes else None
    deadlines = [job.deadline for job in jobs if job.status != Job.Status.COMPLETED]
    deadline = max(deadlines) if deadlines else None
    if deadline is not None and state not in ("closed", "done"):
        basis.append(f"Deadline {deadline:%Y-%m-%d}.")
    return CollectionStatus(
        jobs=rows,
        eta=eta,
        basis=basis,
        state=state,
        deadline=deadline,
        late=bool(eta and deadline and eta > deadline),
        acceptance_rate=rate,
        remaining_hours=totals["remaining"],
    )


def order_episodes_for_customer(*, order: Order, reason: str = "", status: str = ""):
    """The order's checked episodes for the customer's episode list, newest first; `reason`
    keeps the rejected ones with that QA reason (folded in Python: JSON containment is not
    portable to SQLite)."""
    episodes = (
        Episode.objects.filter(order=order)
        .exclude(status=Episode.Status.REGISTERED)
        .select_related("site")
        .order_by("-created_at", "-id")
    )
    if status in Episode.Status.values:
        episodes = episodes.filter(status=status)
    if reason:
        episodes = [
            episode
            for episode in episodes.filter(status=Episode.Status.REJECTED)
            if any(failure.get("code") == reason for failure in episode.qa_failures)
        ]
    return episodes


def order_environment_sites(order: Order) -> dict[int, tuple[str, str]]:
    """{environment index: (site name, site kind label)} of the sites an order's jobs went to
    (the pilot's environment is the first; a job no fleet took yet has none)."""
    sites: dict[int, tuple[str, str]] = {}
    for job in (
        Job.objects.filter(order=order)
        .exclude(site=None)
        .select_related("site")
        .order_by("environment_index", "sequence")
    ):
        sites.setdefault(job.environment_index, (job.site.name, job.site.get_kind_display()))
    return sites


def deliveries_failed():
    """Staff: failed assemblies whose order has no live delivery of that kind since."""
    failed = Delivery.objects.filter(status=Delivery.Status.FAILED).select_related("order")
    live = {
        (row["order_id"], row["kind"])
        for row in Delivery.objects.exclude(status=Delivery.Status.FAILED).values(
            "order_id", "kind"
        )
    }
    return [d for d in failed if (d.order_id, d.kind) not in live]


def orders_past_eta(*, now=None, limit: int = 200) -> list[tuple[Order, CollectionStatus]]:
    """Staff: orders in collection whose estimate is later than their deadline."""
    late = []
    orders = Order.objects.filter(
        status__in=(Order.Status.PAID, Order.Status.IN_COLLECTION)
    ).select_related("organization", "task_type")[:limit]
    for order in orders:
        status = order_collection_status(order=order, now=now)
        if status.late:
            late.append((order, status))
    return late
