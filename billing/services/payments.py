"""Paying an order: open a Stripe payment, and record what Stripe says about it.

Lock the order first, then the payment, then check; Stripe is reached only through
billing.stripe_gateway; side effects run after commit.
"""

import uuid
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework import status as http_status

from billing import stripe_gateway as gateway
from billing.error_codes import ErrorCode
from billing.ledger import post_bank_charge, post_charge
from billing.models import PAYMENT_TRANSITIONS, BillingFlag, Payment, StripeCustomer, WebhookEvent
from billing.services.flags import flag_raise
from marketplace.audit import system_label
from marketplace.errors import Conflict, NotFound, ServiceError, invalid
from marketplace.models import Membership, Organization
from marketplace.queueing import enqueue_on_commit
from marketplace.tenancy import Caller
from marketplace.transitions import require_transition
from orders.models import Order
from orders.services import order_mark_paid

# Who may pay an order, on the API and on the order page: every role of the customer
# organization (members place orders, the billing role exists to pay them).
PAYING_ROLES = (Membership.Role.OWNER, Membership.Role.MEMBER, Membership.Role.BILLING)

PAYMENT_NAMESPACE = uuid.UUID("6f1c2b1e-5a43-4d0e-9a7e-0c6b8c1d2e3f")


class InvalidPaymentTransition(Conflict):
    code = ErrorCode.INVALID_PAYMENT_TRANSITION


class PaymentsNotConfigured(Conflict):
    code = ErrorCode.PAYMENTS_NOT_CONFIGURED


class PaymentProviderUnavailable(ServiceError):
    status_code = http_status.HTTP_503_SERVICE_UNAVAILABLE
    code = ErrorCode.PAYMENT_PROVIDER_UNAVAILABLE


class PaymentProviderRefused(ServiceError):
    status_code = http_status.HTTP_502_BAD_GATEWAY
    code = ErrorCode.PAYMENT_PROVIDER_ERROR


def payment_move(payment: Payment, to_status: str, *, fields: tuple[str, ...] = ()) -> Payment:
    """Change a payment's status by the map (the caller holds its row lock) and save it with
    `fields`; moving to the status it has is a no-op."""
    if payment.status == to_status:
        return payment
    require_transition(
        transitions=PAYMENT_TRANSITIONS,
        from_status=payment.status,
        to_status=to_status,
        what="A payment",
        error=InvalidPaymentTransition,
    )
    payment.status = to_status
    payment.save(update_fields=["status", *fields, "updated_at"])
    return payment


def payments_cancel_open(*, order: Order, message: str = "") -> int:
    """Open attempts of an order can no longer pay for anything (cancelled order, expired
    Checkout session)."""
    cancelled = 0
    for payment in Payment.objects.select_for_update().filter(
        order=order, status=Payment.Status.REQUIRES_PAYMENT
    ):
        payment.failure_message = message or payment.failure_message
        payment_move(payment, Payment.Status.CANCELED, fields=("failure_message",))
        cancelled += 1
    return cancelled


def succeeded_payment(order: Order) -> Payment | None:
    return Payment.objects.filter(order=order, status=Payment.Status.SUCCEEDED).first()


def payments_enabled() -> bool:
    return gateway.is_configured()


def _stripe_customer_id(*, organization: Organization) -> str:
    existing = StripeCustomer.objects.filter(organization=organization).first()
    if existing is not None:
        return existing.stripe_customer_id
    customer_id = gateway.customer_create(
        name=organization.name,
        organization_id=str(organization.id),
        idempotency_key=f"customer:{organization.id}",
    )
    try:
        with transaction.atomic():
            StripeCustomer.objects.create(organization=organization, stripe_customer_id=customer_id)
    except IntegrityError:
        return StripeCustomer.objects.get(organization=organization).stripe_customer_id
    return customer_id


def _checkout_url(template: str, order_id) -> str:
    return template.replace("{order_id}", str(order_id))


def payment_start(*, caller: Caller, order_id, method: str) -> tuple[Payment, bool]:
    """Open a payment for an order awaiting payment: (payment, created).

    An open attempt of the same method is returned as it is. Stripe is called inside the
    order's lock, with keys derived from (order, attempt): if Stripe is down nothing is
    written, and the retry sends the same keys, so Stripe never holds two intents for one try.
    """
    if method not in Payment.Method.values:
        raise ServiceError("Unknown payment method.", fields={"method": ["Unknown method."]})
    with transaction.atomic():
        order = (
            Order.objects.select_for_update()
            .select_related("organization")
            .filter(pk=order_id, organization=caller.organization)
            .first()
        )
        # Another organization's order is a 404 before anything else is said about it.
        if order is None:
            raise NotFound("Order not found.")
        if not payments_enabled():
            raise PaymentsNotConfigured(
                "Online payment is not configured on this platform. Pay by bank transfer: "
                "staff mark the order paid when the money arrives.",
            )
        payments = list(Payment.objects.filter(order=order).order_by("attempt"))
        open_payment = _open_attempt_or_refuse(order=order, payments=payments, method=method)
        if open_payment is not None:
            return open_payment, False
        attempt = (payments[-1].attempt + 1) if payments else 1
        payment = Payment(
            id=uuid.uuid5(PAYMENT_NAMESPACE, f"{order.id}:{attempt}"),
            order=order,
            organization=order.organization,
            method=method,
            attempt=attempt,
            amount=order.total,
            currency=order.currency,
        )
        _open_at_stripe(payment)
        payment.save(force_insert=True)
    return payment, True


