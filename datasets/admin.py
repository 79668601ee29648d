from django.contrib import admin, messages

from datasets.models import Delivery, DeliveryFile, DownloadEvent, Episode, EpisodeExclusion
from datasets.services.downloads import delivery_revoke


@admin.register(Episode)
class EpisodeAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "order",
        "fleet",
        "site",
        "operator",
        "status",
        "duration_seconds",
        "created_at",
    ]
    list_filter = ["status", "success"]
    list_select_related = ["order", "fleet", "site"]
    search_fields = ["id", "operator", "order__id"]
    readonly_fields = [f.name for f in Episode._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # episodes are evidence for payments and deliveries: never deleted


class DeliveryFileInline(admin.TabularInline):
    model = DeliveryFile
    extra = 0
    can_delete = False
    readonly_fields = ["path", "size_bytes", "sha256"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["id", "order", "kind", "status", "review", "episodes", "ready_at", "revoked_at"]
    list_filter = ["kind", "status", "review"]
    list_select_related = ["order"]
    readonly_fields = [f.name for f in Delivery._meta.fields]
    inlines = [DeliveryFileInline]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # deliveries are never deleted; revoke stops new links

    @admin.action(description="Revoke selected deliveries (no new download links)")
    def revoke(self, request, queryset):
        for delivery in queryset:
            delivery_revoke(
                delivery_id=delivery.pk, staff_label=f"staff:{request.user.get_username()}"
            )
        self.message_user(request, f"Revoked {queryset.count()} deliveries.", messages.SUCCESS)


@admin.register(DownloadEvent)
class DownloadEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "delivery", "path", "actor_label", "ip_address"]
    list_select_related = ["delivery"]
    readonly_fields = [f.name for f in DownloadEvent._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(EpisodeExclusion)
class EpisodeExclusionAdmin(admin.ModelAdmin):
    """The append-only audit of exclusions (staff exclude at /staff/orders/<id>/exclusions/)."""

    list_display = [
        "created_at",
        "order",
        "episode",
        "operator",
        "scope",
        "reason_code",
        "actor_label",
    ]
    list_filter = ["scope", "remedy", "reason_code"]
    search_fields = ["=order__id", "=episode__id", "operator"]
    readonly_fields = [f.name for f in EpisodeExclusion._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
