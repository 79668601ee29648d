"""Billing pages: the order page's payment card with "Pay with card" (Stripe Checkout), and the
fleet portal's earnings and payouts page.

Thin: billing.services starts payments (the same call as the REST API) and billing.selectors
reads the payment and the earnings.
"""

from decimal import Decimal

from django.contrib import messages
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.views.decorators.http import require_POST

from billing import selectors
from billing.models import Payment
from billing.services import invoices, payments
from marketplace.errors import NotFound, ServiceError
from marketplace.models import Organization
from orders.models import Embodiment, Order, SensorAddon
from orders.selectors import order_list
from portal.forms.billing import BillingProfileForm
from portal.shell import fleet_page, organization_page, render_page
from portal.wording import readable_line

CAN_PAY = payments.PAYING_ROLES
RETURN_STATES = ("success", "cancelled")


def order_payment_section(request, order) -> dict | None:
    """The order page's payment card (portal/billing/_order_payment.html); None (the order
    page's own staff-marked message) while online payment is not configured."""
    if not payments.payments_enabled():
        return None
    returned = request.GET.get("payment", "")
    return {
        "order": order,
        "payment": selectors.order_latest_payment(order=order),
        "awaiting_payment": order.status == Order.Status.AWAITING_PAYMENT,
        "returned": returned if returned in RETURN_STATES else "",
        "can_pay": request.caller.has_role(*CAN_PAY),
    }


@require_POST
@organization_page(kind=Organization.Kind.CUSTOMER, roles=CAN_PAY)
def order_pay_page(request, pk):
    """Open (or reuse) the order's Checkout session and send the browser there (303)."""
    # Another organization's order does not exist for this caller, whatever else is wrong.
    if not order_list(organization=request.caller.organization).filter(pk=pk).exists():
        raise Http404("Order not found.")
    try:
        payment, _ = payments.payment_start(
            caller=request.caller, order_id=pk, method=Payment.Method.CHECKOUT
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except ServiceError as exc:
        # Stripe unreachable or the order not payable: nothing was written; say why on the page.
        messages.error(request, exc.message)
        return redirect("order-detail-page", pk=pk)
    return HttpResponseRedirect(payment.checkout_url, status=303)


@fleet_page()
def fleet_earnings_page(request):
    earnings = selectors.fleet_earnings(organization=request.caller.organization)
    return render_page(request, "portal/billing/fleet_earnings.html", {"earnings": earnings})


# --- Invoices ------------------------------------------------------------------------------------

INVOICE_ROLES = payments.PAYING_ROLES


def order_invoice_section(request, order) -> dict | None:
    """The order page's invoice card: the invoice (issued on first view of its page) and, while
    the order awaits payment, how to pay it by bank transfer."""
    if order.status in invoices.NOT_INVOICED:
        return None
    return {
        "order": order,
        "invoice": selectors.order_invoice(order=order),
        "awaiting_payment": order.status == Order.Status.AWAITING_PAYMENT,
        "can_see": request.caller.has_role(*INVOICE_ROLES),
    }


def _invoice_for(request, pk):
    if not order_list(organization=request.caller.organization).filter(pk=pk).exists():
        raise Http404("Order not found.")
    try:
        return invoices.invoice_for_order(order_id=pk, organization=request.caller.organization)
    except NotFound as exc:
        raise Http404(exc.message) from exc


def _invoice_context(invoice) -> dict:
    return {"invoice": invoice, "lines": invoice_lines(invoice)}


def invoice_lines(invoice) -> list[dict]:
    names = dict(Embodiment.objects.values_list("slug", "name"))
    names.update(SensorAddon.objects.values_list("slug", "name"))
    return [
        {
            "text": readable_line(line.get("description") or line.get("code", ""), names),
            "quantity": line.get("quantity"),
            "unit_amount": line.get("unit_amount"),
            "amount": Decimal(str(line.get("amount"))),
        }
        for line in invoice.lines
    ]


@organization_page(kind=Organization.Kind.CUSTOMER, roles=INVOICE_ROLES)
def invoice_page(request, pk):
    try:
        invoice = _invoice_for(request, pk)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("order-detail-page", pk=pk)
    profile = selectors.billing_profile(organization=request.caller.organization)
    form = BillingProfileForm(
        request.POST or None,
        initial={
            "legal_name": profile.legal_name if profile else request.caller.organization.name,
            "address": profile.address if profile else "",
            "tax_id": profile.tax_id if profile else "",
            "email": profile.email if profile else "",
        },
    )
    if request.method == "POST" and form.is_valid():
        try:
            invoices.billing_profile_save(
                organization=request.caller.organization, **form.cleaned_data
            )
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, "Billing details saved: your next invoices will use them.")
            return redirect("invoice-page", pk=pk)
    context = _invoice_context(invoice)
    context.update({"order": invoice.order, "profile_form": form})
    return render_page(request, "portal/billing/invoice.html", context)


@organization_page(kind=Organization.Kind.CUSTOMER, roles=INVOICE_ROLES)
def invoice_pdf_page(request, pk):
    try:
        invoice = _invoice_for(request, pk)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("order-detail-page", pk=pk)
    html = render_to_string("portal/billing/invoice_pdf.html", _invoice_context(invoice))
    pdf = invoices.invoice_pdf(html=html, base_url=request.build_absolute_uri("/"))
    response = HttpResponse(pdf, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{invoice.number}.pdf"'
    return response
