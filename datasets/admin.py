from django.contrib import admin

from datasets.models import Episode


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
