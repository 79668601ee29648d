"""Staff's billing tools for money out: fleet payout accounts, payables, payouts and runs."""

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from billing.admin.common import CsvExportMixin, ReadOnlyAdmin, StaffActionsReadOnlyAdmin
from billing.models import (
    FleetPayable,
    FleetPayoutAccount,
    PayableDeduction,
    Payout,
    PayoutRun,
)
from billing.selectors import payables_summary
from billing.services.payables import payables_release_hold
from billing.services.payments import payments_enabled
from billing.services.payouts import payout_plan, payout_run
from marketplace.errors import ServiceError
from orders.money import admin_money, format_money, format_rate


@admin.register(FleetPayoutAccount)
class FleetPayoutAccountAdmin(admin.ModelAdmin):
    list_display = ["fleet", "stripe_account_id", "updated_at"]
    search_fields = ["fleet__name", "stripe_account_id"]
    list_select_related = ["fleet"]
    raw_id_fields = ["fleet"]


def _run_confirmation(model_admin, request) -> TemplateResponse:
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Run fleet payouts",
        "opts": Payout._meta,
        "plan": [(row, format_money(row.amount, row.currency)) for row in payout_plan()],
        "pending": [
            (payout, format_money(payout.amount, payout.currency))
            for payout in Payout.objects.filter(status=Payout.Status.PENDING).select_related(
                "fleet"
            )
        ],
        "configured": payments_enabled(),
    }
    return TemplateResponse(request, "admin/billing/payout_run_confirmation.html", context)


def _run_view(model_admin, request):
    if request.method != "POST" or request.POST.get("confirm") != "yes":
        return _run_confirmation(model_admin, request)
    try:
        run = payout_run(triggered_by=f"staff:{request.user.get_username()}")
    except ServiceError as exc:
        model_admin.message_user(request, exc.message, messages.ERROR)
        return HttpResponseRedirect(reverse("admin:billing_payout_changelist"))
    report = run.report
    model_admin.message_user(
        request,
        f"Payout run: {len(report['paid'])} paid, {len(report['pending'])} still pending "
        f"(Stripe unavailable), {len(report['failed'])} refused, {len(report['skipped'])} "
        "fleet(s) skipped (no payout account).",
        messages.SUCCESS if not (report["pending"] or report["failed"]) else messages.WARNING,
    )
    return HttpResponseRedirect(reverse("admin:billing_payoutrun_change", args=[run.pk]))


class FleetPayableInline(admin.TabularInline):
    model = FleetPayable
    extra = 0
    can_delete = False
    fields = ["job", "order", "accepted_seconds", "rate", "amount_formatted"]
    readonly_fields = fields

    @admin.display(description="Rate")
    def rate(self, payable) -> str:
        return format_rate(payable.rate_per_hour, payable.currency)

    @admin.display(description="Amount")
    def amount_formatted(self, payable) -> str:
        return format_money(payable.amount, payable.currency)

    def has_add_permission(self, request, obj=None):
        return False


PAYOUT_CSV = [
    "id",
    "fleet",
    "status",
    "amount",
    "currency",
    "stripe_account_id",
    "stripe_transfer_id",
    "attempts",
    "created_at",
    "paid_at",
    "failure_message",
]


@admin.register(Payout)
class PayoutAdmin(CsvExportMixin, StaffActionsReadOnlyAdmin):
    csv_filename = "payouts"
    csv_url_name = "billing_payout_export"
    csv_header = PAYOUT_CSV
    csv_fields = (
        "id",
        "fleet__name",
        "status",
        "amount",
        "currency",
        "stripe_account_id",
        "stripe_transfer_id",
        "attempts",
        "created_at",
        "paid_at",
        "failure_message",
    )
    list_display = [
        "created_at",
        "fleet",
        admin_money("amount"),
        "currency",
        "status",
        "stripe_transfer_id",
        "attempts",
        "paid_at",
    ]
    list_filter = ["status", "currency"]
    list_select_related = ["fleet"]
    search_fields = ["id", "fleet__name", "stripe_transfer_id", "stripe_account_id"]
    readonly_fields = [f.name for f in Payout._meta.fields]
    inlines = [FleetPayableInline]
    actions = ["run_payouts", "export_payouts_csv"]
    change_list_template = "admin/billing/payout_change_list.html"

    def get_urls(self):
        return [
            path("run/", self.admin_site.admin_view(self.run_view), name="billing_payout_run"),
            *self.csv_urls(),
            *super().get_urls(),
        ]

    def run_view(self, request):
        return _run_view(self, request)

    @admin.action(description="Run payouts now: pay every fleet its unpaid payables (confirm)")
    def run_payouts(self, request, queryset):
        return _run_confirmation(self, request)

    @admin.action(description="Export the selected payouts as CSV")
    def export_payouts_csv(self, request, queryset):
        return self.csv_response(queryset)


