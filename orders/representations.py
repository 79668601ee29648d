"""Response bodies of the hot endpoints, built as plain dicts (a ModelSerializer costs more than
the pricing itself). Each equals its serializer's output, field for field: the serializer stays
the schema's source, and tests/orders/test_representations.py and test_order_bodies.py compare
the two."""

from datetime import datetime
from decimal import Decimal

import orjson
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from marketplace.audit import public_label
from marketplace.compiled_sql import CompiledQuery
from marketplace.pagination import CompiledCursorSource
from orders.models import AMOUNT, HOURS, Order, OrderEvent, Quote


def _fixed(value: Decimal, places: int) -> str:
    # DRF's DecimalField: quantized to the field's places, as a string
    return str(value.quantize(Decimal(1).scaleb(-places)))


def _moment(value: datetime) -> str:
    # DRF's DateTimeField under TIME_ZONE = "UTC": ISO 8601, "Z" for UTC
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def quote_representation(quote: Quote) -> dict:
    return {
        "id": str(quote.id),
        "task_type": quote.task_type.slug,
        "complexity": quote.complexity_id,
        "embodiment": quote.embodiment.slug,
        "hours": _fixed(quote.hours, HOURS["decimal_places"]),
        "environments": quote.environments,
        "objects_per_environment": quote.objects_per_environment,
        "sensors": [str(slug) for slug in quote.sensor_slugs],
        "rush": quote.rush,
        **_plan(quote.__dict__),
        "currency": quote.currency,
        "lines": [_line(line) for line in quote.lines],
        "total": _fixed(quote.total, AMOUNT["decimal_places"]),
        "rate_card_version": quote.rate_card.version,
        "supply": quote.supply,
        "plan_advice": quote.plan_advice,
        "created_at": _moment(quote.created_at),
        "expires_at": _moment(quote.expires_at),
    }


SHARE = 2  # the cell share percentages' decimal places


def _plan(values: dict) -> dict:
    """The collection plan's fields (PLAN_FIELDS in orders/api.py) from a quote's attributes
    or an order's row."""
    return {
        "environment_unit": values["environment_unit"],
        "distinct_objects": values["distinct_objects"],
        "object_categories": [str(name) for name in _json(values, "object_categories")],
        "demos_per_cell": values["demos_per_cell"],
        "cell_min_share_percent": _fixed(values["cell_min_share_percent"], SHARE),
        "cell_max_share_percent": _fixed(values["cell_max_share_percent"], SHARE),
        "calibrated_cameras": values["calibrated_cameras"],
    }


# Orders: read as rows (`QuerySet.values`), not model objects, on the list and detail paths.
ORDER_COLUMNS = (
    "id",
    "task_type__slug",
    "complexity_id",
    "embodiment__slug",
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
    "currency",
    "lines",
    "total",
    "rate_card__version",
    "quote_id",
    "status",
    "output_format",
    "success_criterion",
    "deadline",
    "pilot_hours",
    "notes",
    "stream_spec",
    "accepted_hours",
    "supply",
    "cells_planned",
    "waitlisted",
    "created_at",
    "updated_at",
)
EVENT_COLUMNS = ("order_id", "from_status", "to_status", "actor_label", "reason", "created_at")


JSON_COLUMNS = ("sensor_slugs", "lines", "stream_spec", "object_categories", "supply")


def order_rows(orders: QuerySet[Order]) -> QuerySet:
    """The columns order_representation reads, joined in one statement. The JSON columns come
    as their text (`<name>_json`), parsed with orjson: Django's JSONField parses each with
    json.loads, most of a page's decoding time."""
    texts = {f"{name}_json": Cast(name, TextField()) for name in JSON_COLUMNS}
    plain = [name for name in ORDER_COLUMNS if name not in JSON_COLUMNS]
    return orders.annotate(**texts).values(*plain, *texts)


def _json(row: dict, name: str):
    return row[name] if name in row else orjson.loads(row[f"{name}_json"])


def event_rows(order_ids) -> QuerySet:
    return OrderEvent.objects.filter(order_id__in=order_ids).values(*EVENT_COLUMNS)


