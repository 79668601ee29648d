"""Waitlisted orders (issue 30): placed although the supply check found the platform's fleets
could not cover them, their jobs are planned held (planning.order_plan) until staff release
the order from the console; then its held jobs open and are dispatched."""

from django.db import transaction

from fleets.models import Job
from fleets.services.jobs import job_move
from marketplace.queueing import enqueue_on_commit
from orders.collection_plan import order_waitlist_release


def waitlist_release(*, order_id, actor_label: str, reason: str = "") -> list[str]:
    """The order is no longer waitlisted (orders audits it); its held jobs open and are
    dispatched. With a pilot, only the pilot's jobs open: the rest stay held for the
    customer's approval (planning.order_release_remaining). Returns the opened job ids."""
    with transaction.atomic():
        order = order_waitlist_release(order_id=order_id, actor_label=actor_label, reason=reason)
        held = Job.objects.select_for_update().filter(order_id=order.pk, status=Job.Status.HELD)
        if held.filter(is_pilot=True).exists():
            held = held.filter(is_pilot=True)
        opened = []
        for job in held.order_by("sequence"):
            job_move(
                job=job,
                to_status=Job.Status.OPEN,
                reason="Released from the waitlist by staff.",
                actor_label=actor_label,
            )
            opened.append(str(job.pk))
            enqueue_on_commit("fleets.tasks.job_dispatch", str(job.pk))
    return opened