PAYABLE_CSV = [
    "id",
    "fleet",
    "order_id",
    "job_id",
    "accepted_seconds",
    "rate_per_hour",
    "amount",
    "customer_amount",
    "currency",
    "payout_id",
    "payout_status",
    "created_at",
]


class PaidFilter(admin.SimpleListFilter):
    title = "paid"
    parameter_name = "paid"

    def lookups(self, request, model_admin):
        return [("yes", "Paid"), ("pending", "In a pending payout"), ("no", "Not in a payout")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(payout__status=Payout.Status.PAID)
        if self.value() == "pending":
            return queryset.filter(payout__status=Payout.Status.PENDING)
        if self.value() == "no":
            return queryset.filter(payout__isnull=True)
        return queryset


@admin.register(FleetPayable)
class FleetPayableAdmin(CsvExportMixin, StaffActionsReadOnlyAdmin):
    csv_filename = "fleet-payables"
    csv_url_name = "billing_payables_export"
    csv_header = PAYABLE_CSV
    csv_fields = (
        "id",
        "fleet__name",
        "order_id",
        "job_id",
        "accepted_seconds",
        "rate_per_hour",
        "amount",
        "customer_amount",
        "currency",
        "payout_id",
        "payout__status",
        "created_at",
    )
    list_display = [
        "created_at",
        "fleet",
        "order",
        "job",
        "accepted_seconds",
        "rate",
        admin_money("amount"),
        admin_money("customer_amount", description="Customer amount"),
        "currency",
        "payout",
        "held",
    ]
    list_filter = [PaidFilter, "currency", "fleet"]
    list_select_related = ["fleet", "order", "job", "payout"]
    search_fields = ["fleet__name", "order__id", "job__id"]
    readonly_fields = [f.name for f in FleetPayable._meta.fields]
    actions = ["run_payouts", "export_payables_csv", "release_holds"]
    change_list_template = "admin/billing/fleetpayable_change_list.html"

    @admin.display(description="Rate", ordering="rate_per_hour")
    def rate(self, payable) -> str:
        return format_rate(payable.rate_per_hour, payable.currency)

    @admin.display(boolean=True, description="held")
    def held(self, payable) -> bool:
        return bool(payable.hold_reason)

    @admin.action(description="Release the hold on the selected payables (after review)")
    def release_holds(self, request, queryset):
        released = payables_release_hold(payable_ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{released} payable(s) released for the next payout run.")

    def get_urls(self):
        return [
            path(
                "summary/",
                self.admin_site.admin_view(self.summary_view),
                name="billing_payables_summary",
            ),
            *self.csv_urls(),
            *super().get_urls(),
        ]

    @admin.action(description="Run payouts now: pay every fleet its unpaid payables (confirm)")
    def run_payouts(self, request, queryset):
        return _run_confirmation(self, request)

    @admin.action(description="Export the selected payables as CSV")
    def export_payables_csv(self, request, queryset):
        return self.csv_response(queryset)

    def summary_view(self, request):
        context = {
            **self.admin_site.each_context(request),
            "title": "Fleet payables summary",
            "opts": self.model._meta,
            "rows": [
                {
                    **row,
                    "money": {
                        key: format_money(row[key], row["currency"])
                        for key in ("earned", "paid", "pending", "unpaid", "margin")
                    },
                }
                for row in payables_summary()
            ],
            "export_url": reverse("admin:billing_payables_export"),
            "run_url": reverse("admin:billing_payout_run"),
        }
        return TemplateResponse(request, "admin/billing/payables_summary.html", context)


class PayoutInline(admin.TabularInline):
    model = Payout
    extra = 0
    can_delete = False
    fields = ["fleet", "amount_formatted", "status", "stripe_transfer_id", "failure_message"]
    readonly_fields = fields

    @admin.display(description="Amount")
    def amount_formatted(self, payout) -> str:
        return format_money(payout.amount, payout.currency)

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(PayoutRun)
class PayoutRunAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "triggered_by", "finished_at", "paid", "skipped"]
    readonly_fields = [f.name for f in PayoutRun._meta.fields]
    inlines = [PayoutInline]

    @admin.display(description="paid")
    def paid(self, run: PayoutRun) -> int:
        return len((run.report or {}).get("paid", []))

    @admin.display(description="skipped fleets")
    def skipped(self, run: PayoutRun) -> int:
        return len((run.report or {}).get("skipped", []))


@admin.register(PayableDeduction)
class PayableDeductionAdmin(admin.ModelAdmin):
    """Payables reversed for excluded episodes: in place before payout, else carried until a
    later payout of the fleet subtracts them."""

    list_display = ["created_at", "fleet", "order", "seconds", "amount", "in_place", "payout"]
    list_filter = ["in_place", "currency"]
    readonly_fields = [f.name for f in PayableDeduction._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
