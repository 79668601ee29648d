"""The one money formatter: Decimal in, text with the currency's symbol and minor units out.

Every page, PDF, email and admin column formats money through `format_money` (templates
through portal's `money` filter), so an amount reads the same everywhere. The symbols and
placement follow CLDR's English conventions, the same as the browser's
`Intl.NumberFormat("en-US", {style: "currency"})` that the live price calculator uses:
`$1,234.50`, `€1,234.50`, `CHF 1,234.50`, `¥1,235`, `-$12.00`.
"""

from decimal import Decimal, InvalidOperation

from orders.pricing import MINOR_UNITS, quantize_money

SYMBOLS = {
    "USD": "$",
    "EUR": "€",
    "GBP": "£",
    "CHF": "CHF\u00a0",
    "CAD": "CA$",
    "AUD": "A$",
    "JPY": "¥",
    "KRW": "₩",
}


def format_money(amount, currency: str) -> str:
    """`format_money(Decimal("1234.5"), "USD")` -> `$1,234.50`. Never takes a float."""
    if amount is None or amount == "":
        return ""
    if isinstance(amount, float):
        raise TypeError("money is never a float")
    try:
        value = amount if isinstance(amount, Decimal) else Decimal(str(amount))
    except InvalidOperation as exc:
        raise ValueError(f"not an amount: {amount!r}") from exc
    currency = (currency or "").upper()
    if currency in MINOR_UNITS:
        value = quantize_money(value, currency)
        digits = MINOR_UNITS[currency]
    else:  # an unknown code: two decimals, the code as the symbol
        digits = 2
        value = value.quantize(Decimal("0.01"))
    symbol = SYMBOLS.get(currency, f"{currency}\u00a0")
    sign = "-" if value < 0 else ""
    return f"{sign}{symbol}{abs(value):,.{digits}f}"


def format_rate(amount, currency: str, unit: str = "h") -> str:
    """A price per unit, with up to four decimals where the rate card has them: `$40.125/h`."""
    if amount is None:
        return ""
    value = amount if isinstance(amount, Decimal) else Decimal(str(amount))
    digits = MINOR_UNITS.get((currency or "").upper(), 2)
    exponent = value.normalize().as_tuple().exponent
    places = max(digits, min(4, -exponent if isinstance(exponent, int) and exponent < 0 else 0))
    symbol = SYMBOLS.get((currency or "").upper(), f"{currency}\u00a0")
    sign = "-" if value < 0 else ""
    return f"{sign}{symbol}{abs(value):,.{places}f}/{unit}"


def admin_money(field: str, *, currency_field: str = "currency", description: str = ""):
    """An admin column showing `field` in the one money format (`list_display` entry)."""

    def column(obj):
        return format_money(getattr(obj, field), getattr(obj, currency_field))

    column.short_description = description or field.replace("_", " ").capitalize()
    column.admin_order_field = field
    column.__name__ = f"{field}_formatted"
    return column
