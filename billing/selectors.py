"""Reads for billing's web pages, each scoped to the caller's organization."""

from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, Q, QuerySet, Sum

from billing.models import (
    BillingFlag,
    FleetPayable,
    FleetPayoutAccount,
    LedgerEntry,
    Payment,
    Payout,
    Refund,
)
from marketplace.models import Organization
from orders.models import Order
from orders.pricing import quantize_money

SECONDS_PER_HOUR = Decimal(3600)
EARNINGS_ROWS = 200  # the page lists the latest rows; totals cover everything


def order_latest_payment(*, order: Order) -> Payment | None:
    return Payment.objects.filter(order=order).order_by("-attempt").first()


@dataclass(frozen=True)
class EarningsTotal:
    currency: str
    earned: Decimal
    paid: Decimal
    accepted_hours: Decimal
    jobs: int

    @property
    def outstanding(self) -> Decimal:
        return self.earned - self.paid


@dataclass(frozen=True)
class FleetEarnings:
    payables: list[FleetPayable]
    payables_count: int
    payouts: list[Payout]
    payouts_count: int
    totals: list[EarningsTotal] = field(default_factory=list)


def _payables_for(organization: Organization) -> QuerySet[FleetPayable]:
    return FleetPayable.objects.filter(fleet__organization=organization)


def fleet_earnings(*, organization: Organization) -> FleetEarnings:
    """A fleet operator's payables (what each job earned) and payouts, with totals per currency.

    A payable counts as paid once the payout it belongs to is paid; until then it is pending
    (not yet in a payout, or in one not sent yet)."""
    paid = Q(payout__status=Payout.Status.PAID)
    totals = (
        _payables_for(organization)
        .values("currency")
        .annotate(
            earned=Sum("amount"),
            paid=Sum("amount", filter=paid, default=Decimal("0")),
            seconds=Sum("accepted_seconds"),
            jobs=Count("id"),
        )
        .order_by("currency")
    )
    payables = list(
        _payables_for(organization)
        .select_related("fleet", "payout", "job", "order__task_type")
        .order_by("-created_at", "-id")[:EARNINGS_ROWS]
    )
    for payable in payables:
        payable.is_paid = payable.payout is not None and payable.payout.status == Payout.Status.PAID
        payable.accepted_hours = payable.accepted_seconds / SECONDS_PER_HOUR
    payouts = Payout.objects.filter(fleet__organization=organization)
    return FleetEarnings(
        payables=payables,
        payables_count=_payables_for(organization).count(),
        payouts=list(
            payouts.select_related("fleet")
            .annotate(payable_count=Count("payables"))
            .order_by("-created_at", "-id")[:EARNINGS_ROWS]
        ),
        payouts_count=payouts.count(),
        totals=[
            EarningsTotal(
                currency=row["currency"],
                earned=quantize_money(row["earned"], row["currency"]),
                paid=quantize_money(row["paid"], row["currency"]),
                accepted_hours=(row["seconds"] / SECONDS_PER_HOUR).quantize(Decimal("0.001")),
                jobs=row["jobs"],
            )
            for row in totals
        ],
    )


def revenue_summary() -> dict:
    """Money per currency from the ledger; refunds and payments by status."""
    rows = (
        LedgerEntry.objects.values("currency")
        .annotate(
            charged=Sum(
                "amount",
                filter=Q(transaction__kind="charge", account__in=("stripe_balance", "bank")),
            ),
            refunded=Sum("amount", filter=Q(transaction__kind="refund", account="customer_funds")),
            disputed=Sum("amount", filter=Q(account="disputes")),
            cash=Sum("amount", filter=Q(account__in=("stripe_balance", "bank"))),
            held=Sum("amount", filter=Q(account="customer_funds")),
            payable=Sum("amount", filter=Q(account="fleet_payable")),
            margin=Sum("amount", filter=Q(account="platform_revenue")),
            total=Sum("amount"),
        )
        .order_by("currency")
    )
    zero = Decimal("0")
    currencies = [
        {
            "currency": row["currency"],
            "charged": row["charged"] or zero,
            "refunded": row["refunded"] or zero,
            "net": (row["charged"] or zero) - (row["refunded"] or zero),
            "disputed": row["disputed"] or zero,
            "cash": row["cash"] or zero,
            "held": -(row["held"] or zero),
            "payable": -(row["payable"] or zero),
            "margin": -(row["margin"] or zero),
            "balanced": (row["total"] or zero) == 0,
        }
        for row in rows
    ]
    return {
        "currencies": currencies,
        "payments": dict(
            Payment.objects.values_list("status").annotate(n=Count("id")).order_by("status")
        ),
        "pending_refunds": Refund.objects.filter(status=Refund.Status.PENDING).count(),
        "open_flags": BillingFlag.objects.filter(resolved_at__isnull=True).count(),
    }


def payables_summary() -> list[dict]:
    """Per fleet and currency: earned, paid, in pending payouts, unpaid, platform margin."""
    zero = Decimal("0")
    rows = (
        FleetPayable.objects.values("fleet_id", "fleet__name", "currency")
        .annotate(
            jobs=Count("id"),
            earned=Sum("amount"),
            customer=Sum("customer_amount"),
            paid=Sum("amount", filter=Q(payout__status=Payout.Status.PAID)),
            pending=Sum("amount", filter=Q(payout__status=Payout.Status.PENDING)),
            unpaid=Sum("amount", filter=Q(payout__isnull=True)),
        )
        .order_by("fleet__name", "currency")
    )
    accounts = dict(FleetPayoutAccount.objects.values_list("fleet_id", "stripe_account_id"))
    return [
        {
            "fleet_id": row["fleet_id"],
            "fleet": row["fleet__name"],
            "currency": row["currency"],
            "jobs": row["jobs"],
            "earned": row["earned"] or zero,
            "paid": row["paid"] or zero,
            "pending": row["pending"] or zero,
            "unpaid": row["unpaid"] or zero,
            "margin": (row["customer"] or zero) - (row["earned"] or zero),
            "account": accounts.get(row["fleet_id"], ""),
        }
        for row in rows
    ]


def order_invoice(*, order: Order):
    """The order's invoice, if one was issued."""
    from billing.models import Invoice

    return Invoice.objects.filter(order=order).first()


def billing_profile(*, organization: Organization):
    from billing.models import BillingProfile

    return BillingProfile.objects.filter(organization=organization).first()


def flags_open():
    """Staff: flags not resolved yet, newest first (disputes, payments in review, ...)."""
    return BillingFlag.objects.filter(resolved_at__isnull=True).select_related("order", "payment")


def payments_in_review():
    return Payment.objects.filter(status=Payment.Status.REVIEW).select_related(
        "order", "organization"
    )


def orders_awaiting_transfer():
    """Staff: orders awaiting payment, with their invoice if one was issued (bank transfers
    to match)."""
    return Order.objects.filter(status=Order.Status.AWAITING_PAYMENT).select_related(
        "organization", "invoice"
    )
