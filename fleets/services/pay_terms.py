"""The one pay rule every offer and assignment obeys, whichever path makes it (batch dispatch
and its matcher, a batch of one, the sweeper's re-dispatch, staff re-dispatch, bids, an
accepted offer, a re-collection job):

- the fleet is paid in the order's currency (its payout currency must be the order's);
- at most what the customer pays per ordered hour (`order_price_per_hour`);
- a re-collection job (excluded episodes collected again) pays the fleet that collected them
  its original agreed rate (the rate on the original job's assignment, not its rate now), and
  any other fleet at most that rate.

A fleet whose own rate is above the ceiling is NOT offered the job (rather than offered the
ceiling): its rate is what it asks, so an offer below it is a price it never agreed to, and
offering the ceiling would reward asking too much (a fleet setting 10,000/h would always be
offered the customer's whole price, leaving the platform nothing and making the rate
meaningless). The matcher therefore ranks only fleets paid in the job's currency at the rate
they would be offered (fleets/matching.py: its cheapness term compares like with like).

Pure (no database): the batch dispatcher's matcher calls it too. The database holds the same
rule on every insert (migration 0006's trigger, PostgreSQL).
"""

from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal

import numpy as np

from fleets.error_codes import ErrorCode
from marketplace.errors import ServiceError

RATE_QUANTUM = Decimal("0.0001")  # fleets' and offers' rates: 4 decimal places (models.MONEY)


def order_price_per_hour(*, total: Decimal, hours: Decimal) -> Decimal:
    """What the customer pays per ordered hour, rounded down to the rates' 4 places (so no rate
    at or below it pays more than the customer does)."""
    return (total / hours).quantize(RATE_QUANTUM, rounding=ROUND_DOWN)


@dataclass(frozen=True)
class PayTerms:
    """What a job may pay per accepted hour."""

    currency: str  # the order's
    ceiling: Decimal  # the order's price per hour; a re-collection: the original rate if lower
    original_fleet_id: object = None  # a re-collection: the fleet that collected the episodes

    @classmethod
    def of(cls, *, currency, total, hours, original_fleet_id=None, original_rate=None):
        ceiling = order_price_per_hour(total=total, hours=hours)
        if original_rate is not None:
            ceiling = min(ceiling, original_rate)
        return cls(currency=currency, ceiling=ceiling, original_fleet_id=original_fleet_id)

    def offer_arrays(self, *, same_currency, rates, original):
        """agreed_rate for offers over arrays of candidates, in floats, for the matcher's
        ranking (fleets/matching.py): which may be offered the job, and the rate each would
        be offered. `same_currency`, `original`: boolean arrays (paid in the job's currency;
        the re-collection's original fleet), `rates`: the fleets' own rates. The same rule as
        agreed_rate (tests/fleets/test_pay_rule.py checks they agree), which decides the chosen
        candidate exactly."""
        ceiling = float(self.ceiling)
        offered = np.where(original, ceiling, rates)
        return same_currency & (offered >= 0) & (offered <= ceiling), offered


def job_pay_terms(job) -> PayTerms:
    """The terms of a job (its order loaded, or one query)."""
    order = job.order
    return PayTerms.of(
        currency=order.currency,
        total=order.total,
        hours=order.hours,
        original_fleet_id=job.original_fleet_id,
        original_rate=job.original_rate_per_hour,
    )


class PayRefused(ServiceError):
    pass


def agreed_rate(
    *, terms: PayTerms, fleet_id, fleet_currency: str, fleet_rate: Decimal, proposed=None
) -> Decimal:
    """THE rule: the rate this fleet is paid per accepted hour of the job, or PayRefused.

    proposed=None: an offer (the fleet's own rate; the original fleet of a re-collection: its
    original rate). Else a price the fleet proposed (a bid) or an offer's rate it accepts:
    allowed when at most what the fleet could be offered now."""
    if fleet_currency != terms.currency:
        raise PayRefused(
            f"This job pays in {terms.currency}; the fleet is paid in {fleet_currency}.",
            code=ErrorCode.PAY_CURRENCY,
            fields={"currency": [f"Must be {terms.currency}."]},
        )
    ceiling = terms.ceiling
    if proposed is None:
        if fleet_id == terms.original_fleet_id:
            return ceiling  # its original agreed rate (never above the order's price)
        proposed = fleet_rate
    if not 0 <= proposed <= ceiling:
        raise PayRefused(
            f"{proposed} is above what the job pays: at most {ceiling} {terms.currency} per hour.",
            code=ErrorCode.PAY_ABOVE_PRICE,
            fields={"rate_per_hour": [f"At most {ceiling}."]},
        )
    return proposed


def offered_rate(*, terms: PayTerms, fleet_id, fleet_currency: str, fleet_rate: Decimal):
    """agreed_rate for an offer, None where the fleet may not be offered the job."""
    try:
        return agreed_rate(
            terms=terms, fleet_id=fleet_id, fleet_currency=fleet_currency, fleet_rate=fleet_rate
        )
    except PayRefused:
        return None
