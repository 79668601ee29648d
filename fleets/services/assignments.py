"""A fleet takes a job (an accepted offer or a winning bid), and the payloads fleets are sent
about jobs and offers. Shared by one-job and batch dispatch and by accept."""

from fleets.models import Assignment, Bid, Fleet, Job, Offer
from fleets.services.jobs import job_move
from fleets.services.pay_terms import agreed_rate, job_pay_terms
from fleets.services.webhooks import webhook_enqueue


def assign_job(
    *, job: Job, fleet: Fleet, site_id, offer=None, bid=None, reason: str, terms=None
) -> Assignment:
    """The fleet takes the job at the agreed rate: the winning bid's price, else the offer's,
    which the pay rule (services/pay_terms.py) checks once more whatever the path (PayRefused:
    e.g. the fleet changed its currency since the offer). `terms`: the job's, when the caller
    has them (a batch), else read."""
    terms = terms or job_pay_terms(job)
    rate = agreed_rate(
        terms=terms,
        fleet_id=fleet.pk,
        fleet_currency=fleet.currency,
        fleet_rate=fleet.payout_rate_per_hour,
        proposed=bid.price_per_hour if bid is not None else offer.rate_per_hour,
    )
    currency = terms.currency
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
    """The offer.created data (the dispatcher loads the job with its embodiment: no query)."""
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
        "target_seconds": str(job.target_seconds),
        "deadline": job.deadline.isoformat(),
        "embodiment": job.embodiment.slug,
        "end_effector": job.end_effector,
        "sensors": job.sensor_slugs,
    }
