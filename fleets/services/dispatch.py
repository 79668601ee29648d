"""Dispatch: offer a job to the best eligible fleet (or take the best bid); accept, decline.

Locks are taken in the order order -> job -> offer/assignment -> fleet, so two writers never
deadlock; notifications go out after commit. Finding jobs a fleet (one job or a batch) is
fleets/services/batch_dispatch.py; this module keeps its names for callers.
"""

from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from fleets import selectors
from fleets.error_codes import ErrorCode
from fleets.models import Assignment, Bid, Fleet, Job, Offer, Site
from fleets.services.assignments import assign_job, job_payload, offer_payload
from fleets.services.batch_dispatch import (
    DispatchResult,
    job_dispatch,
    jobs_dispatch,
    open_jobs_dispatch,
)
from fleets.services.jobs import job_move
from fleets.services.pay_terms import PayRefused, agreed_rate, job_pay_terms
from marketplace.errors import Conflict, NotFound, invalid
from marketplace.models import Organization
from marketplace.queueing import enqueue_on_commit

__all__ = [
    "DispatchResult",
    "bid_place",
    "job_dispatch",
    "job_payload",
    "jobs_dispatch",
    "offer_accept",
    "offer_decline",
    "offer_payload",
    "open_jobs_dispatch",
]


def _offer_for_fleet(*, organization: Organization, offer_id) -> tuple[Job, Offer]:
    """Lock job then offer, for an offer of one of the organization's fleets (else 404)."""
    found = (
        Offer.objects.filter(pk=offer_id, fleet__organization=organization)
        .values_list("job_id", flat=True)
        .first()
    )
    if found is None:
        raise NotFound("Offer not found.")
    job = Job.objects.select_for_update().get(pk=found)
    offer = Offer.objects.select_for_update().get(pk=offer_id)
    return job, offer


def offer_accept(*, organization: Organization, offer_id) -> Assignment:
    """Accept an offer: exactly one accept of a pending, unexpired offer wins; others 409."""
    with transaction.atomic():
        job, offer = _offer_for_fleet(organization=organization, offer_id=offer_id)
        if offer.status != Offer.Status.PENDING:
            raise Conflict(f"This offer is {offer.status}.", code=ErrorCode.OFFER_NOT_PENDING)
        if offer.expires_at <= timezone.now():
            raise Conflict("This offer has expired.", code=ErrorCode.OFFER_EXPIRED)
        if job.status != Job.Status.OFFERED:
            raise Conflict("This job is no longer on offer.", code=ErrorCode.JOB_NOT_OFFERED)
        offer.status = Offer.Status.ACCEPTED
        offer.responded_at = timezone.now()
        offer.save(update_fields=["status", "responded_at"])
        return assign_job(
            job=job, fleet=offer.fleet, site_id=offer.site_id, offer=offer, reason="Offer accepted."
        )


def offer_decline(*, organization: Organization, offer_id, reason: str = "") -> Offer:
    with transaction.atomic():
        job, offer = _offer_for_fleet(organization=organization, offer_id=offer_id)
        if offer.status != Offer.Status.PENDING:
            raise Conflict(f"This offer is {offer.status}.", code=ErrorCode.OFFER_NOT_PENDING)
        offer.status = Offer.Status.DECLINED
        offer.responded_at = timezone.now()
        offer.decline_reason = reason
        offer.save(update_fields=["status", "responded_at", "decline_reason"])
        job_move(job=job, to_status=Job.Status.OPEN, reason="Offer declined.", fleet=offer.fleet)
        enqueue_on_commit("fleets.tasks.job_dispatch", str(job.pk))
    return offer


# A bid's refusals keep the codes and field the bid API always answered.
_BID_CODES = {
    ErrorCode.PAY_CURRENCY: ErrorCode.BID_CURRENCY,
    ErrorCode.PAY_ABOVE_PRICE: ErrorCode.BID_ABOVE_PRICE,
}


def _check_bid_price(*, job: Job, fleet: Fleet, price_per_hour: Decimal) -> None:
    """The pay rule (services/pay_terms.py) on the price the fleet proposes."""
    try:
        agreed_rate(
            terms=job_pay_terms(job),
            fleet_id=fleet.pk,
            fleet_currency=fleet.currency,
            fleet_rate=fleet.payout_rate_per_hour,
            proposed=price_per_hour,
        )
    except PayRefused as refused:
        raise invalid("price_per_hour", refused.message, _BID_CODES[refused.code]) from None


def bid_place(
    *,
    organization: Organization,
    job_id,
    site_id,
    price_per_hour: Decimal,
    earliest_finish: datetime,
) -> Bid:
    """A fleet bids on an open (or flagged) job; the dispatcher takes the best bid."""
    if price_per_hour < 0:
        raise invalid("price_per_hour", "Must be zero or more.")
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(of=("self",))
            .select_related("order")
            .filter(pk=job_id, status__in=[Job.Status.OPEN, Job.Status.OFFERED, Job.Status.FLAGGED])
            .first()
        )
        if job is None:
            raise NotFound("Job not found or not open for bids.")
        site = (
            Site.objects.select_related("fleet")
            .filter(pk=site_id, fleet__organization=organization)
            .first()
        )
        if site is None:
            raise NotFound("Site not found.", fields={"site": ["Site not found."]})
        if earliest_finish > job.deadline:
            raise invalid("earliest_finish", "Must be before the job's deadline.")
        _check_bid_price(job=job, fleet=site.fleet, price_per_hour=price_per_hour)
        eligible = {c.site_id for c in selectors.dispatch_candidates(job=job, now=timezone.now())}
        if site.pk not in eligible:
            raise invalid(
                "site",
                "This site is not eligible for the job (capabilities, diversity or capacity).",
                ErrorCode.NOT_ELIGIBLE,
            )
        if Bid.objects.filter(job=job, fleet=site.fleet, status=Bid.Status.OPEN).exists():
            raise Conflict(
                "Your fleet already has an open bid on this job.", code=ErrorCode.BID_EXISTS
            )
        bid = Bid.objects.create(
            job=job,
            fleet=site.fleet,
            site=site,
            price_per_hour=price_per_hour,
            earliest_finish=earliest_finish,
        )
        if job.status == Job.Status.FLAGGED:
            job_move(job=job, to_status=Job.Status.OPEN, reason="A bid arrived.")
        if job.status == Job.Status.OPEN:
            enqueue_on_commit("fleets.tasks.job_dispatch", str(job.pk))
    return bid
