"""The customer's exclusion page of an order: its operators (figures and outlier flags), a
form to exclude an operator or episodes with a reason (asked again before it acts), the
order's exclusions so far, and once delivered, its claims: each episode's re-check and
decision, the fleet's answer and the staff's. Thin: datasets.services.exclusions and claims
do the work."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from datasets import claim_selectors
from datasets.models import Claim, Episode, EpisodeExclusion, ExclusionReason
from datasets.operator_figures import order_operator_figures
from datasets.services.acceptance import (
    delivered_episodes_of,
    staff_credit_delivered_episodes,
)
from datasets.services.allowance import order_allowance
from datasets.services.claims import claim_create
from datasets.services.delivery_versions import acceptance_deadline, latest_full_delivery
from datasets.services.exclusions import episodes_exclude
from marketplace.audit import user_label
from marketplace.errors import NotFound, ServiceError
from marketplace.models import Organization
from orders.models import Order
from orders.selectors import order_list
from portal.shell import (
    CAN_ORDER,
    confirm_page,
    confirmed,
    organization_page,
    render_page,
    staff_page,
)
from portal.wording import EXCLUSION_REASONS, duration_text

CUSTOMER = Organization.Kind.CUSTOMER


def _order(request, pk):
    order = order_list(organization=request.caller.organization).filter(pk=pk).first()
    if order is None:
        raise Http404("Order not found.")
    return order


def _episode_ids(raw: str) -> list[str]:
    return [part for part in raw.replace(",", " ").split() if part]


@require_http_methods(["GET", "POST"])
@organization_page(kind=CUSTOMER, roles=CAN_ORDER)
def order_exclusions_page(request, pk):
    order = _order(request, pk)
    if request.method == "POST":
        return _exclude(request, order)
    return _page(request, order, staff=False)


@require_http_methods(["GET", "POST"])
@staff_page
def staff_order_exclusions_page(request, pk):
    """Staff exclude episodes of any order (not bound by the acceptance window): the hours are
    re-collected, or, once delivered, credited to the customer."""
    order = Order.objects.filter(pk=pk).first()
    if order is None:
        raise Http404("Order not found.")
    if request.method == "POST":
        return _exclude(request, order, staff=True)
    return _page(request, order, staff=True)


def _page(request, order, *, staff: bool):
    delivered = None
    if order.status == Order.Status.DELIVERED:
        delivered = latest_full_delivery(order)
    return render_page(
        request,
        "portal/deliveries/exclusions.html",
        {
            "order": order,
            "operators": order_operator_figures(order=order),
            "reasons": [(code, EXCLUSION_REASONS[code]) for code in ExclusionReason.values],
            "exclusions": list(EpisodeExclusion.objects.filter(order=order)[:500]),
            "accepted": Episode.objects.filter(order=order, status=Episode.Status.ACCEPTED).count(),
            "delivered": delivered,
            "acceptance_until": acceptance_deadline(delivered) if delivered else None,
            "remedies": EpisodeExclusion.Remedy.choices,
            "staff": staff,
            "allowance": order_allowance(order),
            "claims": list(
                claim_selectors.customer_claims(organization=order.organization, order_id=order.pk)[
                    :100
                ]
            ),
        },
    )


def _exclude(request, order, *, staff: bool = False):
    post = request.POST
    operator = post.get("operator", "").strip()
    episodes = _episode_ids(post.get("episodes", ""))
    reason = post.get("reason_code", "")
    back = reverse(
        "staff-order-exclusions-page" if staff else "order-exclusions-page", args=[order.pk]
    )
    if not confirmed(request):
        what = (
            f"every accepted episode of operator {operator}"
            if operator
            else (f"{len(episodes)} episode{'s' if len(episodes) != 1 else ''}")
        )
        claim = not staff and order.status == Order.Status.DELIVERED
        return confirm_page(
            request,
            title="Claim these episodes?" if claim else "Exclude these episodes?",
            message=_confirm_message(what, reason, post.get("remedy"), claim=claim),
            button="File the claim" if claim else "Exclude",
            back_url=back,
            fields=[
                ("operator", operator),
                ("episodes", " ".join(episodes)),
                ("reason_code", reason),
                ("note", post.get("note", "")),
                ("remedy", post.get("remedy", EpisodeExclusion.Remedy.RECOLLECT)),
                ("start_seconds", post.get("start_seconds", "")),
                ("end_seconds", post.get("end_seconds", "")),
            ],
        )
    try:
        if staff:
            result = _staff_apply(request, order, operator, episodes, reason)
        else:
            result = _apply(request, order, operator, episodes, reason)
    except NotFound as exc:
        messages.error(request, exc.message)
    except ServiceError as exc:
        detail = " ".join(_messages(exc.fields))
        messages.error(request, f"{exc.message} {detail}".strip())
    else:
        messages.success(request, _done(result, post.get("remedy")))
    return redirect(back)


def _confirm_message(what: str, reason: str, remedy, *, claim: bool) -> str:
    words = EXCLUSION_REASONS.get(reason, reason)
    credit = remedy == EpisodeExclusion.Remedy.CREDIT
    if claim:
        return (
            f"Claim {what} of the delivered dataset ({words}), "
            + ("to be credited" if credit else "to be collected again")
            + "? Each episode is re-checked: within your rejection allowance and confirmed, it "
            "is granted at once; otherwise its fleet may answer and staff decide. An episode "
            "is claimed once only."
        )
    return (
        f"Exclude {what} from this order ({words})? They stop counting and are not paid to the "
        "fleet; "
        + (
            "their hours are refunded to the customer"
            if credit
            else "their hours are collected again"
        )
        + " and the dataset is delivered as a new version. This cannot be undone."
    )


def _messages(fields) -> list[str]:
    """Field errors as plain words (a claim's are nested per item)."""
    out = []
    for value in (fields or {}).values():
        if isinstance(value, dict):
            out.extend(_messages(value))
        elif isinstance(value, list | tuple):
            out.extend(str(v) for v in value)
        else:
            out.append(str(value))
    return out[:10]


def _done(result, remedy) -> str:
    if isinstance(result, Claim):
        count = result.items.count()
        return (
            f"Claim filed for {count} episode{'s' if count != 1 else ''}: each is re-checked now;"
            " within your allowance and confirmed, it is granted at once, otherwise the fleet "
            "may answer and staff decide."
        )
    return (
        f"{len(result.excluded)} episode{'s' if len(result.excluded) != 1 else ''} excluded"
        + (f" ({result.already} already were)" if result.already else "")
        + f"; {duration_text(result.seconds)} "
        + ("credited." if remedy == EpisodeExclusion.Remedy.CREDIT else "go back to collection.")
    )


def _staff_apply(request, order, operator: str, episodes: list[str], reason: str):
    """Staff exclude (re-collected) at any time, or credit a delivered order's episodes."""
    common = {
        "staff_label": user_label(request.user),
        "order_id": order.pk,
        "operator": operator,
        "episode_ids": episodes,
        "reason_code": reason,
        "note": request.POST.get("note", ""),
    }
    if request.POST.get("remedy") == EpisodeExclusion.Remedy.CREDIT:
        return staff_credit_delivered_episodes(**common).exclusion
    return episodes_exclude(**common)


def _apply(request, order, operator: str, episodes: list[str], reason: str):
    """Before delivery: an exclusion (re-collected, within the allowance). Delivered: a claim
    on the latest version's episodes, re-collected or credited once granted."""
    note = request.POST.get("note", "")
    delivered = latest_full_delivery(order) if order.status == Order.Status.DELIVERED else None
    if delivered is None:
        return episodes_exclude(
            caller=request.caller,
            order_id=order.pk,
            operator=operator,
            episode_ids=episodes,
            reason_code=reason,
            note=note,
        )
    if operator:
        episodes = delivered_episodes_of(delivered, operator)
    span = {
        name: request.POST.get(name, "").strip() or None
        for name in ("start_seconds", "end_seconds")
    }
    return claim_create(
        caller=request.caller,
        delivery_id=delivered.id,
        remedy=request.POST.get("remedy", EpisodeExclusion.Remedy.RECOLLECT),
        items=[{"episode": e, "reason_code": reason, **span} for e in episodes],
        note=note,
    )
