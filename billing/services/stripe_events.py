"""Stripe's webhooks: store each verified event once, then run its handler once.

Handlers are looked up by `event.type` in WEBHOOK_HANDLERS; an event that arrives before
the one it depends on is deferred until that one is processed.
"""

import logging
import uuid

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from billing import stripe_gateway as gateway
from billing.ledger import Leg, ledger_post, post_refund
from billing.models import (
    BillingFlag,
    LedgerAccount,
    LedgerTransaction,
    Payment,
    Refund,
    WebhookEvent,
)
from billing.services.flags import flag_raise
from billing.services.payments import lock_order_and_payment, payment_move, payment_record_success
from billing.services.refunds import ZERO, after_refund, refund_record_success
from marketplace.queueing import enqueue_or_leave_to_sweeper

logger = logging.getLogger(__name__)


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
            transaction.on_commit(lambda: _process_later(pk))
    return record, created


def _process_later(pk: int) -> None:
    """The event is stored, so Stripe gets its 200 whatever queueing meets: a broker that is
    down, or (eager Celery) the handler's own failure. billing_sweep retries either."""
    try:
        enqueue_or_leave_to_sweeper("billing.tasks.webhook_event_process", str(pk))
    except Exception:
        logger.exception("webhook event %s not processed now; billing_sweep retries it", pk)


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
    _, payment = lock_order_and_payment(payment.pk)
    if payment.status == Payment.Status.REQUIRES_PAYMENT:
        payment.failure_message = "The Checkout session expired unpaid."
        payment_move(payment, Payment.Status.CANCELED, fields=("failure_message",))
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
        order, payment = lock_order_and_payment(payment.id)
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
        post_refund(refund)
        flag_raise(
            kind=BillingFlag.Kind.EXTERNAL_REFUND,
            dedupe_key=f"external-refund:{refund_id}",
            message=f"A refund of {amount} {currency} on order {order.id} was issued in Stripe.",
            order_id=order.id,
            payment=payment,
            webhook_event=event,
        )
        after_refund(order=order, payment=payment)


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
