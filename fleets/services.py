"""Writes for fleets and dispatch. Every state change goes through here.

Conventions: keyword-only functions; lock, then check (rows locked in the order
order -> job -> offer/assignment -> fleet, so two writers never deadlock); side effects
(tasks, webhooks) enqueued with `transaction.on_commit`; safe to run twice.
"""

import ipaddress
import math
import time
import uuid
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from fleets import selectors, webhooks
from fleets.models import (
    JOB_HOLDING_STATES,
    JOB_TRANSITIONS,
    Assignment,
    Bid,
    EndEffector,
    Fleet,
    Job,
    JobEvent,
    Offer,
    Robot,
    Site,
    SiteKind,
    WebhookDelivery,
)
from marketplace.errors import Conflict, NotFound, ServiceError
from marketplace.models import Organization
from marketplace.queueing import enqueue_or_leave_to_sweeper
from orders.models import Embodiment, Order, SensorAddon
from orders.services import order_transition

SYSTEM = "system:dispatcher"

# Orders carry no end effector: it follows from the embodiment they ask for.
EMBODIMENT_END_EFFECTOR = {"dexterous-hand": EndEffector.DEXTEROUS_HAND}
# Site kinds where a task category makes sense; a category not listed accepts any kind.
CATEGORY_SITE_KINDS = {
    "household": [SiteKind.KITCHEN, SiteKind.HOUSEHOLD, SiteKind.OFFICE],
    "logistics": [SiteKind.WAREHOUSE_SHELF, SiteKind.RETAIL_AISLE, SiteKind.PRODUCTION_LINE],
    "assembly": [SiteKind.LAB_BENCH, SiteKind.PRODUCTION_LINE],
}


class InvalidJobTransition(Conflict):
    code = "invalid_job_transition"


def _invalid(field_name: str, message: str, code: str = "invalid") -> ServiceError:
    return ServiceError(message, code=code, fields={field_name: [message]})


def _enqueue(task_name: str, *args) -> None:
    from fleets import tasks

    task = getattr(tasks, task_name)
    # Broker down: dispatch_sweep re-kicks open jobs and resends pending webhooks.
    transaction.on_commit(lambda: enqueue_or_leave_to_sweeper(task, *args))


# --- Job state machine ---------------------------------------------------------------------


def _job_move(
    *, job: Job, to_status: str, reason: str = "", actor_label: str = SYSTEM, fleet=None
) -> Job:
    """Change a job's status; the caller holds the job's row lock."""
    from_status = job.status
    if from_status == to_status:
        return job
    if to_status not in JOB_TRANSITIONS[from_status]:
        raise InvalidJobTransition(
            f"A job cannot go from {from_status} to {to_status}.",
            fields={"status": [f"Not allowed from {from_status}."]},
        )
    job.status = to_status
    if to_status not in JOB_HOLDING_STATES and to_status != Job.Status.COMPLETED:
        job.fleet = None
        job.site = None
    job.save()
    JobEvent.objects.create(
        job=job,
        from_status=from_status,
        to_status=to_status,
        fleet=fleet or job.fleet,
        actor_label=actor_label,
        reason=reason,
    )
    return job


def job_transition(*, job_id, to_status: str, reason: str = "", actor_label: str = SYSTEM) -> Job:
    """The public way to move a job by hand (staff tools): lock, check the map, audit."""
    if to_status not in Job.Status.values:
        raise _invalid("status", f"Unknown job status {to_status!r}.")
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        return _job_move(job=job, to_status=to_status, reason=reason, actor_label=actor_label)


# --- Fleet registry --------------------------------------------------------------------------


def validate_webhook_url(url: str) -> str:
    if not url:
        return ""
    parts = urlsplit(url)
    insecure_ok = settings.FLEETS_WEBHOOK_ALLOW_INSECURE
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise _invalid("webhook_url", "Enter an absolute http(s) URL.", "invalid_webhook_url")
    if parts.scheme != "https" and not insecure_ok:
        raise _invalid("webhook_url", "Webhook URLs must use https.", "invalid_webhook_url")
    if parts.username or parts.password:
        raise _invalid("webhook_url", "No credentials in the URL.", "invalid_webhook_url")
    host = parts.hostname
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    internal = host == "localhost" or (
        address is not None and (address.is_private or address.is_loopback or address.is_reserved)
    )
    if internal and not insecure_ok:
        raise _invalid(
            "webhook_url", "Webhook URLs must be public addresses.", "invalid_webhook_url"
        )
    return url


