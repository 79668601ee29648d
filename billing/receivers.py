"""Reactions to orders' signals. Thin: each only enqueues a billing task."""

from billing import tasks
from marketplace.queueing import enqueue_or_leave_to_sweeper
from orders import signals

# Broker down: billing_sweep finds cancelled or delivered orders whose refund or payables
# were never recorded and queues them, so the order's committed change never fails for it.


def on_order_cancelled(sender, order_id, **kwargs) -> None:
    enqueue_or_leave_to_sweeper(tasks.order_cancellation_refund, str(order_id))
    # Work fleets did before the cancellation is paid (accepted time only).
    enqueue_or_leave_to_sweeper(tasks.order_fleet_payables, str(order_id))


def on_order_delivered(sender, order_id, plan_delivered=None, **kwargs) -> None:
    if isinstance(plan_delivered, dict):
        # A planned order: the shortfall credits, then the hours; the true-up queues the
        # payables after it (their customer parts count the credits).
        enqueue_or_leave_to_sweeper(
            tasks.order_trueup,
            str(order_id),
            plan_delivered.get("environments"),
            plan_delivered.get("objects"),
        )
        return
    enqueue_or_leave_to_sweeper(tasks.order_trueup, str(order_id))
    enqueue_or_leave_to_sweeper(tasks.order_fleet_payables, str(order_id))


def on_order_hours_excluded(sender, order_id, job_ids=(), credit=False, **kwargs) -> None:
    # The fleet is not paid for excluded episodes (a payable recorded already is reversed).
    enqueue_or_leave_to_sweeper(tasks.order_payables_reconcile, str(order_id))
    if credit:  # the customer is credited for those hours (a pro rata refund)
        enqueue_or_leave_to_sweeper(tasks.order_credit, str(order_id))


def connect() -> None:
    signals.order_hours_excluded.connect(
        on_order_hours_excluded, dispatch_uid="billing.order_hours_excluded"
    )
    signals.order_cancelled.connect(on_order_cancelled, dispatch_uid="billing.order_cancelled")
    signals.order_delivered.connect(on_order_delivered, dispatch_uid="billing.order_delivered")
