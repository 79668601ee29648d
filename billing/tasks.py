"""Celery tasks (queue "billing"): take ids, call a service, safe to run twice."""

from celery import shared_task

from billing import services
from billing.stripe_gateway import GatewayUnavailable


@shared_task(bind=True, acks_late=True, max_retries=10)
def webhook_event_process(self, event_pk: int) -> str:
    try:
        return services.webhook_event_process(event_pk=event_pk)
    except Exception as exc:
        services.webhook_event_mark_failed(event_pk=event_pk, error=repr(exc))
        raise self.retry(exc=exc, countdown=min(600, 10 * 2**self.request.retries)) from exc


@shared_task(
    bind=True,
    acks_late=True,
    autoretry_for=(GatewayUnavailable,),
    retry_backoff=10,
    retry_backoff_max=600,
    max_retries=20,
)
def refund_submit(self, refund_id: str) -> str:
    return services.refund_submit(refund_id=refund_id).status


@shared_task(acks_late=True)
def order_trueup(order_id: str) -> str | None:
    refund = services.order_trueup(order_id=order_id)
    return str(refund.id) if refund else None


@shared_task(acks_late=True)
def order_cancellation_refund(order_id: str) -> str | None:
    refund = services.order_cancellation_refund(order_id=order_id)
    return str(refund.id) if refund else None


@shared_task
def billing_sweep() -> dict:
    return services.billing_sweep()


@shared_task(acks_late=True)
def order_fleet_payables(order_id: str) -> list[str]:
    return [str(payable.id) for payable in services.order_fleet_payables(order_id=order_id)]


@shared_task(acks_late=True)
def payout_run() -> dict:
    """Monthly (celery beat): pay each fleet its unpaid payables. Safe to run twice."""
    if not services.payments_enabled():
        return {"skipped": "Stripe is not configured"}
    run = services.payout_run(triggered_by="beat")
    return {"run": str(run.id), **run.report}
