"""Staff console: what needs attention (flagged jobs, orders past their ETA, payments in
review, disputes and other billing flags, failed deliveries, bank transfers to record), the
dispatch board, and their actions. Thin: the same services as the admin actions."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from billing import selectors as billing_selectors
from billing.models import BillingFlag
from billing.services import flags, payments
from datasets import selectors as dataset_selectors
from datasets.models import Delivery, Dispute
from datasets.services.delivery_versions import delivery_start
from fleets import selectors as fleet_selectors
from fleets.models import Job
from fleets.services.jobs import job_redispatch
from fleets.services.waitlist import waitlist_release
from marketplace.audit import actor_label
from marketplace.errors import ServiceError
from marketplace.tenancy import Caller
from orders.models import Order
from orders.selectors import orders_waitlisted
from portal.forms.billing import BankTransferForm
from portal.shell import confirm_page, confirmed, render_page, staff_page


def _label(request) -> str:
    return actor_label(Caller(organization=None, role=None, user=request.user))


@staff_page
def attention(request):
    open_flags = list(billing_selectors.flags_open()[:200])
    return render_page(
        request,
        "portal/staff/attention.html",
        {
            "flagged_jobs": list(fleet_selectors.dispatch_board()["flagged"][:200]),
            "late_orders": dataset_selectors.orders_past_eta(),
            "in_review": list(billing_selectors.payments_in_review()[:200]),
            "disputes": [f for f in open_flags if f.kind == BillingFlag.Kind.DISPUTE],
            "other_flags": [f for f in open_flags if f.kind != BillingFlag.Kind.DISPUTE],
            "failed_deliveries": dataset_selectors.deliveries_failed(),
            "awaiting_transfer": list(billing_selectors.orders_awaiting_transfer()[:200]),
            "waitlisted": list(orders_waitlisted()[:200]),
            "claim_disputes": Dispute.objects.filter(
                status=Dispute.Status.AWAITING_DECISION
            ).count(),
            "now": timezone.now(),
        },
    )


@staff_page
def dispatch_board(request):
    board = fleet_selectors.dispatch_board()
    return render_page(
        request,
        "portal/staff/dispatch.html",
        {
            "columns": [(name, list(jobs[:200])) for name, jobs in board.items()],
            "now": timezone.now(),
        },
    )


@require_POST
@staff_page
def job_redispatch_page(request, pk):
    job = Job.objects.filter(pk=pk).first()
    if job is None:
        raise Http404("Job not found.")
    try:
        job_redispatch(job_id=job.pk, actor_label=_label(request))
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Job {job.order_id}#{job.sequence} sent through dispatch again.")
    return redirect(request.POST.get("next") or reverse("staff-dispatch"))


@require_POST
@staff_page
def waitlist_release_page(request, pk):
    """Release a waitlisted order: its held jobs open and are dispatched (fleets' service)."""
    order = orders_waitlisted().filter(pk=pk).first()
    if order is None:
        raise Http404("No waitlisted order with this id.")
    if not confirmed(request):
        return confirm_page(
            request,
            title="Release this order from the waitlist?",
            message="Its held jobs open and are offered to the fleets now, whether or not the"
            " platform can cover all of it.",
            button="Release",
            back_url=reverse("staff-attention"),
        )
    try:
        opened = waitlist_release(order_id=order.pk, actor_label=_label(request))
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            f"Order {str(order.pk)[:8]} released from the waitlist;"
            f" {len(opened)} job(s) sent to dispatch.",
        )
    return redirect("staff-attention")


@require_POST
@staff_page
def delivery_retry_page(request, pk):
    delivery = Delivery.objects.filter(pk=pk, status=Delivery.Status.FAILED).first()
    if delivery is None:
        raise Http404("No failed delivery with this id.")
    retried = delivery_start(order_id=delivery.order_id, kind=delivery.kind)
    messages.success(request, f"Assembly queued again (delivery {retried.pk}).")
    return redirect("staff-attention")


@require_POST
@staff_page
def flag_resolve_page(request, pk):
    if not confirmed(request):
        return confirm_page(
            request,
            title="Mark this flag resolved?",
            message="It leaves the list of things that need attention; the flag is kept.",
            button="Mark resolved",
            back_url=reverse("staff-attention"),
        )
    try:
        flags.flag_resolve(flag_id=pk, user=request.user)
    except BillingFlag.DoesNotExist as exc:
        raise Http404("Flag not found.") from exc
    messages.success(request, "Flag resolved.")
    return redirect("staff-attention")


@staff_page
def bank_transfer_page(request, pk):
    """Record a bank transfer for an order: a Payment and a ledger entry; the order is paid."""
    order = Order.objects.select_related("organization").filter(pk=pk).first()
    if order is None:
        raise Http404("Order not found.")
    invoice = billing_selectors.order_invoice(order=order)
    form = BankTransferForm(
        request.POST or None,
        initial={"amount": order.total, "reference": invoice.payment_reference if invoice else ""},
    )
    if request.method == "POST" and form.is_valid():
        if not confirmed(request):
            return confirm_page(
                request,
                title="Record this payment?",
                message=(
                    f"Record {form.cleaned_data['amount']} {order.currency} received by bank "
                    f"transfer ({form.cleaned_data['reference']}) for order {order.pk}: the order "
                    "is marked paid and collection starts. This cannot be undone here."
                ),
                button="Record payment",
                back_url=reverse("staff-bank-transfer", args=[order.pk]),
                fields=[(name, form.data.get(name, "")) for name in ("amount", "reference")],
            )
        try:
            payments.payment_record_offline(
                order_id=order.pk,
                amount=form.cleaned_data["amount"],
                reference=form.cleaned_data["reference"],
                recorded_by=_label(request),
            )
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, f"Payment recorded: order {order.pk} is paid.")
            return redirect("staff-attention")
    return render_page(
        request,
        "portal/staff/bank_transfer.html",
        {"order": order, "invoice": invoice, "form": form},
    )
