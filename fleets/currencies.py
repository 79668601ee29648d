"""What a fleet may set as its pay: an ISO 4217 currency it can be paid in, and a rate per
accepted hour in a sane range: more than 0 and at most FLEETS_MAX_PAYOUT_MINOR_UNITS_PER_HOUR
minor units of its currency (10,000.00 USD, 1,000,000 JPY by default). Checked by the registry
service (API, portal) and by the model's validators (the admin's forms).

The codes are the ISO 4217 maintenance agency's table as the `iso4217` package ships it
(the published XML, with minor units and fund flags): current currencies with a minor unit,
less funds (IsFund: BOV, CHE, CHW, CLF, COU, MXV, USN, UYI). Codes without a minor unit are
not money one is paid in: precious metals (XAU, XAG, XPD, XPT), SDR and bond-market units
(XDR, XBA-XBD, XSU, XUA), the testing code XTS and "no currency" XXX. Codes are upper case,
as ISO writes them: "usd" is refused, not guessed.
"""

from decimal import Decimal, InvalidOperation

import iso4217
from django.conf import settings
from django.core.exceptions import ValidationError


def _payout_currencies() -> frozenset[str]:
    funds = {
        entry.findtext("Ccy")
        for entry in iso4217.raw_xml.iter("CcyNtry")
        if entry.find("CcyNm") is not None and entry.find("CcyNm").get("IsFund") == "true"
    }
    return frozenset(c.value for c in iso4217.Currency if c.exponent is not None) - funds


PAYOUT_CURRENCIES = _payout_currencies()


def max_rate_per_hour(currency: str) -> Decimal:
    """The highest rate a fleet paid in `currency` may set (its minor units, ISO's exponent)."""
    exponent = iso4217.Currency(currency).exponent if currency in PAYOUT_CURRENCIES else 2
    return Decimal(settings.FLEETS_MAX_PAYOUT_MINOR_UNITS_PER_HOUR).scaleb(-exponent)


def currency_problem(code) -> str | None:
    """Why `code` is not a currency a fleet can be paid in (None: it is)."""
    if not isinstance(code, str) or code not in PAYOUT_CURRENCIES:
        return (
            f"{str(code)[:10]!r} is not an ISO 4217 currency code a fleet can be paid in"
            " (three upper-case letters, e.g. USD; metals, funds and test codes are refused)."
        )
    return None


def rate_problem(rate, currency: str = "USD") -> str | None:
    """Why `rate` is not a payout rate per hour a fleet paid in `currency` may set (None: it
    may)."""
    ceiling = max_rate_per_hour(currency)
    try:
        value = Decimal(rate)
    except (InvalidOperation, TypeError, ValueError):
        return "A number."
    if not value.is_finite() or not 0 < value <= ceiling:
        return f"More than 0 and at most {ceiling:f} {currency} per hour."
    return None


def fleet_pay_problems(*, currency, rate) -> dict:
    """{field: problem} of a fleet's currency and rate (empty: both fine)."""
    problems = {}
    if (problem := currency_problem(currency)) is not None:
        problems["currency"] = problem
    if (problem := rate_problem(rate, currency if not problems else "USD")) is not None:
        problems["payout_rate_per_hour"] = problem
    return problems


def validate_payout_currency(code) -> None:
    """The model field's validator (the admin's forms)."""
    if (problem := currency_problem(code)) is not None:
        raise ValidationError(problem)