def _open_attempt_or_refuse(*, order: Order, payments: list[Payment], method: str):
    """The open attempt to hand back, None when a new one may start; else why not."""
    open_payment = next((p for p in payments if p.status == Payment.Status.REQUIRES_PAYMENT), None)
    if open_payment is not None and order.status == Order.Status.AWAITING_PAYMENT:
        if open_payment.method != method:
            raise Conflict(
                "A payment by another method is already open for this order.",
                code=ErrorCode.PAYMENT_IN_PROGRESS,
            )
        return open_payment
    if any(p.status in (Payment.Status.SUCCEEDED, Payment.Status.REVIEW) for p in payments):
        raise Conflict("This order has already been paid.", code=ErrorCode.ALREADY_PAID)
    if order.status != Order.Status.AWAITING_PAYMENT:
        raise Conflict(
            f"An order that is {order.get_status_display().lower()} cannot be paid.",
            code=ErrorCode.ORDER_NOT_PAYABLE,
        )
    return None


def _open_at_stripe(payment: Payment) -> None:
    """Create the attempt's PaymentIntent or Checkout session (keys from order and attempt)."""
    order = payment.order
    metadata = {
        "order_id": str(order.id),
        "payment_id": str(payment.id),
        "organization_id": str(order.organization_id),
    }
    key = f"order:{order.id}:payment:{payment.attempt}"
    try:
        customer_id = _stripe_customer_id(organization=order.organization)
        if payment.method == Payment.Method.PAYMENT_INTENT:
            intent = gateway.payment_intent_create(
                amount=order.total,
                currency=order.currency,
                customer_id=customer_id,
                metadata=metadata,
                idempotency_key=f"{key}:intent",
            )
            payment.stripe_payment_intent_id = intent.id
            payment.client_secret = intent.client_secret
        else:
            session = gateway.checkout_session_create(
                amount=order.total,
                currency=order.currency,
                customer_id=customer_id,
                description=f"Motion dataset order {order.id}",
                client_reference_id=str(order.id),
                metadata=metadata,
                success_url=_checkout_url(settings.BILLING_CHECKOUT_SUCCESS_URL, order.id),
                cancel_url=_checkout_url(settings.BILLING_CHECKOUT_CANCEL_URL, order.id),
                idempotency_key=f"{key}:checkout",
            )
            payment.stripe_checkout_session_id = session.id
            payment.checkout_url = session.url
    except gateway.GatewayUnavailable as exc:
        raise PaymentProviderUnavailable(
            "The payment provider cannot be reached right now; the order is unpaid. "
            "Please try again in a few minutes.",
        ) from exc
    except gateway.GatewayError as exc:
        raise PaymentProviderRefused(f"The payment provider refused the payment: {exc}") from exc


def lock_order_and_payment(payment_id) -> tuple[Order, Payment]:
    order_id = Payment.objects.values_list("order_id", flat=True).get(pk=payment_id)
    order = Order.objects.select_for_update().get(pk=order_id)
    payment = Payment.objects.select_for_update().get(pk=payment_id)
    return order, payment


def payment_record_success(
    *,
    payment_id,
    amount: Decimal | None,
    currency: str,
    charge_id: str = "",
    source: str = "stripe",
    webhook_event: WebhookEvent | None = None,
) -> Payment:
    """Stripe says the money arrived: verify it, book it, and confirm the order once."""
    with transaction.atomic():
        order, payment = lock_order_and_payment(payment_id)
        if payment.status in (Payment.Status.SUCCEEDED, Payment.Status.REVIEW):
            return payment
        if charge_id and not payment.stripe_charge_id:
            payment.stripe_charge_id = charge_id
        flag = {"order_id": order.id, "payment": payment, "webhook_event": webhook_event}
        if (
            amount is None
            or amount != payment.amount
            or currency.upper() != payment.currency
            or payment.amount != order.total
            or payment.currency != order.currency
        ):
            payment_move(payment, Payment.Status.REVIEW, fields=("stripe_charge_id",))
            flag_raise(
                kind=BillingFlag.Kind.AMOUNT_MISMATCH,
                dedupe_key=f"mismatch:{payment.id}",
                message=(
                    f"Stripe reported {amount} {currency} for payment {payment.id}; the order "
                    f"{order.id} costs {order.total} {order.currency}. The order was NOT marked "
                    "paid; check the charge in Stripe and refund or adjust it."
                ),
                **flag,
            )
            return payment
        if Payment.objects.filter(order=order, status=Payment.Status.SUCCEEDED).exists():
            payment_move(payment, Payment.Status.REVIEW, fields=("stripe_charge_id",))
            flag_raise(
                kind=BillingFlag.Kind.DUPLICATE_PAYMENT,
                dedupe_key=f"duplicate:{payment.id}",
                message=(
                    f"Payment {payment.id} succeeded but order {order.id} was already paid by "
                    "another payment: refund this one in Stripe."
                ),
                **flag,
            )
            return payment
        payment.succeeded_at = timezone.now()
        payment.failure_message = ""
        payment_move(
            payment,
            Payment.Status.SUCCEEDED,
            fields=("succeeded_at", "failure_message", "stripe_charge_id"),
        )
        post_charge(payment)
        _settle_order(order=order, payment=payment, source=source, flag=flag)
        waiting = f"payment:{payment.id}"
        transaction.on_commit(lambda: release_deferred_events(waiting))
    return payment


