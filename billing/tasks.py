"""Celery tasks (queue "billing"): take ids and call one service (imported inside the task:
services import this module to enqueue); safe to run twice."""

from celery import shared_task

from billing.stripe_gateway import GatewayUnavailable
from marketplace.task_options import task_options


@shared_task(bind=True, **task_options(max_retries=10, autoretry_for=()))
def webhook_event_process(self, event_pk: str) -> str:
    from billing.services.stripe_events import webhook_event_mark_failed, webhook_event_process

    try:
        return webhook_event_process(event_pk=event_pk)
    except Exception as exc:
        webhook_event_mark_failed(event_pk=event_pk, error=repr(exc))
        raise self.retry(exc=exc, countdown=min(600, 10 * 2**self.request.retries)) from exc


@shared_task(
    **task_options(
        transient=(GatewayUnavailable,), backoff=10, max_retries=20, retry_backoff_max=600
    )
)
def refund_submit(refund_id: str) -> str:
    from billing.services.refunds import refund_submit

    return refund_submit(refund_id=refund_id).status


@shared_task(**task_options())
def order_trueup(order_id: str) -> str | None:
    from billing.services.refunds import order_trueup

    refund = order_trueup(order_id=order_id)
    return str(refund.id) if refund else None


@shared_task(**task_options())
def order_cancellation_refund(order_id: str) -> str | None:
    from billing.services.refunds import order_cancellation_refund

    refund = order_cancellation_refund(order_id=order_id)
    return str(refund.id) if refund else None


@shared_task(**task_options())
def billing_sweep() -> dict:
    from billing.services.sweep import billing_sweep

    return billing_sweep()


@shared_task(**task_options())
def order_fleet_payables(order_id: str) -> list[str]:
    from billing.services.payables import order_fleet_payables

    return [str(payable.id) for payable in order_fleet_payables(order_id=order_id)]


@shared_task(**task_options())
def payout_run() -> dict:
    """Monthly (celery beat): pay each fleet its unpaid payables. Safe to run twice."""
    from billing.services.payments import payments_enabled
    from billing.services.payouts import payout_run

    if not payments_enabled():
        return {"skipped": "Stripe is not configured"}
    run = payout_run(triggered_by="beat")
    return {"run": str(run.id), **run.report}


@shared_task(**task_options())
def order_payables_reconcile(order_id: str) -> list[str]:
    from billing.services.payables import payables_reconcile

    return [str(d.id) for d in payables_reconcile(order_id=order_id)]


@shared_task(**task_options())
def order_credit(order_id: str) -> str | None:
    from billing.services.refunds import order_credit

    refund = order_credit(order_id=order_id)
    return str(refund.id) if refund else None
