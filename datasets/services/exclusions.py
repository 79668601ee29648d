"""Excluding accepted episodes from their order (one by one, or all of an operator's): by staff
or the customer within its own order, with a reason code. Excluded episodes stop counting
(their job's, order's and plan cell's accepted seconds go down), their hours go back to
collection (the order returns to collection, a completed job's hours become a new dispatched
job), the fleet is not paid for them (billing hears `orders.signals.order_hours_excluded` and
reduces or deducts the payable), the delivered versions are superseded by a next one, and
each exclusion is an append-only EpisodeExclusion row naming who acted.

A customer excludes only episodes not delivered yet (delivered ones are claimed:
datasets/services/claims.py), within its rejection allowance (datasets/services/allowance.py),
and never episodes whose hours were already re-collected once (a second round is staff's)."""

import uuid
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal

from django.db import transaction
from django.db.models import Sum

from datasets.error_codes import ErrorCode
from datasets.models import Delivery, Episode, EpisodeExclusion, ExclusionReason, Recollection
from datasets.services.allowance import require_within_allowance
from datasets.services.cells import cells_recount
from datasets.services.delivery_versions import deliveries_supersede
from fleets.models import Job
from fleets.services.planning import job_recollect
from marketplace.audit import actor_label as label_of
from marketplace.errors import Conflict, NotFound, invalid
from marketplace.tenancy import Caller
from orders import signals
from orders.models import Order
from orders.services import order_recollect

HOUR = Decimal(3600)
EXCLUDABLE_ORDER_STATES = (
    Order.Status.IN_COLLECTION,
    Order.Status.IN_REVIEW,
    Order.Status.DELIVERED,
)
Scope = EpisodeExclusion.Scope
Remedy = EpisodeExclusion.Remedy


@dataclass
class ExclusionResult:
    order: Order
    excluded: list[EpisodeExclusion] = field(default_factory=list)  # new ones only
    already: int = 0  # named episodes excluded before (counted once)
    seconds: Decimal = Decimal(0)  # accepted time the order lost
    recollection_jobs: list[Job] = field(default_factory=list)


def _check_reason(reason_code: str, note: str) -> None:
    if reason_code not in ExclusionReason.values:
        raise invalid("reason_code", f"One of: {', '.join(ExclusionReason.values)}.")
    if "\x00" in note:
        raise invalid("note", "Null characters are not allowed.")
    if len(note) > 2000:
        raise invalid("note", "At most 2000 characters.")
    if reason_code == ExclusionReason.OTHER and not note.strip():
        raise invalid("note", "Say why (the reason is 'other').")


def _locked_order(caller: Caller | None, order_id) -> Order:
    orders = Order.objects.select_for_update()
    if caller is not None:  # a customer: its own orders only; a fleet owns no order
        orders = orders.filter(organization=caller.organization)
    order = orders.filter(pk=order_id).first()
    if order is None:
        raise NotFound("Order not found.")
    if order.status not in EXCLUDABLE_ORDER_STATES:
        raise Conflict(
            f"Episodes of an order that is {order.get_status_display().lower()} cannot be"
            " excluded.",
            code=ErrorCode.EXCLUSION_NOT_ALLOWED,
        )
    if caller is not None and order.status == Order.Status.DELIVERED:
        raise Conflict(
            "The order is delivered: reject delivered episodes with a claim (POST "
            "/deliveries/<id>/claims), decided by the re-check or by staff.",
            code=ErrorCode.EPISODE_DELIVERED,
        )
    if Delivery.objects.filter(order=order, status=Delivery.Status.ASSEMBLING).exists():
        raise Conflict(
            "A delivery of this order is being assembled: exclude once it is ready.",
            code=ErrorCode.EXCLUSION_NOT_ALLOWED,
        )
    return order


