"""Stripe's webhook endpoint: verify, store once, answer fast; processing runs after commit."""

import logging

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from billing.services.stripe_events import webhook_event_record
from billing.stripe_gateway import WebhookSignatureInvalid
from marketplace.errors import error_body

logger = logging.getLogger(__name__)
MAX_BODY_BYTES = 1024 * 1024


@csrf_exempt
@require_POST
def stripe_webhook(request):
    """200 once stored (also for duplicates); 400 for anything not signed by Stripe.

    5xx only when Stripe should retry: no secret configured yet, or the database failed.
    """
    if not settings.STRIPE_WEBHOOK_SECRET:
        return JsonResponse(
            error_body("webhooks_not_configured", "STRIPE_WEBHOOK_SECRET is not set."), status=503
        )
    body = request.body
    if len(body) > MAX_BODY_BYTES:
        return JsonResponse(error_body("too_large", "Event too large."), status=400)
    try:
        event, created = webhook_event_record(
            payload=body, signature_header=request.headers.get("Stripe-Signature")
        )
    except WebhookSignatureInvalid as exc:
        logger.warning("refused a Stripe webhook: %s", exc)
        return JsonResponse(
            error_body("invalid_signature", "The Stripe signature does not verify."), status=400
        )
    return JsonResponse({"received": True, "duplicate": not created, "status": event.status})
