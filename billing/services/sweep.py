"""The billing sweep (celery beat): re-run what a lost task or a down broker left behind."""

from datetime import timedelta
from decimal import Decimal

from django.db.models import DecimalField, F, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from billing.models import BillingFlag, FleetPayable, Payment, Refund, WebhookEvent
from billing.services.flags import flag_raise
from billing.services.payables import PAYABLE_STATES
from marketplace.queueing import enqueue_or_leave_to_sweeper
from orders.models import Order


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
        enqueue_or_leave_to_sweeper("billing.tasks.webhook_event_process", str(pk))
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
        enqueue_or_leave_to_sweeper("billing.tasks.refund_submit", str(pk))
    orders, reversals = _sweep_payables(stale)
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
        enqueue_or_leave_to_sweeper("billing.tasks.order_cancellation_refund", str(pk))
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
        enqueue_or_leave_to_sweeper("billing.tasks.order_trueup", str(pk))
    return {
        "events": len(events),
        "refunds": len(refunds),
        "payables": len(orders),
        "cancellation_refunds": len(cancelled),
        "trueups": len(short),
        "payable_reversals": len(reversals),
    }


def _sweep_payables(stale) -> tuple[list, list]:
    """Queue the payables a lost task never recorded, and the reversals a lost message never
    made; returns the orders queued for each."""
    # Delivered (or cancelled after dispatch) orders whose payables a lost task never recorded.
    orders = list(
        Order.objects.filter(
            status__in=PAYABLE_STATES,
            updated_at__lt=stale,
            jobs__accepted_seconds__gt=0,
            jobs__payable__isnull=True,
        )
        .values_list("pk", flat=True)
        .distinct()[:100]
    )
    for pk in orders:
        enqueue_or_leave_to_sweeper("billing.tasks.order_fleet_payables", str(pk))
    # Payables whose job is now paid for less time than the payable still stands for (its
    # recorded seconds less those already carried as deductions): a reversal a lost message
    # never made, the first or a later one (payables_reconcile is idempotent).
    carried = Coalesce(
        Sum("deductions__seconds", filter=Q(deductions__in_place=False)),
        Value(Decimal(0), output_field=DecimalField()),
    )
    reversals = list(
        FleetPayable.objects.annotate(standing=F("accepted_seconds") - carried)
        .filter(job__accepted_seconds__lt=F("standing"))
        .values_list("order_id", flat=True)
        .distinct()[:100]
    )
    for pk in reversals:
        enqueue_or_leave_to_sweeper("billing.tasks.order_payables_reconcile", str(pk))
    return orders, reversals
