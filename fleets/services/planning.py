"""Planning: a paid order's hours become jobs (environments first, then job-sized chunks) and,
for an order planned by cell (issue 30), its (environment, object) cells."""

import math
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from decimal import ROUND_UP, Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from fleets.models import Assignment, EndEffector, Job, JobEvent, OrderCell, SiteKind
from fleets.services.jobs import SYSTEM, job_move
from marketplace.queueing import enqueue_on_commit
from orders.models import Order
from orders.services import order_start_collection

# Orders carry no end effector: it follows from the embodiment they ask for.
EMBODIMENT_END_EFFECTOR = {"dexterous-hand": EndEffector.DEXTEROUS_HAND}
# Site kinds where a task category makes sense; a category not listed accepts any kind.
CATEGORY_SITE_KINDS = {
    "household": [SiteKind.KITCHEN, SiteKind.HOUSEHOLD, SiteKind.OFFICE],
    "logistics": [SiteKind.WAREHOUSE_SHELF, SiteKind.RETAIL_AISLE, SiteKind.PRODUCTION_LINE],
    "assembly": [SiteKind.LAB_BENCH, SiteKind.PRODUCTION_LINE],
}


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


def split_cell_targets(*, hours: Decimal, environments: int, objects: int) -> list[Decimal]:
    """Each cell's target in seconds, environment by environment then object slot: the order's
    hours x 3600 split evenly to the millisecond (the first cells take the odd milliseconds),
    summing exactly to the whole. Pure."""
    cells = environments * objects
    if cells <= 0:
        return []
    total_ms = int((hours * 3600 * 1000).to_integral_value())
    base, extra = divmod(total_ms, cells)
    return [Decimal(base + (1 if i < extra else 0)) / 1000 for i in range(cells)]


def _plan_cells(order: Order) -> None:
    """Create the order's unbound cells (once; the caller holds the order's lock)."""
    if order.cells.exists():
        return
    objects = order.objects_per_environment
    targets = split_cell_targets(
        hours=order.hours, environments=order.environments, objects=objects
    )
    OrderCell.objects.bulk_create(
        [
            OrderCell(
                order=order,
                environment_index=i // objects,
                object_slot=i % objects,
                target_seconds=target,
            )
            for i, target in enumerate(targets)
        ]
    )


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
        if order.cells_planned:
            _plan_cells(order)
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
                        # a waitlisted order's jobs all wait for staff (waitlist_release)
                        status=Job.Status.HELD
                        if order.waitlisted or (has_pilot and not pilot)
                        else Job.Status.OPEN,
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
                        reason=("Planned (pilot)." if job.is_pilot else "Planned.")
                        + (" Held: the order is waitlisted." if order.waitlisted else ""),
                    )
                    for job in jobs
                ]
            )
        if order.status == Order.Status.PAID:
            order_start_collection(
                order_id=order.id, actor_label=SYSTEM, reason="Jobs planned and dispatched."
            )
        open_ids = [
            str(pk)
            for pk in order.jobs.filter(status=Job.Status.OPEN)
            .order_by("sequence")
            .values_list("pk", flat=True)
        ]
        for job_id in open_ids:
            enqueue_on_commit("fleets.tasks.job_dispatch", job_id)
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
            job_move(
                job=job,
                to_status=Job.Status.OPEN,
                reason="Pilot approved.",
                actor_label=actor_label,
            )
            released.append(str(job.pk))
            enqueue_on_commit("fleets.tasks.job_dispatch", str(job.pk))
    return released


