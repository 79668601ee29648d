"""Events to fleets (offer.created, job.assigned, job.cancelled, offer.expired): recorded in
the transaction that causes them, sent after commit by marketplace.outbound_webhooks."""

from django.conf import settings

from fleets.models import Fleet, WebhookDelivery
from marketplace import outbound_webhooks
from marketplace.queueing import enqueue_on_commit


def webhook_policy() -> outbound_webhooks.RetryPolicy:
    return outbound_webhooks.RetryPolicy(
        max_attempts=settings.FLEETS_WEBHOOK_MAX_ATTEMPTS,
        backoff_seconds=settings.FLEETS_WEBHOOK_BACKOFF_SECONDS,
        backoff_max_seconds=settings.FLEETS_WEBHOOK_BACKOFF_MAX_SECONDS,
        timeout_seconds=settings.FLEETS_WEBHOOK_TIMEOUT_SECONDS,
        allow_loopback=settings.FLEETS_WEBHOOK_ALLOW_INSECURE,
    )


def webhook_enqueue(*, fleet: Fleet, event_type: str, data: dict) -> WebhookDelivery | None:
    """Record an event for a fleet and send it after commit (no URL: nothing to send)."""
    if not fleet.webhook_url:
        return None
    delivery = outbound_webhooks.delivery_record(
        model=WebhookDelivery, url=fleet.webhook_url, event_type=event_type, data=data, fleet=fleet
    )
    enqueue_on_commit("fleets.tasks.webhook_deliver", delivery.pk)
    return delivery


def webhook_enqueue_many(*, events: list[tuple[Fleet, str, dict]]) -> list[WebhookDelivery]:
    """webhook_enqueue for several (fleet, event_type, data) at once: one INSERT."""
    deliveries = WebhookDelivery.objects.bulk_create(
        [
            outbound_webhooks.delivery_build(
                model=WebhookDelivery,
                url=fleet.webhook_url,
                event_type=event_type,
                data=data,
                fleet=fleet,
            )
            for fleet, event_type, data in events
            if fleet.webhook_url
        ]
    )
    for delivery in deliveries:
        enqueue_on_commit("fleets.tasks.webhook_deliver", delivery.pk)
    return deliveries


def webhook_attempt(*, delivery_id) -> outbound_webhooks.AttemptOutcome:
    """One HTTP attempt (outside any transaction), then log it on the delivery."""
    return outbound_webhooks.delivery_attempt(
        model=WebhookDelivery, delivery_id=delivery_id, policy=webhook_policy()
    )
