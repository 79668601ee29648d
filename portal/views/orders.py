"""Customer web pages: catalog, price calculator, order wizard, orders and the order page.

Thin: the services that back the REST API do every write; these views map forms to them and
errors back. The order page shows what other apps know about the order (billing's payment
card, datasets' QA results and deliveries) by calling their selectors directly.
"""

from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from datasets import selectors as dataset_selectors
from datasets.operator_figures import order_operator_figures
from marketplace.errors import ServiceError
from marketplace.models import Organization
from orders import plan_advisor, services
from orders.models import (
    ComplexityLevel,
    Embodiment,
    Order,
    SensorAddon,
    TaskType,
)
from orders.selectors import order_list, quote_visible_to, rate_card_current, rate_card_terms
from portal.forms.orders import DatasetRequestForm, OrderCancelForm, OrderDetailsForm
from portal.shell import CAN_ORDER, organization_page, render_page
from portal.views.order_page import keeps_changing, order_context, order_for, progress

CUSTOMER = Organization.Kind.CUSTOMER
ORDERS_PER_PAGE = 25

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
    initial["calibrated_cameras"] = query.get("calibrated_cameras") in ("on", "true", "1")
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
                    organization=request.caller.organization,
                    request=form.to_request(),
                    advise=True,  # the quote page proposes a plan ("Use this plan")
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
            "advice_url": _respecify_url(quote, quote.plan_advice) if quote.plan_advice else "",
            "supply": quote.supply,
        },
    )


ADVISED_FIELDS = ("environments", "objects_per_environment", "distinct_objects", "demos_per_cell")


def _respecify_url(quote, advice: dict | None = None) -> str:
    """Back to step 1 with the quote's specification filled in (with the plan advisor's
    proposal instead of the quote's plan: "Use this plan")."""
    plan = {name: getattr(quote, name) for name in ADVISED_FIELDS}
    plan.update({name: advice[name] for name in ADVISED_FIELDS if advice and name in advice})
    params = [
        ("task_type", quote.task_type.slug),
        ("complexity", quote.complexity_id),
        ("embodiment", quote.embodiment.slug),
        ("hours", quote.hours),
        *[(name, value) for name, value in plan.items() if value is not None],
        *[("sensors", slug) for slug in quote.sensor_slugs],
        ("environment_unit", quote.environment_unit),
        ("object_categories", ", ".join(quote.object_categories)),
        ("cell_min_share_percent", quote.cell_min_share_percent),
        ("cell_max_share_percent", quote.cell_max_share_percent),
    ]
    if quote.rush:
        params.append(("rush", "on"))
    if quote.calibrated_cameras:
        params.append(("calibrated_cameras", "on"))
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
            "orders": [(order, progress(order)) for order in page.object_list],
            "status": status,
            "statuses": Order.Status.choices,
            "can_order": request.caller.has_role(*CAN_ORDER),
        },
    )


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


@organization_page(kind=CUSTOMER)
def order_detail(request, pk):
    order = order_for(request, pk)
    return render_page(request, "portal/orders/order_detail.html", order_context(request, order))


@organization_page(kind=CUSTOMER)
def order_live(request, pk):
    """The live parts of the order page as HTML fragments, for the page's polling script."""
    order = order_for(request, pk)
    context = order_context(request, order)
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
            "live": keeps_changing(order, context),
            "sections": sections,
        }
    )
    response["Cache-Control"] = "no-store"
    return response


@organization_page(kind=CUSTOMER)
def order_episodes(request, pk):
    """The order's checked episodes, optionally those rejected for one QA reason."""
    order = order_for(request, pk)
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
    order = order_for(request, pk)
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
        request, "portal/orders/order_detail.html", order_context(request, order, form), status=400
    )


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
            "plan_rules": plan_advisor.RULES,
        },
    )
