"""Batch dispatch: a batch of open jobs placed in one transaction, with set queries and bulk
writes; the assignment itself is fleets/matching.py (pure). One job is a batch of one.

Per batch, whatever its size: lock the orders then the jobs (order -> job -> fleet, as
everywhere), read eligible sites, exclusions and site usage (selectors.batch_candidates), lock
the candidate fleets in id order and read the hours they owe, read open bids; assign in
memory; write offers, job changes and events, webhook deliveries in one statement each;
notifications go out after commit (enqueue_on_commit). A winning bid goes through the same
assign_job as an accepted offer. Python's cyclic garbage collector is held off for the batch
(marketplace/gc_pause.py): its full collections walk every job, offer and event the batch
holds, a cost per job that grew with the batch.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleets import matching, selectors
from fleets.models import Bid, Fleet, Job, Offer
from fleets.services.assignments import assign_job, offer_payload
from fleets.services.jobs import jobs_move
from fleets.services.pay_terms import PayRefused, PayTerms, agreed_rate
from fleets.services.webhooks import webhook_enqueue_many
from marketplace.gc_pause import gc_paused
from orders.models import Order

FLAG_REASON = "No eligible fleet: capability, unused site and capacity before the deadline."


@dataclass(frozen=True)
class DispatchResult:
    outcome: str  # "offered", "assigned_bid", "flagged", "skipped"
    offer_id: object = None


def job_dispatch(*, job_id) -> DispatchResult:
    """Find one job a fleet (the Celery task's unit): a batch of one that waits for its locks.

    Best eligible bid, else an offer to the best-ranked site, else flagged."""
    results = jobs_dispatch(job_ids=[job_id])
    return results.get(str(job_id), DispatchResult("skipped"))


def open_jobs_dispatch(*, limit: int | None = None, prefer: str = "score") -> dict:
    """Dispatch up to `limit` open jobs (earliest deadline first) in one batch, skipping
    jobs and orders another dispatcher holds (FOR UPDATE SKIP LOCKED)."""
    limit = limit or settings.FLEETS_DISPATCH_BATCH_SIZE
    with gc_paused(), transaction.atomic():
        jobs = list(
            Job.objects.select_for_update(of=("self",), skip_locked=True)
            .select_related("embodiment")
            .filter(status=Job.Status.OPEN)
            .order_by("deadline", "created_at", "pk")[:limit]
        )
        orders = _order_pay(
            Order.objects.select_for_update(skip_locked=True).filter(
                pk__in={job.order_id for job in jobs}
            )
        )
        return _dispatch_locked(
            [j for j in jobs if j.order_id in orders], orders=orders, prefer=prefer
        )


def jobs_dispatch(*, job_ids, prefer: str = "score") -> dict:
    """Dispatch the given jobs (those still open) in one batch; waits for their locks.
    Returns {str(job_id): DispatchResult} for the jobs it dispatched."""
    with gc_paused(), transaction.atomic():
        order_ids = set(
            Job.objects.filter(pk__in=list(job_ids), status=Job.Status.OPEN).values_list(
                "order_id", flat=True
            )
        )
        if not order_ids:
            return {}
        locked = Order.objects.select_for_update().filter(pk__in=order_ids).order_by("pk")
        orders = _order_pay(locked)
        jobs = list(
            Job.objects.select_for_update(of=("self",))
            .select_related("embodiment")
            .filter(pk__in=list(job_ids), order_id__in=order_ids, status=Job.Status.OPEN)
            .order_by("pk")
        )
        return _dispatch_locked(jobs, orders=orders, prefer=prefer)


def _order_pay(orders) -> dict:
    """order_id -> (currency, total, hours, cells_planned): what its jobs pay, and whether it is
    planned by cell (read as the orders are locked)."""
    return {
        row[0]: row[1:]
        for row in orders.values_list("pk", "currency", "total", "hours", "cells_planned")
    }


def _terms(job: Job, orders: dict) -> PayTerms:
    currency, total, hours, _ = orders[job.order_id]
    return PayTerms.of(
        currency=currency,
        total=total,
        hours=hours,
        original_fleet_id=job.original_fleet_id,
        original_rate=job.original_rate_per_hour,
    )


def _dispatch_locked(jobs: list[Job], *, orders: dict, prefer: str) -> dict:
    if not jobs:
        return {}
    now = timezone.now()
    for job in jobs:
        job.dispatch_attempts += 1
    planned = {pk for pk, row in orders.items() if row[3]}
    candidates = selectors.batch_candidates(jobs=jobs, planned_orders=planned)
    distinct = {id(c.sites): c.sites for c in candidates.values()}  # jobs alike share theirs
    fleet_ids = {fleet_id for sites in distinct.values() for _, fleet_id in sites}
    fleets = _LockedFleets(fleet_ids)
    owed = selectors.committed_hours(fleet_ids=fleets.rows) if fleets.rows else {}
    states = {
        pk: matching.FleetState(
            fleet_id=pk,
            weekly_capacity=row[_WEEKLY],
            owed=owed.get(pk, Decimal(0)),
            payout_rate=row[_RATE],
            quality=row[_QUALITY],
            currency=row[_CURRENCY],
        )
        for pk, row in fleets.rows.items()
    }
    terms = {job.pk: _terms(job, orders) for job in jobs}
    bids = _open_bids(jobs, candidates, terms, states)
    demands = [
        _demand(job, candidates[job.pk], bids.get(job.pk, []), now, terms[job.pk]) for job in jobs
    ]
    decisions = matching.assign(jobs=demands, fleets=states, prefer=prefer)
    return _write(jobs=jobs, decisions=decisions, fleets=fleets, bids=bids, terms=terms, now=now)


_FLEET_COLUMNS = [field.attname for field in Fleet._meta.concrete_fields]
_PK, _WEEKLY, _RATE, _QUALITY, _CURRENCY = (
    _FLEET_COLUMNS.index(name)
    for name in ("id", "weekly_capacity_hours", "payout_rate_per_hour", "quality_score", "currency")
)


class _LockedFleets:
    """The batch's candidate fleets that are active, locked in id order, read as rows; a model
    instance is made only for a fleet that gets an offer or wins a bid (a batch reads every
    candidate fleet, a thousand where there are a thousand, and places jobs on far fewer)."""

    def __init__(self, fleet_ids):
        self.rows = {
            row[_PK]: row
            for row in Fleet.objects.select_for_update()
            .filter(pk__in=fleet_ids, status=Fleet.Status.ACTIVE)
            .order_by("pk")
            .values_list(*_FLEET_COLUMNS)
        }
        self._made: dict = {}

    def __getitem__(self, fleet_id) -> Fleet:
        fleet = self._made.get(fleet_id)
        if fleet is None:
            fleet = self._made[fleet_id] = Fleet.from_db(
                "default", _FLEET_COLUMNS, self.rows[fleet_id]
            )
        return fleet


def _open_bids(jobs: list[Job], candidates: dict, terms: dict, fleets: dict) -> dict:
    """job_id -> its eligible open bids, best first (price, earliest finish): one query. A
    bid the pay rule refuses now (its fleet changed currency since) is left out."""
    deadlines = {job.pk: job.deadline for job in jobs}
    found: dict = {}
    for bid in Bid.objects.filter(job_id__in=list(deadlines), status=Bid.Status.OPEN).order_by(
        "price_per_hour", "earliest_finish", "pk"
    ):
        sites = {site_id for site_id, _ in candidates[bid.job_id].sites}
        fleet = fleets.get(bid.fleet_id)
        if (
            bid.earliest_finish <= deadlines[bid.job_id]
            and bid.site_id in sites
            and fleet is not None
            and _bid_allowed(bid, fleet, terms[bid.job_id])
        ):
            found.setdefault(bid.job_id, []).append(bid)
    return found


def _bid_allowed(bid: Bid, fleet: matching.FleetState, terms: PayTerms) -> bool:
    try:
        agreed_rate(
            terms=terms,
            fleet_id=fleet.fleet_id,
            fleet_currency=fleet.currency,
            fleet_rate=fleet.payout_rate,
            proposed=bid.price_per_hour,
        )
    except PayRefused:
        return False
    return True


def _demand(job: Job, candidates, bids: list, now: datetime, terms: PayTerms) -> matching.JobDemand:
    seconds = Decimal(max(0.0, (job.deadline - now).total_seconds()))
    return matching.JobDemand(
        job_id=job.pk,
        order_id=job.order_id,
        environment_index=job.environment_index,
        hours=job.target_hours,
        weeks=seconds / selectors.SECONDS_PER_WEEK,
        sites=candidates.sites,
        same_environment_sites=frozenset(candidates.same_environment),
        scene_slots=candidates.scene_slots,
        bids=tuple(matching.BidOption(b.pk, b.site_id, b.fleet_id) for b in bids),
        rank=(str(job.order_id), job.sequence),
        terms=terms,
    )


def _write(*, jobs, decisions, fleets: _LockedFleets, bids: dict, terms: dict, now) -> dict:
    by_id = {job.pk: job for job in jobs}
    results, offers, moves = {}, [], []
    expires_at = now + timedelta(seconds=settings.FLEETS_OFFER_TTL_SECONDS)
    for decision in decisions:
        job = by_id[decision.job_id]
        if decision.outcome == "bid":
            bid = next(b for b in bids[job.pk] if b.pk == decision.bid_id)
            fleet = fleets[decision.fleet_id]
            assign_job(
                job=job,
                fleet=fleet,
                site_id=bid.site_id,
                bid=bid,
                reason="Best bid.",
                terms=terms[job.pk],
            )
            results[str(job.pk)] = DispatchResult("assigned_bid")
        elif decision.outcome == "offer":
            fleet = fleets[decision.fleet_id]
            offer = Offer(
                job=job,
                fleet=fleet,
                site_id=decision.site_id,
                score=decision.score,
                # the rule again, exactly: PayRefused here would be a matcher bug (the batch
                # rolls back whole rather than write an offer the rule refuses)
                rate_per_hour=agreed_rate(
                    terms=terms[job.pk],
                    fleet_id=fleet.pk,
                    fleet_currency=fleet.currency,
                    fleet_rate=fleet.payout_rate_per_hour,
                ),
                currency=fleet.currency,
                expires_at=expires_at,
            )
            offers.append(offer)
            job.fleet, job.site_id = fleet, decision.site_id
            reason = f"Offered to {fleet.name} (score {decision.score:.3f})."
            moves.append((job, Job.Status.OFFERED, reason, fleet))
            results[str(job.pk)] = DispatchResult("offered", offer.pk)
        else:
            job.flag_reason = FLAG_REASON
            moves.append((job, Job.Status.FLAGGED, FLAG_REASON, None))
            results[str(job.pk)] = DispatchResult("flagged")
    Offer.objects.bulk_create(offers)
    jobs_move(moves=moves)
    webhook_enqueue_many(
        events=[(offer.fleet, "offer.created", offer_payload(offer)) for offer in offers]
    )
    return results
