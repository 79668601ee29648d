"""Fleet payouts: gather unpaid payables into one Stripe Connect transfer per fleet and
currency, sent exactly once."""

from dataclasses import dataclass
from decimal import Decimal

from django.db import models, transaction
from django.utils import timezone

from billing import stripe_gateway as gateway
from billing.error_codes import ErrorCode
from billing.ledger import post_payout
from billing.models import (
    BillingFlag,
    FleetPayable,
    FleetPayoutAccount,
    PayableDeduction,
    Payout,
    PayoutRun,
)
from billing.services.flags import flag_raise
from billing.services.payables import payables_check_invariant
from fleets.models import Fleet
from marketplace.errors import Conflict
from orders.models import Order

ZERO = Decimal("0")
# Payables a run pays: unpaid, not zero, not held for staff.
PAYABLE_NOW = models.Q(payout__isnull=True, amount__gt=0, hold_reason="")


class PayoutsNotConfigured(Conflict):
    code = ErrorCode.PAYOUTS_NOT_CONFIGURED


@dataclass(frozen=True)
class PayoutPlanRow:
    fleet: Fleet
    currency: str
    amount: Decimal
    payables: int
    stripe_account_id: str  # empty: no payout account, the fleet is skipped


def payout_plan() -> list[PayoutPlanRow]:
    """What a run would pay now (unpaid payables per fleet and currency); for the admin."""
    rows = (
        FleetPayable.objects.filter(PAYABLE_NOW)
        .values("fleet_id", "currency")
        .annotate(total=models.Sum("amount"), n=models.Count("id"))
        .order_by("fleet_id", "currency")
    )
    carried = {
        (row["fleet_id"], row["currency"]): row["total"]
        for row in PayableDeduction.objects.filter(in_place=False, payout__isnull=True)
        .values("fleet_id", "currency")
        .annotate(total=models.Sum("amount"))
        .order_by()
    }
    fleets = Fleet.objects.in_bulk([row["fleet_id"] for row in rows])
    accounts = dict(
        FleetPayoutAccount.objects.filter(fleet_id__in=fleets).values_list(
            "fleet_id", "stripe_account_id"
        )
    )
    return [
        PayoutPlanRow(
            fleet=fleets[row["fleet_id"]],
            currency=row["currency"],
            # less the deductions carried from excluded episodes (payout_prepare's rule)
            amount=row["total"] - carried.get((row["fleet_id"], row["currency"]), ZERO),
            payables=row["n"],
            stripe_account_id=accounts.get(row["fleet_id"], ""),
        )
        for row in rows
    ]


def payout_prepare(*, fleet_id, run: PayoutRun | None = None) -> list[Payout]:
    """Gather a fleet's unpaid payables into pending payouts (one per currency).

    Lock the fleet's payout account, then re-read its unpaid payables under lock: two runs at
    once cannot put one payable in two payouts. Returns [] (and flags staff) when the fleet
    has no payout account.
    """
    with transaction.atomic():
        account = FleetPayoutAccount.objects.select_for_update().filter(fleet_id=fleet_id).first()
        payables = list(
            FleetPayable.objects.select_for_update()
            .filter(PAYABLE_NOW, fleet_id=fleet_id)
            .order_by("pk")
        )
        # Refunds since the payables were recorded may have broken the ledger invariant.
        held = {
            order_id
            for order_id in {p.order_id for p in payables}
            if not payables_check_invariant(order=Order.objects.get(pk=order_id), fleet_id=fleet_id)
        }
        payables = [p for p in payables if p.order_id not in held]
        if not payables:
            return []
        if account is None:
            fleet = Fleet.objects.get(pk=fleet_id)
            owed = sum((p.amount for p in payables), ZERO)
            flag_raise(
                kind=BillingFlag.Kind.NO_PAYOUT_ACCOUNT,
                dedupe_key=f"no-payout-account:{fleet_id}:{timezone.now():%Y-%m}",
                message=f"Fleet {fleet.name} ({fleet_id}) is owed {owed} "
                f"{payables[0].currency} but has no Stripe payout account: add one in "
                "Billing > Fleet payout accounts; the next run pays it.",
            )
            return []
        by_currency: dict[str, list[FleetPayable]] = {}
        for payable in payables:
            by_currency.setdefault(payable.currency, []).append(payable)
        payouts = []
        for currency, group in sorted(by_currency.items()):
            # Deductions carried from payables already paid (excluded episodes) come off.
            carried = list(
                PayableDeduction.objects.select_for_update()
                .filter(fleet_id=fleet_id, currency=currency, in_place=False, payout__isnull=True)
                .order_by("pk")
            )
            amount = sum((p.amount for p in group), ZERO) - sum((d.amount for d in carried), ZERO)
            if amount <= 0:
                continue  # carried on: the fleet's later payables pay it back
            payout = Payout.objects.create(
                fleet_id=fleet_id,
                run=run,
                stripe_account_id=account.stripe_account_id,
                amount=amount,
                currency=currency,
            )
            FleetPayable.objects.filter(pk__in=[p.pk for p in group]).update(payout=payout)
            PayableDeduction.objects.filter(pk__in=[d.pk for d in carried]).update(payout=payout)
            payouts.append(payout)
    return payouts


