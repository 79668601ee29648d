"""Delivery versions (v1, v2, ... per order and kind): opening the first or the next one,
marking the standing one superseded, and what a version keeps of the accepted episodes
(DeliveryFilters). Assembly itself is datasets.services.deliveries'."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from datasets.error_codes import ErrorCode
from datasets.models import Delivery, Episode
from marketplace.errors import Conflict, NotFound, invalid
from marketplace.queueing import enqueue_on_commit
from marketplace.tenancy import Caller
from orders.models import Order


class AcceptanceWindowClosed(Conflict):
    code = ErrorCode.ACCEPTANCE_WINDOW_CLOSED


def acceptance_deadline(delivery: Delivery) -> datetime | None:
    """Until when the order's delivered episodes may be claimed (None: not a ready full
    delivery). One window per order: it opens with the order's first ready full delivery and
    later versions do not restart it."""
    if delivery.kind != Delivery.Kind.FULL or delivery.ready_at is None:
        return None
    first = first_full_delivery(delivery.order_id)
    opened = first.ready_at if first is not None else delivery.ready_at
    return opened + timedelta(days=settings.DELIVERY_ACCEPTANCE_DAYS)


def first_full_delivery(order_id) -> Delivery | None:
    """The order's first full delivery that became ready: it opens the acceptance window and
    its seconds are the base of the rejection allowance."""
    return (
        Delivery.objects.filter(order_id=order_id, kind=Delivery.Kind.FULL)
        .exclude(ready_at=None)
        .order_by("ready_at", "version")
        .first()
    )


def require_acceptance_window(delivery: Delivery) -> None:
    """A 409 saying when it closed, once the order's acceptance window is over."""
    deadline = acceptance_deadline(delivery)
    if deadline is not None and timezone.now() > deadline:
        raise AcceptanceWindowClosed(
            f"The acceptance window of this order closed on {deadline:%Y-%m-%d %H:%M} UTC "
            f"({settings.DELIVERY_ACCEPTANCE_DAYS} days after its first full delivery).",
            fields={"episodes": ["The acceptance window is closed."]},
        )


def latest_full_delivery(order: Order) -> Delivery | None:
    return _latest_live(order, Delivery.Kind.FULL)


def _latest_live(order: Order, kind: str) -> Delivery | None:
    """The order's newest delivery of a kind that did not fail."""
    return (
        Delivery.objects.filter(order=order, kind=kind)
        .exclude(status=Delivery.Status.FAILED)
        .order_by("-version")
        .first()
    )


def _open_version(
    order: Order, kind: str, *, previous: Delivery | None, reason: str, filters: dict | None
) -> Delivery:
    """Insert the next version (the caller holds the order's lock); assembly after commit."""
    delivery = Delivery(
        order=order,
        kind=kind,
        version=previous.version + 1 if previous is not None else 1,
        previous=previous,
        version_reason=reason[:500],
        filters=dict(filters if filters is not None else (previous.filters if previous else {})),
    )
    delivery.prefix = f"deliveries/{order.id}/{delivery.id}"
    if kind == Delivery.Kind.PILOT:
        delivery.review = Delivery.Review.PENDING
    delivery.save(force_insert=True)
    # Broker down: an assembling delivery is queued again by delivery_sweep.
    enqueue_on_commit("datasets.tasks.delivery_assemble", delivery.id)
    return delivery


