"""Disputes on the web: the fleet's list and answer form, and the staff's queue and decision
page (what the customer claimed and why, the re-check, the fleet's answer, the customer's
granted-rejection share across its orders and what it downloaded before claiming). Thin:
datasets.services.disputes does the work, datasets.claim_selectors reads."""

from django.contrib import messages
from django.db.models import Q
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from datasets import claim_selectors
from datasets.models import Dispute
from datasets.services.disputes import dispute_answer, dispute_decide
from marketplace.audit import user_label
from marketplace.errors import NotFound, ServiceError
from marketplace.models import Organization
from portal.shell import (
    CAN_MANAGE_FLEETS,
    organization_page,
    render_page,
    staff_page,
)

FLEET = Organization.Kind.FLEET_OPERATOR


def _error_text(exc: ServiceError) -> str:
    detail = " ".join(m for ms in (exc.fields or {}).values() for m in ms if isinstance(m, str))
    return f"{exc.message} {detail}".strip()


@organization_page(kind=FLEET)
def fleet_dispute_list(request):
    disputes = claim_selectors.fleet_disputes(organization=request.caller.organization)
    return render_page(
        request,
        "portal/fleet/disputes.html",
        {"disputes": list(disputes.order_by("-created_at")[:200]), "now": timezone.now()},
    )


@require_http_methods(["GET", "POST"])
@organization_page(kind=FLEET)
def fleet_dispute_page(request, pk):
    """One dispute of the fleet's episodes, and (owners and members) the answer form."""
    try:
        dispute = claim_selectors.fleet_dispute(
            organization=request.caller.organization, dispute_id=pk
        )
    except NotFound as exc:
        raise Http404(exc.message) from exc
    can_answer = request.caller.has_role(*CAN_MANAGE_FLEETS)
    if request.method == "POST":
        try:
            dispute_answer(caller=request.caller, dispute_id=pk, answer=request.POST.get("answer"))
        except ServiceError as exc:
            messages.error(request, _error_text(exc))
        else:
            messages.success(request, "Answer sent: staff decide the dispute with it.")
        return redirect("fleet-dispute-page", pk=pk)
    return render_page(
        request,
        "portal/fleet/dispute.html",
        {
            "dispute": dispute,
            "items": list(dispute.items.all()),
            "can_answer": can_answer and dispute.status == Dispute.Status.OPEN,
            "now": timezone.now(),
        },
    )


@staff_page
def staff_dispute_queue(request):
    return render_page(
        request,
        "portal/staff/disputes.html",
        {"queue": claim_selectors.staff_dispute_queue(), "now": timezone.now()},
    )


@require_http_methods(["GET", "POST"])
@staff_page
def staff_dispute_page(request, pk):
    """A dispute to decide: grant, partial (the checked episodes) or refuse, with a note."""
    dispute = (
        Dispute.objects.select_related("claim__order__organization", "claim__delivery", "fleet")
        .filter(pk=pk)
        .first()
    )
    if dispute is None:
        raise Http404("Dispute not found.")
    if request.method == "POST":
        try:
            dispute_decide(
                staff_label=user_label(request.user),
                dispute_id=pk,
                decision=request.POST.get("decision", ""),
                episode_ids=request.POST.getlist("episodes"),
                note=request.POST.get("note", ""),
            )
        except ServiceError as exc:
            messages.error(request, _error_text(exc))
        else:
            messages.success(request, "Decision recorded.")
        return redirect(reverse("staff-dispute-page", args=[pk]))
    claim = dispute.claim
    return render_page(
        request,
        "portal/staff/dispute.html",
        {
            "dispute": dispute,
            "claim": claim,
            "items": list(dispute.items.select_related("episode")),
            "other_items": list(claim.items.exclude(dispute=dispute).select_related("episode")),
            "events": list(claim.events.filter(Q(dispute=None) | Q(dispute=dispute))),
            "record": claim_selectors.rejection_record(organization=claim.order.organization),
            "downloads": claim_selectors.download_audit(order_id=claim.order_id),
            "decisions": Dispute.Decision.choices,
            "decidable": dispute.status == Dispute.Status.AWAITING_DECISION
            or (dispute.status == Dispute.Status.OPEN and timezone.now() > dispute.answer_due_at),
            "now": timezone.now(),
        },
    )
