"""Posting to the double-entry ledger. Called only from billing.services."""

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Sum

from billing.models import LedgerAccount, LedgerEntry, LedgerTransaction


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
