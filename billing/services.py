"""Billing writes: paying orders, webhook processing, refunds and the true-up.

Keyword-only functions; lock (order first, then payment), then check; side effects after
commit. Stripe is reached only through billing.stripe_gateway.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.module_loading import import_string
from rest_framework import status as http_status

from billing import stripe_gateway as gateway
from billing.ledger import Leg, ledger_post
from billing.models import (
    BillingFlag,
    FleetPayable,
    FleetPayoutAccount,
    LedgerAccount,
    LedgerTransaction,
    Payment,
    Payout,
    PayoutRun,
    Refund,
    StripeCustomer,
    WebhookEvent,
)
from fleets.models import Assignment, Fleet, Job
from marketplace.errors import Conflict, NotFound, ServiceError
from marketplace.models import Membership, Organization
from marketplace.tenancy import Caller
from orders.models import Order, OrderEvent
from orders.pricing import MINOR_UNITS, quantize_money
from orders.services import order_mark_paid, order_transition

logger = logging.getLogger(__name__)

# Who may pay an order, on the API and on the order page: every role of the customer
# organization (members place orders, the billing role exists to pay them).
PAYING_ROLES = (Membership.Role.OWNER, Membership.Role.MEMBER, Membership.Role.BILLING)

PAYMENT_NAMESPACE = uuid.UUID("6f1c2b1e-5a43-4d0e-9a7e-0c6b8c1d2e3f")
# An order counts as dispatched (work handed to fleets) from collection onwards.
DISPATCHED_STATES = frozenset(
    {
        Order.Status.IN_COLLECTION,
        Order.Status.IN_REVIEW,
        Order.Status.DELIVERED,
        Order.Status.CLOSED,
    }
)
ZERO = Decimal("0")


class PaymentsNotConfigured(Conflict):
    code = "payments_not_configured"


class PaymentProviderUnavailable(ServiceError):
    status_code = http_status.HTTP_503_SERVICE_UNAVAILABLE
    code = "payment_provider_unavailable"


class PaymentProviderRefused(ServiceError):
    status_code = http_status.HTTP_502_BAD_GATEWAY
    code = "payment_provider_error"


# --- Flags -------------------------------------------------------------------------------------


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


# --- Paying an order ---------------------------------------------------------------------------


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
        open_payment = next(
            (p for p in payments if p.status == Payment.Status.REQUIRES_PAYMENT), None
        )
        if open_payment is not None and order.status == Order.Status.AWAITING_PAYMENT:
            if open_payment.method != method:
                raise Conflict(
                    "A payment by another method is already open for this order.",
                    code="payment_in_progress",
                )
            return open_payment, False
        if any(p.status in (Payment.Status.SUCCEEDED, Payment.Status.REVIEW) for p in payments):
            raise Conflict("This order has already been paid.", code="already_paid")
        if order.status != Order.Status.AWAITING_PAYMENT:
            raise Conflict(
                f"An order that is {order.get_status_display().lower()} cannot be paid.",
                code="order_not_payable",
            )
        attempt = (payments[-1].attempt + 1) if payments else 1
        payment_id = uuid.uuid5(PAYMENT_NAMESPACE, f"{order.id}:{attempt}")
        metadata = {
            "order_id": str(order.id),
            "payment_id": str(payment_id),
            "organization_id": str(order.organization_id),
        }
        payment = Payment(
            id=payment_id,
            order=order,
            organization=order.organization,
            method=method,
            attempt=attempt,
            amount=order.total,
            currency=order.currency,
        )
        try:
            customer_id = _stripe_customer_id(organization=order.organization)
            if method == Payment.Method.PAYMENT_INTENT:
                intent = gateway.payment_intent_create(
                    amount=order.total,
                    currency=order.currency,
                    customer_id=customer_id,
                    metadata=metadata,
                    idempotency_key=f"order:{order.id}:payment:{attempt}:intent",
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
                    idempotency_key=f"order:{order.id}:payment:{attempt}:checkout",
                )
                payment.stripe_checkout_session_id = session.id
                payment.checkout_url = session.url
        except gateway.GatewayUnavailable as exc:
            raise PaymentProviderUnavailable(
                "The payment provider cannot be reached right now; the order is unpaid. "
                "Please try again in a few minutes.",
            ) from exc
        except gateway.GatewayError as exc:
            raise PaymentProviderRefused(
                f"The payment provider refused the payment: {exc}"
            ) from exc
        payment.save(force_insert=True)
    return payment, True


# --- Ledger postings -------------------------------------------------------------------------


def _post_charge(payment: Payment) -> None:
    ledger_post(
        key=f"charge:{payment.id}",
        kind=LedgerTransaction.Kind.CHARGE,
        memo=f"Charge for order {payment.order_id}",
        legs=[
            Leg(LedgerAccount.STRIPE_BALANCE, payment.amount, payment.currency),
            Leg(LedgerAccount.CUSTOMER_FUNDS, -payment.amount, payment.currency),
        ],
        order_id=payment.order_id,
        organization_id=payment.organization_id,
        payment=payment,
    )


def _post_refund(refund: Refund) -> None:
    ledger_post(
        key=f"refund:{refund.id}",
        kind=LedgerTransaction.Kind.REFUND,
        memo=f"Refund ({refund.reason}) for order {refund.order_id}",
        legs=[
            Leg(LedgerAccount.CUSTOMER_FUNDS, refund.amount, refund.currency),
            Leg(LedgerAccount.STRIPE_BALANCE, -refund.amount, refund.currency),
        ],
        order_id=refund.order_id,
        organization_id=refund.payment.organization_id,
        payment_id=refund.payment_id,
        refund=refund,
    )


# --- Payment outcomes --------------------------------------------------------------------------


def _lock_order_and_payment(payment_id) -> tuple[Order, Payment]:
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
        order, payment = _lock_order_and_payment(payment_id)
        if payment.status in (Payment.Status.SUCCEEDED, Payment.Status.REVIEW):
            return payment
        if charge_id and not payment.stripe_charge_id:
            payment.stripe_charge_id = charge_id
        if (
            amount is None
            or amount != payment.amount
            or currency.upper() != payment.currency
            or payment.amount != order.total
            or payment.currency != order.currency
        ):
            payment.status = Payment.Status.REVIEW
            payment.save(update_fields=["status", "stripe_charge_id", "updated_at"])
            flag_raise(
                kind=BillingFlag.Kind.AMOUNT_MISMATCH,
                dedupe_key=f"mismatch:{payment.id}",
                message=(
                    f"Stripe reported {amount} {currency} for payment {payment.id}; the order "
                    f"{order.id} costs {order.total} {order.currency}. The order was NOT marked "
                    "paid; check the charge in Stripe and refund or adjust it."
                ),
                order_id=order.id,
                payment=payment,
                webhook_event=webhook_event,
            )
            return payment
        if Payment.objects.filter(order=order, status=Payment.Status.SUCCEEDED).exists():
            payment.status = Payment.Status.REVIEW
            payment.save(update_fields=["status", "stripe_charge_id", "updated_at"])
            flag_raise(
                kind=BillingFlag.Kind.DUPLICATE_PAYMENT,
                dedupe_key=f"duplicate:{payment.id}",
                message=(
                    f"Payment {payment.id} succeeded but order {order.id} was already paid by "
                    "another payment: refund this one in Stripe."
                ),
                order_id=order.id,
                payment=payment,
                webhook_event=webhook_event,
            )
            return payment
        payment.status = Payment.Status.SUCCEEDED
        payment.succeeded_at = timezone.now()
        payment.failure_message = ""
        payment.save()
        _post_charge(payment)
        if order.status == Order.Status.AWAITING_PAYMENT:
            order_mark_paid(
                order_id=order.id,
                actor_label=f"billing:{source}",
                reason=f"Payment {payment.id} confirmed by {source}.",
            )
        elif order.status == Order.Status.CANCELLED:
            flag_raise(
                kind=BillingFlag.Kind.PAID_AFTER_CANCEL,
                dedupe_key=f"paid-after-cancel:{payment.id}",
                message=f"Order {order.id} was cancelled before its payment succeeded: refunding.",
                order_id=order.id,
                payment=payment,
                webhook_event=webhook_event,
            )
            transaction.on_commit(lambda: _enqueue("order_cancellation_refund", str(order.id)))
        else:
            flag_raise(
                kind=BillingFlag.Kind.DUPLICATE_PAYMENT,
                dedupe_key=f"duplicate:{payment.id}",
                message=(
                    f"Payment {payment.id} succeeded while order {order.id} was already "
                    f"{order.status} (marked paid outside Stripe?): check and refund."
                ),
                order_id=order.id,
                payment=payment,
                webhook_event=webhook_event,
            )
        waiting = f"payment:{payment.id}"
        transaction.on_commit(lambda: _enqueue_deferred(waiting))
    return payment


def _enqueue(task_name: str, *args) -> None:
    from billing import tasks

    getattr(tasks, task_name).delay(*args)


def _enqueue_deferred(waiting_for: str) -> None:
    for pk in WebhookEvent.objects.filter(
        status=WebhookEvent.Status.DEFERRED, waiting_for=waiting_for
    ).values_list("pk", flat=True):
        _enqueue("webhook_event_process", pk)


# --- Refunds -----------------------------------------------------------------------------------


def refund_request(
    *,
    payment_id,
    amount: Decimal,
    reason: str,
    key: str,
    note: str = "",
    user=None,
) -> Refund:
    """Reserve a refund (never more than is refundable) and send it to Stripe after commit.

    `key` names the business reason ("trueup:<order>", "staff:<uuid>"): the same key refunds
    once, however often it is asked.
    """
    if isinstance(amount, float) or not isinstance(amount, Decimal):
        raise TypeError("money is never a float")
    with transaction.atomic():
        order, payment = _lock_order_and_payment(payment_id)
        existing = Refund.objects.filter(key=key).first()
        if existing is not None:
            return existing
        amount = quantize_money(amount, payment.currency)
        if amount <= 0:
            raise ServiceError("A refund must be more than zero.", fields={"amount": ["> 0"]})
        if payment.status != Payment.Status.SUCCEEDED:
            raise Conflict("Only a succeeded payment can be refunded.", code="not_refundable")
        if amount > payment.refundable:
            raise Conflict(
                f"At most {payment.refundable} {payment.currency} can still be refunded.",
                code="refund_exceeds_payment",
                fields={"amount": [f"At most {payment.refundable}."]},
            )
        refund = Refund.objects.create(
            payment=payment,
            order=order,
            key=key,
            reason=reason,
            amount=amount,
            currency=payment.currency,
            note=note,
            created_by=user,
        )
        payment.amount_refunded += amount
        payment.save(update_fields=["amount_refunded", "updated_at"])
        refund_id = str(refund.id)
        transaction.on_commit(lambda: _enqueue("refund_submit", refund_id))
    return refund


def refund_submit(*, refund_id) -> Refund:
    """Send a pending refund to Stripe, exactly once.

    The order, payment and refund stay locked during the call, so two workers running the
    same task cannot both send it; the idempotency key (the refund's id) covers a response
    lost on the way back. Stripe down: nothing changes here and the task retries.
    """
    with transaction.atomic():
        payment_id = Refund.objects.values_list("payment_id", flat=True).get(pk=refund_id)
        _lock_order_and_payment(payment_id)
        refund = Refund.objects.select_for_update().select_related("payment").get(pk=refund_id)
        if refund.status != Refund.Status.PENDING or refund.stripe_refund_id:
            return refund
        try:
            result = gateway.refund_create(
                payment_intent_id=refund.payment.stripe_payment_intent_id,
                amount=refund.amount,
                currency=refund.currency,
                metadata={
                    "refund_id": str(refund.id),
                    "order_id": str(refund.order_id),
                    "payment_id": str(refund.payment_id),
                },
                idempotency_key=f"refund:{refund.id}",
            )
        except gateway.GatewayUnavailable:
            raise  # stays pending; the task retries with the same key
        except gateway.GatewayError as exc:
            return refund_record_failure(refund_id=refund.id, message=str(exc))
        return refund_record_success(
            refund_id=refund.id, stripe_refund_id=result.id, settled=result.status == "succeeded"
        )


def refund_record_success(*, refund_id, stripe_refund_id: str, settled: bool = True) -> Refund:
    with transaction.atomic():
        payment_id = Refund.objects.values_list("payment_id", flat=True).get(pk=refund_id)
        order, payment = _lock_order_and_payment(payment_id)
        refund = Refund.objects.select_for_update().get(pk=refund_id)
        if refund.status != Refund.Status.PENDING:
            return refund
        refund.stripe_refund_id = stripe_refund_id
        if not settled:
            refund.save(update_fields=["stripe_refund_id", "updated_at"])
            return refund
        refund.status = Refund.Status.SUCCEEDED
        refund.save(update_fields=["stripe_refund_id", "status", "updated_at"])
        refund.payment = payment
        _post_refund(refund)
        _after_refund(order=order, payment=payment)
    return refund


def refund_record_failure(*, refund_id, message: str) -> Refund:
    with transaction.atomic():
        payment_id = Refund.objects.values_list("payment_id", flat=True).get(pk=refund_id)
        order, payment = _lock_order_and_payment(payment_id)
        refund = Refund.objects.select_for_update().get(pk=refund_id)
        if refund.status != Refund.Status.PENDING:
            return refund
        refund.status = Refund.Status.FAILED
        refund.failure_message = message
        refund.save(update_fields=["status", "failure_message", "updated_at"])
        payment.amount_refunded -= refund.amount
        payment.save(update_fields=["amount_refunded", "updated_at"])
        flag_raise(
            kind=BillingFlag.Kind.REFUND_FAILED,
            dedupe_key=f"refund-failed:{refund.id}",
            message=f"Stripe refused refund {refund.id} of {refund.amount} {refund.currency}: "
            f"{message}",
            order_id=order.id,
            payment=payment,
        )
    return refund


def _after_refund(*, order: Order, payment: Payment) -> None:
    fully = (
        payment.amount_refunded >= payment.amount
        and not payment.refunds.filter(status=Refund.Status.PENDING).exists()
    )
    if fully and order.status == Order.Status.CANCELLED:
        order_transition(
            order_id=order.id,
            to_status=Order.Status.REFUNDED,
            actor_label="billing",
            reason="Payment refunded in full.",
        )


# --- True-up and cancellation ------------------------------------------------------------------


def prorata_refund(
    *,
    paid: Decimal,
    currency: str,
    hours_ordered: Decimal,
    hours_kept: Decimal,
    already_refunded: Decimal = ZERO,
) -> Decimal:
    """What to give back when only `hours_kept` of `hours_ordered` are charged for.

    Pure and explicit so callers (delivery: accepted hours; cancellation: dispatched hours)
    supply the hours they know. Never negative, never more than what is left to refund.
    """
    for value in (paid, hours_ordered, hours_kept, already_refunded):
        if not isinstance(value, Decimal):
            raise TypeError("money and hours are Decimal")
    if hours_ordered <= 0:
        raise ValueError("hours_ordered must be positive")
    kept = min(max(hours_kept, ZERO), hours_ordered)
    due = quantize_money(paid * (hours_ordered - kept) / hours_ordered, currency)
    return max(ZERO, min(due, paid - already_refunded))


@dataclass(frozen=True)
class RefundPlan:
    amount: Decimal
    hours_kept: Decimal
    why: str


def _succeeded_payment(order: Order) -> Payment | None:
    return Payment.objects.filter(order=order, status=Payment.Status.SUCCEEDED).first()


def _refund_or_flag(*, order: Order, plan: RefundPlan, key: str, reason: str) -> Refund | None:
    if plan.amount <= 0:
        return None
    payment = _succeeded_payment(order)
    if payment is None:
        if OrderEvent.objects.filter(order=order, to_status=Order.Status.PAID).exists():
            flag_raise(
                kind=BillingFlag.Kind.MANUAL_REFUND,
                dedupe_key=f"manual-refund:{key}",
                message=(
                    f"Order {order.id} was paid outside Stripe; refund {plan.amount} "
                    f"{order.currency} by hand ({plan.why})."
                ),
                order_id=order.id,
            )
        return None
    amount = min(plan.amount, payment.refundable)
    if amount <= 0:
        return None
    return refund_request(
        payment_id=payment.id, amount=amount, reason=reason, key=key, note=plan.why
    )


def order_trueup(*, order_id) -> Refund | None:
    """On delivery: refund, pro rata, the hours ordered that QA did not accept."""
    order = Order.objects.get(pk=order_id)
    if order.status not in (Order.Status.DELIVERED, Order.Status.CLOSED):
        return None
    payment = _succeeded_payment(order)
    paid = payment.amount if payment else order.total
    amount = prorata_refund(
        paid=paid,
        currency=order.currency,
        hours_ordered=order.hours,
        hours_kept=order.accepted_hours,
        already_refunded=payment.amount_refunded if payment else ZERO,
    )
    plan = RefundPlan(
        amount=amount,
        hours_kept=order.accepted_hours,
        why=f"{order.accepted_hours} of {order.hours} h accepted",
    )
    return _refund_or_flag(
        order=order, plan=plan, key=f"trueup:{order.id}", reason=Refund.Reason.TRUE_UP
    )


def _status_when_cancelled(order: Order) -> str | None:
    event = (
        OrderEvent.objects.filter(order=order, to_status=Order.Status.CANCELLED)
        .order_by("-created_at", "-id")
        .first()
    )
    return event.from_status if event else None


def dispatched_hours_for(order: Order) -> Decimal | None:
    """Hours handed to fleets, from the provider fleets plugs in; None while unknown."""
    path = settings.BILLING_DISPATCHED_HOURS_PROVIDER
    if not path:
        return None
    return import_string(path)(order)


def order_cancellation_refund(
    *, order_id, dispatched_hours: Decimal | None = None
) -> Refund | None:
    """On cancellation: before dispatch refund in full, after it the undispatched part."""
    order = Order.objects.get(pk=order_id)
    if order.status not in (Order.Status.CANCELLED, Order.Status.REFUNDED):
        return None
    with transaction.atomic():
        # Open attempts can no longer pay for anything.
        Payment.objects.filter(order=order, status=Payment.Status.REQUIRES_PAYMENT).update(
            status=Payment.Status.CANCELED, updated_at=timezone.now()
        )
    from_status = _status_when_cancelled(order)
    if from_status in DISPATCHED_STATES:
        if dispatched_hours is None:
            dispatched_hours = dispatched_hours_for(order)
        if dispatched_hours is None:
            flag_raise(
                kind=BillingFlag.Kind.MANUAL_REFUND,
                dedupe_key=f"manual-refund:cancel:{order.id}",
                message=(
                    f"Order {order.id} was cancelled after dispatch ({from_status}) and the "
                    "dispatched hours are not known: decide the refund by hand."
                ),
                order_id=order.id,
            )
            return None
        kept = dispatched_hours
        why = f"cancelled after dispatch, {dispatched_hours} of {order.hours} h dispatched"
    else:
        kept = ZERO
        why = f"cancelled before dispatch ({from_status})"
    payment = _succeeded_payment(order)
    if payment is None:
        return None
    amount = prorata_refund(
        paid=payment.amount,
        currency=order.currency,
        hours_ordered=order.hours,
        hours_kept=kept,
        already_refunded=payment.amount_refunded,
    )
    plan = RefundPlan(amount=amount, hours_kept=kept, why=why)
    return _refund_or_flag(
        order=order, plan=plan, key=f"cancel:{order.id}", reason=Refund.Reason.CANCELLATION
    )


def refund_by_staff(*, payment_id, amount: Decimal, note: str, user) -> Refund:
    return refund_request(
        payment_id=payment_id,
        amount=amount,
        reason=Refund.Reason.STAFF,
        key=f"staff:{uuid.uuid4()}",
        note=note,
        user=user,
    )


# --- Webhooks ----------------------------------------------------------------------------------


def webhook_event_record(
    *, payload: bytes, signature_header: str | None
) -> tuple[WebhookEvent, bool]:
    """Verify, then store the raw event once (unique event id). Processing runs after commit.

    Raises WebhookSignatureInvalid for anything not signed with our secret in time. Only
    verified events are stored, so a forged event can never take a real event's id.
    """
    event = gateway.webhook_verify(payload=payload, signature_header=signature_header)
    with transaction.atomic():
        record, created = WebhookEvent.objects.get_or_create(
            stripe_event_id=event["id"],
            defaults={
                "type": str(event.get("type") or "")[:100],
                "livemode": bool(event.get("livemode")),
                "raw_body": payload.decode("utf-8"),
                "payload": event,
            },
        )
        if created or record.status in (WebhookEvent.Status.RECEIVED, WebhookEvent.Status.FAILED):
            pk = record.pk
            transaction.on_commit(lambda: _enqueue_safely(pk))
    return record, created


def _enqueue_safely(pk: int) -> None:
    try:
        _enqueue("webhook_event_process", pk)
    except Exception:  # the broker is down: the sweeper picks the event up later
        logger.exception("could not enqueue webhook event %s", pk)


class _Deferred(Exception):
    def __init__(self, waiting_for: str):
        super().__init__(waiting_for)
        self.waiting_for = waiting_for


def _id_of(value) -> str:
    if isinstance(value, dict):
        return str(value.get("id") or "")
    return str(value or "")


def _payment_for(*, intent_id: str = "", session_id: str = "", charge_id: str = "", metadata=None):
    if intent_id:
        payment = Payment.objects.filter(stripe_payment_intent_id=intent_id).first()
        if payment:
            return payment
    if session_id:
        payment = Payment.objects.filter(stripe_checkout_session_id=session_id).first()
        if payment:
            return payment
    if charge_id:
        payment = Payment.objects.filter(stripe_charge_id=charge_id).first()
        if payment:
            return payment
    payment_id = (metadata or {}).get("payment_id")
    if payment_id:
        try:
            payment = Payment.objects.filter(pk=uuid.UUID(str(payment_id))).first()
        except ValueError:
            return None
        # Metadata only links an attempt whose Stripe object we have not learnt yet.
        if payment and payment.stripe_payment_intent_id in (None, "", intent_id):
            return payment
    return None


def _on_intent_succeeded(*, event: WebhookEvent, obj: dict) -> str:
    payment = _payment_for(intent_id=_id_of(obj), metadata=obj.get("metadata"))
    if payment is None:
        return WebhookEvent.Status.UNMATCHED
    if not payment.stripe_payment_intent_id:
        Payment.objects.filter(pk=payment.pk, stripe_payment_intent_id__isnull=True).update(
            stripe_payment_intent_id=_id_of(obj)
        )
    amount, currency = gateway.event_amount(obj, "amount")
    payment_record_success(
        payment_id=payment.id,
        amount=amount,
        currency=currency,
        charge_id=_id_of(obj.get("latest_charge")),
        webhook_event=event,
    )
    return WebhookEvent.Status.PROCESSED


def _on_intent_failed(*, event: WebhookEvent, obj: dict) -> str:
    payment = _payment_for(intent_id=_id_of(obj), metadata=obj.get("metadata"))
    if payment is None:
        return WebhookEvent.Status.UNMATCHED
    error = obj.get("last_payment_error") or {}
    message = str(error.get("message") or "The payment failed.")[:2000]
    Payment.objects.filter(pk=payment.pk, status=Payment.Status.REQUIRES_PAYMENT).update(
        failure_message=message, updated_at=timezone.now()
    )
    return WebhookEvent.Status.PROCESSED


def _on_checkout_completed(*, event: WebhookEvent, obj: dict) -> str:
    intent_id = _id_of(obj.get("payment_intent"))
    payment = _payment_for(session_id=_id_of(obj), metadata=obj.get("metadata"))
    if payment is None:
        return WebhookEvent.Status.UNMATCHED
    if payment.method != Payment.Method.CHECKOUT:
        return WebhookEvent.Status.UNMATCHED
    if intent_id and not payment.stripe_payment_intent_id:
        Payment.objects.filter(pk=payment.pk).update(stripe_payment_intent_id=intent_id)
    if obj.get("payment_status") != "paid":
        return WebhookEvent.Status.PROCESSED  # async method: payment_intent.succeeded follows
    amount, currency = gateway.event_amount(obj, "amount_total")
    payment_record_success(
        payment_id=payment.id,
        amount=amount,
        currency=currency,
        source="stripe checkout",
        webhook_event=event,
    )
    return WebhookEvent.Status.PROCESSED


def _on_checkout_expired(*, event: WebhookEvent, obj: dict) -> str:
    """Stripe expires an unpaid Checkout session (24 h by default): cancel our open attempt so
    the next "Pay" opens a fresh session instead of sending the customer to a dead page."""
    payment = _payment_for(session_id=_id_of(obj), metadata=obj.get("metadata"))
    if payment is None or payment.method != Payment.Method.CHECKOUT:
        return WebhookEvent.Status.UNMATCHED
    Payment.objects.filter(pk=payment.pk, status=Payment.Status.REQUIRES_PAYMENT).update(
        status=Payment.Status.CANCELED,
        failure_message="The Checkout session expired unpaid.",
        updated_at=timezone.now(),
    )
    return WebhookEvent.Status.PROCESSED


def _record_stripe_refund(*, payment: Payment, stripe_refund: dict, event: WebhookEvent) -> None:
    refund_id = _id_of(stripe_refund)
    if stripe_refund.get("status") not in (None, "succeeded"):
        return
    ours = Refund.objects.filter(stripe_refund_id=refund_id).first()
    if ours is None:
        our_id = (stripe_refund.get("metadata") or {}).get("refund_id")
        if our_id:
            try:
                ours = Refund.objects.filter(pk=uuid.UUID(str(our_id)), payment=payment).first()
            except ValueError:
                ours = None
    if ours is not None:
        if ours.status == Refund.Status.PENDING:
            refund_record_success(refund_id=ours.id, stripe_refund_id=refund_id)
        return
    amount, currency = gateway.event_amount(stripe_refund, "amount")
    with transaction.atomic():
        order, payment = _lock_order_and_payment(payment.id)
        if Refund.objects.filter(key=f"stripe:{refund_id}").exists():
            return
        if amount is None or currency != payment.currency or amount > payment.refundable:
            flag_raise(
                kind=BillingFlag.Kind.REFUND_EXCEEDS,
                dedupe_key=f"refund-exceeds:{refund_id}",
                message=(
                    f"Stripe refund {refund_id} of {amount} {currency} does not fit payment "
                    f"{payment.id} ({payment.refundable} {payment.currency} refundable): not "
                    "booked, check Stripe."
                ),
                order_id=order.id,
                payment=payment,
                webhook_event=event,
            )
            return
        refund = Refund.objects.create(
            payment=payment,
            order=order,
            key=f"stripe:{refund_id}",
            reason=Refund.Reason.STRIPE,
            status=Refund.Status.SUCCEEDED,
            amount=amount,
            currency=payment.currency,
            stripe_refund_id=refund_id,
            note="Issued in Stripe, recorded from its webhook.",
        )
        payment.amount_refunded += amount
        payment.save(update_fields=["amount_refunded", "updated_at"])
        _post_refund(refund)
        flag_raise(
            kind=BillingFlag.Kind.EXTERNAL_REFUND,
            dedupe_key=f"external-refund:{refund_id}",
            message=f"A refund of {amount} {currency} on order {order.id} was issued in Stripe.",
            order_id=order.id,
            payment=payment,
            webhook_event=event,
        )
        _after_refund(order=order, payment=payment)


def _on_charge_refunded(*, event: WebhookEvent, obj: dict) -> str:
    payment = _payment_for(
        intent_id=_id_of(obj.get("payment_intent")),
        charge_id=_id_of(obj),
        metadata=obj.get("metadata"),
    )
    if payment is None:
        return WebhookEvent.Status.UNMATCHED
    if payment.status == Payment.Status.REVIEW:
        # The charge itself was never booked (held for staff, already flagged): neither is
        # its refund, which is how staff usually settle such a payment.
        return WebhookEvent.Status.PROCESSED
    if payment.status != Payment.Status.SUCCEEDED:
        # The refund overtook the payment's own event: wait for it.
        raise _Deferred(f"payment:{payment.id}")
    refunds = (obj.get("refunds") or {}).get("data")
    if isinstance(refunds, list):
        for stripe_refund in refunds:
            if isinstance(stripe_refund, dict):
                _record_stripe_refund(payment=payment, stripe_refund=stripe_refund, event=event)
    else:
        # Newer API versions do not embed the refunds: book the cumulative difference.
        total, currency = gateway.event_amount(obj, "amount_refunded")
        booked = sum(
            (r.amount for r in payment.refunds.filter(status=Refund.Status.SUCCEEDED)), ZERO
        )
        if total is not None and total > booked:
            _record_stripe_refund(
                payment=payment,
                stripe_refund={
                    "id": f"{_id_of(obj)}:{gateway.minor_units(total, currency)}",
                    "amount": gateway.minor_units(total - booked, currency),
                    "currency": currency.lower(),
                },
                event=event,
            )
    return WebhookEvent.Status.PROCESSED


def _on_dispute_created(*, event: WebhookEvent, obj: dict) -> str:
    payment = _payment_for(
        intent_id=_id_of(obj.get("payment_intent")), charge_id=_id_of(obj.get("charge"))
    )
    if payment is None:
        return WebhookEvent.Status.UNMATCHED
    amount, currency = gateway.event_amount(obj, "amount")
    flag_raise(
        kind=BillingFlag.Kind.DISPUTE,
        dedupe_key=f"dispute:{_id_of(obj)}",
        message=(
            f"Dispute {_id_of(obj)} ({obj.get('reason') or 'no reason given'}) opened for "
            f"{amount} {currency} on order {payment.order_id}: answer it in Stripe."
        ),
        order_id=payment.order_id,
        payment=payment,
        webhook_event=event,
    )
    if payment.status == Payment.Status.SUCCEEDED and amount and currency == payment.currency:
        ledger_post(
            key=f"dispute:{_id_of(obj)}",
            kind=LedgerTransaction.Kind.DISPUTE,
            memo=f"Dispute {_id_of(obj)}",
            legs=[
                Leg(LedgerAccount.DISPUTES, amount, currency),
                Leg(LedgerAccount.STRIPE_BALANCE, -amount, currency),
            ],
            order_id=payment.order_id,
            organization_id=payment.organization_id,
            payment=payment,
        )
    return WebhookEvent.Status.PROCESSED


WEBHOOK_HANDLERS = {
    "payment_intent.succeeded": _on_intent_succeeded,
    "payment_intent.payment_failed": _on_intent_failed,
    "checkout.session.completed": _on_checkout_completed,
    "checkout.session.expired": _on_checkout_expired,
    "charge.refunded": _on_charge_refunded,
    "charge.dispute.created": _on_dispute_created,
}
FINAL_STATES = (
    WebhookEvent.Status.PROCESSED,
    WebhookEvent.Status.IGNORED,
    WebhookEvent.Status.UNMATCHED,
)


def webhook_event_process(*, event_pk: int) -> str:
    """Run the handler for one stored event, once. Safe to call again at any time."""
    with transaction.atomic():
        event = WebhookEvent.objects.select_for_update().get(pk=event_pk)
        if event.status in FINAL_STATES:
            return event.status
        event.attempts += 1
        handler = WEBHOOK_HANDLERS.get(event.type)
        waiting_for = ""
        if handler is None:
            result = WebhookEvent.Status.IGNORED
        else:
            data = event.payload.get("data") if isinstance(event.payload, dict) else None
            obj = data.get("object") if isinstance(data, dict) else None
            if not isinstance(obj, dict):
                result = WebhookEvent.Status.UNMATCHED
            else:
                try:
                    with transaction.atomic():
                        result = handler(event=event, obj=obj)
                except _Deferred as deferred:
                    result = WebhookEvent.Status.DEFERRED
                    waiting_for = deferred.waiting_for
        event.status = result
        event.waiting_for = waiting_for
        event.last_error = ""
        if result != WebhookEvent.Status.DEFERRED:
            event.processed_at = timezone.now()
        event.save()
    return result


def webhook_event_mark_failed(*, event_pk: int, error: str) -> None:
    WebhookEvent.objects.filter(pk=event_pk).exclude(status__in=FINAL_STATES).update(
        status=WebhookEvent.Status.FAILED, last_error=error[:5000], attempts=F("attempts") + 1
    )


def billing_sweep(*, now=None) -> dict[str, int]:
    """Re-run what a lost task or a down broker left behind (celery beat calls this)."""
    now = now or timezone.now()
    stale = now - timedelta(minutes=2)
    events = list(
        WebhookEvent.objects.filter(
            status__in=[WebhookEvent.Status.RECEIVED, WebhookEvent.Status.FAILED],
            received_at__lt=stale,
        ).values_list("pk", flat=True)[:500]
    )
    for pk in events:
        _enqueue_safely(pk)
    for event in WebhookEvent.objects.filter(
        status=WebhookEvent.Status.DEFERRED, received_at__lt=now - timedelta(days=1)
    )[:100]:
        flag_raise(
            kind=BillingFlag.Kind.STUCK_EVENT,
            dedupe_key=f"stuck:{event.stripe_event_id}",
            message=f"Event {event.stripe_event_id} ({event.type}) still waits for "
            f"{event.waiting_for} after a day.",
            webhook_event=event,
        )
    refunds = list(
        Refund.objects.filter(
            status=Refund.Status.PENDING, stripe_refund_id__isnull=True, created_at__lt=stale
        ).values_list("pk", flat=True)[:500]
    )
    for pk in refunds:
        _enqueue("refund_submit", str(pk))
    # Delivered orders whose payables a lost task never recorded.
    orders = list(
        Order.objects.filter(
            status__in=[Order.Status.DELIVERED, Order.Status.CLOSED],
            updated_at__lt=stale,
            jobs__accepted_seconds__gt=0,
            jobs__payable__isnull=True,
        )
        .values_list("pk", flat=True)
        .distinct()[:100]
    )
    for pk in orders:
        _enqueue("order_fleet_payables", str(pk))
    # Cancelled or delivered orders (of the last two days) whose refund was never computed:
    # the broker was down when the order changed state. Both tasks are idempotent (refund
    # keys are unique), so an order that needs no refund is just looked at again.
    recent = now - timedelta(days=2)
    paid_orders = Order.objects.filter(
        updated_at__lt=stale,
        updated_at__gte=recent,
        payments__status=Payment.Status.SUCCEEDED,
    )
    cancelled = list(
        paid_orders.filter(status__in=[Order.Status.CANCELLED, Order.Status.REFUNDED])
        .exclude(refunds__reason=Refund.Reason.CANCELLATION)
        .values_list("pk", flat=True)
        .distinct()[:100]
    )
    for pk in cancelled:
        _enqueue("order_cancellation_refund", str(pk))
    short = list(
        paid_orders.filter(
            status__in=[Order.Status.DELIVERED, Order.Status.CLOSED],
            accepted_hours__lt=F("hours"),
        )
        .exclude(refunds__reason=Refund.Reason.TRUE_UP)
        .values_list("pk", flat=True)
        .distinct()[:100]
    )
    for pk in short:
        _enqueue("order_trueup", str(pk))
    return {
        "events": len(events),
        "refunds": len(refunds),
        "payables": len(orders),
        "cancellation_refunds": len(cancelled),
        "trueups": len(short),
    }


# --- Fleet payables and payouts ----------------------------------------------------------------

SECONDS_PER_HOUR = Decimal(3600)


def payable_amount(*, accepted_seconds: Decimal, rate_per_hour: Decimal, currency: str) -> Decimal:
    """Accepted hours x the fleet's hourly rate, rounded half-up to the currency's minor unit."""
    for value in (accepted_seconds, rate_per_hour):
        if not isinstance(value, Decimal):
            raise TypeError("money and hours are Decimal")
    return quantize_money(accepted_seconds * rate_per_hour / SECONDS_PER_HOUR, currency)


def allocate(*, total: Decimal, weights: list[Decimal], currency: str) -> list[Decimal]:
    """Split `total` over `weights` in minor units (largest remainder): the parts sum to total."""
    exponent = MINOR_UNITS[currency]
    total_minor = int(quantize_money(total, currency).scaleb(exponent))
    whole = [int(w.scaleb(3)) for w in weights]  # weights are seconds to the millisecond
    denominator = sum(whole)
    if denominator <= 0 or total_minor == 0:
        return [Decimal(0).scaleb(-exponent) for _ in weights]
    parts = [total_minor * w // denominator for w in whole]
    remainders = sorted(
        range(len(whole)), key=lambda i: (-(total_minor * whole[i] % denominator), i)
    )
    for i in remainders[: total_minor - sum(parts)]:
        parts[i] += 1
    return [Decimal(part).scaleb(-exponent) for part in parts]


def order_earned(order: Order) -> Decimal:
    """What the customer pays for the accepted hours: the payment minus the true-up refund."""
    payment = _succeeded_payment(order)
    paid = payment.amount if payment else order.total
    refund = prorata_refund(
        paid=paid,
        currency=order.currency,
        hours_ordered=order.hours,
        hours_kept=order.accepted_hours,
    )
    return paid - refund


def _job_fleet(job: Job) -> Fleet | None:
    """The fleet that did the job: its holder, else its latest assignment's fleet."""
    if job.fleet_id is not None:
        return job.fleet
    assignment = (
        Assignment.objects.filter(job=job).select_related("fleet").order_by("-created_at").first()
    )
    return assignment.fleet if assignment else None


def _post_payable(payable: FleetPayable, fleet: Fleet) -> None:
    ledger_post(
        key=f"payable:{payable.job_id}",
        kind=LedgerTransaction.Kind.PAYABLE,
        memo=f"Fleet {fleet.name}: {payable.accepted_seconds} s accepted on order "
        f"{payable.order_id} at {payable.rate_per_hour}/h",
        legs=[
            Leg(LedgerAccount.CUSTOMER_FUNDS, payable.customer_amount, payable.currency),
            Leg(LedgerAccount.FLEET_PAYABLE, -payable.amount, payable.currency),
            Leg(
                LedgerAccount.PLATFORM_REVENUE,
                payable.amount - payable.customer_amount,
                payable.currency,
            ),
        ],
        order_id=payable.order_id,
        organization_id=fleet.organization_id,
        fleet=fleet,
    )


def order_fleet_payables(*, order_id) -> list[FleetPayable]:
    """On delivery: one payable per job with accepted time, and the platform's margin.

    The order row is locked, then jobs that already have a payable are skipped (the job is
    unique on FleetPayable and the ledger key is `payable:<job>`), so running this twice, or
    twice at once, records each job once. The customer's payment for the accepted hours is
    split over the jobs by accepted time, so per order the payables' customer parts add up to
    exactly what the customer keeps paying after the true-up.
    """
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        if order.status not in (Order.Status.DELIVERED, Order.Status.CLOSED):
            return []
        jobs = list(
            Job.objects.filter(order=order, accepted_seconds__gt=0)
            .select_related("fleet")
            .order_by("sequence")
        )
        if not jobs:
            return []
        shares = allocate(
            total=order_earned(order),
            weights=[job.accepted_seconds for job in jobs],
            currency=order.currency,
        )
        done = set(FleetPayable.objects.filter(job__in=jobs).values_list("job_id", flat=True))
        created = []
        for job, share in zip(jobs, shares, strict=True):
            if job.id in done:
                continue
            fleet = _job_fleet(job)
            if fleet is None or fleet.currency != order.currency:
                why = (
                    "no fleet is known for it"
                    if fleet is None
                    else f"fleet {fleet.name} is paid in {fleet.currency}, the order in "
                    f"{order.currency}"
                )
                flag_raise(
                    kind=BillingFlag.Kind.PAYABLE_UNRECORDED,
                    dedupe_key=f"payable-unrecorded:{job.id}",
                    message=f"Job {job.id} of order {order.id} has {job.accepted_seconds} s "
                    f"accepted but {why}: record its payable by hand.",
                    order_id=order.id,
                )
                continue
            payable = FleetPayable.objects.create(
                job=job,
                fleet=fleet,
                order=order,
                accepted_seconds=job.accepted_seconds,
                rate_per_hour=fleet.payout_rate_per_hour,
                amount=payable_amount(
                    accepted_seconds=job.accepted_seconds,
                    rate_per_hour=fleet.payout_rate_per_hour,
                    currency=order.currency,
                ),
                customer_amount=share,
                currency=order.currency,
            )
            _post_payable(payable, fleet)
            created.append(payable)
    return created


class PayoutsNotConfigured(Conflict):
    code = "payouts_not_configured"


@dataclass(frozen=True)
class PayoutPlanRow:
    fleet: Fleet
    currency: str
    amount: Decimal
    payables: int
    stripe_account_id: str  # empty: no payout account, the fleet is skipped


def payout_plan() -> list[PayoutPlanRow]:
    """What a run would pay now (unpaid payables per fleet and currency); for the admin."""
    rows = (
        FleetPayable.objects.filter(payout__isnull=True, amount__gt=0)
        .values("fleet_id", "currency")
        .annotate(total=models.Sum("amount"), n=models.Count("id"))
        .order_by("fleet_id", "currency")
    )
    fleets = Fleet.objects.in_bulk([row["fleet_id"] for row in rows])
    accounts = dict(
        FleetPayoutAccount.objects.filter(fleet_id__in=fleets).values_list(
            "fleet_id", "stripe_account_id"
        )
    )
    return [
        PayoutPlanRow(
            fleet=fleets[row["fleet_id"]],
            currency=row["currency"],
            amount=row["total"],
            payables=row["n"],
            stripe_account_id=accounts.get(row["fleet_id"], ""),
        )
        for row in rows
    ]


def payout_prepare(*, fleet_id, run: PayoutRun | None = None) -> list[Payout]:
    """Gather a fleet's unpaid payables into pending payouts (one per currency).

    Lock the fleet's payout account, then re-read its unpaid payables under lock: two runs at
    once cannot put one payable in two payouts. Returns [] (and flags staff) when the fleet
    has no payout account.
    """
    with transaction.atomic():
        account = FleetPayoutAccount.objects.select_for_update().filter(fleet_id=fleet_id).first()
        payables = list(
            FleetPayable.objects.select_for_update()
            .filter(fleet_id=fleet_id, payout__isnull=True, amount__gt=0)
            .order_by("pk")
        )
        if not payables:
            return []
        if account is None:
            fleet = Fleet.objects.get(pk=fleet_id)
            owed = sum((p.amount for p in payables), ZERO)
            flag_raise(
                kind=BillingFlag.Kind.NO_PAYOUT_ACCOUNT,
                dedupe_key=f"no-payout-account:{fleet_id}:{timezone.now():%Y-%m}",
                message=f"Fleet {fleet.name} ({fleet_id}) is owed {owed} "
                f"{payables[0].currency} but has no Stripe payout account: add one in "
                "Billing > Fleet payout accounts; the next run pays it.",
            )
            return []
        by_currency: dict[str, list[FleetPayable]] = {}
        for payable in payables:
            by_currency.setdefault(payable.currency, []).append(payable)
        payouts = []
        for currency, group in sorted(by_currency.items()):
            payout = Payout.objects.create(
                fleet_id=fleet_id,
                run=run,
                stripe_account_id=account.stripe_account_id,
                amount=sum((p.amount for p in group), ZERO),
                currency=currency,
            )
            FleetPayable.objects.filter(pk__in=[p.pk for p in group]).update(payout=payout)
            payouts.append(payout)
    return payouts


def _post_payout(payout: Payout) -> None:
    ledger_post(
        key=f"payout:{payout.id}",
        kind=LedgerTransaction.Kind.PAYOUT,
        memo=f"Transfer {payout.stripe_transfer_id} to {payout.stripe_account_id}",
        legs=[
            Leg(LedgerAccount.FLEET_PAYABLE, payout.amount, payout.currency),
            Leg(LedgerAccount.STRIPE_BALANCE, -payout.amount, payout.currency),
        ],
        organization_id=payout.fleet.organization_id,
        fleet_id=payout.fleet_id,
    )


def payout_submit(*, payout_id) -> Payout:
    """Send a pending payout to Stripe as one transfer, exactly once.

    The payout row stays locked during the call (two workers cannot both send it) and the
    idempotency key is `payout:<id>`, so a re-send after a lost response or an outage gets the
    same transfer back. Stripe down: the payout stays pending (its payables unpaid) with the
    error noted; the next run re-sends it. Stripe refuses: the payout fails, its payables are
    released for a later run and staff are flagged.
    """
    return _payout_send(payout_id=payout_id)[0]


def _payout_send(*, payout_id) -> tuple[Payout, bool]:
    """payout_submit, also telling whether this call sent it (False: already settled)."""
    with transaction.atomic():
        payout = Payout.objects.select_for_update().select_related("fleet").get(pk=payout_id)
        if payout.status != Payout.Status.PENDING:
            return payout, False
        payout.attempts += 1
        try:
            result = gateway.transfer_find(
                transfer_group=f"payout:{payout.id}"
            ) or gateway.transfer_create(
                amount=payout.amount,
                currency=payout.currency,
                destination=payout.stripe_account_id,
                transfer_group=f"payout:{payout.id}",
                metadata={"payout_id": str(payout.id), "fleet_id": str(payout.fleet_id)},
                idempotency_key=f"payout:{payout.id}",
            )
        except gateway.GatewayUnavailable as exc:
            payout.failure_message = str(exc)[:2000]
            payout.save(update_fields=["attempts", "failure_message", "updated_at"])
            return payout, True
        except gateway.GatewayError as exc:
            payout.status = Payout.Status.FAILED
            payout.failure_message = str(exc)[:2000]
            payout.save(update_fields=["status", "attempts", "failure_message", "updated_at"])
            FleetPayable.objects.filter(payout=payout).update(payout=None)
            flag_raise(
                kind=BillingFlag.Kind.PAYOUT_FAILED,
                dedupe_key=f"payout-failed:{payout.id}",
                message=f"Stripe refused payout {payout.id} of {payout.amount} "
                f"{payout.currency} to fleet {payout.fleet.name} ({payout.stripe_account_id}): "
                f"{exc}. Its payables are unpaid again; fix the account and run payouts.",
            )
            return payout, True
        payout.status = Payout.Status.PAID
        payout.stripe_transfer_id = result.id
        payout.paid_at = timezone.now()
        payout.failure_message = ""
        payout.save()
        _post_payout(payout)
    return payout, True


def payout_run(*, triggered_by: str) -> PayoutRun:
    """Pay every fleet its unpaid payables; a second run right after pays nothing.

    First re-sends payouts an earlier run left pending (Stripe was down), with their own
    keys; then gathers and sends new ones. Fleets without a payout account are skipped,
    reported in the run and flagged.
    """
    if not gateway.is_configured():
        raise PayoutsNotConfigured("Stripe is not configured (STRIPE_API_KEY): no payouts.")
    run = PayoutRun.objects.create(triggered_by=triggered_by[:200])
    report: dict[str, list] = {"paid": [], "pending": [], "failed": [], "skipped": []}
    payout_ids = list(
        Payout.objects.filter(status=Payout.Status.PENDING)
        .order_by("created_at")
        .values_list("pk", flat=True)
    )
    fleet_ids = list(
        FleetPayable.objects.filter(payout__isnull=True, amount__gt=0)
        .order_by("fleet_id")
        .values_list("fleet_id", flat=True)
        .distinct()
    )
    for fleet_id in fleet_ids:
        payouts = payout_prepare(fleet_id=fleet_id, run=run)
        if (
            not payouts
            and FleetPayable.objects.filter(
                fleet_id=fleet_id, payout__isnull=True, amount__gt=0
            ).exists()
        ):
            report["skipped"].append({"fleet": str(fleet_id), "reason": "no payout account"})
        payout_ids.extend(p.pk for p in payouts)
    for payout_id in payout_ids:
        payout, sent = _payout_send(payout_id=payout_id)
        if not sent:
            continue  # another run settled it meanwhile
        entry = {
            "payout": str(payout.id),
            "fleet": str(payout.fleet_id),
            "amount": str(payout.amount),
            "currency": payout.currency,
        }
        if payout.status == Payout.Status.PAID:
            report["paid"].append(entry)
        elif payout.status == Payout.Status.FAILED:
            report["failed"].append({**entry, "error": payout.failure_message})
        else:
            report["pending"].append({**entry, "error": payout.failure_message})
    run.report = report
    run.finished_at = timezone.now()
    run.save(update_fields=["report", "finished_at"])
    return run
