"""The error codes billing answers (see marketplace/error_codes.py)."""

from django.db import models

from marketplace.error_codes import register


@register
class ErrorCode(models.TextChoices):
    ALREADY_PAID = "already_paid", "The order has already been paid."
    INVALID_PAYMENT_TRANSITION = (
        "invalid_payment_transition",
        "The payment's status does not allow this move.",
    )
    NOT_REFUNDABLE = "not_refundable", "Only a succeeded payment can be refunded."
    ORDER_NOT_PAYABLE = "order_not_payable", "The order's status does not allow paying it."
    PAYMENT_IN_PROGRESS = (
        "payment_in_progress",
        "A payment by another method is already open for this order.",
    )
    PAYMENT_PROVIDER_ERROR = "payment_provider_error", "The payment provider refused the request."
    PAYMENT_PROVIDER_UNAVAILABLE = (
        "payment_provider_unavailable",
        "The payment provider cannot be reached; retry.",
    )
    PAYMENTS_NOT_CONFIGURED = (
        "payments_not_configured",
        "Online payment is not configured on this platform.",
    )
    PAYOUTS_NOT_CONFIGURED = "payouts_not_configured", "Stripe is not configured: no payouts."
    REFUND_EXCEEDS_PAYMENT = (
        "refund_exceeds_payment",
        "The refund is more than what can still be refunded.",
    )
