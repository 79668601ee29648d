"""The collection plan's rules on the demand side (issue 30), used by orders.services: the
plan's fields checked, the supply check asked, the plan advisor asked, the waitlist decided,
and staff's release of a waitlisted order (the order's part; fleets opens its held jobs)."""

import re
from datetime import date
from decimal import Decimal

from django.conf import settings
from django.db import transaction

from marketplace.errors import Conflict, NotFound, invalid
from orders import plan_advisor, supply
from orders.error_codes import ErrorCode
from orders.models import EnvironmentUnit, Order, OrderEvent

OBJECT_CATEGORY = re.compile(r"^[a-z0-9][a-z0-9 _-]{0,59}$")
MAX_OBJECT_CATEGORIES = 20
CELL_MIN_SHARE = (Decimal(1), Decimal(100))
CELL_MAX_SHARE = (Decimal(100), Decimal("999.99"))  # the stored field's 5 digits


def validate_plan(request) -> None:
    """The plan's own rules (a services.DatasetRequest), each refusal on its field."""
    if request.environment_unit not in EnvironmentUnit.values:
        raise invalid("environment_unit", f"One of {', '.join(EnvironmentUnit.values)}.")
    per_environment, environments = request.objects_per_environment, request.environments
    if request.distinct_objects is not None and not (
        per_environment <= request.distinct_objects <= environments * per_environment
    ):
        raise invalid(
            "distinct_objects",
            f"Distinct objects must be between the objects per environment ({per_environment})"
            f" and environments x objects per environment ({environments * per_environment}).",
        )
    categories = request.object_categories
    if len(categories) > MAX_OBJECT_CATEGORIES:
        raise invalid("object_categories", f"At most {MAX_OBJECT_CATEGORIES} categories.")
    bad = [name for name in categories if not OBJECT_CATEGORY.match(str(name))]
    if bad:
        raise invalid(
            "object_categories",
            "Categories are lower-case names (letters, digits, spaces, '-' or '_', at most 60"
            f" characters): {', '.join(repr(str(name)[:60]) for name in bad[:3])}.",
        )
    if request.demos_per_cell is not None and request.demos_per_cell < 1:
        raise invalid("demos_per_cell", "At least one demonstration per cell.")
    low, high = CELL_MIN_SHARE
    if not (low <= request.cell_min_share_percent <= high):
        raise invalid("cell_min_share_percent", f"Between {low} and {high} percent.")
    low, high = CELL_MAX_SHARE
    if not (low <= request.cell_max_share_percent <= high):
        raise invalid("cell_max_share_percent", f"Between {low} and {high} percent.")


def supply_answer(
    request,
    *,
    embodiment: str,
    task_category: str,
    sensors,
    lead_days: int,
    deadline: date | None = None,
) -> supply.SupplyAnswer:
    """The supply check's answer for a request's plan (orders/supply.py)."""
    return supply.supply_check(
        supply.SupplyQuestion(
            embodiment=embodiment,
            task_category=task_category,
            sensors=tuple(sensors),
            hours=request.hours,
            environments=request.environments,
            environment_unit=request.environment_unit,
            objects_per_environment=request.objects_per_environment,
            distinct_objects=request.plan_distinct_objects,
            object_categories=tuple(sorted(set(request.object_categories))),
            rush=request.rush,
            lead_days=lead_days,
            deadline=deadline,
        )
    )


def advice(request, *, task_type, complexity: int, available_environments: int | None) -> dict:
    """The plan advisor's proposal for a request, within what the supply check found."""
    return plan_advisor.advise(
        task_category=task_type.category,
        contact_rich=task_type.contact_rich,
        complexity=complexity,
        hours=request.hours,
        max_environments=settings.ORDER_MAX_ENVIRONMENTS,
        available_environments=available_environments,
    ).as_json()


class NotCoverable(Conflict):
    code = ErrorCode.NOT_COVERABLE


def require_coverable_or_waitlist(answer: dict, *, waitlist: bool) -> bool:
    """Whether the order is waitlisted: a plan the platform cannot cover is placed only
    when the customer asks for the waitlist (else 409 with the shortfalls)."""
    if not supply.not_coverable(answer):
        return False
    if waitlist:
        return True
    shortfalls = list(answer.get("shortfalls") or []) or ["The platform cannot cover it."]
    raise NotCoverable(
        "The platform's active fleets cannot cover this order now: "
        + "; ".join(shortfalls)
        + ". Send waitlist: true to place it as a waitlisted order (its collection waits"
        " until staff release it).",
        fields={"waitlist": shortfalls},
    )


WAITLIST_OPEN_STATUSES = frozenset(
    {
        Order.Status.AWAITING_PAYMENT,
        Order.Status.PAID,
        Order.Status.IN_COLLECTION,
        Order.Status.IN_REVIEW,
    }
)


def order_waitlist_release(*, order_id, actor_label: str, reason: str = "") -> Order:
    """Staff release a waitlisted order: it is no longer waitlisted (audited as an event of
    its current status). The caller (fleets' waitlist_release) opens its held jobs in the
    same transaction; the order's row lock comes first, as everywhere."""
    with transaction.atomic():
        order = Order.objects.select_for_update().filter(pk=order_id).first()
        if order is None:
            raise NotFound("Order not found.")
        if not order.waitlisted:
            raise Conflict("The order is not waitlisted.", code=ErrorCode.NOT_WAITLISTED)
        if order.status not in WAITLIST_OPEN_STATUSES:
            raise Conflict(
                f"A {order.get_status_display().lower()} order is not released from the waitlist.",
                code=ErrorCode.INVALID_TRANSITION,
            )
        order.waitlisted = False
        order.save(update_fields=["waitlisted", "updated_at"])
        OrderEvent.objects.create(
            order=order,
            from_status=order.status,
            to_status=order.status,
            actor_label=actor_label,
            reason=("Released from the waitlist: " + (reason or "collection may start."))[:2000],
        )
    return order