def _validate_fleet_fields(fields: dict) -> dict:
    if "name" in fields and not str(fields["name"]).strip():
        raise _invalid("name", "A name is required.")
    for name in ("weekly_capacity_hours", "payout_rate_per_hour"):
        if name in fields and Decimal(fields[name]) < 0:
            raise _invalid(name, "Must be zero or more.")
    if "timezone" in fields and fields["timezone"] not in zoneinfo.available_timezones():
        raise _invalid("timezone", f"Unknown time zone {fields['timezone']!r}.")
    if "status" in fields and fields["status"] not in Fleet.Status.values:
        raise _invalid("status", f"Unknown status {fields['status']!r}.")
    if "webhook_url" in fields:
        fields["webhook_url"] = validate_webhook_url(fields["webhook_url"] or "")
    return fields


FLEET_EDITABLE = (
    "name",
    "status",
    "timezone",
    "weekly_capacity_hours",
    "payout_rate_per_hour",
    "currency",
    "webhook_url",
)


def _require_fleet_operator(organization: Organization) -> None:
    if organization is None or not organization.is_fleet_operator:
        raise ServiceError("Only fleet operators have fleets.", code="not_a_fleet_operator")


def fleet_create(
    *,
    organization: Organization,
    name: str,
    weekly_capacity_hours: Decimal,
    payout_rate_per_hour: Decimal,
    timezone: str = "UTC",
    currency: str = "USD",
    webhook_url: str = "",
    status: str = Fleet.Status.ACTIVE,
) -> Fleet:
    _require_fleet_operator(organization)
    fields = _validate_fleet_fields(
        {
            "name": name,
            "weekly_capacity_hours": weekly_capacity_hours,
            "payout_rate_per_hour": payout_rate_per_hour,
            "timezone": timezone,
            "currency": currency,
            "webhook_url": webhook_url,
            "status": status,
        }
    )
    return Fleet.objects.create(organization=organization, **fields)


def _own_fleet_locked(*, organization: Organization, fleet_id) -> Fleet:
    fleet = Fleet.objects.select_for_update().filter(pk=fleet_id, organization=organization).first()
    if fleet is None:
        raise NotFound("Fleet not found.")
    return fleet


def fleet_update(*, organization: Organization, fleet_id, changes: dict) -> Fleet:
    unknown = set(changes) - set(FLEET_EDITABLE)
    if unknown:
        raise ServiceError(
            "These fields cannot be changed.", fields={k: ["Read-only."] for k in unknown}
        )
    fields = _validate_fleet_fields(dict(changes))
    with transaction.atomic():
        fleet = _own_fleet_locked(organization=organization, fleet_id=fleet_id)
        for name, value in fields.items():
            setattr(fleet, name, value)
        fleet.save()
    return fleet


def fleet_rotate_secret(*, organization: Organization, fleet_id) -> Fleet:
    from fleets.models import new_webhook_secret

    with transaction.atomic():
        fleet = _own_fleet_locked(organization=organization, fleet_id=fleet_id)
        fleet.webhook_secret = new_webhook_secret()
        fleet.save(update_fields=["webhook_secret", "updated_at"])
    return fleet


def fleet_heartbeat(*, organization: Organization, fleet_id) -> Fleet:
    now = timezone.now()
    updated = Fleet.objects.filter(pk=fleet_id, organization=organization).update(
        last_heartbeat_at=now
    )
    if not updated:
        raise NotFound("Fleet not found.")
    return Fleet.objects.get(pk=fleet_id)


def _clean_objects(objects) -> list[str]:
    if not isinstance(objects, list) or not all(isinstance(o, str) for o in objects):
        raise _invalid("objects_available", "A list of object names.")
    cleaned = sorted({o.strip() for o in objects if o.strip()})
    if len(cleaned) > 500:
        raise _invalid("objects_available", "At most 500 objects.")
    return cleaned


