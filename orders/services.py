"""Writes for orders: quotes, order creation, and the one transition service."""

import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from marketplace.audit import actor_label as label_of
from marketplace.errors import Conflict, NotFound, ServiceError, invalid
from marketplace.tenancy import Caller
from marketplace.transitions import require_transition
from orders import catalog, plan_advisor, signals, supply
from orders.error_codes import ErrorCode
from orders.models import (
    CUSTOMER_CANCELLABLE,
    ORDER_TRANSITIONS,
    ComplexityLevel,
    Embodiment,
    EnvironmentUnit,
    Order,
    OrderEvent,
    OutputFormat,
    Quote,
    RateCard,
    TaskType,
)
from orders.pricing import Price, PriceRequest, PricingError, price_dataset
from orders.selectors import quote_visible_to, rate_card_terms
from orders.streams import DEFAULT_VIDEO_CODEC, VIDEO_CODECS, build_stream_spec

MIN_HOURS_PER_ENVIRONMENT = Decimal("0.5")


class InvalidTransition(Conflict):
    code = ErrorCode.INVALID_TRANSITION


@dataclass(frozen=True)
class DatasetRequest:
    """What a customer asks to have collected (the priced part of an order)."""

    task_type: str
    embodiment: str
    hours: Decimal
    environments: int = 1
    complexity: int | None = None  # None: the task type's default
    objects_per_environment: int = 1
    sensors: tuple[str, ...] = ()
    rush: bool = False
    # The collection plan (issue 30; models.DatasetSpec says what each means).
    environment_unit: str = EnvironmentUnit.SITE
    distinct_objects: int | None = None
    object_categories: tuple[str, ...] = ()
    demos_per_cell: int | None = None
    cell_min_share_percent: Decimal = Decimal("50")
    cell_max_share_percent: Decimal = Decimal("150")
    calibrated_cameras: bool = False

    @property
    def plan_distinct_objects(self) -> int:
        """The distinct objects the plan prices: distinct_objects, else one environment's."""
        if self.distinct_objects is not None:
            return self.distinct_objects
        return self.objects_per_environment

    @classmethod
    def of(cls, values) -> "DatasetRequest":
        """From validated request fields (a mapping; absent optional ones take the defaults)."""
        return cls(
            task_type=values["task_type"],
            embodiment=values["embodiment"],
            hours=values["hours"],
            environments=values.get("environments", 1),
            complexity=values.get("complexity"),
            objects_per_environment=values.get("objects_per_environment", 1),
            sensors=tuple(values.get("sensors", ())),
            rush=values.get("rush", False),
            environment_unit=values.get("environment_unit") or EnvironmentUnit.SITE,
            distinct_objects=values.get("distinct_objects"),
            object_categories=tuple(values.get("object_categories") or ()),
            demos_per_cell=values.get("demos_per_cell"),
            cell_min_share_percent=_or_default(values, "cell_min_share_percent", "50"),
            cell_max_share_percent=_or_default(values, "cell_max_share_percent", "150"),
            calibrated_cameras=values.get("calibrated_cameras", False),
        )


def _or_default(values, name: str, default: str) -> Decimal:
    value = values.get(name)
    return Decimal(default) if value is None else value


@dataclass(frozen=True)
class OrderDetails:
    """The unpriced part of an order."""

    output_format: str = OutputFormat.LEROBOT_V3
    success_criterion: str = ""
    deadline: date | None = None
    pilot_hours: Decimal | None = None
    notes: str = ""
    video_codec: str = DEFAULT_VIDEO_CODEC  # the delivered videos' codec (orders/streams.py)
    # Place it although the supply check found the platform cannot cover it (a waitlisted
    # order: dispatch holds its jobs until staff release it). Without it such an order is
    # refused (409 not_coverable).
    waitlist: bool = False


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
    _validate_plan(request)
    return _ResolvedRequest(
        task_type=task_type,
        complexity=complexity,
        embodiment=embodiment,
        sensors=sensors,
        known=known,
    )


OBJECT_CATEGORY = re.compile(r"^[a-z0-9][a-z0-9 _-]{0,59}$")
MAX_OBJECT_CATEGORIES = 20
CELL_MIN_SHARE = (Decimal(1), Decimal(100))
CELL_MAX_SHARE = (Decimal(100), Decimal("999.99"))  # the stored field's 5 digits


def _validate_plan(request: DatasetRequest) -> None:
    """The collection plan's own rules (issue 30), each refusal on its field."""
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


