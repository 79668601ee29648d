"""The collection plan's true-up (issue 30): distinct environments or objects a planned order
(`Order.cells_planned`) delivered short of its plan are credited, one refund per shortfall.

The rule (billing/README.md, "Plan shortfall"): the plan's priced units that were not
delivered are given back at the unit price the order was charged, from the order's frozen
price lines (`extra_environments`, `extra_objects`). Only units that were paid for are
credited: the first ones included in the price (the rate card's included environments or
objects) carry no fee, so with 1 included and 8 planned, 2 missing environments credit 2 fees
and 8 missing credit 7. A plan without the priced line (everything included, or an order
priced before objects were) credits nothing for that unit. A line is never credited above
its amount, the refunds never above what is left of the payment, each shortfall once (the
refund key names the order, the unit and the units credited; a later delivery that is
shorter still credits only the difference). The hours true-up then refunds, pro rata, the
hours not accepted of what is left of the price (services/refunds.py), so no unit is refunded
twice: in all the customer gets back the units not delivered and the hours not kept of the
rest. A unit found short only after an hours refund (a later delivery) is credited less the
part of its fee that refund already gave back.
"""

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.db.models import Sum

from billing.models import Payment, Refund
from billing.services.payments import succeeded_payment
from billing.services.refunds import (
    RefundPlan,
    order_trueup,
    plan_credit_room,
    plan_shortfall_credited,
    refund_or_flag,
)
from marketplace.queueing import enqueue_on_commit
from orders.models import Order
from orders.pricing import quantize_money

ZERO = Decimal("0")


@dataclass(frozen=True)
class PlanUnit:
    name: str  # the key in the delivered counts and in refund keys
    line_code: str  # orders/pricing.py's line
    noun: str  # singular, plural
    nouns: str
    fee: str


PLAN_UNITS = (
    PlanUnit("environments", "extra_environments", "environment", "environments", "environment"),
    PlanUnit("objects", "extra_objects", "distinct object", "distinct objects", "object"),
)


@dataclass(frozen=True)
class ShortfallLine:
    """One shortfall of the plan and what it credits."""

    unit: str
    planned: int
    delivered: int
    units: int  # the missing units that were paid for
    unit_amount: Decimal
    amount: Decimal
    description: str


def planned_counts(order: Order) -> dict[str, int]:
    """What the plan asks for: environments, and distinct objects (null distinct_objects: as
    many as one environment's objects)."""
    return {
        "environments": order.environments,
        "objects": order.distinct_objects or order.objects_per_environment,
    }


def _decimal(value) -> Decimal | None:
    try:
        number = Decimal(str(value))
    except (InvalidOperation, TypeError, ValueError):
        return None
    return number if number.is_finite() else None


def shortfall_lines(
    *, lines: list, planned: dict, delivered: dict, currency: str
) -> list[ShortfallLine]:
    """Pure: a credit line per unit (environments, objects) delivered short of the plan, from
    the order's frozen price lines. Missing counts or lines credit nothing."""
    by_code = {line.get("code"): line for line in lines or [] if isinstance(line, dict)}
    out = []
    for unit in PLAN_UNITS:
        count = delivered.get(unit.name)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            continue
        missing = max(0, planned[unit.name] - count)
        line = by_code.get(unit.line_code)
        if not missing or line is None:
            continue
        quantity = _decimal(line.get("quantity"))
        unit_amount = _decimal(line.get("unit_amount"))
        line_amount = _decimal(line.get("amount"))
        if None in (quantity, unit_amount, line_amount) or quantity <= 0 or unit_amount <= 0:
            continue
        paid_units = min(missing, int(quantity))
        amount = min(quantize_money(paid_units * unit_amount, currency), line_amount)
        if paid_units <= 0 or amount <= 0:
            continue
        included = (
            f" (the first {planned[unit.name] - int(quantity)} are included in the price)"
            if paid_units < missing
            else ""
        )
        out.append(
            ShortfallLine(
                unit=unit.name,
                planned=planned[unit.name],
                delivered=count,
                units=paid_units,
                unit_amount=unit_amount,
                amount=amount,
                description=(
                    f"{missing} of {planned[unit.name]} {unit.nouns} not delivered: "
                    f"{paid_units} x extra {unit.fee} fee ({unit_amount} {currency}){included}"
                ),
            )
        )
    return out


def shortfall_key_prefix(order_id, unit: str) -> str:
    return f"plan:{order_id}:{unit}:"


def credited_for_plan(order: Order, unit: str) -> Decimal:
    """What plan shortfall refunds (pending or made) of one unit stand for on the order."""
    refunds = Refund.objects.filter(
        order=order,
        reason=Refund.Reason.PLAN_SHORTFALL,
        key__startswith=shortfall_key_prefix(order.id, unit),
    ).exclude(status=Refund.Status.FAILED)
    return refunds.aggregate(total=Sum("amount"))["total"] or ZERO


def order_plan_shortfall(*, order_id, delivered: dict) -> list[Refund]:
    """Credit (a refund per shortfall) the plan's environments and objects a delivered,
    planned order did not deliver; `delivered`: {"environments": n, "objects": m}. Runs
    under the order's and payment's locks; idempotent."""
    made = []
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        if not order.cells_planned or order.status not in (
            Order.Status.DELIVERED,
            Order.Status.CLOSED,
        ):
            return []
        payment = succeeded_payment(order)
        if payment is not None:
            Payment.objects.select_for_update().filter(pk=payment.pk).first()
        for line in shortfall_lines(
            lines=order.lines,
            planned=planned_counts(order),
            delivered=delivered if isinstance(delivered, dict) else {},
            currency=order.currency,
        ):
            due = line.amount - credited_for_plan(order, line.unit)
            if due <= 0:
                continue
            credit = min(
                due,
                plan_credit_room(order, shortfall=plan_shortfall_credited(order) + due),
            )
            why = line.description
            if credit < due:
                why += f"; {due - credit} {order.currency} of it came back with the hours refund"
            refund = refund_or_flag(
                order=order,
                plan=RefundPlan(amount=credit, hours_kept=order.accepted_hours, why=why),
                key=f"{shortfall_key_prefix(order.id, line.unit)}{line.units}",
                reason=Refund.Reason.PLAN_SHORTFALL,
            )
            if refund is not None:
                made.append(refund)
    return made


def order_delivered_trueup(*, order_id, delivered: dict | None = None) -> Refund | None:
    """The true-up of a delivery: a planned order's shortfall credits first (`delivered`
    given), then the hours not accepted (services/refunds.py). Returns the hours' refund. A
    planned order's fleet payables are queued after it, so their customer parts count the
    credits (services/payables.py, order_earned)."""
    if delivered is not None:
        order_plan_shortfall(order_id=order_id, delivered=delivered)
        with transaction.atomic():
            enqueue_on_commit("billing.tasks.order_fleet_payables", order_id)
    return order_trueup(order_id=order_id)
