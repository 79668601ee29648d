"""Writes for orders: quotes, order creation, and the one transition service."""

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from marketplace.audit import actor_label as label_of
from marketplace.errors import Conflict, NotFound, ServiceError, invalid
from marketplace.tenancy import Caller
from marketplace.transitions import require_transition
from orders import catalog, collection_plan, signals, supply
from orders.error_codes import ErrorCode
from orders.models import (
    CUSTOMER_CANCELLABLE,
    ORDER_TRANSITIONS,
    ComplexityLevel,
    Embodiment,
    Order,
    OrderEvent,
    OutputFormat,
    Quote,
    RateCard,
    TaskType,
)
from orders.pricing import Price, PriceRequest, PricingError, price_dataset
from orders.requests import DatasetRequest, OrderDetails
from orders.selectors import quote_visible_to, rate_card_terms
from orders.streams import VIDEO_CODECS, build_stream_spec

MIN_HOURS_PER_ENVIRONMENT = Decimal("0.5")


class InvalidTransition(Conflict):
    code = ErrorCode.INVALID_TRANSITION


@dataclass
class _ResolvedRequest:
    task_type: TaskType
    complexity: ComplexityLevel
    embodiment: Embodiment
    sensors: list[str] = field(default_factory=list)
    known: catalog.Catalog | None = None  # the cached catalog's copy it was resolved against


def _resolved_with_card(request: DatasetRequest) -> tuple[_ResolvedRequest, RateCard]:
    """The request resolved against the catalog, and the rate card in force: both from one
    read of the cached catalog (one version lookup in the shared cache, one snapshot)."""
    known = catalog.current()  # active entries only, cached (orders/catalog.py)
    return _resolve(request, known), _require_rate_card(known)


def _resolve(request: DatasetRequest, known: catalog.Catalog) -> _ResolvedRequest:
    task_type = known.task_types.get(request.task_type)
    if task_type is None:
        raise invalid(
            "task_type", f"Unknown task type {request.task_type!r}.", ErrorCode.UNKNOWN_TASK_TYPE
        )
    embodiment = known.embodiments.get(request.embodiment)
    if embodiment is None:
        raise invalid(
            "embodiment",
            f"Unknown embodiment {request.embodiment!r}.",
            ErrorCode.UNKNOWN_EMBODIMENT,
        )
    level = (
        request.complexity if request.complexity is not None else task_type.default_complexity_id
    )
    complexity = known.levels.get(level)
    if complexity is None:
        raise invalid(
            "complexity", f"Unknown complexity level {level!r}.", ErrorCode.UNKNOWN_COMPLEXITY
        )
    sensors = sorted(set(request.sensors))
    unknown = [slug for slug in sensors if slug not in known.sensors]
    if unknown:
        raise invalid(
            "sensors", f"Unknown sensors: {', '.join(unknown)}.", ErrorCode.UNKNOWN_SENSOR
        )

    min_hours = Decimal(settings.ORDER_MIN_HOURS)
    max_hours = Decimal(settings.ORDER_MAX_HOURS)
    if not (min_hours <= request.hours <= max_hours):
        raise invalid("hours", f"Hours must be between {min_hours} and {max_hours}.")
    if not (1 <= request.environments <= settings.ORDER_MAX_ENVIRONMENTS):
        raise invalid(
            "environments", f"Environments must be between 1 and {settings.ORDER_MAX_ENVIRONMENTS}."
        )
    if request.hours < request.environments * MIN_HOURS_PER_ENVIRONMENT:
        raise invalid(
            "environments",
            f"Each environment needs at least {MIN_HOURS_PER_ENVIRONMENT} h of collection.",
        )
    if request.objects_per_environment < 1:
        raise invalid("objects_per_environment", "At least one object per environment.")
    collection_plan.validate_plan(request)
    return _ResolvedRequest(
        task_type=task_type,
        complexity=complexity,
        embodiment=embodiment,
        sensors=sensors,
        known=known,
    )


def _price(request: DatasetRequest, resolved: _ResolvedRequest, rate_card: RateCard) -> Price:
    try:
        return price_dataset(
            PriceRequest(
                embodiment=resolved.embodiment.slug,
                complexity=resolved.complexity.level,
                hours=request.hours,
                environments=request.environments,
                sensors=tuple(resolved.sensors),
                rush=request.rush,
                distinct_objects=request.plan_distinct_objects,
            ),
            rate_card_terms(rate_card),
        )
    except PricingError as exc:
        raise invalid(exc.field_name, exc.message, ErrorCode.NOT_PRICED) from exc


def _require_rate_card(known: catalog.Catalog) -> RateCard:
    rate_card = known.rate_card_at(timezone.now())  # as rate_card_current() reads it
    if rate_card is None:
        raise ServiceError(
            "No rate card is in force; quotes are unavailable.", code=ErrorCode.NO_RATE_CARD
        )
    return rate_card


