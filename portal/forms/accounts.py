"""Web forms for accounts: sign up and API keys."""

from django import forms
from django.contrib.auth import password_validation

from marketplace.models import Membership
from portal.forms.base import AccessibleFormMixin


class SignupForm(AccessibleFormMixin, forms.Form):
    organization_name = forms.CharField(
        label="Organization", max_length=200, help_text="Your team or company, as on invoices."
    )
    username = forms.RegexField(
        label="Username",
        max_length=150,
        regex=r"^[\w.@+-]+$",
        error_messages={"invalid": "Letters, digits and @ . + - _ only."},
        widget=forms.TextInput(attrs={"autocomplete": "username"}),
    )
    email = forms.EmailField(
        label="Email", widget=forms.EmailInput(attrs={"autocomplete": "email"})
    )
    password1 = forms.CharField(
        label="Password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="At least 8 characters, not a common password, not only digits.",
    )
    password2 = forms.CharField(
        label="Password again",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    def clean(self):
        cleaned = super().clean()
        password1, password2 = cleaned.get("password1"), cleaned.get("password2")
        if password1 and password2 and password1 != password2:
            self.add_error("password2", "The two passwords differ.")
        elif password1:
            try:
                password_validation.validate_password(password1)
            except forms.ValidationError as exc:
                self.add_error("password1", exc)
        return cleaned


class ApiKeyCreateForm(AccessibleFormMixin, forms.Form):
    name = forms.CharField(
        label="Key name",
        max_length=100,
        help_text="Where the key is used, e.g. 'training pipeline'.",
    )
    role = forms.ChoiceField(
        label="Role",
        choices=Membership.Role.choices,
        initial=Membership.Role.MEMBER,
        help_text=(
            "Member keys place and read orders; billing keys only read; "
            "owner keys may also manage keys."
        ),
    )
