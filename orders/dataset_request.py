"""The quote request's nine fields read without DRF's serializer when they are plainly valid.

A DatasetRequestSerializer costs more than the pricing it feeds (its declared fields are
deep-copied and bound for every instance, each value run through its field and validators):
a fifth of a quote's time. `plain_dataset_request(data)` accepts only what the serializer
certainly accepts, spelled the plain way (JSON types as they come: strings for slugs and
hours, integers, a list of slugs, a boolean), and returns what the serializer's
`to_request()` would. Anything else, a valid value spelled another way included ("5" for
an integer, " peg " for a slug), returns None: the view then runs the serializer, which
accepts it or answers its own errors in its own shape. So the serializer stays the only
source of error messages and of the OpenAPI schema; tests/orders/test_dataset_request.py
checks that whatever this accepts, the serializer accepts with the same result."""

import re
from decimal import Decimal

from orders import services

_SLUG = re.compile(r"[-a-zA-Z0-9_]{1,60}")  # SlugField(max_length=60), nothing to trim
# DecimalField(max_digits=9, decimal_places=2, min_value=0.01): at most 7 whole digits
_HOURS = re.compile(r"[0-9]{1,7}(?:\.[0-9]{1,2})?")
_CENT = Decimal("0.01")
_MAX_HOURS = 10**7  # exclusive: 7 whole digits
# what the serializer refuses in validate(): prices are the server's
REFUSED_PRICE_FIELDS = ("total", "price", "amount", "lines", "unit_amount", "currency", "rate_card")


def _slug(value) -> bool:
    return type(value) is str and _SLUG.fullmatch(value) is not None


def _integer(value, low: int, high: int | None = None) -> bool:
    return type(value) is int and value >= low and (high is None or value <= high)


def _hours(value) -> Decimal | None:
    plain = type(value) is str and _HOURS.fullmatch(value) is not None
    if not (plain or (type(value) is int and 0 < value < _MAX_HOURS)):
        return None
    hours = Decimal(value).quantize(_CENT)
    return hours if hours >= _CENT else None


def plain_dataset_request(data) -> services.DatasetRequest | None:
    """The request DatasetRequestSerializer(data=data).to_request() gives, or None when the
    serializer has to decide (anything not plainly valid)."""
    if type(data) is not dict or any(name in data for name in REFUSED_PRICE_FIELDS):
        return None
    task_type, embodiment = data.get("task_type"), data.get("embodiment")
    hours = _hours(data.get("hours"))
    complexity = data.get("complexity")
    environments = data.get("environments", 1)
    objects = data.get("objects_per_environment", 1)
    sensors = data.get("sensors", [])
    rush = data.get("rush", False)
    if not (
        _slug(task_type)
        and _slug(embodiment)
        and hours is not None
        and (complexity is None or _integer(complexity, 1, 5))
        and _integer(environments, 1)
        and _integer(objects, 1, 100000)
        and type(sensors) is list
        and len(sensors) <= 20
        and all(_slug(sensor) for sensor in sensors)
        and type(rush) is bool
    ):
        return None
    return services.DatasetRequest.of(dict(data, hours=hours))
