"""Staff tools: the dispatch board (flagged and stuck jobs, expired offers), re-dispatch."""

from django.contrib import admin, messages
from django.utils import timezone

from fleets.models import (
    Assignment,
    Bid,
    Fleet,
    Job,
    JobEvent,
    Offer,
    Robot,
    Site,
    WebhookDelivery,
)
from fleets.services.jobs import job_redispatch
from fleets.services.sweep import offer_expire
from marketplace.admin import URL_FIELDS_ASSUME_HTTPS
from marketplace.errors import ServiceError


class SiteInline(admin.TabularInline):
    model = Site
    extra = 0
    fields = ["name", "kind", "active"]


@admin.register(Fleet)
class FleetAdmin(admin.ModelAdmin):
    formfield_overrides = URL_FIELDS_ASSUME_HTTPS
    list_display = [
        "name",
        "organization",
        "status",
        "weekly_capacity_hours",
        "payout_rate_per_hour",
        "quality_score",
        "last_heartbeat_at",
    ]
    list_filter = ["status"]
    search_fields = ["name", "organization__name"]
    readonly_fields = ["webhook_secret", "last_heartbeat_at", "created_at", "updated_at"]
    inlines = [SiteInline]


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin):
    list_display = ["name", "fleet", "kind", "active"]
    list_filter = ["kind", "active"]
    search_fields = ["name", "fleet__name"]


@admin.register(Robot)
class RobotAdmin(admin.ModelAdmin):
    list_display = ["name", "fleet", "site", "embodiment", "end_effector", "active"]
    list_filter = ["embodiment", "end_effector", "active"]
    search_fields = ["name", "fleet__name"]


class NeedsAttentionFilter(admin.SimpleListFilter):
    """The dispatch board: what staff must look at."""

    title = "dispatch board"
    parameter_name = "board"

    def lookups(self, request, model_admin):
        return [
            ("flagged", "Flagged: nobody eligible"),
            ("open", "Open: waiting for dispatch"),
            ("expired_offer", "Offered, offer expired"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "flagged":
            return queryset.filter(status=Job.Status.FLAGGED)
        if self.value() == "open":
            return queryset.filter(status=Job.Status.OPEN)
        if self.value() == "expired_offer":
            return queryset.filter(
                status=Job.Status.OFFERED,
                offers__status=Offer.Status.PENDING,
                offers__expires_at__lte=timezone.now(),
            )
        return queryset


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["from_status", "to_status", "fleet", "actor_label", "reason", "created_at"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "order",
        "sequence",
        "status",
        "is_pilot",
        "target_hours",
        "fleet",
        "site",
        "deadline",
        "flag_reason",
    ]
    list_filter = [NeedsAttentionFilter, "status", "is_pilot"]
    list_select_related = ["order", "fleet", "site"]
    search_fields = ["id", "order__id"]
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = [JobEventInline]
    actions = ["redispatch"]

    @admin.action(description="Re-dispatch selected flagged/open jobs")
    def redispatch(self, request, queryset):
        done = 0
        for job in queryset:
            try:
                job_redispatch(job_id=job.pk, actor_label=f"staff:{request.user}")
                done += 1
            except ServiceError as exc:
                self.message_user(request, f"{job}: {exc.message}", messages.WARNING)
        self.message_user(request, f"{done} job(s) sent to dispatch again.")


class ExpiredFilter(admin.SimpleListFilter):
    title = "expiry"
    parameter_name = "expired"

    def lookups(self, request, model_admin):
        return [("yes", "Pending but past expiry")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(status=Offer.Status.PENDING, expires_at__lte=timezone.now())
        return queryset


class PayFixedByDispatch:
    """Offers and assignments are made by dispatch, whose pay rule fixes their rate and currency
    (fleets/services/pay_terms.py): staff read them here, never add or re-price one."""

    pay_fields = ["job", "fleet", "site", "rate_per_hour", "currency"]

    def has_add_permission(self, request):
        return False

    def get_readonly_fields(self, request, obj=None):
        return [*super().get_readonly_fields(request, obj), *self.pay_fields]


@admin.register(Offer)
class OfferAdmin(PayFixedByDispatch, admin.ModelAdmin):
    list_display = ["id", "job", "fleet", "site", "status", "score", "expires_at", "responded_at"]
    list_filter = [ExpiredFilter, "status"]
    list_select_related = ["job", "fleet", "site"]
    actions = ["expire_now"]

    @admin.action(description="Expire selected past-due offers and dispatch their jobs")
    def expire_now(self, request, queryset):
        done = sum(offer_expire(offer_id=offer.pk) for offer in queryset)
        self.message_user(request, f"{done} offer(s) expired.")


@admin.register(Bid)
class BidAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "fleet", "price_per_hour", "earliest_finish", "status"]
    list_filter = ["status"]


@admin.register(Assignment)
class AssignmentAdmin(PayFixedByDispatch, admin.ModelAdmin):
    list_display = [
        "id",
        "job",
        "fleet",
        "site",
        "rate_per_hour",
        "currency",
        "active",
        "created_at",
        "ended_at",
    ]
    list_filter = ["active"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    formfield_overrides = URL_FIELDS_ASSUME_HTTPS
    list_display = ["id", "fleet", "event_type", "status", "attempt_count", "last_status_code"]
    list_filter = ["status", "event_type"]
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]
