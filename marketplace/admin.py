from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.db import models

from marketplace import services
from marketplace.errors import ServiceError
from marketplace.models import ApiKey, IdempotencyKey, Membership, Organization, User

admin.site.site_header = "Motion dataset marketplace: staff"

# URLs typed without a scheme mean https (webhooks must be https), as Django 6.0 will assume.
URL_FIELDS_ASSUME_HTTPS = {models.URLField: {"assume_scheme": "https"}}


@admin.register(User)
class MarketplaceUserAdmin(UserAdmin):
    pass


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    formfield_overrides = URL_FIELDS_ASSUME_HTTPS
    list_display = ["name", "kind", "created_at"]
    list_filter = ["kind"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "prefix",
        "organization",
        "role",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["role", "organization__kind"]
    search_fields = ["name", "prefix", "organization__name"]
    readonly_fields = [
        "prefix",
        "hashed_key",
        "created_at",
        "last_used_at",
        "revoked_at",
        "created_by",
    ]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return (
            False  # keys are issued through the API or the portal, where the secret is shown once
        )

    @admin.action(description="Revoke selected API keys")
    def revoke(self, request, queryset):
        for api_key in queryset:
            try:
                services.api_key_revoke(api_key=api_key)
            except ServiceError as exc:
                self.message_user(request, f"{api_key}: {exc.message}", messages.WARNING)


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(admin.ModelAdmin):
    list_display = ["organization", "scope", "key", "response_status", "created_at"]
    readonly_fields = [f.name for f in IdempotencyKey._meta.fields]

    def has_add_permission(self, request):
        return False
