"""Dispatch: offer a job to the best eligible fleet (or take the best bid); accept, decline.

Locks are taken in the order order -> job -> offer/assignment -> fleet, so two writers never
deadlock; notifications go out after commit.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleets import selectors, tasks
from fleets.error_codes import ErrorCode
from fleets.models import Assignment, Bid, Fleet, Job, Offer, Site
from fleets.services.jobs import job_move
from fleets.services.webhooks import webhook_enqueue
from marketplace.errors import Conflict, NotFound, invalid
from marketplace.models import Organization
from marketplace.queueing import enqueue_on_commit
from orders.models import Order


@dataclass(frozen=True)
class DispatchResult:
    outcome: str  # "offered", "assigned_bid", "flagged", "skipped"
    offer_id: object = None


def _best_bid(*, job: Job, candidates: list) -> Bid | None:
    eligible_sites = {c.site_id for c in candidates}
    bids = [
        bid
        for bid in Bid.objects.filter(
            job=job, status=Bid.Status.OPEN, earliest_finish__lte=job.deadline
        ).order_by("price_per_hour", "earliest_finish", "pk")
        if bid.site_id in eligible_sites
    ]
    return bids[0] if bids else None


def _capacity_still_free(*, fleet: Fleet, job: Job, now: datetime) -> bool:
    owed = selectors.committed_hours(fleet_ids=[fleet.pk]).get(fleet.pk, Decimal(0))
    return selectors.capacity_until(fleet, job.deadline, now) - owed >= job.target_hours


def job_dispatch(*, job_id) -> DispatchResult:
    """Find the job a fleet: best eligible bid, else an offer to the best-scored site.

    Locks the order first, so two jobs of one order never pick the same site concurrently,
    then the job; re-checks the chosen fleet's capacity under its row lock.
    """
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.filter(pk=job_id).only("order_id").first()
        if job is None:
            return DispatchResult("skipped")
        Order.objects.select_for_update().filter(pk=job.order_id).first()
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status != Job.Status.OPEN:
            return DispatchResult("skipped")
        job.dispatch_attempts += 1
        candidates = selectors.dispatch_candidates(job=job, now=now)

        bid = _best_bid(job=job, candidates=candidates)
        if bid is not None:
            fleet = Fleet.objects.select_for_update().get(pk=bid.fleet_id)
            if _capacity_still_free(fleet=fleet, job=job, now=now):
                _assign(job=job, fleet=fleet, site_id=bid.site_id, bid=bid, reason="Best bid.")
                return DispatchResult("assigned_bid")

        for candidate in candidates:
            fleet = Fleet.objects.select_for_update().get(pk=candidate.fleet_id)
            if fleet.status != Fleet.Status.ACTIVE:
                continue
            if not _capacity_still_free(fleet=fleet, job=job, now=now):
                continue
            offer = Offer.objects.create(
                job=job,
                fleet=fleet,
                site_id=candidate.site_id,
                score=candidate.score,
                rate_per_hour=fleet.payout_rate_per_hour,
                currency=fleet.currency,
                expires_at=now + timedelta(seconds=settings.FLEETS_OFFER_TTL_SECONDS),
            )
            job.fleet, job.site_id = fleet, candidate.site_id
            job_move(
                job=job,
                to_status=Job.Status.OFFERED,
                reason=f"Offered to {fleet.name} (score {candidate.score:.3f}).",
            )
            webhook_enqueue(fleet=fleet, event_type="offer.created", data=offer_payload(offer))
            return DispatchResult("offered", offer.pk)

        job.flag_reason = (
            "No eligible fleet: capability, unused site and capacity before the deadline."
        )
        job_move(job=job, to_status=Job.Status.FLAGGED, reason=job.flag_reason)
        return DispatchResult("flagged")


def _assign(*, job: Job, fleet: Fleet, site_id, offer=None, bid=None, reason: str) -> Assignment:
    """The fleet takes the job at the agreed rate: the winning bid's price, else the offer's."""
    rate = bid.price_per_hour if bid is not None else offer.rate_per_hour
    currency = fleet.currency if bid is not None else offer.currency
    assignment = Assignment.objects.create(
        job=job,
        fleet=fleet,
        site_id=site_id,
        offer=offer,
        bid=bid,
        rate_per_hour=rate,
        currency=currency,
    )
    job.fleet, job.site_id = fleet, site_id
    job.flag_reason = ""
    job_move(job=job, to_status=Job.Status.ASSIGNED, reason=reason, fleet=fleet)
    if bid is not None:
        Bid.objects.filter(pk=bid.pk).update(status=Bid.Status.WON)
        Bid.objects.filter(job=job, status=Bid.Status.OPEN).update(status=Bid.Status.LOST)
        webhook_enqueue(fleet=fleet, event_type="job.assigned", data=job_payload(job))
    return assignment


def offer_payload(offer: Offer) -> dict:
    return {
        "offer_id": str(offer.pk),
        "expires_at": offer.expires_at.isoformat(),
        "rate_per_hour": str(offer.rate_per_hour),
        "currency": offer.currency,
        "job": job_payload(offer.job),
    }


def job_payload(job: Job) -> dict:
    return {
        "job_id": str(job.pk),
        "status": job.status,
        "site_id": str(job.site_id) if job.site_id else None,
        "target_hours": str(job.target_hours),
        "deadline": job.deadline.isoformat(),
        "embodiment": job.embodiment.slug,
        "end_effector": job.end_effector,
        "sensors": job.sensor_slugs,
    }


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
        return _assign(
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
        enqueue_on_commit(tasks.job_dispatch, str(job.pk))
    return offer


def job_price_per_hour(job: Job) -> Decimal:
    """What the customer pays per ordered hour of the job's order: no fleet is paid more."""
    order = job.order
    return (order.total / order.hours).quantize(Decimal("0.0001"))


def _check_bid_price(*, job: Job, fleet: Fleet, price_per_hour: Decimal) -> None:
    order = job.order
    if fleet.currency != order.currency:
        raise invalid(
            "price_per_hour",
            f"Bids on this job are in {order.currency}; your fleet is paid in {fleet.currency}.",
            ErrorCode.BID_CURRENCY,
        )
    ceiling = job_price_per_hour(job)
    if price_per_hour > ceiling:
        raise invalid(
            "price_per_hour",
            f"At most {ceiling} {order.currency} per hour (what the customer pays per hour).",
            ErrorCode.BID_ABOVE_PRICE,
        )


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
            enqueue_on_commit(tasks.job_dispatch, str(job.pk))
    return bid
