"""Reads used by more than one view or service."""

from django.db.models import QuerySet
from django.utils import timezone

from marketplace.models import Organization
from orders import catalog
from orders.models import Order, Quote, RateCard
from orders.pricing import RateCardTerms


def rate_card_current(*, at=None) -> RateCard | None:
    """The rate card in force at `at` (now): the newest whose effective date has come, read
    from the cached catalog (orders/catalog.py)."""
    return catalog.rate_card_in_force(at)


_terms_cache: dict[tuple[int, int], RateCardTerms] = {}


def rate_card_terms(rate_card: RateCard) -> RateCardTerms:
    """The card's prices as plain values. A card in force is frozen (the admin refuses edits),
    so its terms are kept per process; a card not yet in force is always read afresh."""
    key = (rate_card.pk, rate_card.version)
    cached = _terms_cache.get(key)
    if cached is not None:
        return cached
    terms = _read_terms(rate_card)
    if rate_card.effective_from <= timezone.now():
        _terms_cache[key] = terms
    return terms


def _read_terms(rate_card: RateCard) -> RateCardTerms:
    # Whether an embodiment or sensor may be ordered at all is the catalog's `active` flag,
    # checked when a request is resolved; the card only says what it costs.
    return RateCardTerms(
        version=rate_card.version,
        currency=rate_card.currency,
        embodiment_rates={
            rate.embodiment.slug: rate.hourly_rate
            for rate in rate_card.embodiment_rates.select_related("embodiment")
        },
        complexity_multipliers={
            m.level_id: m.multiplier for m in rate_card.complexity_multipliers.all()
        },
        sensor_rates={
            rate.sensor.slug: rate.hourly_rate
            for rate in rate_card.sensor_rates.select_related("sensor")
        },
        included_environments=rate_card.included_environments,
        extra_environment_fee=rate_card.extra_environment_fee,
        included_objects=rate_card.included_objects,
        extra_object_fee=rate_card.extra_object_fee,
        rush_surcharge_percent=rate_card.rush_surcharge_percent,
        volume_tiers=tuple((t.min_hours, t.discount_percent) for t in rate_card.volume_tiers.all()),
    )


def order_list(*, organization: Organization) -> QuerySet[Order]:
    return Order.objects.filter(organization=organization).select_related(
        "task_type", "complexity", "embodiment", "rate_card"
    )


def orders_waitlisted() -> QuerySet[Order]:
    """Orders placed on the waitlist and not yet released, cancelled or refunded (the staff
    console lists them), oldest first."""
    return (
        Order.objects.filter(waitlisted=True)
        .exclude(status__in=[Order.Status.CANCELLED, Order.Status.REFUNDED, Order.Status.CLOSED])
        .select_related("organization", "task_type", "embodiment")
        .order_by("created_at")
    )


def quote_visible_to(*, organization: Organization | None) -> QuerySet[Quote]:
    """A quote is the asking organization's; anonymous quotes belong to whoever holds the id."""
    from django.db.models import Q

    if organization is None:
        return Quote.objects.filter(organization__isnull=True)
    return Quote.objects.filter(Q(organization=organization) | Q(organization__isnull=True))
