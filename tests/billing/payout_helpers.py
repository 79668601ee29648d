"""Scenario helpers for payables and payouts: delivered orders with jobs done by fleets."""

import math
from decimal import Decimal

from django.utils import timezone

from billing.ledger import post_charge
from billing.models import FleetPayoutAccount, Payment
from orders.models import Order
from tests.billing.factories import PaymentFactory
from tests.factories import CompletedJobFactory, FleetFactory, OrderFactory, SiteFactory

_accounts = iter(range(1, 10**9))


def fleet_with_account(**fleet_fields):
    fleet = FleetFactory(**fleet_fields)
    FleetPayoutAccount.objects.create(fleet=fleet, stripe_account_id=f"acct_test{next(_accounts)}")
    return fleet


def delivered_order(*, jobs, hours="10.00", total="1000.00", accepted_hours=None, paid=True):
    """An order delivered with `jobs` = [(fleet, accepted_seconds), ...], paid by card.

    The charge is booked like a confirmed payment; accepted hours default to the jobs'
    accepted time rounded down to the hundredth (what datasets does), at most the hours.
    """
    hours = Decimal(hours)
    seconds = sum((Decimal(s) for _, s in jobs), Decimal(0))
    if accepted_hours is None:
        accepted_hours = min(hours, (seconds / 3600).quantize(Decimal("0.01"), "ROUND_DOWN"))
    order = OrderFactory(
        hours=hours,
        total=Decimal(total),
        status=Order.Status.DELIVERED,
        accepted_seconds=seconds,
        accepted_hours=accepted_hours,
    )
    if paid:
        payment = PaymentFactory(
            order=order, status=Payment.Status.SUCCEEDED, succeeded_at=timezone.now()
        )
        post_charge(payment)
    for index, (fleet, job_seconds) in enumerate(jobs):
        CompletedJobFactory(
            order=order,
            sequence=index + 1,
            environment_index=index,
            site=SiteFactory(fleet=fleet),
            fleet=fleet,
            accepted_seconds=Decimal(job_seconds),
            # QA never accrues past a job's target: the job was planned for what it did.
            target_hours=max(Decimal("5.00"), math.ceil(Decimal(job_seconds) / 36) / Decimal(100)),
        )
    return order