def _spec_fields(
    request: DatasetRequest, resolved: _ResolvedRequest, rate_card: RateCard, price: Price
):
    return {
        "task_type": resolved.task_type,
        "complexity": resolved.complexity,
        "embodiment": resolved.embodiment,
        "hours": request.hours,
        "environments": request.environments,
        "objects_per_environment": request.objects_per_environment,
        "sensor_slugs": resolved.sensors,
        "rush": request.rush,
        "environment_unit": request.environment_unit,
        "distinct_objects": request.distinct_objects,
        "object_categories": sorted(set(request.object_categories)),
        "demos_per_cell": request.demos_per_cell,
        "cell_min_share_percent": request.cell_min_share_percent,
        "cell_max_share_percent": request.cell_max_share_percent,
        "calibrated_cameras": request.calibrated_cameras,
        "rate_card": rate_card,
        "currency": price.currency,
        "lines": [line.as_json() for line in price.lines],
        "total": price.total,
    }


def _priced_quote(*, organization, request: DatasetRequest) -> Quote:
    resolved, rate_card = _resolved_with_card(request)
    price = _price(request, resolved, rate_card)
    return Quote(
        organization=organization,
        expires_at=timezone.now() + timedelta(hours=rate_card.quote_validity_hours),
        **_spec_fields(request, resolved, rate_card, price),
    )


def _supply_of(request, resolved, rate_card, deadline=None) -> supply.SupplyAnswer:
    """The supply check's answer for this plan (unknown when no check is registered)."""
    return collection_plan.supply_answer(
        request,
        embodiment=resolved.embodiment.slug,
        task_category=resolved.task_type.category,
        sensors=resolved.sensors,
        lead_days=rate_card.rush_lead_days if request.rush else rate_card.standard_lead_days,
        deadline=deadline,
    )


def quote_create(*, organization, request: DatasetRequest, advise: bool = False) -> Quote:
    """Price a request with the rate card in force and store it until it expires, with the
    supply check's answer (can the platform cover it, by when) and, when asked, the plan
    advisor's proposal (the quote itself is priced as requested)."""
    resolved, rate_card = _resolved_with_card(request)
    price = _price(request, resolved, rate_card)
    answer = _supply_of(request, resolved, rate_card)
    quote = Quote(
        organization=organization,
        expires_at=timezone.now() + timedelta(hours=rate_card.quote_validity_hours),
        supply=answer.as_json(),
        plan_advice=(
            collection_plan.advice(
                request,
                task_type=resolved.task_type,
                complexity=resolved.complexity.level,
                available_environments=answer.available_environments,
            )
            if advise
            else {}
        ),
        **_spec_fields(request, resolved, rate_card, price),
    )
    quote.save(force_insert=True)
    return quote


def quote_preview(*, request: DatasetRequest) -> Quote:
    """The same price as quote_create, stored nowhere (the live price calculator); no supply
    check (the stored quote carries it)."""
    return _priced_quote(organization=None, request=request)


def _validate_details(
    details: OrderDetails, *, hours: Decimal, rush: bool, rate_card: RateCard
) -> None:
    if details.output_format not in OutputFormat.values:
        raise invalid("output_format", f"Unknown output format {details.output_format!r}.")
    if details.video_codec not in VIDEO_CODECS:
        raise invalid("video_codec", f"One of {', '.join(VIDEO_CODECS)}.")
    if details.pilot_hours is not None and not (0 < details.pilot_hours < hours):
        raise invalid(
            "pilot_hours", "Pilot hours must be more than 0 and less than the order's hours."
        )
    if details.deadline is not None:
        lead_days = rate_card.rush_lead_days if rush else rate_card.standard_lead_days
        earliest = timezone.localdate() + timedelta(days=lead_days)
        if details.deadline < earliest:
            hint = "" if rush else " Ask for rush delivery for a sooner date."
            raise invalid(
                "deadline", f"The earliest possible deadline is {earliest.isoformat()}.{hint}"
            )


def _actor_fields(caller: Caller | None, label: str = "") -> dict:
    return {
        "actor": caller.user if caller else None,
        "actor_api_key": caller.api_key if caller else None,
        "actor_label": label or label_of(caller),
    }


WAITLISTED_NOTE = " Waitlisted: the platform cannot cover it now; collection waits for staff."


