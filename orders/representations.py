"""Response bodies of the hot endpoints, built as plain dicts (a ModelSerializer costs more than
the pricing itself). Each equals its serializer's output, field for field: the serializer stays
the schema's source, and tests/orders/test_representations.py compares the two."""

from datetime import datetime
from decimal import Decimal

from orders.models import AMOUNT, HOURS, Quote


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
        "currency": quote.currency,
        "lines": [
            {
                "code": str(line["code"]),
                "description": str(line["description"]),
                "quantity": str(line["quantity"]),
                "unit_amount": str(line["unit_amount"]),
                "amount": str(line["amount"]),
            }
            for line in quote.lines
        ],
        "total": _fixed(quote.total, AMOUNT["decimal_places"]),
        "rate_card_version": quote.rate_card.version,
        "created_at": _moment(quote.created_at),
        "expires_at": _moment(quote.expires_at),
    }