def order_row(order: Order) -> dict:
    """A loaded Order as the row order_representation reads (for an order just written)."""
    row = {name: getattr(order, name) for name in ORDER_COLUMNS if "__" not in name}
    row["task_type__slug"] = order.task_type.slug
    row["embodiment__slug"] = order.embodiment.slug
    row["rate_card__version"] = order.rate_card.version
    return row


def order_representation(row: dict, events: list[dict] | None = None) -> dict:
    """OrderSerializer's body from a row of ORDER_COLUMNS; with events, OrderDetailSerializer's."""
    hours = HOURS["decimal_places"]
    body = {
        "id": str(row["id"]),
        "task_type": row["task_type__slug"],
        "complexity": row["complexity_id"],
        "embodiment": row["embodiment__slug"],
        "hours": _fixed(row["hours"], hours),
        "environments": row["environments"],
        "objects_per_environment": row["objects_per_environment"],
        "sensors": [str(slug) for slug in _json(row, "sensor_slugs")],
        "rush": row["rush"],
        **_plan(row),
        "currency": row["currency"],
        "lines": [_line(line) for line in _json(row, "lines")],
        "total": _fixed(row["total"], AMOUNT["decimal_places"]),
        "rate_card_version": row["rate_card__version"],
        "quote": None if row["quote_id"] is None else str(row["quote_id"]),
        "status": row["status"],
        "output_format": row["output_format"],
        "success_criterion": row["success_criterion"],
        "deadline": None if row["deadline"] is None else row["deadline"].isoformat(),
        "pilot_hours": None if row["pilot_hours"] is None else _fixed(row["pilot_hours"], hours),
        "notes": row["notes"],
        "stream_spec": _json(row, "stream_spec"),
        "accepted_hours": _fixed(row["accepted_hours"], hours),
        "supply": _json(row, "supply"),
        "cells_planned": row["cells_planned"],
        "waitlisted": row["waitlisted"],
        "created_at": _moment(row["created_at"]),
        "updated_at": _moment(row["updated_at"]),
    }
    if events is not None:
        body["events"] = [
            {
                "from_status": event["from_status"],
                "to_status": event["to_status"],
                "actor_label": public_label(event["actor_label"]),
                "reason": event["reason"],
                "created_at": _moment(event["created_at"]),
            }
            for event in events
        ]
    return body


# One order's events in their own order, and an organization's order by id: the order
# detail's two statements, compiled once (marketplace/compiled_sql.py).
_EVENTS_OF_ORDER = CompiledQuery(
    lambda order_id: (
        OrderEvent.objects.filter(order_id=order_id)
        .order_by(*OrderEvent._meta.ordering)
        .values(*EVENT_COLUMNS)
    ),
    order_id="uuid",
)
_ORDER_OF_ORGANIZATION = CompiledQuery(
    lambda organization_id, order_id: order_rows(
        Order.objects.filter(organization_id=organization_id, pk=order_id)
    ).order_by()[:1],
    organization_id="uuid",
    order_id="uuid",
)


# An organization's orders as order_rows, for the cursor pagination to page through: each
# page's statement (ordering, cursor position, LIMIT/OFFSET) compiled once per shape. The list
# without filters; the tenant is a parameter of every shape.
ORDER_PAGES = CompiledCursorSource(
    lambda organization_id: order_rows(Order.objects.filter(organization_id=organization_id)),
    model=Order,
    position="created_at",
    organization_id="uuid",
)


def order_detail_row(*, organization_id, order_id) -> dict | None:
    """The row of one of the organization's orders (order_rows' columns), or None."""
    rows = _ORDER_OF_ORGANIZATION.values(organization_id=organization_id, order_id=order_id)
    return rows[0] if rows else None


def order_detail_representation(row: dict) -> dict:
    """One order with its events (one more statement), in the events' own order."""
    return order_representation(row, _EVENTS_OF_ORDER.values(order_id=row["id"]))


def _line(line: dict) -> dict:
    return {
        "code": str(line["code"]),
        "description": str(line["description"]),
        "quantity": str(line["quantity"]),
        "unit_amount": str(line["unit_amount"]),
        "amount": str(line["amount"]),
    }
