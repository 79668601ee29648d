"""Web forms for accounts. They validate input shape only; services hold the rules."""

from django import forms
from django.contrib.auth import password_validation

from marketplace.errors import ServiceError
from marketplace.models import Membership


class AccessibleFormMixin:
    """Ties every input to its help text and error slot (aria-describedby, aria-invalid).

    The slot `id_<field>_error` is always rendered (see marketplace/_field.html), so the same
    place shows server-side errors and the errors live scripts report.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            bound = self[name]
            described = [f"{bound.auto_id}_error"]
            if field.help_text:
                described.insert(0, f"{bound.auto_id}_helptext")
            field.widget.attrs.setdefault("aria-describedby", " ".join(described))

    def full_clean(self):
        super().full_clean()
        for name in self.errors:
            if name in self.fields:
                self.fields[name].widget.attrs["aria-invalid"] = "true"

    def add_service_error(self, error: ServiceError) -> None:
        """A service's refusal, shown next to the fields it names (else above the form)."""
        for name, messages in (error.fields or {}).items():
            target = name if name in self.fields else None
            for message in messages if isinstance(messages, list | tuple) else [messages]:
                self.add_error(target, str(message))
        if not error.fields:
            self.add_error(None, error.message)


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