def payout_submit(*, payout_id) -> Payout:
    """Send a pending payout to Stripe as one transfer, exactly once.

    The payout row stays locked during the call (two workers cannot both send it) and the
    idempotency key is `payout:<id>`, so a re-send after a lost response or an outage gets the
    same transfer back. Stripe down: the payout stays pending (its payables unpaid) with the
    error noted; the next run re-sends it. Stripe refuses: the payout fails, its payables are
    released for a later run and staff are flagged.
    """
    return _payout_send(payout_id=payout_id)[0]


def _payout_send(*, payout_id) -> tuple[Payout, bool]:
    """payout_submit, also telling whether this call sent it (False: already settled)."""
    with transaction.atomic():
        payout = Payout.objects.select_for_update().select_related("fleet").get(pk=payout_id)
        if payout.status != Payout.Status.PENDING:
            return payout, False
        payout.attempts += 1
        try:
            result = gateway.transfer_find(
                transfer_group=f"payout:{payout.id}"
            ) or gateway.transfer_create(
                amount=payout.amount,
                currency=payout.currency,
                destination=payout.stripe_account_id,
                transfer_group=f"payout:{payout.id}",
                metadata={"payout_id": str(payout.id), "fleet_id": str(payout.fleet_id)},
                idempotency_key=f"payout:{payout.id}",
            )
        except gateway.GatewayUnavailable as exc:
            payout.failure_message = str(exc)[:2000]
            payout.save(update_fields=["attempts", "failure_message", "updated_at"])
            return payout, True
        except gateway.GatewayError as exc:
            payout.status = Payout.Status.FAILED
            payout.failure_message = str(exc)[:2000]
            payout.save(update_fields=["status", "attempts", "failure_message", "updated_at"])
            FleetPayable.objects.filter(payout=payout).update(payout=None)
            PayableDeduction.objects.filter(payout=payout).update(payout=None)
            flag_raise(
                kind=BillingFlag.Kind.PAYOUT_FAILED,
                dedupe_key=f"payout-failed:{payout.id}",
                message=f"Stripe refused payout {payout.id} of {payout.amount} "
                f"{payout.currency} to fleet {payout.fleet.name} ({payout.stripe_account_id}): "
                f"{exc}. Its payables are unpaid again; fix the account and run payouts.",
            )
            return payout, True
        payout.status = Payout.Status.PAID
        payout.stripe_transfer_id = result.id
        payout.paid_at = timezone.now()
        payout.failure_message = ""
        payout.save()
        post_payout(payout)
    return payout, True


def payout_run(*, triggered_by: str) -> PayoutRun:
    """Pay every fleet its unpaid payables; a second run right after pays nothing.

    First re-sends payouts an earlier run left pending (Stripe was down), with their own
    keys; then gathers and sends new ones. Fleets without a payout account are skipped,
    reported in the run and flagged.
    """
    if not gateway.is_configured():
        raise PayoutsNotConfigured("Stripe is not configured (STRIPE_API_KEY): no payouts.")
    run = PayoutRun.objects.create(triggered_by=triggered_by[:200])
    report: dict[str, list] = {"paid": [], "pending": [], "failed": [], "skipped": []}
    payout_ids = list(
        Payout.objects.filter(status=Payout.Status.PENDING)
        .order_by("created_at")
        .values_list("pk", flat=True)
    )
    fleet_ids = list(
        FleetPayable.objects.filter(PAYABLE_NOW)
        .order_by("fleet_id")
        .values_list("fleet_id", flat=True)
        .distinct()
    )
    for fleet_id in fleet_ids:
        payouts = payout_prepare(fleet_id=fleet_id, run=run)
        if not payouts and FleetPayable.objects.filter(PAYABLE_NOW, fleet_id=fleet_id).exists():
            report["skipped"].append({"fleet": str(fleet_id), "reason": "no payout account"})
        payout_ids.extend(p.pk for p in payouts)
    for payout_id in payout_ids:
        payout, sent = _payout_send(payout_id=payout_id)
        if not sent:
            continue  # another run settled it meanwhile
        entry = {
            "payout": str(payout.id),
            "fleet": str(payout.fleet_id),
            "amount": str(payout.amount),
            "currency": payout.currency,
        }
        if payout.status == Payout.Status.PAID:
            report["paid"].append(entry)
        elif payout.status == Payout.Status.FAILED:
            report["failed"].append({**entry, "error": payout.failure_message})
        else:
            report["pending"].append({**entry, "error": payout.failure_message})
    run.report = report
    run.finished_at = timezone.now()
    run.save(update_fields=["report", "finished_at"])
    return run
