"""Refunds: requested once per business key, sent to Stripe once, booked when settled; and
the refunds the platform owes by itself (the true-up at delivery, cancellations)."""

import uuid
from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum

from billing import stripe_gateway as gateway
from billing.error_codes import ErrorCode
from billing.ledger import post_refund
from billing.models import BillingFlag, Payment, Refund
from billing.services.flags import flag_raise
from billing.services.payments import (
    lock_order_and_payment,
    payments_cancel_open,
    succeeded_payment,
)
from fleets.selectors import order_dispatched_hours
from marketplace.audit import system_label
from marketplace.errors import Conflict, ServiceError
from marketplace.queueing import enqueue_on_commit
from orders.models import Order, OrderEvent
from orders.pricing import quantize_money
from orders.services import order_mark_refunded

SYSTEM = system_label("billing")
ZERO = Decimal("0")
# An order counts as dispatched (work handed to fleets) from collection onwards.
DISPATCHED_STATES = frozenset(
    {
        Order.Status.IN_COLLECTION,
        Order.Status.IN_REVIEW,
        Order.Status.DELIVERED,
        Order.Status.CLOSED,
    }
)


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
        order, payment = lock_order_and_payment(payment_id)
        existing = Refund.objects.filter(key=key).first()
        if existing is not None:
            return existing
        amount = quantize_money(amount, payment.currency)
        if amount <= 0:
            raise ServiceError("A refund must be more than zero.", fields={"amount": ["> 0"]})
        if payment.status != Payment.Status.SUCCEEDED:
            raise Conflict(
                "Only a succeeded payment can be refunded.", code=ErrorCode.NOT_REFUNDABLE
            )
        if amount > payment.refundable:
            raise Conflict(
                f"At most {payment.refundable} {payment.currency} can still be refunded.",
                code=ErrorCode.REFUND_EXCEEDS_PAYMENT,
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
        enqueue_on_commit("billing.tasks.refund_submit", refund_id)
    return refund


def refund_submit(*, refund_id) -> Refund:
    """Send a pending refund to Stripe, exactly once.

    The order, payment and refund stay locked during the call, so two workers running the
    same task cannot both send it; the idempotency key (the refund's id) covers a response
    lost on the way back. Stripe down: nothing changes here and the task retries.
    """
    with transaction.atomic():
        payment_id = Refund.objects.values_list("payment_id", flat=True).get(pk=refund_id)
        lock_order_and_payment(payment_id)
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
        order, payment = lock_order_and_payment(payment_id)
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
        post_refund(refund)
        after_refund(order=order, payment=payment)
    return refund


def refund_record_failure(*, refund_id, message: str) -> Refund:
    with transaction.atomic():
        payment_id = Refund.objects.values_list("payment_id", flat=True).get(pk=refund_id)
        order, payment = lock_order_and_payment(payment_id)
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


def after_refund(*, order: Order, payment: Payment) -> None:
    fully = (
        payment.amount_refunded >= payment.amount
        and not payment.refunds.filter(status=Refund.Status.PENDING).exists()
    )
    if fully and order.status == Order.Status.CANCELLED:
        order_mark_refunded(
            order_id=order.id,
            actor_label=SYSTEM,
            reason="Payment refunded in full.",
        )


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


def refund_or_flag(*, order: Order, plan: RefundPlan, key: str, reason: str) -> Refund | None:
    if plan.amount <= 0:
        return None
    payment = succeeded_payment(order)
    by_transfer = payment is not None and payment.method == Payment.Method.BANK_TRANSFER
    if payment is None or by_transfer:
        # Paid outside Stripe (bank transfer, or marked paid): Stripe cannot send it back.
        paid = (
            by_transfer
            or OrderEvent.objects.filter(order=order, to_status=Order.Status.PAID).exists()
        )
        if paid:
            flag_raise(
                kind=BillingFlag.Kind.MANUAL_REFUND,
                dedupe_key=f"manual-refund:{key}",
                message=(
                    f"Order {order.id} was paid outside Stripe"
                    + (f" (bank transfer {payment.reference})" if by_transfer else "")
                    + f"; refund {plan.amount} {order.currency} by hand ({plan.why})."
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


def plan_shortfall_credited(order: Order) -> Decimal:
    """What the plan shortfall refunds (pending or made) stand for (services/plan_credits.py):
    the price of units not delivered, taken out of what the hours true-up prorates."""
    total = (
        Refund.objects.filter(order=order, reason=Refund.Reason.PLAN_SHORTFALL)
        .exclude(status=Refund.Status.FAILED)
        .aggregate(total=Sum("amount"))["total"]
    )
    return total or ZERO


def order_trueup(*, order_id) -> Refund | None:
    """On delivery: refund, pro rata, the hours ordered that QA did not accept. Delivered
    again (after a re-collection): what order_credit owes instead (a credit granted while the
    order was being collected again is refunded then). A planned order's environments and
    objects short of the plan are credited first (billing.tasks.order_trueup)."""
    deliveries = OrderEvent.objects.filter(order_id=order_id, to_status=Order.Status.DELIVERED)
    if deliveries.count() > 1:
        return order_credit(order_id=order_id)
    return _unkept_hours_refund(
        order_id=order_id,
        key=lambda order: f"trueup:{order.id}",
        reason=Refund.Reason.TRUE_UP,
        why=lambda order: f"{order.accepted_hours} of {order.hours} h accepted",
    )


def plan_credit_room(order: Order, *, shortfall: Decimal) -> Decimal:
    """How much more may be refunded for the plan once the shortfall credits stand for
    `shortfall` in all: the shortfall plus the hours not kept of the rest of the price, less
    every refund made or pending (so a unit found short after an hours refund already gave
    back part of its fee is credited only the rest)."""
    payment = succeeded_payment(order)
    kept = max(order.accepted_hours, order.accepted_seconds / 3600)
    paid = payment.amount if payment else order.total
    refunded = payment.amount_refunded if payment else ZERO
    hours = prorata_refund(
        paid=max(ZERO, paid - shortfall),
        currency=order.currency,
        hours_ordered=order.hours,
        hours_kept=kept,
    )
    return max(ZERO, min(shortfall + hours, paid) - refunded)


def _unkept_hours_plan(order: Order, *, why: str) -> RefundPlan:
    """What the hours ordered and not kept are owed, pro rata, less every refund made or
    pending (the true-up and earlier credits count: a credit after a true-up refunds only the
    difference). Kept: the accepted time to the second (never less than the accepted hours,
    which are rounded down to the hundredth). A plan shortfall credited (environments or
    objects not delivered) is out of both: the hours prorate what is left of the price."""
    payment = succeeded_payment(order)
    kept = max(order.accepted_hours, order.accepted_seconds / 3600)
    paid = payment.amount if payment else order.total
    refunded = payment.amount_refunded if payment else ZERO
    shortfall = plan_shortfall_credited(order) if payment else ZERO
    due = prorata_refund(
        paid=paid - shortfall, currency=order.currency, hours_ordered=order.hours, hours_kept=kept
    )
    amount = max(ZERO, min(due - (refunded - shortfall), paid - refunded))
    return RefundPlan(amount=amount, hours_kept=kept, why=why)


def _unkept_hours_refund(*, order_id, key, reason: str, why) -> Refund | None:
    """The refund of the hours a delivered order no longer keeps, planned under the order's
    and payment's locks (the true-up and a credit running at once never both refund the same
    hours). `key` and `why` are functions of the locked order."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        if order.status not in (Order.Status.DELIVERED, Order.Status.CLOSED):
            return None
        payment = succeeded_payment(order)
        if payment is not None:
            Payment.objects.select_for_update().filter(pk=payment.pk).first()
        plan = _unkept_hours_plan(order, why=why(order))
        return refund_or_flag(order=order, plan=plan, key=key(order), reason=reason)


def order_credit(*, order_id) -> Refund | None:
    """Delivered episodes were credited (a granted claim, or staff): refund, pro rata to the
    second, the hours ordered that are no longer kept, less what was refunded already (the
    true-up's and earlier credits'). Keyed by the seconds kept, so a repeat refunds nothing.
    An order being collected again is credited when it is delivered again (order_trueup)."""
    return _unkept_hours_refund(
        order_id=order_id,
        key=lambda order: f"credit:{order.id}:{order.accepted_seconds}",
        reason=Refund.Reason.CREDIT,
        why=lambda order: (
            f"delivered episodes credited: {order.accepted_seconds} s of {order.hours} h kept"
        ),
    )


def _status_when_cancelled(order: Order) -> str | None:
    event = (
        OrderEvent.objects.filter(order=order, to_status=Order.Status.CANCELLED)
        .order_by("-created_at", "-id")
        .first()
    )
    return event.from_status if event else None


def order_cancellation_refund(
    *, order_id, dispatched_hours: Decimal | None = None
) -> Refund | None:
    """On cancellation: before dispatch refund in full, after it the undispatched part."""
    order = Order.objects.get(pk=order_id)
    if order.status not in (Order.Status.CANCELLED, Order.Status.REFUNDED):
        return None
    with transaction.atomic():
        Order.objects.select_for_update().filter(pk=order.pk).first()
        payments_cancel_open(order=order)
    from_status = _status_when_cancelled(order)
    if from_status in DISPATCHED_STATES:
        if dispatched_hours is None:
            dispatched_hours = order_dispatched_hours(order)
        kept = dispatched_hours
        why = f"cancelled after dispatch, {dispatched_hours} of {order.hours} h dispatched"
    else:
        kept = ZERO
        why = f"cancelled before dispatch ({from_status})"
    payment = succeeded_payment(order)
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
    return refund_or_flag(
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
