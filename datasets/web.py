"""Web pieces for customers: the QA and deliveries section of the order page, audited
downloads and pilot review. Thin: the services behind the REST API do the work."""

from django.contrib import messages
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from datasets import selectors
from datasets.models import Delivery, Episode
from datasets.services.deliveries import pilot_review
from datasets.services.downloads import delivery_download_link, delivery_revoke
from marketplace.errors import NotFound, ServiceError
from marketplace.models import Membership, Organization
from marketplace.views import organization_page

CUSTOMER = Organization.Kind.CUSTOMER
CAN_ORDER = (Membership.Role.OWNER, Membership.Role.MEMBER)


def order_quality_and_deliveries(request, order) -> dict:
    """ORDER_PAGE_SECTIONS entry: QA figures, rejection reasons, operators and deliveries."""
    caller = request.caller
    return {
        "template": "datasets/_order_quality.html",
        "order": order,
        "coverage": selectors.order_coverage(order=order),
        "deliveries": list(Delivery.objects.filter(order=order).prefetch_related("files")),
        "can_review": caller.has_role(*CAN_ORDER),
        "can_revoke": caller.has_role(Membership.Role.OWNER),
    }


def job_episodes(request, job) -> dict:
    """JOB_PAGE_SECTIONS entry: the job's episodes, newest first, with QA status and reasons."""
    episodes = Episode.objects.filter(job=job).order_by("-created_at", "-id")
    return {
        "template": "datasets/_job_episodes.html",
        "episodes": list(episodes[:200]),
        "total": episodes.count(),
    }


@require_GET
@organization_page(kind=CUSTOMER)
def delivery_download_page(request, pk):
    """Redirect to a freshly signed link (recorded), or back to the order with the reason."""
    try:
        link = delivery_download_link(
            caller=request.caller,
            delivery_id=pk,
            path=request.GET.get("path", "manifest.json"),
            ip_address=request.META.get("REMOTE_ADDR") or None,
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
        pilot_review(
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
        delivery_revoke(delivery_id=pk, caller=request.caller)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    messages.success(request, "Delivery revoked: no new download links will be issued.")
    return _back_to_order(request, pk)


def _back_to_order(request, delivery_id):
    delivery = Delivery.objects.filter(
        pk=delivery_id, order__organization=request.caller.organization
    ).first()
    if delivery is None:
        raise Http404("Delivery not found.")
    return redirect("order-detail-page", pk=delivery.order_id)
