"""Staff's billing tools: payments (refund with confirmation), refunds, the ledger,
webhook events, flags, a revenue summary and CSV exports."""

import csv
from decimal import Decimal, InvalidOperation

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Q, Sum
from django.http import HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from billing import services
from billing.models import (
    BillingFlag,
    FleetPayable,
    FleetPayoutAccount,
    LedgerEntry,
    LedgerTransaction,
    Payment,
    Payout,
    PayoutRun,
    Refund,
    StripeCustomer,
    WebhookEvent,
)
from marketplace.errors import ServiceError


def export_csv(filename: str, header: list[str], rows) -> HttpResponse:
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if value is None else str(value) for value in row])
    return response


class CsvExportMixin:
    """CSV of the selected rows (an admin action calls `csv_response`) and of all rows
    (the `export/` admin URL named `csv_url_name`), the columns named in `csv_fields`."""

    csv_filename: str
    csv_header: list[str]
    csv_fields: tuple[str, ...]
    csv_url_name: str

    def csv_response(self, queryset) -> HttpResponse:
        rows = queryset.values_list(*self.csv_fields).order_by("created_at", "id")
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        return export_csv(f"{self.csv_filename}-{stamp}.csv", self.csv_header, rows)

    def export_all_view(self, request):
        return self.csv_response(self.model.objects.all())

    def csv_urls(self) -> list:
        return [
            path(
                "export/", self.admin_site.admin_view(self.export_all_view), name=self.csv_url_name
            )
        ]


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class StaffActionsReadOnlyAdmin(ReadOnlyAdmin):
    """Read-only too, but staff get the changelist's actions (Django asks for "change" to
    show them); every field stays read-only."""

    def has_change_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff


