"""Staff's billing tools for money in: payments (refund with confirmation), refunds, the
ledger, webhook events, flags, a revenue summary and CSV exports."""

from decimal import Decimal, InvalidOperation

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import path, reverse

from billing.admin.common import (
    CsvExportMixin,
    ReadOnlyAdmin,
    StaffActionsReadOnlyAdmin,
    export_csv,
)
from billing.models import (
    BillingFlag,
    LedgerEntry,
    LedgerTransaction,
    Payment,
    Refund,
    StripeCustomer,
    WebhookEvent,
)
from billing.selectors import revenue_summary
from billing.services.flags import flag_resolve
from billing.services.refunds import refund_by_staff
from billing.services.stripe_events import FINAL_STATES, webhook_event_process
from marketplace.errors import ServiceError
from orders.money import admin_money


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
        admin_money("amount"),
        admin_money("amount_refunded", description="Refunded"),
        "currency",
        "reference",
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
                    refund_by_staff(
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
    list_display = [
        "id",
        "order",
        "reason",
        "status",
        admin_money("amount"),
        "currency",
        "created_at",
    ]
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
        admin_money("amount"),
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
        for event in queryset.exclude(status__in=FINAL_STATES):
            status = webhook_event_process(event_pk=event.pk)
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
            flag_resolve(flag_id=flag.pk, user=request.user)
        self.message_user(request, "Resolved.", messages.SUCCESS)


@admin.register(StripeCustomer)
class StripeCustomerAdmin(ReadOnlyAdmin):
    list_display = ["organization", "stripe_customer_id", "created_at"]
    search_fields = ["organization__name", "stripe_customer_id"]
