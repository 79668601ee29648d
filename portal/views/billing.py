"""Billing pages: the order page's payment card with "Pay with card" (Stripe Checkout), and the
fleet portal's earnings and payouts page.

Thin: billing.services starts payments (the same call as the REST API) and billing.selectors
reads the payment and the earnings.
"""

from django.contrib import messages
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from billing import selectors
from billing.models import Payment
from billing.services import payments
from marketplace.errors import NotFound, ServiceError
from marketplace.models import Organization
from orders.models import Order
from orders.selectors import order_list
from portal.shell import fleet_page, organization_page, render_page

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
