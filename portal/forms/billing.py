"""Web forms for billing: the customer's billing details, staff recording a bank transfer."""

from decimal import Decimal

from django import forms

from portal.forms.base import AccessibleFormMixin


class BillingProfileForm(AccessibleFormMixin, forms.Form):
    legal_name = forms.CharField(label="Invoice to (legal name)", max_length=200)
    address = forms.CharField(
        label="Billing address", required=False, widget=forms.Textarea(attrs={"rows": 3})
    )
    tax_id = forms.CharField(
        label="VAT / tax id", max_length=40, required=False, help_text="e.g. DE123456789"
    )
    email = forms.EmailField(label="Billing email", required=False)


class BankTransferForm(AccessibleFormMixin, forms.Form):
    amount = forms.DecimalField(
        label="Amount received",
        min_value=Decimal("0.01"),
        max_digits=14,
        decimal_places=2,
        help_text="Exactly as it arrived on the bank statement.",
    )
    reference = forms.CharField(
        label="Bank reference",
        max_length=200,
        help_text="The transfer's reference (normally the invoice's payment reference).",
    )
