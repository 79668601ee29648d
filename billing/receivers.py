"""Reactions to orders' signals. Thin: each only enqueues a billing task."""

from orders import signals


def on_order_cancelled(sender, order_id, **kwargs) -> None:
    from billing import tasks

    tasks.order_cancellation_refund.delay(str(order_id))


def on_order_delivered(sender, order_id, **kwargs) -> None:
    from billing import tasks

    tasks.order_trueup.delay(str(order_id))
    tasks.order_fleet_payables.delay(str(order_id))


def connect() -> None:
    signals.order_cancelled.connect(on_order_cancelled, dispatch_uid="billing.order_cancelled")
    signals.order_delivered.connect(on_order_delivered, dispatch_uid="billing.order_delivered")