def _order_open(
    *,
    caller: Caller,
    fields: dict,
    details: OrderDetails,
    quote: Quote | None,
    known: catalog.Catalog | None = None,
) -> Order:
    """The order, written priced and awaiting payment, with both opening events (created as
    a draft, then priced) in one insert: the same rows as a draft moved by order_transition,
    without re-reading and updating the row just written."""
    draft, priced = Order.Status.DRAFT, Order.Status.AWAITING_PAYMENT
    require_transition(
        transitions=ORDER_TRANSITIONS,
        from_status=draft,
        to_status=priced,
        what="An order",
        error=InvalidTransition,
    )
    order = Order.objects.create(
        organization=caller.organization,
        created_by=caller.user,
        created_by_api_key=caller.api_key,
        quote=quote,
        status=priced,
        output_format=details.output_format,
        success_criterion=details.success_criterion,
        deadline=details.deadline,
        pilot_hours=details.pilot_hours,
        notes=details.notes,
        cells_planned=True,  # planned and checked by (environment, object) cell (issue 30)
        # Placed: what every episode carries is frozen now (later catalog edits do not move it).
        stream_spec=build_stream_spec(
            embodiment=fields["embodiment"],
            sensor_slugs=fields["sensor_slugs"],
            video_codec=details.video_codec,
            known=known,
        ),
        **fields,
    )
    actor = _actor_fields(caller)
    OrderEvent.objects.bulk_create(
        [
            OrderEvent(
                order=order, from_status="", to_status=draft, reason="Order created.", **actor
            ),
            OrderEvent(
                order=order,
                from_status=draft,
                to_status=priced,
                reason=f"Priced at {order.total} {order.currency}; awaiting payment."
                + WAITLISTED_NOTE * order.waitlisted,
                **actor,
            ),
        ]
    )
    transaction.on_commit(lambda: _announce(order.id, priced))
    return order


def order_create(*, caller: Caller, request: DatasetRequest, details: OrderDetails) -> Order:
    """An order from a full specification, priced now with the rate card in force."""
    _require_customer(caller)
    resolved, rate_card = _resolved_with_card(request)
    price = _price(request, resolved, rate_card)
    _validate_details(details, hours=request.hours, rush=request.rush, rate_card=rate_card)
    answer = _supply_of(request, resolved, rate_card, deadline=details.deadline).as_json()
    waitlisted = collection_plan.require_coverable_or_waitlist(answer, waitlist=details.waitlist)
    with transaction.atomic():
        return _order_open(
            caller=caller,
            fields={
                **_spec_fields(request, resolved, rate_card, price),
                "supply": answer,
                "waitlisted": waitlisted,
            },
            details=details,
            quote=None,
            known=resolved.known,
        )


QUOTE_COPIED_FIELDS = (
    "task_type",
    "complexity",
    "embodiment",
    "hours",
    "environments",
    "objects_per_environment",
    "sensor_slugs",
    "rush",
    "environment_unit",
    "distinct_objects",
    "object_categories",
    "demos_per_cell",
    "cell_min_share_percent",
    "cell_max_share_percent",
    "calibrated_cameras",
    "plan_advice",
    "supply",
    "rate_card",
    "currency",
    "lines",
    "total",
)


def order_create_from_quote(*, caller: Caller, quote_id, details: OrderDetails) -> Order:
    """An order at exactly the quoted price, while the quote is valid and unused."""
    _require_customer(caller)
    with transaction.atomic():
        quote = (
            quote_visible_to(organization=caller.organization)
            .select_for_update(of=("self",))
            .select_related("task_type", "embodiment", "rate_card")
            .filter(pk=quote_id)
            .first()
        )
        if quote is None:
            raise NotFound("Quote not found.", fields={"quote": ["Quote not found."]})
        if quote.expires_at <= timezone.now():
            raise invalid(
                "quote", "This quote has expired; ask for a new one.", ErrorCode.QUOTE_EXPIRED
            )
        if Order.objects.filter(quote=quote).exists():
            raise Conflict(
                "An order was already placed from this quote.",
                code=ErrorCode.QUOTE_USED,
                fields={"quote": ["Already used."]},
            )
        _validate_details(details, hours=quote.hours, rush=quote.rush, rate_card=quote.rate_card)
        fields = {name: getattr(quote, name) for name in QUOTE_COPIED_FIELDS}
        fields["waitlisted"] = collection_plan.require_coverable_or_waitlist(
            quote.supply, waitlist=details.waitlist
        )
        return _order_open(caller=caller, fields=fields, details=details, quote=quote)


def _require_customer(caller: Caller) -> None:
    if not caller.is_customer:
        raise ServiceError(
            "Only customer organizations can place orders.", code=ErrorCode.NOT_A_CUSTOMER
        )


