"""Customer web pages: catalog, price calculator, order wizard, orders and the order page.

Thin: the services that back the REST API do every write; these views map forms to them and
errors back. The order page shows what other apps know about the order (billing's payment
card, datasets' QA results and deliveries) by calling their selectors directly.
"""

from decimal import Decimal
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from datasets import selectors as dataset_selectors
from datasets.operator_figures import order_operator_figures
from marketplace.errors import ServiceError
from marketplace.models import Organization
from orders import services
from orders.models import (
    CUSTOMER_CANCELLABLE,
    ComplexityLevel,
    Embodiment,
    Order,
    SensorAddon,
    TaskType,
)
from orders.selectors import order_list, quote_visible_to, rate_card_current, rate_card_terms
from portal.forms.orders import DatasetRequestForm, OrderCancelForm, OrderDetailsForm
from portal.shell import CAN_ORDER, organization_page, render_page
from portal.views.billing import order_invoice_section, order_payment_section
from portal.views.deliveries import order_quality_section

CUSTOMER = Organization.Kind.CUSTOMER
ORDERS_PER_PAGE = 25

# The usual path of an order, for the timeline's steps (cancel/refund are shown as events).
ORDER_PATH = [
    Order.Status.AWAITING_PAYMENT,
    Order.Status.PAID,
    Order.Status.IN_COLLECTION,
    Order.Status.IN_REVIEW,
    Order.Status.DELIVERED,
    Order.Status.CLOSED,
]


# --- Public ------------------------------------------------------------------------------------


def catalog(request):
    rate_card = rate_card_current()
    multipliers = (
        {m.level_id: m.multiplier for m in rate_card.complexity_multipliers.all()}
        if rate_card
        else {}
    )
    levels = [(level, multipliers.get(level.level)) for level in ComplexityLevel.objects.all()]
    return render_page(
        request,
        "portal/orders/catalog.html",
        {
            "levels": levels,
            "task_types": TaskType.objects.filter(active=True).select_related("default_complexity"),
            "embodiments": Embodiment.objects.filter(active=True),
            "sensors": SensorAddon.objects.filter(active=True),
            "rate_card": rate_card,
        },
    )


def price_calculator(request):
    form = DatasetRequestForm(initial=_initial_from_query(request))
    return render_page(
        request,
        "portal/orders/price_calculator.html",
        {"form": form, "rate_card": rate_card_current()},
    )


def _initial_from_query(request) -> dict:
    """Prefill the specification from a link (the calculator's 'Continue to order')."""
    query = request.GET
    if "task_type" not in query:
        return {}
    initial = {name: query.get(name) for name in DatasetRequestForm.base_fields if name in query}
    initial["sensors"] = query.getlist("sensors")
    initial["rush"] = query.get("rush") in ("on", "true", "1")
    return initial


# --- Order wizard ------------------------------------------------------------------------------


@organization_page(kind=CUSTOMER, roles=CAN_ORDER)
def order_new(request):
    """Step 1: the specification, priced live; submitting stores a quote."""
    if request.method == "POST":
        form = DatasetRequestForm(request.POST)
        if form.is_valid():
            try:
                quote = services.quote_create(
                    organization=request.caller.organization, request=form.to_request()
                )
            except ServiceError as exc:
                form.add_service_error(exc)
            else:
                return redirect("order-new-quote", quote_id=quote.id)
    else:
        form = DatasetRequestForm(initial=_initial_from_query(request))
    return render_page(request, "portal/orders/order_new.html", {"form": form, "step": 1})


@organization_page(kind=CUSTOMER, roles=CAN_ORDER)
def order_new_quote(request, quote_id):
    """Step 2: the quote on screen, the order details, and 'Place order'."""
    caller = request.caller
    quote = get_object_or_404(
        quote_visible_to(organization=caller.organization).select_related(
            "task_type", "complexity", "embodiment", "rate_card"
        ),
        pk=quote_id,
    )
    placed = order_list(organization=caller.organization).filter(quote=quote).first()
    if placed is not None:
        messages.info(request, "An order was already placed from this quote.")
        return redirect("order-detail-page", pk=placed.pk)
    form = OrderDetailsForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            order = services.order_create_from_quote(
                caller=caller, quote_id=quote.id, details=form.to_details()
            )
        except ServiceError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, "Order placed. Payment is the next step.")
            return redirect("order-detail-page", pk=order.pk)
    expired = quote.expires_at <= timezone.now()
    return render_page(
        request,
        "portal/orders/order_new_quote.html",
        {
            "form": form,
            "quote": quote,
            "expired": expired,
            "step": 2,
            "respecify_url": _respecify_url(quote),
        },
    )


def _respecify_url(quote) -> str:
    """Back to step 1 with the quote's specification filled in."""
    params = [
        ("task_type", quote.task_type.slug),
        ("complexity", quote.complexity_id),
        ("embodiment", quote.embodiment.slug),
        ("hours", quote.hours),
        ("environments", quote.environments),
        ("objects_per_environment", quote.objects_per_environment),
        *[("sensors", slug) for slug in quote.sensor_slugs],
    ]
    if quote.rush:
        params.append(("rush", "on"))
    return f"{reverse('order-new')}?{urlencode(params)}"


