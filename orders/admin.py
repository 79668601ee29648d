from django.contrib import admin, messages
from django.utils import timezone

from marketplace.errors import ServiceError
from marketplace.tenancy import Caller
from orders import services
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
    list_display = ["id", "organization", "task_type", "hours", "total", "currency", "expires_at"]
    list_select_related = ["organization", "task_type"]
    readonly_fields = [f.name for f in Quote._meta.fields]

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
        "total",
        "currency",
        "status",
        "created_at",
    ]
    list_filter = ["status", "task_type", "embodiment"]
    list_select_related = ["organization", "task_type"]
    search_fields = ["id", "organization__name"]
    readonly_fields = [f.name for f in Order._meta.fields]
    inlines = [OrderEventInline]
    actions = ["mark_paid"]

    def has_add_permission(self, request):
        return False  # orders are placed by customers (API or portal)

    @admin.action(description="Mark selected orders as paid (payment received outside Stripe)")
    def mark_paid(self, request, queryset):
        caller = Caller(organization=None, role=None, user=request.user)
        for order in queryset:
            try:
                services.order_mark_paid(
                    order_id=order.pk, caller=caller, reason="Payment marked received by staff."
                )
            except ServiceError as exc:
                self.message_user(request, f"{order.pk}: {exc.message}", messages.WARNING)
            else:
                self.message_user(request, f"{order.pk}: marked paid.", messages.SUCCESS)