def order_transition(
    *,
    order_id,
    to_status: str,
    caller: Caller | None = None,
    actor_label: str = "",
    reason: str = "",
    announce: dict | None = None,
) -> Order:
    """The one way an order changes status: lock, check the map, write the event.

    Moving to the state the order is already in is a no-op (safe for retried tasks).
    `announce`: more keyword arguments of the signal the move sends (orders/signals.py).
    """
    if to_status not in Order.Status.values:
        raise ServiceError(f"Unknown order status {to_status!r}.", code=ErrorCode.UNKNOWN_STATUS)
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        from_status = order.status
        if from_status == to_status:
            return order
        require_transition(
            transitions=ORDER_TRANSITIONS,
            from_status=from_status,
            to_status=to_status,
            what="An order",
            error=InvalidTransition,
        )
        order.status = to_status
        order.save(update_fields=["status", "updated_at"])
        OrderEvent.objects.create(
            order=order,
            from_status=from_status,
            to_status=to_status,
            reason=reason,
            **_actor_fields(caller, actor_label),
        )
        transaction.on_commit(lambda: _announce(order.id, to_status, announce))
    return order


# What other apps hear about (after commit); their receivers enqueue their work.
ANNOUNCED = {
    Order.Status.PAID: signals.order_paid,
    Order.Status.CANCELLED: signals.order_cancelled,
    Order.Status.DELIVERED: signals.order_delivered,
}


def _announce(order_id, to_status: str, announce: dict | None = None) -> None:
    signal = ANNOUNCED.get(to_status)
    if signal is not None:
        signal.send(sender=Order, order_id=order_id, **(announce or {}))


def order_cancel(*, caller: Caller, order_id, reason: str = "") -> Order:
    """Customer cancellation, from the states where the customer may still cancel."""
    with transaction.atomic():
        order = (
            Order.objects.select_for_update()
            .filter(pk=order_id, organization=caller.organization)
            .first()
        )
        if order is None:
            raise NotFound("Order not found.")
        if order.status == Order.Status.CANCELLED:
            return order
        if order.status not in CUSTOMER_CANCELLABLE:
            raise InvalidTransition(
                f"An order that is {order.get_status_display().lower()} cannot be cancelled.",
                fields={"status": [f"Not cancellable from {order.status}."]},
            )
        return order_transition(
            order_id=order.id,
            to_status=Order.Status.CANCELLED,
            caller=caller,
            reason=reason or "Cancelled by the customer.",
        )


def order_mark_paid(
    *, order_id, caller: Caller | None = None, actor_label: str = "", reason: str = ""
) -> Order:
    """Payment confirmed (by the payment provider or by staff): dispatch starts on commit."""
    return order_transition(
        order_id=order_id,
        to_status=Order.Status.PAID,
        caller=caller,
        actor_label=actor_label,
        reason=reason or "Payment confirmed.",
    )


# --- The moves other apps make (only orders changes an order's status) -------------------------


def order_start_collection(*, order_id, actor_label: str, reason: str) -> Order:
    """Fleets planned the paid order's jobs."""
    return order_transition(
        order_id=order_id,
        to_status=Order.Status.IN_COLLECTION,
        actor_label=actor_label,
        reason=reason,
    )


def order_send_to_review(*, order_id, actor_label: str, reason: str) -> Order:
    """Every job of the current phase (pilot or full) is collected."""
    return order_transition(
        order_id=order_id, to_status=Order.Status.IN_REVIEW, actor_label=actor_label, reason=reason
    )


def order_resume_collection(*, order_id, caller: Caller, reason: str) -> Order:
    """The customer approved the pilot: the rest of the order is collected."""
    return order_transition(
        order_id=order_id, to_status=Order.Status.IN_COLLECTION, caller=caller, reason=reason
    )


def order_recollect(*, order_id, actor_label: str, reason: str) -> Order:
    """Accepted episodes were excluded (in review or after delivery): their hours are collected
    again. An order already in collection stays there."""
    return order_transition(
        order_id=order_id,
        to_status=Order.Status.IN_COLLECTION,
        actor_label=actor_label,
        reason=reason,
    )


def order_mark_delivered(
    *, order_id, actor_label: str, reason: str, plan_delivered: dict | None = None
) -> Order:
    """The full dataset is ready for the customer. `plan_delivered` (planned orders): the
    distinct environments and objects delivered, {"environments": n, "objects": m}, passed on
    to billing with `order_delivered` (the true-up credits a shortfall)."""
    return order_transition(
        order_id=order_id,
        to_status=Order.Status.DELIVERED,
        actor_label=actor_label,
        reason=reason,
        announce={"plan_delivered": plan_delivered} if plan_delivered is not None else None,
    )


def order_mark_refunded(*, order_id, actor_label: str, reason: str) -> Order:
    """A cancelled order's payment was refunded in full."""
    return order_transition(
        order_id=order_id, to_status=Order.Status.REFUNDED, actor_label=actor_label, reason=reason
    )
