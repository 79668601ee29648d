from decimal import Decimal

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from orders.models import (
    ComplexityLevel,
    ComplexityMultiplier,
    Embodiment,
    EmbodimentRate,
    Order,
    OrderEvent,
    Quote,
    RateCard,
    SensorAddon,
    SensorRate,
    TaskType,
    VolumeDiscountTier,
)
from orders.money import format_money


@admin.register(ComplexityLevel)
class ComplexityLevelAdmin(admin.ModelAdmin):
    list_display = ["level", "name", "description"]


@admin.register(TaskType)
class TaskTypeAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "category", "contact_rich", "default_complexity", "active"]
    list_filter = ["category", "contact_rich", "active"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Embodiment)
class EmbodimentAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "arms", "action_dim", "active"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(SensorAddon)
class SensorAddonAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "active"]
    prepopulated_fields = {"slug": ["name"]}


class InForceReadOnlyInline(admin.TabularInline):
    extra = 0

    def _in_force(self, obj) -> bool:
        return obj is not None and obj.effective_from <= timezone.now()

    def has_add_permission(self, request, obj=None):
        return not self._in_force(obj)

    def has_change_permission(self, request, obj=None):
        return not self._in_force(obj)

    def has_delete_permission(self, request, obj=None):
        return not self._in_force(obj)


class EmbodimentRateInline(InForceReadOnlyInline):
    model = EmbodimentRate


class ComplexityMultiplierInline(InForceReadOnlyInline):
    model = ComplexityMultiplier


class SensorRateInline(InForceReadOnlyInline):
    model = SensorRate


class VolumeDiscountTierInline(InForceReadOnlyInline):
    model = VolumeDiscountTier


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
    """A version that is in force is frozen: publish a new version with a later date instead."""

    list_display = ["version", "currency", "effective_from", "created_at"]
    inlines = [
        EmbodimentRateInline,
        ComplexityMultiplierInline,
        SensorRateInline,
        VolumeDiscountTierInline,
    ]

    def has_change_permission(self, request, obj=None):
        if obj is not None and obj.effective_from <= timezone.now():
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.effective_from <= timezone.now():
            return False
        return super().has_delete_permission(request, obj)


@admin.register(Quote)
class QuoteAdmin(admin.ModelAdmin):
    list_display = ["id", "organization", "task_type", "hours", "total_display", "expires_at"]
    list_select_related = ["organization", "task_type"]
    readonly_fields = ["price_lines"] + [f.name for f in Quote._meta.fields if f.name != "lines"]

    @admin.display(description="Total", ordering="total")
    def total_display(self, obj):
        return format_money(obj.total, obj.currency)

    @admin.display(description="Price lines")
    def price_lines(self, obj):
        return lines_table(obj)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class OrderEventInline(admin.TabularInline):
    model = OrderEvent
    extra = 0
    can_delete = False
    readonly_fields = ["from_status", "to_status", "actor_label", "reason", "created_at"]
    fields = readonly_fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "organization",
        "task_type",
        "hours",
        "accepted_hours",
        "total_display",
        "status",
        "created_at",
    ]
    list_filter = ["status", "task_type", "embodiment", "waitlisted", "cells_planned"]
    list_select_related = ["organization", "task_type"]
    search_fields = ["id", "organization__name"]
    readonly_fields = ["price_lines"] + [f.name for f in Order._meta.fields if f.name != "lines"]
    inlines = [OrderEventInline]
    actions = ["mark_paid"]

    def has_add_permission(self, request):
        return False  # orders are placed by customers (API or portal)

    @admin.display(description="Total", ordering="total")
    def total_display(self, obj):
        return format_money(obj.total, obj.currency)

    @admin.action(description="Record a bank transfer for the selected order (marks it paid)")
    def mark_paid(self, request, queryset):
        """Paid outside Stripe: staff record the transfer (amount and reference) on the staff
        console's page, which books a Payment and a ledger entry, then marks the order paid;
        so billing's totals include it. One order at a time (each has its own reference)."""
        orders = list(queryset[:2])
        if len(orders) != 1:
            self.message_user(
                request, "Select exactly one order to record its bank transfer.", messages.WARNING
            )
            return None
        return HttpResponseRedirect(reverse("staff-bank-transfer", args=[orders[0].pk]))

    @admin.display(description="Price lines")
    def price_lines(self, obj):
        return lines_table(obj)


def lines_table(spec):
    """Price lines as a readable table (description, quantity, unit price, amount) in the one
    money format, instead of the raw JSON."""
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td style='text-align:right'>{}</td><td style='text-align:right'>{}</td>"
        "<td style='text-align:right'>{}</td></tr>",
        (
            (
                line.get("description") or line.get("code"),
                line.get("quantity", ""),
                format_money(Decimal(str(line["unit_amount"])), spec.currency)
                if line.get("unit_amount") not in (None, "")
                else "",
                format_money(Decimal(str(line["amount"])), spec.currency),
            )
            for line in spec.lines or []
        ),
    )
    return format_html(
        "<table><thead><tr><th>Item</th><th>Quantity</th><th>Unit</th><th>Amount</th></tr>"
        "</thead><tbody>{}</tbody><tfoot><tr><th colspan='3'>Total</th>"
        "<th style='text-align:right'>{}</th></tr></tfoot></table>",
        rows,
        format_money(spec.total, spec.currency),
    )