def _named_episodes(order: Order, episode_ids, operator: str) -> list[Episode]:
    """The episodes to exclude, locked; an id that is not this order's is a 404."""
    if bool(episode_ids) == bool(operator):
        raise invalid("episodes", "Name either episodes or one operator.")
    episodes = Episode.objects.select_for_update().filter(order=order).order_by("pk")
    if operator:
        found = list(
            episodes.filter(
                operator=operator, status__in=[Episode.Status.ACCEPTED, Episode.Status.EXCLUDED]
            )
        )
        if not found:
            raise NotFound(
                "No accepted episode of this operator in this order.",
                fields={"operator": ["Not an operator of this order's accepted episodes."]},
            )
        return found
    ids = set(episode_uuids(episode_ids))
    found = list(episodes.filter(pk__in=ids))
    if len(found) != len(ids):
        raise NotFound("Episode not found in this order.", fields={"episodes": ["Not found."]})
    refused = [
        e for e in found if e.status not in (Episode.Status.ACCEPTED, Episode.Status.EXCLUDED)
    ]
    if refused:
        raise Conflict(
            f"Only accepted episodes are excluded; episode {refused[0].id} is {refused[0].status}.",
            code=ErrorCode.EPISODE_NOT_ACCEPTED,
        )
    return found


def episode_uuids(values) -> list[str]:
    """Episode ids as canonical strings, in order, once each; anything else is a 400."""
    ids = []
    for value in values or []:
        try:
            ids.append(str(uuid.UUID(str(value))))
        except ValueError:
            raise invalid("episodes", f"Not an episode id: {str(value)[:40]!r}.") from None
    return list(dict.fromkeys(ids))


def _job_lost_seconds(job: Job) -> Decimal:
    """Re-count a job's accepted time from its accepted episodes (QA accrues up to the
    target); save it and return how much it went down. The caller holds the job's lock."""
    total = Episode.objects.filter(job=job, status=Episode.Status.ACCEPTED).aggregate(
        s=Sum("duration_seconds")
    )["s"] or Decimal(0)
    kept = min(total, job.target_seconds, job.accepted_seconds)
    lost = job.accepted_seconds - kept
    if lost:
        job.accepted_seconds = kept
        job.save(update_fields=["accepted_seconds", "updated_at"])
    return lost


def episodes_exclude(
    *,
    order_id,
    reason_code: str,
    caller: Caller | None = None,
    staff_label: str = "",
    episode_ids=(),
    operator: str = "",
    note: str = "",
    scope: str = "",
    remedy: str = Remedy.RECOLLECT,
    reasons: dict | None = None,
    against_allowance: bool = False,
) -> ExclusionResult:
    """Exclude accepted episodes of an order (see the module). `caller` is the customer (its
    own order only; another's is a 404), None for staff or a granted claim (`staff_label`:
    who acted). `reasons`: episode id -> (reason code, note), for episodes excluded for
    another reason than `reason_code`. A customer's exclusions (but a pilot review's) and
    `against_allowance` ones count against its rejection allowance. Excluding an episode
    again changes nothing; the whole call is one transaction."""
    note = note or ""
    _check_reason(reason_code, note)
    actor = label_of(caller) if caller is not None else (staff_label or "staff")
    scope = scope or (Scope.OPERATOR if operator else Scope.EPISODE)
    customer = caller is not None and scope != Scope.PILOT_REVIEW
    with transaction.atomic():
        order = _locked_order(caller, order_id)
        named = _named_episodes(order, episode_ids, operator)
        result = ExclusionResult(order=order)
        fresh = [e for e in named if e.status == Episode.Status.ACCEPTED]
        result.already = len(named) - len(fresh)
        if not fresh:
            return result
        if customer:
            _check_customer_may_exclude(order, fresh)
        for episode in fresh:
            episode.status = Episode.Status.EXCLUDED
            episode.save(update_fields=["status"])
        jobs = Job.objects.select_for_update().filter(pk__in={e.job_id for e in fresh})
        lost_by_job = {job.id: (job, _job_lost_seconds(job)) for job in jobs.order_by("pk")}
        result.seconds = sum((lost for _, lost in lost_by_job.values()), Decimal(0))
        _order_lose(order, result.seconds)
        if order.cells_planned:  # their cells of the plan lose their time too
            cells_recount(cell_ids={e.cell_id for e in fresh if e.cell_id is not None})
        why = {str(e.id): (reason_code, note) for e in fresh} | dict(reasons or {})
        result.excluded = _record(
            fresh, lost_by_job, why, scope, remedy, actor, against_allowance or customer
        )
        deliveries_supersede(order=order, kinds=_kinds_affected(order, lost_by_job))
        if remedy == Remedy.RECOLLECT and result.seconds > 0:
            result.recollection_jobs = _recollect(order, lost_by_job, actor, reason_code)
        job_ids = [str(pk) for pk, (_, lost) in lost_by_job.items() if lost > 0]
        credit = remedy == Remedy.CREDIT
        transaction.on_commit(
            lambda: signals.order_hours_excluded.send(
                sender=Order, order_id=order.id, job_ids=job_ids, credit=credit
            )
        )
    return result