class RefundInline(admin.TabularInline):
    model = Refund
    extra = 0
    can_delete = False
    fields = ["created_at", "reason", "status", "amount", "currency", "stripe_refund_id", "note"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


class RefundForm(forms.Form):
    amount = forms.DecimalField(max_digits=14, decimal_places=2, min_value=Decimal("0.01"))
    note = forms.CharField(max_length=500, required=True)


PAYMENT_CSV = [
    "id",
    "order_id",
    "organization",
    "method",
    "status",
    "amount",
    "amount_refunded",
    "currency",
    "stripe_payment_intent_id",
    "created_at",
    "succeeded_at",
]


@admin.register(Payment)
class PaymentAdmin(StaffActionsReadOnlyAdmin):
    list_display = [
        "id",
        "order",
        "organization",
        "method",
        "status",
        "amount",
        "amount_refunded",
        "currency",
        "created_at",
    ]
    list_filter = ["status", "method", "currency"]
    list_select_related = ["order", "organization"]
    search_fields = ["id", "order__id", "organization__name", "stripe_payment_intent_id"]
    inlines = [RefundInline]
    actions = ["refund", "export_payments_csv"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Payment._meta.fields]

    @admin.action(description="Refund the selected payments (asks for amount and reason)")
    def refund(self, request, queryset):
        payments = list(queryset.filter(status=Payment.Status.SUCCEEDED))
        if not payments:
            self.message_user(request, "Only succeeded payments can be refunded.", messages.ERROR)
            return None
        if request.POST.get("confirm") == "yes":
            done = 0
            for payment in payments:
                try:
                    amount = Decimal(request.POST.get(f"amount_{payment.pk}", ""))
                except InvalidOperation:
                    self.message_user(request, f"{payment.pk}: bad amount.", messages.ERROR)
                    continue
                form = RefundForm({"amount": amount, "note": request.POST.get("note", "")})
                if not form.is_valid():
                    self.message_user(request, f"{payment.pk}: {form.errors}", messages.ERROR)
                    continue
                try:
                    services.refund_by_staff(
                        payment_id=payment.pk,
                        amount=form.cleaned_data["amount"],
                        note=form.cleaned_data["note"],
                        user=request.user,
                    )
                except ServiceError as exc:
                    self.message_user(request, f"{payment.pk}: {exc.message}", messages.ERROR)
                else:
                    done += 1
            if done:
                self.message_user(request, f"{done} refund(s) sent to Stripe.", messages.SUCCESS)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Confirm refunds",
            "payments": payments,
            "opts": self.model._meta,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/billing/refund_confirmation.html", context)

    @admin.action(description="Export the selected payments as CSV")
    def export_payments_csv(self, request, queryset):
        rows = queryset.select_related("organization").values_list(
            "id",
            "order_id",
            "organization__name",
            "method",
            "status",
            "amount",
            "amount_refunded",
            "currency",
            "stripe_payment_intent_id",
            "created_at",
            "succeeded_at",
        )
        return export_csv("payments.csv", PAYMENT_CSV, rows)


@admin.register(Refund)
class RefundAdmin(StaffActionsReadOnlyAdmin):
    list_display = ["id", "order", "reason", "status", "amount", "currency", "created_at"]
    list_filter = ["status", "reason", "currency"]
    search_fields = ["id", "order__id", "stripe_refund_id", "key"]
    readonly_fields = [f.name for f in Refund._meta.fields]
    actions = ["export_refunds_csv"]

    @admin.action(description="Export the selected refunds as CSV")
    def export_refunds_csv(self, request, queryset):
        fields = ["id", "order_id", "payment_id", "reason", "status", "amount", "currency"]
        rows = queryset.values_list(*fields, "stripe_refund_id", "created_at")
        return export_csv("refunds.csv", [*fields, "stripe_refund_id", "created_at"], rows)


class LedgerEntryInline(admin.TabularInline):
    model = LedgerEntry
    extra = 0
    can_delete = False
    fields = ["account", "amount", "currency", "order", "organization", "fleet"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(LedgerTransaction)
class LedgerTransactionAdmin(ReadOnlyAdmin):
    list_display = ["key", "kind", "memo", "created_at"]
    list_filter = ["kind"]
    search_fields = ["key", "memo"]
    inlines = [LedgerEntryInline]


LEDGER_CSV = [
    "transaction",
    "kind",
    "account",
    "amount",
    "currency",
    "order_id",
    "organization",
    "fleet",
    "created_at",
]


def revenue_summary() -> dict:
    """Money per currency from the ledger; refunds and payments by status."""
    rows = (
        LedgerEntry.objects.values("currency")
        .annotate(
            charged=Sum(
                "amount",
                filter=Q(transaction__kind="charge", account="stripe_balance"),
            ),
            refunded=Sum("amount", filter=Q(transaction__kind="refund", account="customer_funds")),
            disputed=Sum("amount", filter=Q(account="disputes")),
            cash=Sum("amount", filter=Q(account="stripe_balance")),
            held=Sum("amount", filter=Q(account="customer_funds")),
            payable=Sum("amount", filter=Q(account="fleet_payable")),
            margin=Sum("amount", filter=Q(account="platform_revenue")),
            total=Sum("amount"),
        )
        .order_by("currency")
    )
    zero = Decimal("0")
    currencies = [
        {
            "currency": row["currency"],
            "charged": row["charged"] or zero,
            "refunded": row["refunded"] or zero,
            "net": (row["charged"] or zero) - (row["refunded"] or zero),
            "disputed": row["disputed"] or zero,
            "cash": row["cash"] or zero,
            "held": -(row["held"] or zero),
            "payable": -(row["payable"] or zero),
            "margin": -(row["margin"] or zero),
            "balanced": (row["total"] or zero) == 0,
        }
        for row in rows
    ]
    return {
        "currencies": currencies,
        "payments": dict(
            Payment.objects.values_list("status").annotate(n=Count("id")).order_by("status")
        ),
        "pending_refunds": Refund.objects.filter(status=Refund.Status.PENDING).count(),
        "open_flags": BillingFlag.objects.filter(resolved_at__isnull=True).count(),
    }


@admin.register(LedgerEntry)
class LedgerEntryAdmin(CsvExportMixin, StaffActionsReadOnlyAdmin):
    csv_filename = "ledger"
    csv_url_name = "billing_ledger_export"
    csv_header = LEDGER_CSV
    csv_fields = (
        "transaction__key",
        "transaction__kind",
        "account",
        "amount",
        "currency",
        "order_id",
        "organization__name",
        "fleet__name",
        "created_at",
    )
    list_display = [
        "created_at",
        "transaction",
        "account",
        "amount",
        "currency",
        "order",
        "fleet",
    ]
    list_filter = ["account", "currency", "transaction__kind"]
    list_select_related = ["transaction", "order", "fleet"]
    search_fields = ["transaction__key", "order__id"]
    actions = ["export_ledger_csv"]
    change_list_template = "admin/billing/ledgerentry_change_list.html"

    def get_urls(self):
        return [
            path(
                "summary/",
                self.admin_site.admin_view(self.summary_view),
                name="billing_revenue_summary",
            ),
            *self.csv_urls(),
            *super().get_urls(),
        ]

    @admin.action(description="Export the selected ledger entries as CSV")
    def export_ledger_csv(self, request, queryset):
        return self.csv_response(queryset)

    def summary_view(self, request):
        context = {
            **self.admin_site.each_context(request),
            "title": "Revenue and payables summary",
            "opts": self.model._meta,
            "summary": revenue_summary(),
            "export_url": reverse("admin:billing_ledger_export"),
        }
        return TemplateResponse(request, "admin/billing/summary.html", context)


@admin.register(WebhookEvent)
class WebhookEventAdmin(StaffActionsReadOnlyAdmin):
    list_display = ["stripe_event_id", "type", "status", "attempts", "received_at"]
    list_filter = ["status", "type"]
    search_fields = ["stripe_event_id", "raw_body"]
    readonly_fields = [f.name for f in WebhookEvent._meta.fields]
    actions = ["reprocess"]

    @admin.action(description="Process the selected events again (safe: handlers dedupe)")
    def reprocess(self, request, queryset):
        for event in queryset.exclude(status__in=services.FINAL_STATES):
            status = services.webhook_event_process(event_pk=event.pk)
            self.message_user(request, f"{event.stripe_event_id}: {status}")


@admin.register(BillingFlag)
class BillingFlagAdmin(StaffActionsReadOnlyAdmin):
    list_display = ["created_at", "kind", "message", "order", "resolved_at"]
    list_filter = ["kind", ("resolved_at", admin.EmptyFieldListFilter)]
    search_fields = ["message", "order__id"]
    readonly_fields = [f.name for f in BillingFlag._meta.fields]
    actions = ["resolve"]

    @admin.action(description="Mark the selected flags resolved")
    def resolve(self, request, queryset):
        for flag in queryset:
            services.flag_resolve(flag_id=flag.pk, user=request.user)
        self.message_user(request, "Resolved.", messages.SUCCESS)


@admin.register(StripeCustomer)
class StripeCustomerAdmin(ReadOnlyAdmin):
    list_display = ["organization", "stripe_customer_id", "created_at"]
    search_fields = ["organization__name", "stripe_customer_id"]


# --- Fleet payables and payouts ----------------------------------------------------------------


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
        "plan": services.payout_plan(),
        "pending": Payout.objects.filter(status=Payout.Status.PENDING).select_related("fleet"),
        "configured": services.payments_enabled(),
    }
    return TemplateResponse(request, "admin/billing/payout_run_confirmation.html", context)


def _run_view(model_admin, request):
    if request.method != "POST" or request.POST.get("confirm") != "yes":
        return _run_confirmation(model_admin, request)
    try:
        run = services.payout_run(triggered_by=f"staff:{request.user.get_username()}")
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
    fields = ["job", "order", "accepted_seconds", "rate_per_hour", "amount", "currency"]
    readonly_fields = fields

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
        "amount",
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


def payables_summary() -> list[dict]:
    """Per fleet and currency: earned, paid, in pending payouts, unpaid, platform margin."""
    zero = Decimal("0")
    rows = (
        FleetPayable.objects.values("fleet_id", "fleet__name", "currency")
        .annotate(
            jobs=Count("id"),
            earned=Sum("amount"),
            customer=Sum("customer_amount"),
            paid=Sum("amount", filter=Q(payout__status=Payout.Status.PAID)),
            pending=Sum("amount", filter=Q(payout__status=Payout.Status.PENDING)),
            unpaid=Sum("amount", filter=Q(payout__isnull=True)),
        )
        .order_by("fleet__name", "currency")
    )
    accounts = dict(FleetPayoutAccount.objects.values_list("fleet_id", "stripe_account_id"))
    return [
        {
            "fleet_id": row["fleet_id"],
            "fleet": row["fleet__name"],
            "currency": row["currency"],
            "jobs": row["jobs"],
            "earned": row["earned"] or zero,
            "paid": row["paid"] or zero,
            "pending": row["pending"] or zero,
            "unpaid": row["unpaid"] or zero,
            "margin": (row["customer"] or zero) - (row["earned"] or zero),
            "account": accounts.get(row["fleet_id"], ""),
        }
        for row in rows
    ]


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
        "rate_per_hour",
        "amount",
        "customer_amount",
        "currency",
        "payout",
    ]
    list_filter = [PaidFilter, "currency", "fleet"]
    list_select_related = ["fleet", "order", "job", "payout"]
    search_fields = ["fleet__name", "order__id", "job__id"]
    readonly_fields = [f.name for f in FleetPayable._meta.fields]
    actions = ["run_payouts", "export_payables_csv"]
    change_list_template = "admin/billing/fleetpayable_change_list.html"

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
            "rows": payables_summary(),
            "export_url": reverse("admin:billing_payables_export"),
            "run_url": reverse("admin:billing_payout_run"),
        }
        return TemplateResponse(request, "admin/billing/payables_summary.html", context)


class PayoutInline(admin.TabularInline):
    model = Payout
    extra = 0
    can_delete = False
    fields = ["fleet", "amount", "currency", "status", "stripe_transfer_id", "failure_message"]
    readonly_fields = fields

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
