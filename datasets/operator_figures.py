"""Per-operator figures (issue 16): across orders for the fleet, per order for the customer.

Each figure set is one aggregate query over the checked episodes (accepted, rejected, excluded),
grouped by fleet and operator pseudonym (a pseudonym is unique within a fleet; a fleet that
registered its operators has them as entities, the others keep free-text pseudonyms):
episodes, acceptance rate, success rate (successful among the accepted), mean duration and
its spread (sample standard deviation, accepted episodes), idle fraction, jerk and quality
score (means over the episodes content QA measured).

Outliers: within one order, over the operators with at least OPERATOR_OUTLIER_MIN_EPISODES
checked episodes (at least two such operators), an operator is flagged `quality` when its
mean quality score is below OPERATOR_OUTLIER_QUALITY_RATIO x the order's median, and
`acceptance` when its acceptance rate is more than OPERATOR_OUTLIER_ACCEPTANCE_GAP below the
order's median. The medians are taken over the aggregated rows, never per episode.
"""

import statistics
from decimal import Decimal

from django.conf import settings
from django.db.models import Avg, Count, Q, StdDev

from datasets.models import Episode
from fleets.models import Operator
from marketplace.models import Organization
from orders.models import Order

# Excluded episodes (accepted, then excluded by the customer or staff) count as checked and
# not accepted: an excluded operator's figures show it.
CHECKED = (Episode.Status.ACCEPTED, Episode.Status.REJECTED, Episode.Status.EXCLUDED)
ACCEPTED = Q(status=Episode.Status.ACCEPTED)


def _aggregate(episodes, *group):
    return (
        episodes.filter(status__in=CHECKED)
        .values(*group)
        .annotate(
            episodes=Count("id"),
            accepted=Count("id", filter=ACCEPTED),
            succeeded=Count("id", filter=ACCEPTED & Q(success=True)),
            mean_seconds=Avg("duration_seconds", filter=ACCEPTED),
            spread_seconds=StdDev("duration_seconds", filter=ACCEPTED, sample=True),
            idle=Avg("idle_fraction"),
            jerk=Avg("jerk"),
            quality=Avg("quality_score"),
            orders=Count("order_id", distinct=True),
        )
        .order_by(*group)
    )


def _rounded(value, places=4):
    return None if value is None else round(float(value), places)


def _figures(row) -> dict:
    accepted = row["accepted"]
    return {
        "operator": row["operator"],
        "episodes": row["episodes"],
        "episodes_accepted": accepted,
        "acceptance_rate": round(accepted / row["episodes"], 4),
        "success_rate": round(row["succeeded"] / accepted, 4) if accepted else None,
        "mean_duration_seconds": _seconds(row["mean_seconds"]),
        "duration_spread_seconds": _seconds(row["spread_seconds"]),
        "idle_fraction": _rounded(row["idle"]),
        "jerk": _rounded(row["jerk"]),
        "quality_score": _rounded(row["quality"]),
    }


def _seconds(value):
    return None if value is None else Decimal(value).quantize(Decimal("0.1"))


def outlier_flags(rows: list[dict]) -> dict:
    """{(order_id, fleet_id, operator): [reasons]} for the rows of one or more orders."""
    per_order: dict = {}
    for row in rows:
        if row["episodes"] >= settings.OPERATOR_OUTLIER_MIN_EPISODES:
            per_order.setdefault(row["order_id"], []).append(row)
    flags: dict = {}
    for eligible in per_order.values():
        if len(eligible) < 2:
            continue
        qualities = [row["quality"] for row in eligible if row["quality"] is not None]
        median_quality = statistics.median(qualities) if qualities else None
        median_acceptance = statistics.median(row["accepted"] / row["episodes"] for row in eligible)
        for row in eligible:
            reasons = []
            if (
                median_quality is not None
                and row["quality"] is not None
                and row["quality"] < settings.OPERATOR_OUTLIER_QUALITY_RATIO * median_quality
            ):
                reasons.append("quality")
            acceptance = row["accepted"] / row["episodes"]
            if acceptance < median_acceptance - settings.OPERATOR_OUTLIER_ACCEPTANCE_GAP:
                reasons.append("acceptance")
            if reasons:
                flags[(row["order_id"], row["fleet_id"], row["operator"])] = reasons
    return flags


def order_operator_figures(*, order: Order) -> list[dict]:
    """The customer's view of one order: per operator pseudonym (no identity beyond it), with
    the outlier flags against the order's median. One aggregate query."""
    rows = list(_aggregate(Episode.objects.filter(order=order), "order_id", "fleet_id", "operator"))
    flags = outlier_flags(rows)
    return [
        _figures(row)
        | {"flags": flags.get((row["order_id"], row["fleet_id"], row["operator"]), [])}
        for row in rows
    ]


def fleet_operator_figures(*, organization: Organization) -> list[dict]:
    """The fleet's own operators across all their orders, each with the orders it is an
    outlier in (against each order's median over every fleet's operators there). Two
    aggregate queries and one for the registered operators."""
    own = Episode.objects.filter(fleet__organization=organization)
    totals = list(_aggregate(own, "fleet_id", "operator"))
    orders = own.filter(status__in=CHECKED).values("order_id").distinct()
    per_order = list(
        _aggregate(Episode.objects.filter(order_id__in=orders), "order_id", "fleet_id", "operator")
    )
    flagged: dict = {}
    for (order_id, fleet_id, operator), reasons in outlier_flags(per_order).items():
        flagged.setdefault((fleet_id, operator), []).append({"order": order_id, "reasons": reasons})
    registered = {
        (fleet_id, pseudonym): operator_id
        for operator_id, fleet_id, pseudonym in Operator.objects.filter(
            fleet__organization=organization
        ).values_list("id", "fleet_id", "pseudonym")
    }
    return [
        _figures(row)
        | {
            "fleet": row["fleet_id"],
            "registered_operator": registered.get((row["fleet_id"], row["operator"])),
            "orders": row["orders"],
            "outlier_in": flagged.get((row["fleet_id"], row["operator"]), []),
        }
        for row in totals
    ]