def _kinds_affected(order: Order, lost_by_job: dict) -> list[str]:
    """The full dataset holds every accepted episode; the pilot's version is replaced only
    while the order is still in its pilot phase (no full delivery yet)."""
    kinds = [Delivery.Kind.FULL]
    pilot = any(job.is_pilot for job, _ in lost_by_job.values())
    if pilot and not Delivery.objects.filter(order=order, kind=Delivery.Kind.FULL).exists():
        kinds.append(Delivery.Kind.PILOT)
    return kinds


def _order_lose(order: Order, seconds: Decimal) -> None:
    if not seconds:
        return
    order.accepted_seconds = max(Decimal(0), order.accepted_seconds - seconds)
    order.accepted_hours = (order.accepted_seconds / HOUR).quantize(
        Decimal("0.01"), rounding=ROUND_DOWN
    )
    order.save(update_fields=["accepted_seconds", "accepted_hours", "updated_at"])


def _check_customer_may_exclude(order: Order, fresh: list[Episode]) -> None:
    """A customer excludes undelivered episodes, not re-collected ones, within its allowance
    (the caller holds the order's lock)."""
    delivered = set()
    for ids in Delivery.objects.filter(
        order=order, kind=Delivery.Kind.FULL, status=Delivery.Status.READY
    ).values_list("episode_ids", flat=True):
        delivered.update(ids)
    if shown := [str(e.id) for e in fresh if str(e.id) in delivered]:
        raise Conflict(
            f"{len(shown)} of these episodes were delivered: reject them with a claim.",
            code=ErrorCode.EPISODE_DELIVERED,
            fields={"episodes": shown[:20]},
        )
    again = Recollection.objects.filter(job_id__in={e.job_id for e in fresh})
    if again.exists():
        raise Conflict(
            "These hours were re-collected once already; only staff collect them again.",
            code=ErrorCode.RECOLLECTION_EXHAUSTED,
        )
    require_within_allowance(order, sum((e.duration_seconds for e in fresh), Decimal(0)))


def _record(fresh, lost_by_job, why, scope, remedy, actor, against_allowance) -> list:
    """One append-only row per newly excluded episode, the job's lost time spread over its
    episodes in order (so the rows add up to what the job lost)."""
    left = {pk: lost for pk, (_, lost) in lost_by_job.items()}
    rows = []
    for episode in fresh:
        seconds = min(episode.duration_seconds or Decimal(0), left[episode.job_id])
        left[episode.job_id] -= seconds
        reason_code, note = why[str(episode.id)]
        rows.append(
            EpisodeExclusion(
                episode=episode,
                order_id=episode.order_id,
                job_id=episode.job_id,
                operator=episode.operator,
                scope=scope,
                remedy=remedy,
                reason_code=reason_code,
                note=note.strip(),
                seconds=seconds,
                actor_label=actor,
                against_allowance=against_allowance,
            )
        )
    return EpisodeExclusion.objects.bulk_create(rows)


def _recollect(order: Order, lost_by_job: dict, actor: str, reason_code: str) -> list[Job]:
    """The lost hours go back to collection: completed jobs' hours as new dispatched jobs, the
    order back in collection (from review or delivered)."""
    created = []
    for job, lost in lost_by_job.values():
        if lost > 0:
            extra = job_recollect(
                job_id=job.id, seconds=lost, actor_label=actor, reason=f"excluded ({reason_code})"
            )
            if extra is not None:
                Recollection.objects.create(
                    job=extra, source_job=job, seconds=lost, actor_label=actor
                )
                created.append(extra)
    collecting = Job.objects.filter(
        order=order,
        status__in=[
            Job.Status.OPEN,
            Job.Status.OFFERED,
            Job.Status.ASSIGNED,
            Job.Status.IN_PROGRESS,
            Job.Status.FLAGGED,
        ],
    ).exists()
    if order.status != Order.Status.IN_COLLECTION and collecting:
        order_recollect(
            order_id=order.id,
            actor_label=actor,
            reason=f"Episodes excluded ({reason_code}): their hours are collected again.",
        )
    return created