def job_recollect(*, job_id, seconds: Decimal, actor_label: str, reason: str) -> Job | None:
    """`seconds` of a job's accepted time were excluded: collect them again.

    A job still collecting (or held for the pilot) simply has that much more to fill. A
    completed one is final (its payable is its own), so a new job of the same environment and
    phase collects exactly those seconds (its target_hours, rounded up to the hundredth of an
    hour, only plans capacity), at most at the rate agreed for them, and is dispatched;
    returned.
    A cancelled job's hours are not re-collected."""
    with transaction.atomic():
        job = Job.objects.select_for_update().select_related("order__rate_card").get(pk=job_id)
        if job.status != Job.Status.COMPLETED or seconds <= 0:
            return None
        Order.objects.select_for_update().filter(pk=job.order_id).first()
        hours = max(Decimal("0.01"), (seconds / 36).to_integral_value(rounding=ROUND_UP) / 100)
        sequence = Job.objects.filter(order_id=job.order_id).aggregate(n=Max("sequence"))["n"]
        deadline = max(job.deadline, _job_deadline(job.order))
        # Who collected the excluded seconds, at what agreed rate: the job's latest assignment
        # (what it was paid under). That fleet is offered the new job at that rate, any other
        # fleet at most it (services/pay_terms.py), whatever rate the fleet asks now.
        collected = (
            Assignment.objects.filter(job=job)
            .order_by("-created_at", "-pk")
            .values_list("fleet_id", "rate_per_hour")
            .first()
        )
        original_fleet_id, original_rate = collected or (None, None)
        extra = Job.objects.create(
            order_id=job.order_id,
            sequence=sequence + 1,
            environment_index=job.environment_index,
            is_pilot=job.is_pilot,
            embodiment_id=job.embodiment_id,
            end_effector=job.end_effector,
            sensor_slugs=list(job.sensor_slugs),
            site_kinds=list(job.site_kinds),
            target_hours=hours,
            exact_target_seconds=seconds if seconds != hours * 3600 else None,
            deadline=deadline,
            status=Job.Status.OPEN,
            recollection_of=job,
            original_fleet_id=original_fleet_id,
            original_rate_per_hour=original_rate,
        )
        JobEvent.objects.create(
            job=extra,
            from_status="",
            to_status=extra.status,
            actor_label=actor_label,
            reason=f"Re-collection of {seconds} s excluded from job #{job.sequence}: {reason}"[
                :2000
            ],
        )
        enqueue_on_commit("fleets.tasks.job_dispatch", str(extra.pk))
    return extra


def job_collect_shortfall(*, cell_id, seconds: Decimal, actor_label: str = SYSTEM) -> Job | None:
    """A cell of a planned order fell short (its environment's jobs are done, its accepted time
    below its minimum share): a new job of that environment collects `seconds` more, shaped as
    a re-collection (the next sequence, the environment's latest job's capabilities and
    deadline at least the order's, its fleet offered it at the rate it was paid, any other at
    most that), and is dispatched; returned. Idempotent: None while the cell already has an
    open shortfall job (the caller holds the order's lock)."""
    cell = OrderCell.objects.select_related("order__rate_card", "site_object").get(pk=cell_id)
    if seconds <= 0:
        return None
    if cell.shortfall_jobs.exclude(
        status__in=[Job.Status.COMPLETED, Job.Status.CANCELLED]
    ).exists():
        return None
    previous = (
        Job.objects.filter(order_id=cell.order_id, environment_index=cell.environment_index)
        .exclude(status=Job.Status.CANCELLED)
        .order_by("-sequence")
        .first()
    )
    if previous is None:
        return None
    hours = max(Decimal("0.01"), (seconds / 36).to_integral_value(rounding=ROUND_UP) / 100)
    sequence = Job.objects.filter(order_id=cell.order_id).aggregate(n=Max("sequence"))["n"]
    collected = (
        Assignment.objects.filter(
            job__order_id=cell.order_id, job__environment_index=cell.environment_index
        )
        .order_by("-created_at", "-pk")
        .values_list("fleet_id", "rate_per_hour")
        .first()
    )
    original_fleet_id, original_rate = collected or (None, None)
    extra = Job.objects.create(
        order_id=cell.order_id,
        sequence=sequence + 1,
        environment_index=cell.environment_index,
        is_pilot=False,
        embodiment_id=previous.embodiment_id,
        end_effector=previous.end_effector,
        sensor_slugs=list(previous.sensor_slugs),
        site_kinds=list(previous.site_kinds),
        target_hours=hours,
        exact_target_seconds=seconds if seconds != hours * 3600 else None,
        deadline=max(previous.deadline, _job_deadline(cell.order)),
        status=Job.Status.OPEN,
        original_fleet_id=original_fleet_id,
        original_rate_per_hour=original_rate,
        shortfall_cell=cell,
    )
    what = f" ({cell.site_object.name})" if cell.site_object else ""
    JobEvent.objects.create(
        job=extra,
        from_status="",
        to_status=extra.status,
        actor_label=actor_label,
        reason=(
            f"Shortfall of cell {cell.environment_index + 1}x{cell.object_slot + 1}{what}: "
            f"{seconds} s more to collect."
        ),
    )
    enqueue_on_commit("fleets.tasks.job_dispatch", str(extra.pk))
    return extra