def delivery_start(*, order_id, kind: str, reason: str = "") -> Delivery:
    """Open (once) the delivery of an order's pilot or full dataset; assembly runs after commit.

    The latest version is returned while it stands; once superseded (episodes were excluded
    since), the next version is opened instead, from the accepted episodes as they are now."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        latest = _latest_live(order, kind)
        if latest is not None and latest.superseded_at is None:
            return latest
        if latest is not None and not reason:
            reason = "Episodes were excluded and re-collected."
        return _open_version(order, kind, previous=latest, reason=reason, filters=None)


def deliveries_supersede(*, order: Order, kinds=None) -> int:
    """Mark the order's latest live versions (of `kinds`, default all) as replaced by a next
    version to come (their links keep working until revoked); the caller holds the order's
    lock. Returns how many were marked."""
    marked = 0
    for kind in kinds or Delivery.Kind.values:
        latest = _latest_live(order, kind)
        if latest is not None and latest.superseded_at is None:
            latest.superseded_at = timezone.now()
            latest.save(update_fields=["superseded_at"])
            marked += 1
    return marked


def delivery_next_version(
    *, caller: Caller | None, order_id, kind: str, reason: str, filters: dict | None = None
) -> Delivery:
    """Assemble a new version of a delivered dataset now, from the order's accepted episodes
    (optionally filtered: DeliveryFilters). The customer (its own orders only) or staff
    (caller None). The previous version stays downloadable until revoked."""
    with transaction.atomic():
        orders = Order.objects.select_for_update()
        if caller is not None:
            orders = orders.filter(organization=caller.organization)
        order = orders.filter(pk=order_id).first()
        if order is None:
            raise NotFound("Order not found.")
        latest = _latest_live(order, kind)
        if latest is None or latest.status != Delivery.Status.READY:
            raise Conflict(
                "A new version is made from a ready delivery; this order has none of that kind"
                " ready yet.",
                code=ErrorCode.DELIVERY_NOT_READY,
            )
        if filters is not None:
            filters = DeliveryFilters.parse(filters, order=order).as_json()
        latest.superseded_at = latest.superseded_at or timezone.now()
        latest.save(update_fields=["superseded_at"])
        return _open_version(order, kind, previous=latest, reason=reason, filters=filters)


def open_next_version(*, order_id, kind: str, reason: str) -> Delivery:
    """The next version now, from the accepted episodes (the standing version's filters):
    after episodes were excluded without re-collection (credited). The caller is in a
    transaction; the standing version is marked superseded."""
    order = Order.objects.select_for_update().get(pk=order_id)
    latest = _latest_live(order, kind)
    if latest is not None and latest.superseded_at is None:
        latest.superseded_at = timezone.now()
        latest.save(update_fields=["superseded_at"])
    return _open_version(order, kind, previous=latest, reason=reason, filters=None)


@dataclass(frozen=True)
class DeliveryFilters:
    """What a version keeps of the order's accepted episodes."""

    min_quality: float | None = None
    exclude_operators: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw, *, order: Order) -> "DeliveryFilters":
        if not isinstance(raw, dict):
            raise invalid("filters", "An object with min_quality and/or exclude_operators.")
        unknown = set(raw) - {"min_quality", "exclude_operators"}
        if unknown:
            raise invalid("filters", f"Unknown filters: {', '.join(sorted(unknown))}.")
        minimum = raw.get("min_quality")
        if minimum is not None:
            if isinstance(minimum, bool) or not isinstance(minimum, int | float):
                raise invalid("min_quality", "A number from 0 to 1.")
            if not 0 <= minimum <= 1:
                raise invalid("min_quality", "A number from 0 to 1.")
        operators = raw.get("exclude_operators") or []
        if not isinstance(operators, list) or not all(isinstance(o, str) for o in operators):
            raise invalid("exclude_operators", "A list of operator pseudonyms.")
        known = set(
            Episode.objects.filter(order=order, operator__in=operators).values_list(
                "operator", flat=True
            )
        )
        if missing := sorted(set(operators) - known):
            raise invalid(
                "exclude_operators", f"No operator of this order is named {', '.join(missing)}."
            )
        return cls(
            min_quality=None if minimum is None else float(minimum),
            exclude_operators=tuple(sorted(set(operators))),
        )

    @classmethod
    def of(cls, delivery: Delivery) -> "DeliveryFilters":
        raw = delivery.filters or {}
        return cls(
            min_quality=raw.get("min_quality"),
            exclude_operators=tuple(raw.get("exclude_operators") or ()),
        )

    def as_json(self) -> dict:
        out: dict = {}
        if self.min_quality is not None:
            out["min_quality"] = self.min_quality
        if self.exclude_operators:
            out["exclude_operators"] = list(self.exclude_operators)
        return out

    def apply(self, episodes):
        if self.min_quality is not None:
            episodes = episodes.filter(quality_score__gte=self.min_quality)
        if self.exclude_operators:
            episodes = episodes.exclude(operator__in=self.exclude_operators)
        return episodes
