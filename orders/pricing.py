"""Pricing: a pure function of a specification and a rate card. No database, no floats.

    price = hours x base_rate(embodiment) x complexity_multiplier(level)
            + sensor add-ons (hours x rate each)
            + extra environments beyond those included (flat fee each)
            + extra distinct objects beyond those included (flat fee each)
            + rush surcharge (percent of the hourly subtotal)
            - volume discount (percent of the hourly subtotal, by hours tier)

The hourly subtotal is the sum of the base and sensor lines as rounded.

Each line is rounded half-up to the currency's minor unit; the total is the sum of the
lines, so what the customer sees always adds up.
"""

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

# ISO 4217 minor units for the currencies a rate card may use.
MINOR_UNITS = {"USD": 2, "EUR": 2, "GBP": 2, "CHF": 2, "CAD": 2, "AUD": 2, "JPY": 0, "KRW": 0}
HUNDRED = Decimal(100)


class PricingError(ValueError):
    """The specification cannot be priced with this rate card (field -> message)."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field_name = field_name
        self.message = message


def quantize_money(amount: Decimal, currency: str) -> Decimal:
    if isinstance(amount, float):
        raise TypeError("money is never a float")
    exponent = Decimal(1).scaleb(-MINOR_UNITS[currency])
    return amount.quantize(exponent, rounding=ROUND_HALF_UP)


def to_minor_units(amount: Decimal, currency: str) -> int:
    """Only for the payment boundary (Stripe wants integers)."""
    return int(quantize_money(amount, currency).scaleb(MINOR_UNITS[currency]))


def plain_decimal(value: Decimal) -> str:
    """120.0000 -> '120', 396.0000000 -> '396', 0.125 -> '0.125' (never scientific notation)."""
    text = format(value.normalize(), "f")
    return text


@dataclass(frozen=True)
class RateCardTerms:
    """A rate card version as plain values, so pricing needs no database."""

    version: int
    currency: str
    embodiment_rates: dict[str, Decimal]
    complexity_multipliers: dict[int, Decimal]
    sensor_rates: dict[str, Decimal] = field(default_factory=dict)
    included_environments: int = 1
    extra_environment_fee: Decimal = Decimal("0")
    included_objects: int = 1
    extra_object_fee: Decimal = Decimal("0")
    rush_surcharge_percent: Decimal = Decimal("0")
    volume_tiers: tuple[tuple[Decimal, Decimal], ...] = ()  # (min_hours, discount_percent)

    def discount_percent_for(self, hours: Decimal) -> Decimal:
        percent = Decimal("0")
        for min_hours, tier_percent in sorted(self.volume_tiers):
            if hours >= min_hours:
                percent = tier_percent
        return percent


@dataclass(frozen=True)
class PriceRequest:
    embodiment: str
    complexity: int
    hours: Decimal
    environments: int = 1
    sensors: tuple[str, ...] = ()
    rush: bool = False
    # The plan's distinct objects: its distinct_objects, else its objects per environment.
    distinct_objects: int = 1


@dataclass(frozen=True)
class LineItem:
    code: str
    description: str
    quantity: Decimal
    unit_amount: Decimal
    amount: Decimal

    def as_json(self) -> dict:
        return {
            "code": self.code,
            "description": self.description,
            "quantity": plain_decimal(self.quantity),
            "unit_amount": plain_decimal(self.unit_amount),
            "amount": str(self.amount),
        }


@dataclass(frozen=True)
class Price:
    currency: str
    lines: tuple[LineItem, ...]
    total: Decimal
    rate_card_version: int


def price_dataset(request: PriceRequest, terms: RateCardTerms) -> Price:
    _check_priceable(request, terms)
    currency = terms.currency
    hours = request.hours

    def money(amount: Decimal) -> Decimal:
        return quantize_money(amount, currency)

    lines = _hourly_lines(request, terms, money)
    # Percentages apply to the hourly lines as shown (rounded), which keeps the total
    # monotone in hours and lets the customer check every line by hand.
    hourly_subtotal = sum((line.amount for line in lines), Decimal(0))
    extra_environments = max(0, request.environments - terms.included_environments)
    if extra_environments:
        fee = terms.extra_environment_fee
        lines.append(
            LineItem(
                code="extra_environments",
                description=(
                    f"{extra_environments} extra environment(s) beyond the"
                    f" {terms.included_environments} included, {fee} {currency} each"
                ),
                quantity=Decimal(extra_environments),
                unit_amount=fee,
                amount=money(extra_environments * fee),
            )
        )
    extra_objects = max(0, request.distinct_objects - terms.included_objects)
    if extra_objects:
        fee = terms.extra_object_fee
        lines.append(
            LineItem(
                code="extra_objects",
                description=(
                    f"{extra_objects} extra distinct object(s) beyond the"
                    f" {terms.included_objects} included, {fee} {currency} each"
                ),
                quantity=Decimal(extra_objects),
                unit_amount=fee,
                amount=money(extra_objects * fee),
            )
        )
    if request.rush and terms.rush_surcharge_percent:
        percent = terms.rush_surcharge_percent
        lines.append(
            LineItem(
                code="rush",
                description=f"Rush delivery: {percent}% of the hourly subtotal",
                quantity=Decimal(1),
                unit_amount=money(hourly_subtotal * percent / HUNDRED),
                amount=money(hourly_subtotal * percent / HUNDRED),
            )
        )
    discount = terms.discount_percent_for(hours)
    if discount:
        # percent < 100, so the discount never exceeds the hourly lines: the total stays >= 0.
        discount_amount = money(hourly_subtotal * discount / HUNDRED)
        lines.append(
            LineItem(
                code="volume_discount",
                description=f"Volume discount: {discount}% of the hourly subtotal",
                quantity=Decimal(1),
                unit_amount=-discount_amount,
                amount=-discount_amount,
            )
        )
    total = sum((line.amount for line in lines), Decimal("0"))
    return Price(
        currency=currency, lines=tuple(lines), total=total, rate_card_version=terms.version
    )


def _check_priceable(request: PriceRequest, terms: RateCardTerms) -> None:
    if not isinstance(request.hours, Decimal):
        raise TypeError("hours must be a Decimal")
    if request.hours <= 0:
        raise PricingError("hours", "Hours must be greater than zero.")
    if request.environments < 1:
        raise PricingError("environments", "At least one environment is needed.")
    if request.distinct_objects < 1:
        raise PricingError("distinct_objects", "At least one object is needed.")
    if request.embodiment not in terms.embodiment_rates:
        raise PricingError("embodiment", "This embodiment is not on the current rate card.")
    if request.complexity not in terms.complexity_multipliers:
        raise PricingError("complexity", "This complexity level is not on the current rate card.")
    unknown = sorted(set(request.sensors) - set(terms.sensor_rates))
    if unknown:
        raise PricingError("sensors", f"Not on the current rate card: {', '.join(unknown)}.")


def _hourly_lines(request: PriceRequest, terms: RateCardTerms, money) -> list[LineItem]:
    """The base line (hours x rate x complexity) and one line per sensor add-on."""
    currency, hours = terms.currency, request.hours
    base_rate = terms.embodiment_rates[request.embodiment]
    multiplier = terms.complexity_multipliers[request.complexity]
    hourly_rate = base_rate * multiplier
    lines = [
        LineItem(
            code="base",
            description=(
                f"{hours} h x {base_rate} {currency}/h ({request.embodiment})"
                f" x {multiplier} (complexity L{request.complexity})"
            ),
            quantity=hours,
            unit_amount=hourly_rate,
            amount=money(hours * hourly_rate),
        )
    ]
    for sensor in sorted(set(request.sensors)):
        rate = terms.sensor_rates[sensor]
        lines.append(
            LineItem(
                code=f"sensor:{sensor}",
                description=f"Sensor add-on {sensor}: {hours} h x {rate} {currency}/h",
                quantity=hours,
                unit_amount=rate,
                amount=money(hours * rate),
            )
        )
    return lines
