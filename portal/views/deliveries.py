"""Customer pages for datasets: the QA and deliveries section of the order page, the job
page's episodes (fleet portal), audited downloads and pilot review. Thin: the services behind
the REST API do the work; datasets.selectors does the reads."""

import io
import zipfile
from pathlib import Path

from django.contrib import messages
from django.http import Http404, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

import marketplace_client
from datasets import selectors
from datasets.models import Delivery
from datasets.services import deliveries, downloads, exports
from marketplace.client_address import client_address
from marketplace.errors import NotFound, ServiceError
from marketplace.models import Membership, Organization
from portal.forms.deliveries import BucketExportForm
from portal.shell import CAN_ORDER, confirm_page, confirmed, organization_page, render_page
from portal.views.order_page import order_context, order_for, order_quality_section

CUSTOMER = Organization.Kind.CUSTOMER
JOB_PAGE_EPISODES = 200


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
            reason_codes=request.POST.getlist("reason_codes"),
            recollect=not approve and request.POST.get("recollect") == "yes",
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except ServiceError as exc:
        detail = " ".join(m for ms in (exc.fields or {}).values() for m in ms)
        messages.error(request, f"{exc.message} {detail}".strip())
    else:
        recollect = request.POST.get("recollect") == "yes"
        messages.success(
            request,
            "Pilot approved: the rest of the order is being dispatched."
            if approve
            else "Pilot rejected: it is collected again and delivered as a new version."
            if recollect
            else "Pilot rejected: our staff will contact you.",
        )
    return _back_to_order(request, pk)


@require_POST
@organization_page(kind=CUSTOMER, roles=(Membership.Role.OWNER,))
def delivery_revoke_page(request, pk):
    if not confirmed(request):
        delivery = _customer_delivery(request, pk)
        return confirm_page(
            request,
            title="Revoke the download links?",
            message=(
                "No new download link of this delivery will be issued, to anyone in your "
                "organization (links handed out already expire within minutes). This cannot "
                "be undone."
            ),
            button="Revoke download links",
            back_url=reverse("order-detail-page", args=[delivery.order_id]),
        )
    try:
        downloads.delivery_revoke(delivery_id=pk, caller=request.caller)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    messages.success(request, "Delivery revoked: no new download links will be issued.")
    return _back_to_order(request, pk)


def _customer_delivery(request, delivery_id) -> Delivery:
    delivery = (
        selectors.deliveries_of(organization=request.caller.organization)
        .filter(pk=delivery_id)
        .first()
    )
    if delivery is None:
        raise Http404("Delivery not found.")
    return delivery


def _back_to_order(request, delivery_id):
    return redirect("order-detail-page", pk=_customer_delivery(request, delivery_id).order_id)


@require_GET
@organization_page(kind=CUSTOMER)
def delivery_archive_page(request, pk):
    """The whole delivery as one tar file, streamed from storage (never held in memory)."""
    try:
        archive = downloads.delivery_archive(
            caller=request.caller,
            delivery_id=pk,
            ip_address=client_address(request),
            user_agent=request.headers.get("User-Agent", ""),
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except ServiceError as exc:
        messages.error(request, exc.message)
        return _back_to_order(request, pk)
    response = StreamingHttpResponse(archive.chunks, content_type="application/x-tar")
    response["Content-Length"] = str(archive.size)
    response["Content-Disposition"] = f'attachment; filename="{archive.filename}"'
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@organization_page(kind=CUSTOMER, roles=CAN_ORDER)
def delivery_export_page(request, pk):
    """Start copying a delivery into the customer's own bucket."""
    delivery = _customer_delivery(request, pk)
    form = BucketExportForm(request.POST, prefix_id=str(delivery.id)[:8])
    if form.is_valid():
        try:
            export = exports.bucket_export_start(
                caller=request.caller, delivery_id=delivery.pk, **form.cleaned_data
            )
        except NotFound as exc:
            raise Http404(exc.message) from exc
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(
                request,
                f"Copying into {export.target}: this page shows when every file is verified.",
            )
            return redirect("order-detail-page", pk=delivery.order_id)
    order = order_for(request, delivery.order_id)
    context = order_context(request, order)
    context["quality_section"] = order_quality_section(
        request, order, export_forms={delivery.id: form}
    )
    messages.error(request, "The copy did not start: see the form below.")
    return render_page(request, "portal/orders/order_detail.html", context)


CLIENT_MAIN = b"""import sys
from marketplace_client.download import main
sys.exit(main())
"""


@require_GET
def download_client(request):
    """The download command as one file (a Python zip application of marketplace_client, the
    same code this platform ships; standard library only): `python3 marketplace-download.pyz`."""
    package = Path(marketplace_client.__file__).parent
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")  # as zipapp writes it: the shebang, then the zip
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("__main__.py", CLIENT_MAIN)
        for module in sorted(package.glob("*.py")):
            archive.write(module, f"marketplace_client/{module.name}")
    response = HttpResponse(buffer.getvalue(), content_type="application/zip")
    response["Content-Disposition"] = 'attachment; filename="marketplace-download.pyz"'
    return response
