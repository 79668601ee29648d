"""The customer's rejection allowance of an order: what it may take out without a person
deciding. Its exclusions during collection and its granted claims (EpisodeExclusion rows
`against_allowance`) count; within CLAIM_AUTO_GRANT_SHARE of the order's accepted time (the
seconds of its first full delivery, or the hours ordered before that) they need no review,
beyond it a claim is a dispute staff decide and an exclusion is refused. Pilot reviews and
staff exclusions do not count."""

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Sum

from datasets.error_codes import ErrorCode
from datasets.models import EpisodeExclusion
from datasets.services.delivery_versions import first_full_delivery
from marketplace.errors import Conflict
from orders.models import Order

ZERO = Decimal(0)


@dataclass(frozen=True)
class Allowance:
    base_seconds: Decimal  # the order's accepted time the share applies to
    share: Decimal
    used_seconds: Decimal

    @property
    def limit_seconds(self) -> Decimal:
        return (self.base_seconds * self.share).quantize(Decimal("0.001"))

    @property
    def left_seconds(self) -> Decimal:
        return max(ZERO, self.limit_seconds - self.used_seconds)


def order_allowance(order: Order) -> Allowance:
    first = first_full_delivery(order.id)
    base = first.seconds if first is not None else order.hours * 3600
    used = EpisodeExclusion.objects.filter(order=order, against_allowance=True).aggregate(
        s=Sum("seconds")
    )["s"]
    return Allowance(
        base_seconds=Decimal(base),
        share=Decimal(settings.CLAIM_AUTO_GRANT_SHARE),
        used_seconds=used or ZERO,
    )


def require_within_allowance(order: Order, seconds: Decimal) -> None:
    """A 409 when excluding `seconds` more would take the customer past its allowance (the
    caller holds the order's lock)."""
    allowance = order_allowance(order)
    if seconds > allowance.left_seconds:
        raise Conflict(
            f"Excluding {seconds} s more would pass this order's rejection allowance "
            f"({allowance.share:.0%} of {allowance.base_seconds} s = "
            f"{allowance.limit_seconds} s; {allowance.used_seconds} s used). Once delivered, "
            "episodes beyond it are claimed and decided by staff after the fleet answers.",
            code=ErrorCode.REJECTION_ALLOWANCE_EXCEEDED,
            fields={"episodes": [f"{allowance.left_seconds} s left in the allowance."]},
        )