def _settle_order(*, order: Order, payment: Payment, source: str, flag: dict) -> None:
    """A booked charge: the order is paid, or (cancelled, already paid) staff are told."""
    if order.status == Order.Status.AWAITING_PAYMENT:
        order_mark_paid(
            order_id=order.id,
            actor_label=system_label(f"billing:{source}"),
            reason=f"Payment {payment.id} confirmed by {source}.",
        )
    elif order.status == Order.Status.CANCELLED:
        flag_raise(
            kind=BillingFlag.Kind.PAID_AFTER_CANCEL,
            dedupe_key=f"paid-after-cancel:{payment.id}",
            message=f"Order {order.id} was cancelled before its payment succeeded: refunding.",
            **flag,
        )
        enqueue_on_commit("billing.tasks.order_cancellation_refund", order.id)
    else:
        flag_raise(
            kind=BillingFlag.Kind.DUPLICATE_PAYMENT,
            dedupe_key=f"duplicate:{payment.id}",
            message=(
                f"Payment {payment.id} succeeded while order {order.id} was already "
                f"{order.status} (marked paid outside Stripe?): check and refund."
            ),
            **flag,
        )


def release_deferred_events(waiting_for: str) -> None:
    for pk in WebhookEvent.objects.filter(
        status=WebhookEvent.Status.DEFERRED, waiting_for=waiting_for
    ).values_list("pk", flat=True):
        enqueue_on_commit("billing.tasks.webhook_event_process", pk)


# --- Payments received outside Stripe (bank transfer), recorded by staff ------------------------


def payment_record_offline(
    *, order_id, amount: Decimal, reference: str, recorded_by: str
) -> Payment:
    """Staff saw the order's money arrive by bank transfer: a succeeded Payment of that amount
    with the bank's reference, a ledger charge (cash in the bank account), and the order paid.

    Only the invoice's full amount is recorded (a short or a larger transfer is refused with
    what was expected); an order paid already, or not awaiting payment, is refused. Open card
    attempts are cancelled, so they can no longer pay a second time.
    """
    reference = (reference or "").strip()
    if not reference:
        raise invalid("reference", "Enter the bank transfer's reference.")
    if amount is None or amount <= 0:
        raise invalid("amount", "Enter the amount received.")
    with transaction.atomic():
        order = Order.objects.select_for_update().filter(pk=order_id).first()
        if order is None:
            raise NotFound("Order not found.")
        if Payment.objects.filter(
            order=order, status__in=(Payment.Status.SUCCEEDED, Payment.Status.REVIEW)
        ).exists():
            raise Conflict("This order has already been paid.", code=ErrorCode.ALREADY_PAID)
        if order.status != Order.Status.AWAITING_PAYMENT:
            raise Conflict(
                f"An order that is {order.get_status_display().lower()} cannot be paid.",
                code=ErrorCode.ORDER_NOT_PAYABLE,
            )
        if amount != order.total:
            raise invalid(
                "amount",
                f"The invoice is for {order.total} {order.currency}; {amount} was entered. "
                "Record only a transfer of the full amount (ask the customer about the rest).",
            )
        payments_cancel_open(order=order, message="Paid by bank transfer.")
        attempt = (
            Payment.objects.filter(order=order)
            .order_by("-attempt")
            .values_list("attempt", flat=True)
            .first()
            or 0
        ) + 1
        payment = Payment.objects.create(
            order=order,
            organization_id=order.organization_id,
            method=Payment.Method.BANK_TRANSFER,
            status=Payment.Status.SUCCEEDED,
            attempt=attempt,
            amount=amount,
            currency=order.currency,
            reference=reference[:200],
            recorded_by=recorded_by[:200],
            succeeded_at=timezone.now(),
        )
        post_bank_charge(payment)
        order_mark_paid(
            order_id=order.id,
            actor_label=recorded_by,
            reason=f"Bank transfer {reference} of {amount} {order.currency} received.",
        )
    return payment