def _supply_of(
    request: DatasetRequest,
    resolved: _ResolvedRequest,
    rate_card: RateCard,
    deadline: date | None = None,
) -> supply.SupplyAnswer:
    """The supply check's answer for this plan (orders/supply.py: unknown when no check is
    registered)."""
    return supply.supply_check(
        supply.SupplyQuestion(
            embodiment=resolved.embodiment.slug,
            task_category=resolved.task_type.category,
            sensors=tuple(resolved.sensors),
            hours=request.hours,
            environments=request.environments,
            environment_unit=request.environment_unit,
            objects_per_environment=request.objects_per_environment,
            distinct_objects=request.plan_distinct_objects,
            object_categories=tuple(sorted(set(request.object_categories))),
            rush=request.rush,
            lead_days=rate_card.rush_lead_days if request.rush else rate_card.standard_lead_days,
            deadline=deadline,
        )
    )


def _advice(
    request: DatasetRequest, resolved: _ResolvedRequest, answer: supply.SupplyAnswer
) -> dict:
    return plan_advisor.advise(
        task_category=resolved.task_type.category,
        contact_rich=resolved.task_type.contact_rich,
        complexity=resolved.complexity.level,
        hours=request.hours,
        max_environments=settings.ORDER_MAX_ENVIRONMENTS,
        available_environments=answer.available_environments,
    ).as_json()


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
        plan_advice=_advice(request, resolved, answer) if advise else {},
        **_spec_fields(request, resolved, rate_card, price),
    )
    quote.save(force_insert=True)
    return quote


def quote_preview(*, request: DatasetRequest) -> Quote:
    """The same price as quote_create, stored nowhere (the live price calculator); no supply
    check (the stored quote carries it)."""
    return _priced_quote(organization=None, request=request)


class NotCoverable(Conflict):
    code = ErrorCode.NOT_COVERABLE


def _require_coverable_or_waitlist(answer: dict, details: OrderDetails) -> bool:
    """Whether the order is waitlisted: a plan the platform cannot cover is placed only
    when the customer asks for the waitlist (else 409 with the shortfalls)."""
    if not supply.not_coverable(answer):
        return False
    if details.waitlist:
        return True
    shortfalls = list(answer.get("shortfalls") or []) or ["The platform cannot cover it."]
    raise NotCoverable(
        "The platform's active fleets cannot cover this order now: "
        + "; ".join(shortfalls)
        + ". Send waitlist: true to place it as a waitlisted order (its collection waits"
        " until staff release it).",
        fields={"waitlist": shortfalls},
    )


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
                + (
                    " Waitlisted: the platform cannot cover it now; collection waits for staff."
                    if order.waitlisted
                    else ""
                ),
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
    waitlisted = _require_coverable_or_waitlist(answer, details)
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
        fields["waitlisted"] = _require_coverable_or_waitlist(quote.supply, details)
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
) -> Order:
    """The one way an order changes status: lock, check the map, write the event.

    Moving to the state the order is already in is a no-op (safe for retried tasks).
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
        transaction.on_commit(lambda: _announce(order.id, to_status))
    return order


# What other apps hear about (after commit); their receivers enqueue their work.
ANNOUNCED = {
    Order.Status.PAID: signals.order_paid,
    Order.Status.CANCELLED: signals.order_cancelled,
    Order.Status.DELIVERED: signals.order_delivered,
}


def _announce(order_id, to_status: str) -> None:
    signal = ANNOUNCED.get(to_status)
    if signal is not None:
        signal.send(sender=Order, order_id=order_id)


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


def order_mark_delivered(*, order_id, actor_label: str, reason: str) -> Order:
    """The full dataset is ready for the customer."""
    return order_transition(
        order_id=order_id, to_status=Order.Status.DELIVERED, actor_label=actor_label, reason=reason
    )


def order_mark_refunded(*, order_id, actor_label: str, reason: str) -> Order:
    """A cancelled order's payment was refunded in full."""
    return order_transition(
        order_id=order_id, to_status=Order.Status.REFUNDED, actor_label=actor_label, reason=reason
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
    its current status). The caller (fleets' release) opens its held jobs in the same
    transaction; the order's row lock comes first, as everywhere."""
    with transaction.atomic():
        order = Order.objects.select_for_update().filter(pk=order_id).first()
        if order is None:
            raise NotFound("Order not found.")
        if not order.waitlisted:
            raise Conflict("The order is not waitlisted.", code=ErrorCode.NOT_WAITLISTED)
        if order.status not in WAITLIST_OPEN_STATUSES:
            raise InvalidTransition(
                f"A {order.get_status_display().lower()} order is not released from the waitlist."
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
