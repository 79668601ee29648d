"""The supply check's hook: whether the platform's active fleets can cover a plan, and when.

orders cannot import fleets (the floors, ARCHITECTURE.md), so the check itself lives in
fleets (`fleets/supply.py`) and registers here when fleets is ready (`fleets/apps.py`). The
quote code asks `supply_check(question)`; with nothing registered the answer is "unknown"
(coverable None, no ETA), and an unknown answer never blocks an order.

The answer is stored on the quote and the order (`DatasetSpec.supply`) as `as_json()`:
{"coverable": true | false | null, "shortfalls": ["2 matching sites, the plan needs 8", ...],
 "eta": "YYYY-MM-DD" | null, "basis": "...", "available_environments": n | null}.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal


@dataclass(frozen=True)
class SupplyQuestion:
    """The plan as the supply side reads it (slugs and plain values, no models)."""

    embodiment: str
    task_category: str
    sensors: tuple[str, ...]
    hours: Decimal
    environments: int
    environment_unit: str
    objects_per_environment: int
    distinct_objects: int
    object_categories: tuple[str, ...]
    rush: bool
    lead_days: int  # the rate card's lead time for this delivery (rush or standard)
    deadline: date | None = None  # the order's own deadline, when it has one


@dataclass(frozen=True)
class SupplyAnswer:
    coverable: bool | None  # None: unknown (no check registered)
    shortfalls: tuple[str, ...] = ()
    eta: date | None = None
    basis: str = ""
    # Distinct environments (sites, or scenes in scene mode) the platform could offer the
    # plan now; None when unknown. The plan advisor stays within it.
    available_environments: int | None = None

    def as_json(self) -> dict:
        return {
            "coverable": self.coverable,
            "shortfalls": list(self.shortfalls),
            "eta": None if self.eta is None else self.eta.isoformat(),
            "basis": self.basis,
            "available_environments": self.available_environments,
        }


UNKNOWN = SupplyAnswer(
    coverable=None, basis="No supply check is available: coverage and delivery date unknown."
)

_check: Callable[[SupplyQuestion], SupplyAnswer] | None = None


def register_supply_check(check: Callable[[SupplyQuestion], SupplyAnswer] | None) -> None:
    """The supply side's implementation (None: unregister)."""
    global _check
    _check = check


def registered_supply_check() -> Callable[[SupplyQuestion], SupplyAnswer] | None:
    return _check


def supply_check(question: SupplyQuestion) -> SupplyAnswer:
    if _check is None:
        return UNKNOWN
    return _check(question)


def not_coverable(supply: dict) -> bool:
    """A stored answer says the platform cannot cover the plan (unknown is not a no)."""
    return supply.get("coverable") is False
