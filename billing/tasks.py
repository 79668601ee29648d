"""Celery tasks (queue "billing"): take ids and call one service; services queue them by name
(marketplace/queueing.py) and never import this module. Safe to run twice."""

from celery import shared_task

from billing.services import (
    payables,
    payments,
    payouts,
    plan_credits,
    refunds,
    stripe_events,
    sweep,
)
from billing.stripe_gateway import GatewayUnavailable
from marketplace.task_options import task_options


@shared_task(bind=True, **task_options(max_retries=10, autoretry_for=()))
def webhook_event_process(self, event_pk: str) -> str:
    try:
        return stripe_events.webhook_event_process(event_pk=event_pk)
    except Exception as exc:
        stripe_events.webhook_event_mark_failed(event_pk=event_pk, error=repr(exc))
        raise self.retry(exc=exc, countdown=min(600, 10 * 2**self.request.retries)) from exc


@shared_task(
    **task_options(
        transient=(GatewayUnavailable,), backoff=10, max_retries=20, retry_backoff_max=600
    )
)
def refund_submit(refund_id: str) -> str:
    return refunds.refund_submit(refund_id=refund_id).status


@shared_task(**task_options())
def order_trueup(
    order_id: str, environments: int | None = None, objects: int | None = None
) -> str | None:
    """`environments`, `objects`: a planned order's distinct ones delivered (else None)."""
    delivered = None
    if environments is not None or objects is not None:
        delivered = {"environments": environments, "objects": objects}
    refund = plan_credits.order_delivered_trueup(order_id=order_id, delivered=delivered)
    return str(refund.id) if refund else None


@shared_task(**task_options())
def order_cancellation_refund(order_id: str) -> str | None:
    refund = refunds.order_cancellation_refund(order_id=order_id)
    return str(refund.id) if refund else None


@shared_task(**task_options())
def billing_sweep() -> dict:
    return sweep.billing_sweep()


@shared_task(**task_options())
def order_fleet_payables(order_id: str) -> list[str]:
    return [str(payable.id) for payable in payables.order_fleet_payables(order_id=order_id)]


@shared_task(**task_options())
def payout_run() -> dict:
    """Monthly (celery beat): pay each fleet its unpaid payables. Safe to run twice."""
    if not payments.payments_enabled():
        return {"skipped": "Stripe is not configured"}
    run = payouts.payout_run(triggered_by="beat")
    return {"run": str(run.id), **run.report}


@shared_task(**task_options())
def order_payables_reconcile(order_id: str) -> list[str]:
    return [str(d.id) for d in payables.payables_reconcile(order_id=order_id)]


@shared_task(**task_options())
def order_credit(order_id: str) -> str | None:
    refund = refunds.order_credit(order_id=order_id)
    return str(refund.id) if refund else None
