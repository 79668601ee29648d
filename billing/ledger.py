"""The double-entry ledger: `ledger_post` and the postings billing makes (charges, refunds,
fleet payables, payouts). Called only from billing.services."""

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Sum

from billing.models import (
    FleetPayable,
    LedgerAccount,
    LedgerEntry,
    LedgerTransaction,
    PayableDeduction,
    Payment,
    Payout,
    Refund,
)
from fleets.models import Fleet


@dataclass(frozen=True)
class Leg:
    account: str
    amount: Decimal  # debit > 0, credit < 0
    currency: str


class UnbalancedTransaction(ValueError):
    pass


def ledger_post(
    *, key: str, kind: str, legs: list[Leg], memo: str = "", **links
) -> LedgerTransaction | None:
    """Post one balanced transaction once per key; None if the key was already posted."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for leg in legs:
        if leg.account not in LedgerAccount.values:
            raise ValueError(f"Unknown ledger account {leg.account!r}.")
        totals[leg.currency] += leg.amount
    if not legs or any(total != 0 for total in totals.values()):
        raise UnbalancedTransaction(f"Transaction {key} does not balance: {dict(totals)}")
    try:
        with transaction.atomic():
            txn = LedgerTransaction.objects.create(key=key, kind=kind, memo=memo[:500])
    except IntegrityError:
        return None
    LedgerEntry.objects.bulk_create(
        [
            LedgerEntry(
                transaction=txn,
                account=leg.account,
                amount=leg.amount,
                currency=leg.currency,
                **links,
            )
            for leg in legs
            if leg.amount != 0
        ]
    )
    return txn


def balances(**filters) -> dict[tuple[str, str], Decimal]:
    """{(account, currency): balance} over the entries matching filters."""
    rows = (
        LedgerEntry.objects.filter(**filters)
        .values("account", "currency")
        .annotate(total=Sum("amount"))
        .order_by()
    )
    return {(row["account"], row["currency"]): row["total"] for row in rows}


# --- The postings ------------------------------------------------------------------------------


def post_charge(payment: Payment) -> None:
    ledger_post(
        key=f"charge:{payment.id}",
        kind=LedgerTransaction.Kind.CHARGE,
        memo=f"Charge for order {payment.order_id}",
        legs=[
            Leg(LedgerAccount.STRIPE_BALANCE, payment.amount, payment.currency),
            Leg(LedgerAccount.CUSTOMER_FUNDS, -payment.amount, payment.currency),
        ],
        order_id=payment.order_id,
        organization_id=payment.organization_id,
        payment=payment,
    )


def post_refund(refund: Refund) -> None:
    ledger_post(
        key=f"refund:{refund.id}",
        kind=LedgerTransaction.Kind.REFUND,
        memo=f"Refund ({refund.reason}) for order {refund.order_id}"
        + (f": {refund.note}" if refund.note else ""),
        legs=[
            Leg(LedgerAccount.CUSTOMER_FUNDS, refund.amount, refund.currency),
            Leg(LedgerAccount.STRIPE_BALANCE, -refund.amount, refund.currency),
        ],
        order_id=refund.order_id,
        organization_id=refund.payment.organization_id,
        payment_id=refund.payment_id,
        refund=refund,
    )


def post_payable(payable: FleetPayable, fleet: Fleet) -> None:
    ledger_post(
        key=f"payable:{payable.job_id}",
        kind=LedgerTransaction.Kind.PAYABLE,
        memo=f"Fleet {fleet.name}: {payable.accepted_seconds} s accepted on order "
        f"{payable.order_id} at {payable.rate_per_hour}/h",
        legs=[
            Leg(LedgerAccount.CUSTOMER_FUNDS, payable.customer_amount, payable.currency),
            Leg(LedgerAccount.FLEET_PAYABLE, -payable.amount, payable.currency),
            Leg(
                LedgerAccount.PLATFORM_REVENUE,
                payable.amount - payable.customer_amount,
                payable.currency,
            ),
        ],
        order_id=payable.order_id,
        organization_id=fleet.organization_id,
        fleet=fleet,
    )


def post_deduction(deduction: PayableDeduction) -> None:
    """The reverse of part of a payable: the fleet is owed less, the customer's part goes back
    to its funds, the platform's margin on it is undone."""
    ledger_post(
        key=f"deduction:{deduction.id}",
        kind=LedgerTransaction.Kind.DEDUCTION,
        memo=f"Fleet {deduction.fleet.name}: {deduction.seconds} s excluded on order "
        f"{deduction.order_id}",
        legs=[
            Leg(LedgerAccount.CUSTOMER_FUNDS, -deduction.customer_amount, deduction.currency),
            Leg(LedgerAccount.FLEET_PAYABLE, deduction.amount, deduction.currency),
            Leg(
                LedgerAccount.PLATFORM_REVENUE,
                deduction.customer_amount - deduction.amount,
                deduction.currency,
            ),
        ],
        order_id=deduction.order_id,
        organization_id=deduction.fleet.organization_id,
        fleet=deduction.fleet,
    )


def post_payout(payout: Payout) -> None:
    ledger_post(
        key=f"payout:{payout.id}",
        kind=LedgerTransaction.Kind.PAYOUT,
        memo=f"Transfer {payout.stripe_transfer_id} to {payout.stripe_account_id}",
        legs=[
            Leg(LedgerAccount.FLEET_PAYABLE, payout.amount, payout.currency),
            Leg(LedgerAccount.STRIPE_BALANCE, -payout.amount, payout.currency),
        ],
        organization_id=payout.fleet.organization_id,
        fleet_id=payout.fleet_id,
    )


def post_bank_charge(payment: Payment) -> None:
    """A payment received by bank transfer (recorded by staff): cash in the bank account."""
    ledger_post(
        key=f"charge:{payment.id}",
        kind=LedgerTransaction.Kind.CHARGE,
        memo=f"Bank transfer {payment.reference} for order {payment.order_id}"[:500],
        legs=[
            Leg(LedgerAccount.BANK, payment.amount, payment.currency),
            Leg(LedgerAccount.CUSTOMER_FUNDS, -payment.amount, payment.currency),
        ],
        order_id=payment.order_id,
        organization_id=payment.organization_id,
        payment=payment,
    )
