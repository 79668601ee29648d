"""Receivers of orders' signals. Thin: they only enqueue a task (signals fire after commit)."""

from fleets import tasks


def on_order_paid(sender, order_id, **kwargs) -> None:
    tasks.order_plan.delay(str(order_id))


def on_order_cancelled(sender, order_id, **kwargs) -> None:
    tasks.order_cancel_jobs.delay(str(order_id))