def site_create(
    *,
    organization: Organization,
    fleet_id,
    name: str,
    kind: str,
    description: str = "",
    objects_available: list | None = None,
    active: bool = True,
) -> Site:
    if kind not in SiteKind.values:
        raise _invalid("kind", f"Unknown site kind {kind!r}.", "unknown_site_kind")
    if not name.strip():
        raise _invalid("name", "A name is required.")
    objects = _clean_objects(objects_available or [])
    fleet = Fleet.objects.filter(pk=fleet_id, organization=organization).first()
    if fleet is None:
        raise NotFound("Fleet not found.", fields={"fleet": ["Fleet not found."]})
    return Site.objects.create(
        fleet=fleet,
        name=name.strip(),
        kind=kind,
        description=description,
        objects_available=objects,
        active=active,
    )


def site_update(*, organization: Organization, site_id, changes: dict) -> Site:
    allowed = {"name", "kind", "description", "objects_available", "active"}
    unknown = set(changes) - allowed
    if unknown:
        raise ServiceError(
            "These fields cannot be changed.", fields={k: ["Read-only."] for k in unknown}
        )
    if "kind" in changes and changes["kind"] not in SiteKind.values:
        raise _invalid("kind", f"Unknown site kind {changes['kind']!r}.", "unknown_site_kind")
    if "objects_available" in changes:
        changes["objects_available"] = _clean_objects(changes["objects_available"])
    with transaction.atomic():
        site = (
            Site.objects.select_for_update()
            .filter(pk=site_id, fleet__organization=organization)
            .first()
        )
        if site is None:
            raise NotFound("Site not found.")
        for name, value in changes.items():
            setattr(site, name, value)
        site.save()
    return site


def _resolve_capabilities(*, embodiment: str | None, end_effector: str | None, sensors) -> dict:
    resolved: dict = {}
    if embodiment is not None:
        found = Embodiment.objects.filter(slug=embodiment, active=True).first()
        if found is None:
            raise _invalid(
                "embodiment", f"Unknown embodiment {embodiment!r}.", "unknown_embodiment"
            )
        resolved["embodiment"] = found
    if end_effector is not None:
        if end_effector not in EndEffector.values:
            raise _invalid(
                "end_effector", f"Unknown end effector {end_effector!r}.", "unknown_end_effector"
            )
        resolved["end_effector"] = end_effector
    if sensors is not None:
        wanted = sorted(set(sensors))
        known = set(
            SensorAddon.objects.filter(slug__in=wanted, active=True).values_list("slug", flat=True)
        )
        unknown = [s for s in wanted if s not in known]
        if unknown:
            raise _invalid("sensors", f"Unknown sensors: {', '.join(unknown)}.", "unknown_sensor")
        resolved["sensor_slugs"] = wanted
    return resolved


def robot_create(
    *,
    organization: Organization,
    site_id,
    name: str,
    embodiment: str,
    end_effector: str,
    sensors: list[str] | tuple = (),
    active: bool = True,
) -> Robot:
    if not name.strip():
        raise _invalid("name", "A name is required.")
    capabilities = _resolve_capabilities(
        embodiment=embodiment, end_effector=end_effector, sensors=sensors
    )
    site = Site.objects.filter(pk=site_id, fleet__organization=organization).first()
    if site is None:
        raise NotFound("Site not found.", fields={"site": ["Site not found."]})
    return Robot.objects.create(
        fleet_id=site.fleet_id, site=site, name=name.strip(), active=active, **capabilities
    )


def robot_update(*, organization: Organization, robot_id, changes: dict) -> Robot:
    allowed = {"name", "embodiment", "end_effector", "sensors", "site", "active"}
    unknown = set(changes) - allowed
    if unknown:
        raise ServiceError(
            "These fields cannot be changed.", fields={k: ["Read-only."] for k in unknown}
        )
    capabilities = _resolve_capabilities(
        embodiment=changes.get("embodiment"),
        end_effector=changes.get("end_effector"),
        sensors=changes.get("sensors"),
    )
    with transaction.atomic():
        robot = (
            Robot.objects.select_for_update()
            .filter(pk=robot_id, fleet__organization=organization)
            .first()
        )
        if robot is None:
            raise NotFound("Robot not found.")
        if "site" in changes:
            site = Site.objects.filter(pk=changes["site"], fleet_id=robot.fleet_id).first()
            if site is None:
                raise NotFound("Site not found.", fields={"site": ["Site not found."]})
            robot.site = site
        for name, value in capabilities.items():
            setattr(robot, name, value)
        if "name" in changes:
            robot.name = changes["name"]
        if "active" in changes:
            robot.active = bool(changes["active"])
        robot.save()
    return robot