# --- Orders ------------------------------------------------------------------------------------


@organization_page(kind=CUSTOMER)
def order_list_page(request):
    orders = order_list(organization=request.caller.organization)
    status = request.GET.get("status", "")
    if status in Order.Status.values:
        orders = orders.filter(status=status)
    else:
        status = ""
    page = Paginator(orders, ORDERS_PER_PAGE).get_page(request.GET.get("page"))
    return render_page(
        request,
        "portal/orders/order_list.html",
        {
            "page": page,
            "orders": [(order, _progress(order)) for order in page.object_list],
            "status": status,
            "statuses": Order.Status.choices,
            "can_order": request.caller.has_role(*CAN_ORDER),
        },
    )


def _order_for(request, pk) -> Order:
    """The caller's order, or a 404 (another organization's order does not exist for them)."""
    order = (
        order_list(organization=request.caller.organization)
        .select_related("created_by", "quote")
        .prefetch_related("events")
        .filter(pk=pk)
        .first()
    )
    if order is None:
        raise Http404("Order not found.")
    return order


# The order page's parts that change while an order runs: each a partial of its own,
# rendered into the page and re-rendered by the live endpoint (`order_live`), so another part
# (a media section, say) is one more (name, template) here and one include in the page.
LIVE_SECTIONS = [
    ("eta", "portal/orders/_eta.html"),
    ("progress", "portal/orders/_collection.html"),
    ("coverage", "portal/orders/_coverage.html"),
    ("quality", "portal/deliveries/_order_quality.html"),
    ("timeline", "portal/orders/_timeline.html"),
]
# Statuses after which nothing on the page changes by itself any more.
SETTLED = (Order.Status.CLOSED, Order.Status.CANCELLED, Order.Status.REFUNDED)


@organization_page(kind=CUSTOMER)
def order_detail(request, pk):
    order = _order_for(request, pk)
    return render_page(request, "portal/orders/order_detail.html", _order_context(request, order))


@organization_page(kind=CUSTOMER)
def order_live(request, pk):
    """The live parts of the order page as HTML fragments, for the page's polling script."""
    order = _order_for(request, pk)
    context = _order_context(request, order)
    context["caller"] = request.caller
    context["section"] = context["quality_section"]  # as the page includes it
    sections = {
        name: render_to_string(template, context, request=request)
        for name, template in LIVE_SECTIONS
    }
    response = JsonResponse(
        {
            "status": order.status,
            "status_label": order.get_status_display(),
            "live": _keeps_changing(order, context),
            "sections": sections,
        }
    )
    response["Cache-Control"] = "no-store"
    return response


def _keeps_changing(order: Order, context: dict) -> bool:
    if order.status in SETTLED:
        return False
    if order.status == Order.Status.DELIVERED:
        return any(d.status == "assembling" for d in context["quality_section"]["deliveries"])
    return True


def _order_context(request, order: Order, cancel_form: OrderCancelForm | None = None) -> dict:
    can_order = request.caller.has_role(*CAN_ORDER)
    events = list(order.events.all())
    reached = {event.to_status for event in events}
    steps = [
        {
            "status": status,
            "label": Order.Status(status).label,
            "done": status in reached,
            "current": status == order.status,
        }
        for status in ORDER_PATH
    ]
    collection = dataset_selectors.order_collection_status(order=order)
    context = {
        "order": order,
        "events": events,
        "steps": steps,
        "progress": _progress(order),
        "collection": collection,
        "coverage": _coverage_chart(order, collection),
        # billing's card (None: payment is not online, the page's own staff-marked message)
        "payment_section": order_payment_section(request, order),
        "invoice_section": order_invoice_section(request, order),
        "quality_section": order_quality_section(request, order),  # datasets: QA, deliveries
        "can_cancel": can_order and order.status in CUSTOMER_CANCELLABLE,
        "cancel_form": cancel_form or OrderCancelForm(),
        "awaiting_payment": order.status == Order.Status.AWAITING_PAYMENT,
        "is_closed_out": order.status in (Order.Status.CANCELLED, Order.Status.REFUNDED),
        "poll_seconds": settings.ORDER_PAGE_POLL_SECONDS,
    }
    context["live"] = _keeps_changing(order, context)
    return context


@organization_page(kind=CUSTOMER)
def order_episodes(request, pk):
    """The order's checked episodes, optionally those rejected for one QA reason."""
    order = _order_for(request, pk)
    reason = request.GET.get("reason", "")
    status = request.GET.get("status", "")
    episodes = dataset_selectors.order_episodes_for_customer(
        order=order, reason=reason, status=status
    )
    page = Paginator(episodes, 50).get_page(request.GET.get("page"))
    return render_page(
        request,
        "portal/orders/order_episodes.html",
        {
            "order": order,
            "page": page,
            "reason": reason,
            "status": status,
            "operators": order_operator_figures(order=order),
        },
    )


