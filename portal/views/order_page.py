"""The customer's order page, shared by the views that render it: the order (or a 404), its
context (timeline, progress, ETA, coverage chart, billing's payment and invoice cards, the
QA and deliveries section) and whether it still changes by itself. `portal/views/orders.py`
(the page and its live endpoint) and `portal/views/deliveries.py` (a failed copy into the
customer's bucket re-renders the page with its form) both import it; it imports neither.
"""

from decimal import Decimal

from django.conf import settings
from django.http import Http404

from datasets import selectors as dataset_selectors
from datasets.models import Delivery
from datasets.services import downloads
from marketplace.models import Membership
from orders.models import CUSTOMER_CANCELLABLE, Order
from orders.selectors import order_list
from portal.forms.deliveries import BucketExportForm
from portal.forms.orders import OrderCancelForm
from portal.shell import CAN_ORDER
from portal.views.billing import order_invoice_section, order_payment_section
from portal.wording import EXCLUSION_REASONS

FILES_LISTED = 50

# The usual path of an order, for the timeline's steps (cancel/refund are shown as events).
ORDER_PATH = [
    Order.Status.AWAITING_PAYMENT,
    Order.Status.PAID,
    Order.Status.IN_COLLECTION,
    Order.Status.IN_REVIEW,
    Order.Status.DELIVERED,
    Order.Status.CLOSED,
]


# Statuses after which nothing on the page changes by itself any more.
SETTLED = (Order.Status.CLOSED, Order.Status.CANCELLED, Order.Status.REFUNDED)


def order_for(request, pk) -> Order:
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


def order_context(request, order: Order, cancel_form: OrderCancelForm | None = None) -> dict:
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
        "progress": progress(order),
        "collection": collection,
        "coverage": coverage_chart(order, collection),
        "cell_grid": cell_grid(order),  # the plan's grid (orders planned by cell), else None
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
    context["live"] = keeps_changing(order, context)
    return context


def keeps_changing(order: Order, context: dict) -> bool:
    if order.status in SETTLED:
        return False
    if order.status == Order.Status.DELIVERED:
        return any(d.status == "assembling" for d in context["quality_section"]["deliveries"])
    return True


def order_quality_section(request, order, export_forms: dict | None = None) -> dict:
    """The order page's QA figures, rejection reasons, operators and deliveries, each ready
    delivery with its ways out: the command, the LeRobot snippet, one archive, a copy into the
    customer's bucket, the files (portal/deliveries/_order_quality.html, _download.html)."""
    caller = request.caller
    delivered = list(dataset_selectors.order_deliveries(order=order).prefetch_related("exports"))
    site_url = request.build_absolute_uri("/").rstrip("/")
    downloads_ = []
    for delivery in delivered:
        files = list(delivery.files.all())
        archive_size = downloads.delivery_archive_size(delivery) if files else 0
        downloads_.append(
            {
                "delivery": delivery,
                "site_url": site_url,
                "folder": f"./dataset-{str(delivery.id)[:8]}",
                "repo_id": f"marketplace/{delivery.id}",
                "archive_size": archive_size,
                "archive_ok": 0 < archive_size <= settings.DELIVERY_ARCHIVE_MAX_BYTES,
                "exports": list(delivery.exports.all()),
                "export_form": (export_forms or {}).get(delivery.id)
                or BucketExportForm(prefix_id=str(delivery.id)[:8]),
                "files": files[:FILES_LISTED],
                "more_files": max(0, len(files) - FILES_LISTED),
            }
        )
    return {
        "order": order,
        "coverage": dataset_selectors.order_coverage(order=order),
        "deliveries": delivered,
        "downloads": downloads_,
        "older_versions": sum(
            1 for d in delivered if not d.is_latest and d.status != Delivery.Status.ASSEMBLING
        ),
        "can_review": caller.has_role(*CAN_ORDER),
        "exclusion_reasons": list(EXCLUSION_REASONS.items()),
        "can_revoke": caller.has_role(Membership.Role.OWNER),
    }


# --- Presentation helpers (no business rules: just numbers for the templates) -----------------


def progress(order: Order) -> dict:
    hours = order.hours or Decimal("0")
    accepted = order.accepted_hours or Decimal("0")
    percent = int(min(Decimal(100), accepted / hours * 100)) if hours > 0 else 0
    return {"accepted": accepted, "hours": hours, "percent": percent}


def _minutes(seconds: Decimal) -> Decimal:
    return (seconds / 60).quantize(Decimal("0.1"))


def cell_grid(order: Order) -> dict | None:
    """The collection plan's grid (issue 30): a row per environment (its site's pseudonym, or
    its scene's name, once bound), a column per object slot (the object's name once bound),
    each cell's accepted episodes and minutes against its target, marked short (below the
    minimum share) or full (at the maximum). None for an order not planned by cell."""
    cells = dataset_selectors.order_cells(order=order)
    if not cells:
        return None
    slots = max(cell["object_slot"] for cell in cells) + 1
    rows: dict[int, dict] = {}
    for cell in cells:
        row = rows.setdefault(
            cell["environment_index"],
            {
                "label": f"Environment {cell['environment_index'] + 1}",
                "where": cell["scene"] or cell["site"],
                "cells": [],
            },
        )
        row["cells"].append(
            {
                **cell,
                "accepted_minutes": _minutes(cell["accepted_seconds"]),
                "target_minutes": _minutes(cell["target_seconds"]),
            }
        )
    return {
        "columns": [f"Object {slot + 1}" for slot in range(slots)],
        "rows": [rows[index] for index in sorted(rows)],
        "scenes": order.environment_unit == "scene",
        "short": sum(1 for cell in cells if cell["state"] == "short"),
        "full": sum(1 for cell in cells if cell["state"] == "full"),
    }


CHART_MAX_BARS = 12
CHART_WIDTH = 640
CHART_HEIGHT = 220
CHART_LEFT = 48
CHART_BOTTOM = 36
CHART_TOP = 16


def coverage_chart(order: Order, collection=None) -> dict:
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
