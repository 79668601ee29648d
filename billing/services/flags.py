"""Flags: things staff must look at (amount mismatches, disputes, manual refunds, ...)."""

import logging

from django.db import transaction
from django.utils import timezone

from billing.models import BillingFlag, Payment, WebhookEvent

logger = logging.getLogger(__name__)


def flag_raise(
    *,
    kind: str,
    dedupe_key: str,
    message: str,
    order_id=None,
    payment: Payment | None = None,
    webhook_event: WebhookEvent | None = None,
) -> BillingFlag:
    """Ask staff to look at something; the same dedupe_key raises one flag only."""
    flag, _ = BillingFlag.objects.get_or_create(
        dedupe_key=dedupe_key,
        defaults={
            "kind": kind,
            "message": message,
            "order_id": order_id,
            "payment": payment,
            "webhook_event": webhook_event,
        },
    )
    logger.warning("billing flag %s: %s", kind, message)
    return flag


def flag_resolve(*, flag_id: int, user) -> BillingFlag:
    with transaction.atomic():
        flag = BillingFlag.objects.select_for_update().get(pk=flag_id)
        if flag.resolved_at is None:
            flag.resolved_at = timezone.now()
            flag.resolved_by = user
            flag.save(update_fields=["resolved_at", "resolved_by"])
    return flag
