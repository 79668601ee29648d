"""Fleet payables: at delivery, what each fleet earned on the order's jobs, and the
platform's margin, booked once per job."""

from decimal import Decimal

from django.db import transaction

from billing.ledger import post_payable
from billing.models import BillingFlag, FleetPayable
from billing.services.flags import flag_raise
from billing.services.payments import succeeded_payment
from billing.services.refunds import prorata_refund
from fleets.models import Assignment, Fleet, Job
from orders.models import Order
from orders.pricing import MINOR_UNITS, quantize_money

SECONDS_PER_HOUR = Decimal(3600)


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
    """What the customer pays for the accepted hours: the payment minus the true-up refund."""
    payment = succeeded_payment(order)
    paid = payment.amount if payment else order.total
    refund = prorata_refund(
        paid=paid,
        currency=order.currency,
        hours_ordered=order.hours,
        hours_kept=order.accepted_hours,
    )
    return paid - refund


def _job_fleet(job: Job) -> Fleet | None:
    """The fleet that did the job: its holder, else its latest assignment's fleet."""
    if job.fleet_id is not None:
        return job.fleet
    assignment = (
        Assignment.objects.filter(job=job).select_related("fleet").order_by("-created_at").first()
    )
    return assignment.fleet if assignment else None


def order_fleet_payables(*, order_id) -> list[FleetPayable]:
    """On delivery: one payable per job with accepted time, and the platform's margin.

    The order row is locked, then jobs that already have a payable are skipped (the job is
    unique on FleetPayable and the ledger key is `payable:<job>`), so running this twice, or
    twice at once, records each job once. The customer's payment for the accepted hours is
    split over the jobs by accepted time, so per order the payables' customer parts add up to
    exactly what the customer keeps paying after the true-up.
    """
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        if order.status not in (Order.Status.DELIVERED, Order.Status.CLOSED):
            return []
        jobs = list(
            Job.objects.filter(order=order, accepted_seconds__gt=0)
            .select_related("fleet")
            .order_by("sequence")
        )
        if not jobs:
            return []
        shares = allocate(
            total=order_earned(order),
            weights=[job.accepted_seconds for job in jobs],
            currency=order.currency,
        )
        done = set(FleetPayable.objects.filter(job__in=jobs).values_list("job_id", flat=True))
        created = []
        for job, share in zip(jobs, shares, strict=True):
            if job.id in done:
                continue
            fleet = _job_fleet(job)
            if fleet is None or fleet.currency != order.currency:
                why = (
                    "no fleet is known for it"
                    if fleet is None
                    else f"fleet {fleet.name} is paid in {fleet.currency}, the order in "
                    f"{order.currency}"
                )
                flag_raise(
                    kind=BillingFlag.Kind.PAYABLE_UNRECORDED,
                    dedupe_key=f"payable-unrecorded:{job.id}",
                    message=f"Job {job.id} of order {order.id} has {job.accepted_seconds} s "
                    f"accepted but {why}: record its payable by hand.",
                    order_id=order.id,
                )
                continue
            payable = FleetPayable.objects.create(
                job=job,
                fleet=fleet,
                order=order,
                accepted_seconds=job.accepted_seconds,
                rate_per_hour=fleet.payout_rate_per_hour,
                amount=payable_amount(
                    accepted_seconds=job.accepted_seconds,
                    rate_per_hour=fleet.payout_rate_per_hour,
                    currency=order.currency,
                ),
                customer_amount=share,
                currency=order.currency,
            )
            post_payable(payable, fleet)
            created.append(payable)
    return created
