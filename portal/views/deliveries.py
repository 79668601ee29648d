"""Customer pages for datasets: the QA and deliveries section of the order page, the job
page's episodes (fleet portal), audited downloads and pilot review. Thin: the services behind
the REST API do the work; datasets.selectors does the reads."""

from django.contrib import messages
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from datasets import selectors
from datasets.services import deliveries, downloads
from marketplace.client_address import client_address
from marketplace.errors import NotFound, ServiceError
from marketplace.models import Membership, Organization
from portal.shell import CAN_ORDER, organization_page

CUSTOMER = Organization.Kind.CUSTOMER
JOB_PAGE_EPISODES = 200


def order_quality_section(request, order) -> dict:
    """The order page's QA figures, rejection reasons, operators and deliveries
    (portal/deliveries/_order_quality.html)."""
    caller = request.caller
    return {
        "order": order,
        "coverage": selectors.order_coverage(order=order),
        "deliveries": list(selectors.order_deliveries(order=order)),
        "can_review": caller.has_role(*CAN_ORDER),
        "can_revoke": caller.has_role(Membership.Role.OWNER),
    }


def job_episodes_section(job) -> dict:
    """The job page's episodes, newest first, with QA status and reasons
    (portal/deliveries/_job_episodes.html)."""
    episodes = selectors.job_episodes(job=job)
    return {"episodes": list(episodes[:JOB_PAGE_EPISODES]), "total": episodes.count()}


@require_GET
@organization_page(kind=CUSTOMER)
def delivery_download_page(request, pk):
    """Redirect to a freshly signed link (recorded), or back to the order with the reason."""
    try:
        link = downloads.delivery_download_link(
            caller=request.caller,
            delivery_id=pk,
            path=request.GET.get("path", "manifest.json"),
            ip_address=client_address(request),
            user_agent=request.headers.get("User-Agent", ""),
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except ServiceError as exc:
        messages.error(request, exc.message)
        return _back_to_order(request, pk)
    response = HttpResponseRedirect(link.url)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@organization_page(kind=CUSTOMER, roles=CAN_ORDER)
def pilot_review_page(request, pk):
    approve = request.POST.get("decision") == "approve"
    try:
        deliveries.pilot_review(
            caller=request.caller,
            delivery_id=pk,
            approve=approve,
            reason=request.POST.get("reason", ""),
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            "Pilot approved: the rest of the order is being dispatched."
            if approve
            else "Pilot rejected: our staff will contact you.",
        )
    return _back_to_order(request, pk)


@require_POST
@organization_page(kind=CUSTOMER, roles=(Membership.Role.OWNER,))
def delivery_revoke_page(request, pk):
    try:
        downloads.delivery_revoke(delivery_id=pk, caller=request.caller)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    messages.success(request, "Delivery revoked: no new download links will be issued.")
    return _back_to_order(request, pk)


def _back_to_order(request, delivery_id):
    delivery = (
        selectors.deliveries_of(organization=request.caller.organization)
        .filter(pk=delivery_id)
        .first()
    )
    if delivery is None:
        raise Http404("Delivery not found.")
    return redirect("order-detail-page", pk=delivery.order_id)
