"""Fleet payables: at delivery, what each fleet earned on the order's jobs, and the
platform's margin, booked once per job."""

from decimal import Decimal

from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from billing.ledger import post_deduction, post_payable
from billing.models import BillingFlag, FleetPayable, PayableDeduction
from billing.services.flags import flag_raise
from billing.services.payments import succeeded_payment
from billing.services.refunds import plan_shortfall_credited, prorata_refund
from fleets.models import Assignment, Job
from orders.models import Order
from orders.pricing import MINOR_UNITS, quantize_money

SECONDS_PER_HOUR = Decimal(3600)
ZERO = Decimal("0")


def payable_amount(*, accepted_seconds: Decimal, rate_per_hour: Decimal, currency: str) -> Decimal:
    """Accepted hours x the fleet's hourly rate, rounded half-up to the currency's minor unit."""
    for value in (accepted_seconds, rate_per_hour):
        if not isinstance(value, Decimal):
            raise TypeError("money and hours are Decimal")
    return quantize_money(accepted_seconds * rate_per_hour / SECONDS_PER_HOUR, currency)


def allocate(*, total: Decimal, weights: list[Decimal], currency: str) -> list[Decimal]:
    """Split `total` over `weights` in minor units (largest remainder): the parts sum to total."""
    exponent = MINOR_UNITS[currency]
    total_minor = int(quantize_money(total, currency).scaleb(exponent))
    whole = [int(w.scaleb(3)) for w in weights]  # weights are seconds to the millisecond
    denominator = sum(whole)
    if denominator <= 0 or total_minor == 0:
        return [Decimal(0).scaleb(-exponent) for _ in weights]
    parts = [total_minor * w // denominator for w in whole]
    remainders = sorted(
        range(len(whole)), key=lambda i: (-(total_minor * whole[i] % denominator), i)
    )
    for i in remainders[: total_minor - sum(parts)]:
        parts[i] += 1
    return [Decimal(part).scaleb(-exponent) for part in parts]


def order_earned(order: Order) -> Decimal:
    """What the customer pays for the accepted hours: the payment minus the true-up refund
    (and minus a planned order's credits for environments or objects not delivered: the
    hours prorate what is left, services/refunds.py)."""
    payment = succeeded_payment(order)
    paid = payment.amount if payment else order.total
    if payment is not None:
        paid -= plan_shortfall_credited(order)
    refund = prorata_refund(
        paid=paid,
        currency=order.currency,
        hours_ordered=order.hours,
        hours_kept=order.accepted_hours,
    )
    return paid - refund


def _paying_assignment(job: Job) -> Assignment | None:
    """The assignment under which the job was done (its latest): its fleet and agreed rate."""
    return (
        Assignment.objects.filter(job=job).select_related("fleet").order_by("-created_at").first()
    )


def paid_seconds(job: Job) -> Decimal:
    """Accepted seconds a fleet is paid for: never more than the job's target."""
    return min(job.accepted_seconds, job.target_seconds)


def order_net_revenue(order: Order) -> Decimal:
    """What the platform keeps from the customer for the order: what it earns for the accepted
    hours, and never more than the payment less every refund made or pending."""
    earned = order_earned(order)
    payment = succeeded_payment(order)
    if payment is None:
        return earned
    return min(earned, payment.amount - payment.amount_refunded)


PAYABLE_STATES = (
    Order.Status.DELIVERED,
    Order.Status.CLOSED,
    # Accepted work on jobs of an order cancelled after dispatch is paid too.
    Order.Status.CANCELLED,
    Order.Status.REFUNDED,
)


def order_fleet_payables(*, order_id) -> list[FleetPayable]:
    """One payable per job with accepted time, at the rate agreed on its assignment; the
    platform's margin; and the ledger invariant (payables <= net revenue, else held).

    The order row is locked, then jobs that already have a payable are skipped (the job is
    unique on FleetPayable and the ledger key is `payable:<job>`), so running this twice, or
    twice at once, records each job once. The customer's payment for the accepted hours is
    split over the jobs by accepted time, so per order the payables' customer parts add up to
    exactly what the customer keeps paying after the true-up. (QA accrues nothing to a
    cancelled job, so a cancelled order's accepted time is final when it is cancelled.)
    """
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        if order.status not in PAYABLE_STATES:
            return []
        jobs = list(
            Job.objects.filter(order=order, accepted_seconds__gt=0)
            .select_related("fleet")
            .order_by("sequence")
        )
        if not jobs:
            return []
        recorded = FleetPayable.objects.filter(order=order)
        done = set(recorded.values_list("job_id", flat=True))
        new_jobs = [job for job in jobs if job.id not in done]
        # The jobs still without a payable share what earlier payables do not already stand
        # for (so after a re-collection the shares still add up to the cent).
        shares = allocate(
            total=max(ZERO, order_earned(order) - _standing_customer_amount(recorded)),
            weights=[paid_seconds(job) for job in new_jobs],
            currency=order.currency,
        )
        created = []
        for job, share in zip(new_jobs, shares, strict=True):
            payable = _job_payable(order=order, job=job, share=share)
            if payable is not None:
                created.append(payable)
        payables_check_invariant(order=order)
    return created


def _standing_customer_amount(payables) -> Decimal:
    """The customer's part the payables still stand for: recorded, less what was carried off
    as deductions (in-place ones already reduced the payable itself)."""
    recorded = payables.aggregate(total=Sum("customer_amount"))["total"] or ZERO
    carried = PayableDeduction.objects.filter(payable__in=payables, in_place=False).aggregate(
        total=Sum("customer_amount")
    )["total"]
    return recorded - (carried or ZERO)


def _job_payable(*, order: Order, job: Job, share: Decimal) -> FleetPayable | None:
    assignment = _paying_assignment(job)
    if assignment is None or assignment.currency != order.currency:
        why = (
            "no fleet ever took it"
            if assignment is None
            else f"its fleet is paid in {assignment.currency}, the order in {order.currency}"
        )
        flag_raise(
            kind=BillingFlag.Kind.PAYABLE_UNRECORDED,
            dedupe_key=f"payable-unrecorded:{job.id}",
            message=f"Job {job.id} of order {order.id} has {job.accepted_seconds} s "
            f"accepted but {why}: record its payable by hand.",
            order_id=order.id,
        )
        return None
    seconds = paid_seconds(job)
    payable = FleetPayable.objects.create(
        job=job,
        fleet=assignment.fleet,
        order=order,
        accepted_seconds=seconds,
        rate_per_hour=assignment.rate_per_hour,
        amount=payable_amount(
            accepted_seconds=seconds,
            rate_per_hour=assignment.rate_per_hour,
            currency=order.currency,
        ),
        customer_amount=share,
        currency=order.currency,
    )
    post_payable(payable, assignment.fleet)
    return payable


def payables_check_invariant(*, order: Order, fleet_id=None) -> bool:
    """The ledger invariant, per job and per order, in the order's currency only:

    - per job: a payable never stands for more than the customer money for the same accepted
      seconds (the order's price per hour x those seconds), and is in the order's currency;
    - per order: its payables (in its currency) never exceed its net revenue.

    A payable that breaks the first is held; if the second breaks, the order's unpaid
    payables (of `fleet_id` only, when given: a payout run holds only the rows it locked) are
    held. Held payables are skipped by payout runs until staff release them, and staff are
    flagged. True when both hold (for `fleet_id`'s payables, when given)."""
    per_job = _check_per_job(order, fleet_id)
    return _check_order_total(order, fleet_id) and per_job


def customer_money(order: Order, seconds: Decimal) -> Decimal:
    """What the customer pays for `seconds` of the order: its price per ordered hour x them."""
    return quantize_money(order.total * seconds / (order.hours * SECONDS_PER_HOUR), order.currency)


def _check_per_job(order: Order, fleet_id) -> bool:
    payables = (
        FleetPayable.objects.filter(order=order, hold_released_at__isnull=True)
        .annotate(
            carried_seconds=Sum("deductions__seconds", filter=Q(deductions__in_place=False)),
            carried_amount=Sum("deductions__amount", filter=Q(deductions__in_place=False)),
        )
        .order_by("pk")
    )
    if fleet_id is not None:
        payables = payables.filter(fleet_id=fleet_id)
    holds = True
    for payable in payables:
        seconds = payable.accepted_seconds - (payable.carried_seconds or ZERO)
        amount = payable.amount - (payable.carried_amount or ZERO)
        if payable.currency != order.currency:
            why = f"is in {payable.currency}, its order in {order.currency}"
        elif amount > (money := customer_money(order, seconds)):
            why = (
                f"stands for {amount} {order.currency}, more than the customer pays for the "
                f"same {seconds} s ({money} {order.currency})"
            )
        else:
            continue
        holds = False
        reason = f"The payable of job {payable.job_id} {why}: held until staff review."
        if payable.payout_id is None and not payable.hold_reason:
            FleetPayable.objects.filter(pk=payable.pk).update(hold_reason=reason)
        flag_raise(
            kind=BillingFlag.Kind.PAYABLES_EXCEED_REVENUE,
            dedupe_key=f"payable-exceeds:{payable.job_id}",
            message=reason,
            order_id=order.id,
        )
    return holds


def _check_order_total(order: Order, fleet_id) -> bool:
    in_currency = FleetPayable.objects.filter(order=order, currency=order.currency)
    total = in_currency.aggregate(total=Sum("amount"))["total"]
    carried = PayableDeduction.objects.filter(
        order=order, in_place=False, currency=order.currency
    ).aggregate(total=Sum("amount"))["total"]
    total = (total or ZERO) - (carried or ZERO)
    revenue = order_net_revenue(order)
    if total <= revenue:
        return True
    if not FleetPayable.objects.filter(
        order=order, payout__isnull=True, hold_released_at__isnull=True
    ).exists():
        return True  # staff reviewed and released what is left to pay
    reason = (
        f"Fleet payables of order {order.id} ({total} {order.currency}) exceed its net revenue "
        f"({revenue} {order.currency}): held until staff review."
    )
    unpaid = FleetPayable.objects.filter(
        order=order, payout__isnull=True, hold_reason="", hold_released_at__isnull=True
    )
    if fleet_id is not None:
        unpaid = unpaid.filter(fleet_id=fleet_id)
    unpaid.update(hold_reason=reason)
    flag_raise(
        kind=BillingFlag.Kind.PAYABLES_EXCEED_REVENUE,
        dedupe_key=f"payables-exceed:{order.id}",
        message=reason,
        order_id=order.id,
    )
    return False


def payables_release_hold(*, payable_ids: list) -> int:
    """Staff reviewed held payables: the next payout run may pay them."""
    return (
        FleetPayable.objects.filter(pk__in=payable_ids, payout__isnull=True)
        .exclude(hold_reason="")
        .update(hold_reason="", hold_released_at=timezone.now())
    )


def payables_reconcile(*, order_id) -> list[PayableDeduction]:
    """Episodes were excluded: each of the order's payables whose job is now paid for less time
    than it was recorded with is reversed by the difference, once (the order and payable rows
    locked; running it again finds nothing left to reverse). Unpaid, the payable itself is
    reduced; paid, the amount is carried as a deduction on the fleet's next payout."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        payables = (
            FleetPayable.objects.select_for_update(of=("self",))
            .filter(order=order)
            .select_related("job", "fleet")
            .order_by("pk")
        )
        created = [d for d in (_payable_reduce(p) for p in payables) if d is not None]
        if created:
            payables_check_invariant(order=order)
    return created


def _payable_reduce(payable: FleetPayable) -> PayableDeduction | None:
    carried = payable.deductions.filter(in_place=False).aggregate(
        seconds=Sum("seconds"), amount=Sum("amount"), customer=Sum("customer_amount")
    )
    basis = payable.accepted_seconds - (carried["seconds"] or ZERO)
    lost = basis - paid_seconds(payable.job)
    if lost <= 0 or basis <= 0:
        return None
    amount_left = payable.amount - (carried["amount"] or ZERO)
    customer_left = payable.customer_amount - (carried["customer"] or ZERO)
    if lost >= basis:
        amount, customer = amount_left, customer_left
    else:
        # What is left stands for exactly the seconds kept at the agreed rate, rounded once (two
        # roundings, of the whole and of the part lost, could leave a cent more than the kept
        # seconds are worth, and more than the customer pays for them).
        kept = payable_amount(
            accepted_seconds=basis - lost,
            rate_per_hour=payable.rate_per_hour,
            currency=payable.currency,
        )
        amount = min(amount_left, max(ZERO, amount_left - kept))
        customer = min(
            customer_left, quantize_money(customer_left * lost / basis, payable.currency)
        )
    in_place = payable.payout_id is None
    deduction = PayableDeduction.objects.create(
        payable=payable,
        fleet=payable.fleet,
        order_id=payable.order_id,
        seconds=min(lost, basis),
        amount=amount,
        customer_amount=customer,
        currency=payable.currency,
        in_place=in_place,
    )
    if in_place:
        payable.accepted_seconds -= deduction.seconds
        payable.amount -= amount
        payable.customer_amount -= customer
        payable.save(update_fields=["accepted_seconds", "amount", "customer_amount"])
    post_deduction(deduction)
    return deduction