# --- Planning ----------------------------------------------------------------------------------


def _split_cents(total_cents: int, parts: int) -> list[int]:
    base, extra = divmod(total_cents, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def plan_hours(
    *, hours: Decimal, environments: int, pilot_hours: Decimal | None, max_job_hours: Decimal
) -> list[tuple[int, bool, Decimal]]:
    """(environment_index, is_pilot, hours) per job. Pure: the rules of planning in one place.

    The pilot (if any) is collected in environment 0; the rest of the hours are split evenly
    over all environments, then each environment's share into jobs of at most max_job_hours.
    """
    max_cents = int(max_job_hours * 100)
    plan: list[tuple[int, bool, Decimal]] = []

    def chunks(env: int, cents: int, pilot: bool) -> None:
        if cents <= 0:
            return
        for part in _split_cents(cents, math.ceil(cents / max_cents)):
            plan.append((env, pilot, Decimal(part) / 100))

    pilot_cents = int((pilot_hours or Decimal(0)) * 100)
    chunks(0, pilot_cents, True)
    rest = int(hours * 100) - pilot_cents
    for env, cents in enumerate(_split_cents(rest, environments)):
        chunks(env, cents, False)
    return plan


def _job_deadline(order: Order) -> datetime:
    if order.deadline is not None:
        return datetime.combine(order.deadline, dtime(23, 59, 59), tzinfo=UTC)
    return timezone.now() + timedelta(days=order.rate_card.standard_lead_days)


def order_plan(*, order_id) -> list:
    """Split a paid order into jobs (once), move it to collection, dispatch its open jobs.

    Safe to run again: jobs are created only the first time; every run re-enqueues the
    dispatch of open jobs (a crash between commit and enqueue loses nothing).
    """
    with transaction.atomic():
        order = (
            Order.objects.select_for_update()
            .select_related("task_type", "rate_card")
            .filter(pk=order_id)
            .first()
        )
        if order is None or order.status not in (Order.Status.PAID, Order.Status.IN_COLLECTION):
            return []
        if not order.jobs.exists():
            deadline = _job_deadline(order)
            end_effector = EMBODIMENT_END_EFFECTOR.get(
                order.embodiment.slug, EndEffector.PARALLEL_GRIPPER
            )
            site_kinds = [str(k) for k in CATEGORY_SITE_KINDS.get(order.task_type.category, [])]
            plan = plan_hours(
                hours=order.hours,
                environments=order.environments,
                pilot_hours=order.pilot_hours,
                max_job_hours=Decimal(settings.FLEETS_MAX_JOB_HOURS),
            )
            has_pilot = any(pilot for _, pilot, _ in plan)
            jobs = Job.objects.bulk_create(
                [
                    Job(
                        order=order,
                        sequence=sequence,
                        environment_index=env,
                        is_pilot=pilot,
                        embodiment_id=order.embodiment_id,
                        end_effector=end_effector,
                        sensor_slugs=list(order.sensor_slugs),
                        site_kinds=site_kinds,
                        target_hours=hours,
                        deadline=deadline,
                        status=Job.Status.HELD if has_pilot and not pilot else Job.Status.OPEN,
                    )
                    for sequence, (env, pilot, hours) in enumerate(plan, start=1)
                ]
            )
            JobEvent.objects.bulk_create(
                [
                    JobEvent(
                        job=job,
                        from_status="",
                        to_status=job.status,
                        actor_label=SYSTEM,
                        reason="Planned (pilot)." if job.is_pilot else "Planned.",
                    )
                    for job in jobs
                ]
            )
        if order.status == Order.Status.PAID:
            order_transition(
                order_id=order.id,
                to_status=Order.Status.IN_COLLECTION,
                actor_label=SYSTEM,
                reason="Jobs planned and dispatched.",
            )
        open_ids = [
            str(pk)
            for pk in order.jobs.filter(status=Job.Status.OPEN)
            .order_by("sequence")
            .values_list("pk", flat=True)
        ]
        for job_id in open_ids:
            _enqueue("job_dispatch", job_id)
    return open_ids


def order_release_remaining(*, order_id, actor_label: str = SYSTEM) -> list:
    """The customer approved the pilot: open the held jobs and dispatch them."""
    with transaction.atomic():
        Order.objects.select_for_update().filter(pk=order_id).first()
        released = []
        for job in (
            Job.objects.select_for_update()
            .filter(order_id=order_id, status=Job.Status.HELD)
            .order_by("pk")
        ):
            _job_move(
                job=job,
                to_status=Job.Status.OPEN,
                reason="Pilot approved.",
                actor_label=actor_label,
            )
            released.append(str(job.pk))
            _enqueue("job_dispatch", str(job.pk))
    return released


# --- Dispatch ------------------------------------------------------------------------------------


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
        if settings.FLEETS_DISPATCH_FAULT_DELAY_SECONDS:
            time.sleep(settings.FLEETS_DISPATCH_FAULT_DELAY_SECONDS)  # crash tests only
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
                expires_at=now + timedelta(seconds=settings.FLEETS_OFFER_TTL_SECONDS),
            )
            job.fleet, job.site_id = fleet, candidate.site_id
            _job_move(
                job=job,
                to_status=Job.Status.OFFERED,
                reason=f"Offered to {fleet.name} (score {candidate.score:.3f}).",
            )
            webhook_enqueue(fleet=fleet, event_type="offer.created", data=offer_payload(offer))
            return DispatchResult("offered", offer.pk)

        job.flag_reason = (
            "No eligible fleet: capability, unused site and capacity before the deadline."
        )
        _job_move(job=job, to_status=Job.Status.FLAGGED, reason=job.flag_reason)
        return DispatchResult("flagged")


