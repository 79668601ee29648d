"""The catalog and the rate cards as the hot paths (quotes, previews, orders) read them: loaded
together, kept per process, reloaded when the catalog changes.

A change (any save or delete of a task type, complexity level, embodiment, sensor add-on or
rate card, through the ORM or the admin) bumps a version in the shared cache; every process
compares its copy's version on each read (one cache lookup: in-process memory by default,
Redis with REDIS_URL). With the embedded per-process cache another process cannot see the
bump, so every copy also expires after CATALOG_CACHE_SECONDS: that is the staleness bound
without Redis, and zero with it. A rate card in force is frozen (the admin refuses edits), so
caching it changes no price; which card is in force is decided per read, by time.
"""

import threading
import time
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from orders.models import ComplexityLevel, Embodiment, RateCard, SensorAddon, TaskType

VERSION_KEY = "orders:catalog:version"


@dataclass(frozen=True)
class Catalog:
    version: int
    loaded_at: float  # time.monotonic()
    task_types: dict[str, TaskType]  # active ones, by slug
    embodiments: dict[str, Embodiment]  # active ones, by slug
    levels: dict[int, ComplexityLevel]
    sensors: dict[str, SensorAddon]  # active ones, by slug
    rate_cards: tuple[RateCard, ...]  # newest first: (-effective_from, -version)

    def rate_card_at(self, at: datetime) -> RateCard | None:
        return next((card for card in self.rate_cards if card.effective_from <= at), None)


_lock = threading.Lock()
_copy: Catalog | None = None


def current() -> Catalog:
    """The catalog, from this process's copy unless it changed or expired."""
    global _copy
    version = cache.get(VERSION_KEY, 0)
    held = _copy
    if (
        held is not None
        and held.version == version
        and time.monotonic() - held.loaded_at < settings.CATALOG_CACHE_SECONDS
    ):
        return held
    with _lock:
        _copy = _load(version)
        return _copy


def rate_card_in_force(at: datetime | None = None) -> RateCard | None:
    return current().rate_card_at(at or timezone.now())


def forget() -> None:
    """Drop this process's copy and tell the others (through the shared cache) to drop theirs."""
    global _copy
    _copy = None
    try:
        cache.incr(VERSION_KEY)
    except ValueError:  # not set yet (or evicted): any new value differs from the copies'
        cache.set(VERSION_KEY, time.time_ns(), timeout=None)


def _load(version: int) -> Catalog:
    return Catalog(
        version=version,
        loaded_at=time.monotonic(),
        task_types={t.slug: t for t in TaskType.objects.filter(active=True)},
        embodiments={e.slug: e for e in Embodiment.objects.filter(active=True)},
        levels={level.level: level for level in ComplexityLevel.objects.all()},
        sensors={s.slug: s for s in SensorAddon.objects.filter(active=True)},
        rate_cards=tuple(RateCard.objects.order_by("-effective_from", "-version")),
    )


def _changed(sender, **kwargs) -> None:
    # now, and again once the change is committed (a process reading in between would
    # otherwise keep the old rows until its copy expires)
    forget()
    transaction.on_commit(forget)


for _model in (TaskType, ComplexityLevel, Embodiment, SensorAddon, RateCard):
    post_save.connect(_changed, sender=_model, dispatch_uid=f"catalog-{_model.__name__}-save")
    post_delete.connect(_changed, sender=_model, dispatch_uid=f"catalog-{_model.__name__}-del")