@require_POST
@organization_page(kind=CUSTOMER, roles=CAN_ORDER)
def order_cancel(request, pk):
    order = _order_for(request, pk)
    form = OrderCancelForm(request.POST)
    if form.is_valid():
        try:
            services.order_cancel(
                caller=request.caller, order_id=order.pk, reason=form.cleaned_data["reason"]
            )
        except ServiceError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, "The order is cancelled.")
        return redirect("order-detail-page", pk=order.pk)
    return render_page(
        request, "portal/orders/order_detail.html", _order_context(request, order, form), status=400
    )


# --- Presentation helpers (no business rules: just numbers for the templates) -----------------


def _progress(order: Order) -> dict:
    hours = order.hours or Decimal("0")
    accepted = order.accepted_hours or Decimal("0")
    percent = int(min(Decimal(100), accepted / hours * 100)) if hours > 0 else 0
    return {"accepted": accepted, "hours": hours, "percent": percent}


CHART_MAX_BARS = 12
CHART_WIDTH = 640
CHART_HEIGHT = 220
CHART_LEFT = 48
CHART_BOTTOM = 36
CHART_TOP = 16


def _coverage_chart(order: Order, collection=None) -> dict:
    """Geometry of the per-environment coverage chart, rendered as inline SVG, with each
    environment's site (name and kind) once a fleet has taken its job.

    Accepted hours per environment come from datasets (episodes that passed QA); with none yet
    every bar is empty and the chart shows its empty state, drawn on the same axes (the target
    per environment).
    """
    per_environment: list[Decimal] = dataset_selectors.order_environment_hours(order)
    sites = dataset_selectors.order_environment_sites(order)
    count = min(order.environments, CHART_MAX_BARS)
    target = order.hours / order.environments if order.environments else order.hours
    plot_width = CHART_WIDTH - CHART_LEFT - 8
    plot_height = CHART_HEIGHT - CHART_BOTTOM - CHART_TOP
    slot = plot_width / max(count, 1)
    bars = []
    rows = []
    for index in range(order.environments):
        value = per_environment[index] if index < len(per_environment) else Decimal("0")
        site_name, site_kind = sites.get(index, ("", ""))
        rows.append(
            {
                "label": f"E{index + 1}",
                "site_name": site_name,
                "site_kind": site_kind,
                "value": value,
                "target": target,
                "percent": int(min(Decimal(100), value / target * 100)) if target else 0,
            }
        )
        if index >= count:
            continue
        height = float(min(value / target, Decimal(1))) * plot_height if target else 0.0
        short = (site_name[:11] + "…") if len(site_name) > 12 else site_name
        bars.append(
            {
                "label": f"E{index + 1}",
                "site_name": site_name,
                "site_kind": site_kind,
                "short": short or f"E{index + 1}",
                "value": value,
                "x": CHART_LEFT + index * slot + slot * 0.15,
                "width": slot * 0.7,
                "y": CHART_TOP + plot_height - height,
                "height": height,
                "label_x": CHART_LEFT + index * slot + slot / 2,
            }
        )
    return {
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "left": CHART_LEFT,
        "top": CHART_TOP,
        "plot_bottom": CHART_TOP + plot_height,
        "plot_right": CHART_WIDTH - 8,
        "label_y": CHART_TOP + plot_height + 20,
        "center_x": CHART_LEFT + plot_width // 2,
        "center_y": CHART_TOP + plot_height // 2,
        "target": target.quantize(Decimal("0.01")),
        "bars": bars,
        "rows": rows,
        "hidden_environments": max(order.environments - CHART_MAX_BARS, 0),
        "empty": not any(per_environment),
    }


def price_list(request):
    """The public price list, generated from the rate card in force: hourly rates per robot and
    complexity level, sensor add-ons, environments, rush and volume discounts."""
    rate_card = rate_card_current()
    table, levels = [], []
    if rate_card is not None:
        terms = rate_card_terms(rate_card)
        levels = [
            level
            for level in ComplexityLevel.objects.all()
            if level.level in terms.complexity_multipliers
        ]
        names = {e.slug: e.name for e in Embodiment.objects.filter(active=True)}
        for slug, base in sorted(
            terms.embodiment_rates.items(), key=lambda item: names.get(item[0], item[0])
        ):
            if slug not in names:
                continue
            table.append(
                {
                    "embodiment": names[slug],
                    "base": base,
                    "rates": [base * terms.complexity_multipliers[level.level] for level in levels],
                }
            )
        sensors = {s.slug: s.name for s in SensorAddon.objects.filter(active=True)}
        sensor_rates = [
            (sensors[slug], rate)
            for slug, rate in sorted(terms.sensor_rates.items())
            if slug in sensors
        ]
        multipliers = [terms.complexity_multipliers[level.level] for level in levels]
    else:
        terms, sensor_rates, multipliers = None, [], []
    return render_page(
        request,
        "portal/orders/price_list.html",
        {
            "rate_card": rate_card,
            "terms": terms,
            "levels": list(zip(levels, multipliers, strict=True)),
            "table": table,
            "sensor_rates": sensor_rates,
        },
    )