def _assign(*, job: Job, fleet: Fleet, site_id, offer=None, bid=None, reason: str) -> Assignment:
    assignment = Assignment.objects.create(
        job=job, fleet=fleet, site_id=site_id, offer=offer, bid=bid
    )
    job.fleet, job.site_id = fleet, site_id
    job.flag_reason = ""
    _job_move(job=job, to_status=Job.Status.ASSIGNED, reason=reason, fleet=fleet)
    if bid is not None:
        Bid.objects.filter(pk=bid.pk).update(status=Bid.Status.WON)
        Bid.objects.filter(job=job, status=Bid.Status.OPEN).update(status=Bid.Status.LOST)
        webhook_enqueue(fleet=fleet, event_type="job.assigned", data=job_payload(job))
    return assignment


def offer_payload(offer: Offer) -> dict:
    return {
        "offer_id": str(offer.pk),
        "expires_at": offer.expires_at.isoformat(),
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
            raise Conflict(f"This offer is {offer.status}.", code="offer_not_pending")
        if offer.expires_at <= timezone.now():
            raise Conflict("This offer has expired.", code="offer_expired")
        if job.status != Job.Status.OFFERED:
            raise Conflict("This job is no longer on offer.", code="job_not_offered")
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
            raise Conflict(f"This offer is {offer.status}.", code="offer_not_pending")
        offer.status = Offer.Status.DECLINED
        offer.responded_at = timezone.now()
        offer.decline_reason = reason
        offer.save(update_fields=["status", "responded_at", "decline_reason"])
        _job_move(job=job, to_status=Job.Status.OPEN, reason="Offer declined.", fleet=offer.fleet)
        _enqueue("job_dispatch", str(job.pk))
    return offer


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
        raise _invalid("price_per_hour", "Must be zero or more.")
    with transaction.atomic():
        job = (
            Job.objects.select_for_update()
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
            raise _invalid("earliest_finish", "Must be before the job's deadline.")
        eligible = {c.site_id for c in selectors.dispatch_candidates(job=job, now=timezone.now())}
        if site.pk not in eligible:
            raise _invalid(
                "site",
                "This site is not eligible for the job (capabilities, diversity or capacity).",
                "not_eligible",
            )
        if Bid.objects.filter(job=job, fleet=site.fleet, status=Bid.Status.OPEN).exists():
            raise Conflict("Your fleet already has an open bid on this job.", code="bid_exists")
        bid = Bid.objects.create(
            job=job,
            fleet=site.fleet,
            site=site,
            price_per_hour=price_per_hour,
            earliest_finish=earliest_finish,
        )
        if job.status == Job.Status.FLAGGED:
            _job_move(job=job, to_status=Job.Status.OPEN, reason="A bid arrived.")
        if job.status == Job.Status.OPEN:
            _enqueue("job_dispatch", str(job.pk))
    return bid


def job_report_progress(
    *, organization: Organization, job_id, progress_hours: Decimal | None = None
) -> Job:
    """Heartbeat and progress of a held job; the first report starts it."""
    now = timezone.now()
    with transaction.atomic():
        job = (
            Job.objects.select_for_update()
            .filter(
                pk=job_id,
                fleet__organization=organization,
                status__in=[Job.Status.ASSIGNED, Job.Status.IN_PROGRESS],
            )
            .first()
        )
        if job is None:
            raise NotFound("Job not found.")
        if progress_hours is not None:
            if progress_hours < 0 or progress_hours > job.target_hours:
                raise _invalid("progress_hours", f"Between 0 and {job.target_hours}.")
            job.progress_hours = progress_hours
        job.last_heartbeat_at = now
        Fleet.objects.filter(pk=job.fleet_id).update(last_heartbeat_at=now)
        if job.status == Job.Status.ASSIGNED:
            _job_move(job=job, to_status=Job.Status.IN_PROGRESS, reason="Collection started.")
        else:
            job.save()
    return job


# --- Sweeper, staff tools, cancellation ------------------------------------------------------


def offer_expire(*, offer_id) -> bool:
    with transaction.atomic():
        job_id = Offer.objects.filter(pk=offer_id).values_list("job_id", flat=True).first()
        if job_id is None:
            return False
        job = Job.objects.select_for_update().get(pk=job_id)
        offer = Offer.objects.select_for_update().get(pk=offer_id)
        if offer.status != Offer.Status.PENDING or offer.expires_at > timezone.now():
            return False
        offer.status = Offer.Status.EXPIRED
        offer.save(update_fields=["status"])
        if job.status == Job.Status.OFFERED:
            _job_move(
                job=job, to_status=Job.Status.OPEN, reason="Offer expired.", fleet=offer.fleet
            )
            _enqueue("job_dispatch", str(job.pk))
        webhook_enqueue(
            fleet=offer.fleet, event_type="offer.expired", data={"offer_id": str(offer.pk)}
        )
    return True


def job_reclaim_silent(*, assignment_id, timeout_seconds: int) -> bool:
    """Take a job back from a fleet that went silent (no heartbeat) and dispatch it again."""
    now = timezone.now()
    with transaction.atomic():
        job_id = (
            Assignment.objects.filter(pk=assignment_id).values_list("job_id", flat=True).first()
        )
        if job_id is None:
            return False
        job = Job.objects.select_for_update().get(pk=job_id)
        assignment = (
            Assignment.objects.select_for_update().select_related("fleet").get(pk=assignment_id)
        )
        if not assignment.active:
            return False
        seen = max(
            t
            for t in (
                assignment.created_at,
                job.last_heartbeat_at,
                assignment.fleet.last_heartbeat_at,
            )
            if t is not None
        )
        if seen > now - timedelta(seconds=timeout_seconds):
            return False
        assignment.active = False
        assignment.ended_at = now
        assignment.end_reason = "No heartbeat from the fleet."
        assignment.save(update_fields=["active", "ended_at", "end_reason"])
        fleet = assignment.fleet
        _job_move(
            job=job, to_status=Job.Status.OPEN, reason="Fleet silent; re-dispatching.", fleet=fleet
        )
        webhook_enqueue(
            fleet=fleet,
            event_type="job.cancelled",
            data={"job_id": str(job.pk), "reason": "no_heartbeat"},
        )
        _enqueue("job_dispatch", str(job.pk))
    return True


@dataclass(frozen=True)
class SweepResult:
    offers_expired: int
    jobs_reclaimed: int
    jobs_redispatched: int
    webhooks_resent: int = 0
    orders_planned: int = 0
    jobs_of_cancelled_orders: int = 0


def dispatch_sweep() -> SweepResult:
    """The periodic sweep: expire offers, reclaim jobs from silent fleets, re-kick open jobs."""
    now = timezone.now()
    expired = 0
    for offer_id in Offer.objects.filter(
        status=Offer.Status.PENDING, expires_at__lte=now
    ).values_list("pk", flat=True)[:1000]:
        expired += offer_expire(offer_id=offer_id)

    timeout = settings.FLEETS_HEARTBEAT_TIMEOUT_SECONDS
    cutoff = now - timedelta(seconds=timeout)
    reclaimed = 0
    stale = Assignment.objects.filter(active=True, created_at__lte=cutoff).select_related(
        "job", "fleet"
    )
    for assignment in stale[:1000]:
        seen = [assignment.job.last_heartbeat_at, assignment.fleet.last_heartbeat_at]
        if all(t is None or t <= cutoff for t in seen):
            reclaimed += job_reclaim_silent(assignment_id=assignment.pk, timeout_seconds=timeout)

    stale_open = now - timedelta(seconds=settings.FLEETS_STALE_OPEN_JOB_SECONDS)
    # Jobs of cancelled orders whose order_cancelled work was never queued (broker down):
    # cancelled first, so they are not dispatched again below. Idempotent.
    cancelled = 0
    for order_id in (
        Order.objects.filter(status=Order.Status.CANCELLED, updated_at__lte=stale_open)
        .filter(jobs__isnull=False)
        .exclude(jobs__status__in=[Job.Status.COMPLETED, Job.Status.CANCELLED])
        .values_list("pk", flat=True)
        .distinct()[:100]
    ):
        cancelled += order_cancel_jobs(order_id=order_id)
    redispatched = 0
    for job_id in Job.objects.filter(
        status=Job.Status.OPEN, updated_at__lte=stale_open
    ).values_list("pk", flat=True)[:1000]:
        transaction.on_commit(lambda j=str(job_id): _dispatch_now(j))
        redispatched += 1
    # Deliveries whose message was lost (a crash between commit and publish): send again.
    # A receiver may then see an event twice; it dedupes on X-Marketplace-Delivery.
    stuck_before = now - timedelta(seconds=max(600, 2 * settings.FLEETS_WEBHOOK_TIMEOUT_SECONDS))
    resent = 0
    for delivery_id in (
        WebhookDelivery.objects.filter(status=WebhookDelivery.Status.PENDING)
        .filter(
            Q(next_attempt_at__lte=stuck_before)
            | Q(next_attempt_at__isnull=True, created_at__lte=stuck_before)
        )
        .values_list("pk", flat=True)[:1000]
    ):
        transaction.on_commit(lambda d=str(delivery_id): _deliver_now(d))
        resent += 1
    # Paid orders whose order_paid work was never queued (the broker was down when the order
    # was paid): plan them (idempotent).
    planned = 0
    for order_id in Order.objects.filter(
        status=Order.Status.PAID, jobs__isnull=True, updated_at__lte=stale_open
    ).values_list("pk", flat=True)[:100]:
        transaction.on_commit(lambda o=str(order_id): _plan_now(o))
        planned += 1
    return SweepResult(expired, reclaimed, redispatched, resent, planned, cancelled)


def _deliver_now(delivery_id: str) -> None:
    from fleets import tasks

    enqueue_or_leave_to_sweeper(tasks.webhook_deliver, delivery_id)


def _dispatch_now(job_id: str) -> None:
    from fleets import tasks

    enqueue_or_leave_to_sweeper(tasks.job_dispatch, job_id)


def _plan_now(order_id: str) -> None:
    from fleets import tasks

    enqueue_or_leave_to_sweeper(tasks.order_plan, order_id)


def job_redispatch(*, job_id, actor_label: str) -> Job:
    """Staff: send a flagged (or open) job through dispatch again."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status == Job.Status.FLAGGED:
            _job_move(
                job=job,
                to_status=Job.Status.OPEN,
                reason="Re-dispatch by staff.",
                actor_label=actor_label,
            )
        elif job.status != Job.Status.OPEN:
            raise Conflict(f"Only flagged or open jobs can be re-dispatched, not {job.status}.")
        _enqueue("job_dispatch", str(job.pk))
    return job


def order_cancel_jobs(*, order_id) -> int:
    """The order was cancelled: cancel its unfinished jobs and tell the fleets holding them."""
    cancelled = 0
    with transaction.atomic():
        jobs = Job.objects.select_for_update().filter(order_id=order_id).order_by("pk")
        for job in jobs:
            if job.status in (Job.Status.COMPLETED, Job.Status.CANCELLED):
                continue
            fleet = job.fleet
            Offer.objects.filter(job=job, status=Offer.Status.PENDING).update(
                status=Offer.Status.WITHDRAWN
            )
            Assignment.objects.filter(job=job, active=True).update(
                active=False, ended_at=timezone.now(), end_reason="Order cancelled."
            )
            Bid.objects.filter(job=job, status=Bid.Status.OPEN).update(status=Bid.Status.LOST)
            _job_move(job=job, to_status=Job.Status.CANCELLED, reason="Order cancelled.")
            if fleet is not None:
                webhook_enqueue(
                    fleet=fleet,
                    event_type="job.cancelled",
                    data={"job_id": str(job.pk), "reason": "order_cancelled"},
                )
            cancelled += 1
    return cancelled


# --- Webhooks ------------------------------------------------------------------------------------


def webhook_enqueue(*, fleet: Fleet, event_type: str, data: dict) -> WebhookDelivery | None:
    """Record an event for a fleet and send it after commit (no URL: nothing to send)."""
    if not fleet.webhook_url:
        return None
    delivery_id = uuid.uuid4()
    delivery = WebhookDelivery.objects.create(
        id=delivery_id,
        fleet=fleet,
        event_type=event_type,
        url=fleet.webhook_url,
        payload={
            "id": str(delivery_id),
            "type": event_type,
            "created": int(timezone.now().timestamp()),
            "fleet_id": str(fleet.pk),
            "data": data,
        },
    )
    _enqueue("webhook_deliver", str(delivery.pk))
    return delivery


@dataclass(frozen=True)
class AttemptOutcome:
    status: str  # the delivery's status after this attempt
    attempt: int
    retry_in: float | None  # seconds until the next attempt, None when done


def webhook_attempt(*, delivery_id) -> AttemptOutcome:
    """One HTTP attempt (outside any transaction), then log it on the delivery."""
    delivery = WebhookDelivery.objects.select_related("fleet").filter(pk=delivery_id).first()
    if delivery is None:
        return AttemptOutcome("missing", 0, None)
    if delivery.status != WebhookDelivery.Status.PENDING:
        return AttemptOutcome(delivery.status, delivery.attempt_count, None)
    result = webhooks.post(
        url=delivery.url,
        secret=delivery.fleet.webhook_secret,
        event_type=delivery.event_type,
        delivery_id=str(delivery.pk),
        payload=delivery.payload,
        timeout=settings.FLEETS_WEBHOOK_TIMEOUT_SECONDS,
    )
    now = timezone.now()
    with transaction.atomic():
        delivery = WebhookDelivery.objects.select_for_update().get(pk=delivery_id)
        if delivery.status != WebhookDelivery.Status.PENDING:
            return AttemptOutcome(delivery.status, delivery.attempt_count, None)
        delivery.attempt_count += 1
        delivery.attempts = [
            *delivery.attempts,
            {
                "at": now.isoformat(),
                "status_code": result.status_code,
                "error": result.error,
                "ms": result.elapsed_ms,
            },
        ]
        delivery.last_status_code = result.status_code
        retry_in = None
        if result.ok:
            delivery.status = WebhookDelivery.Status.DELIVERED
            delivery.delivered_at = now
            delivery.next_attempt_at = None
        elif delivery.attempt_count >= settings.FLEETS_WEBHOOK_MAX_ATTEMPTS:
            delivery.status = WebhookDelivery.Status.FAILED
            delivery.next_attempt_at = None
        else:
            retry_in = webhooks.backoff_seconds(
                delivery.attempt_count,
                base=settings.FLEETS_WEBHOOK_BACKOFF_SECONDS,
                cap=settings.FLEETS_WEBHOOK_BACKOFF_MAX_SECONDS,
            )
            delivery.next_attempt_at = now + timedelta(seconds=retry_in)
        delivery.save()
    return AttemptOutcome(delivery.status, delivery.attempt_count, retry_in)
