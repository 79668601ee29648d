"""Receivers of orders' signals. Thin: they only enqueue a task (signals fire after commit)."""

from fleets import tasks
from marketplace.queueing import enqueue_or_leave_to_sweeper

# Broker down: dispatch_sweep plans paid orders without jobs and cancels the jobs of
# cancelled orders, so the order's own change (already committed) is never failed for it.


def on_order_paid(sender, order_id, **kwargs) -> None:
    enqueue_or_leave_to_sweeper(tasks.order_plan, str(order_id))


def on_order_cancelled(sender, order_id, **kwargs) -> None:
    enqueue_or_leave_to_sweeper(tasks.order_cancel_jobs, str(order_id))
