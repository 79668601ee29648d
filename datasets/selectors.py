"""Reads: coverage of an order against what was ordered, and per-operator figures."""

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Avg, Count, Q, QuerySet, Sum

from datasets.models import Delivery, Episode
from fleets.models import Job
from marketplace.models import Organization
from orders.models import Order

HOUR = Decimal(3600)


def episodes_of_fleet(*, organization: Organization) -> QuerySet[Episode]:
    return Episode.objects.filter(fleet__organization=organization).select_related(
        "job", "site", "robot"
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
    )


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
    """An order's deliveries (pilot and final) with their files, for the order page."""
    return Delivery.objects.filter(order=order).prefetch_related("files")


def deliveries_of(*, organization: Organization) -> QuerySet[Delivery]:
    """Deliveries of a customer's orders; another organization's do not exist for them."""
    return Delivery.objects.filter(order__organization=organization)


def job_episodes(*, job: Job) -> QuerySet[Episode]:
    """A job's episodes, newest first (the fleet operator's job page)."""
    return Episode.objects.filter(job=job).order_by("-created_at", "-id")
