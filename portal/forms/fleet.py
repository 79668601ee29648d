"""Web forms for the fleet portal. Shapes only: every rule (time zones, webhook URLs, site
kinds, capabilities, ownership) is checked by fleets.services, whose refusals are shown next
to the fields they name (AccessibleFormMixin.add_service_error)."""

from django import forms

from fleets.models import EndEffector, Fleet, SiteKind
from orders.models import Embodiment, SensorAddon
from portal.forms.base import AccessibleFormMixin


class FleetForm(AccessibleFormMixin, forms.Form):
    """The same fields as `POST /api/v1/fleet/fleets` (fleets.services.registry.FLEET_EDITABLE)."""

    name = forms.CharField(label="Fleet name", max_length=120)
    status = forms.ChoiceField(
        label="Status",
        choices=Fleet.Status.choices,
        initial=Fleet.Status.ACTIVE,
        help_text="Only active fleets receive offers.",
    )
    timezone = forms.CharField(
        label="Time zone",
        max_length=64,
        initial="UTC",
        help_text="An IANA name, e.g. Europe/Berlin or America/Chicago.",
    )
    weekly_capacity_hours = forms.DecimalField(
        label="Weekly capacity (hours)",
        max_digits=9,
        decimal_places=2,
        max_value=168000,  # as the fleet API: negative values are the service's to refuse
        help_text="Hours of recording your fleet can deliver per week, all sites together.",
        widget=forms.NumberInput(attrs={"step": "0.5", "inputmode": "decimal"}),
    )
    payout_rate_per_hour = forms.DecimalField(
        label="Payout rate per accepted hour",
        max_digits=14,
        decimal_places=4,
        help_text="What you are paid per QA-accepted hour. Lower rates rank higher.",
        widget=forms.NumberInput(attrs={"step": "0.01", "inputmode": "decimal"}),
    )
    currency = forms.RegexField(
        label="Currency",
        regex=r"^[A-Za-z]{3}$",
        initial="USD",
        error_messages={"invalid": "A three-letter currency code, e.g. USD."},
    )
    webhook_url = forms.CharField(
        label="Webhook URL",
        max_length=500,
        required=False,
        help_text="Optional: we POST signed offer and job events here (https).",
        widget=forms.URLInput(),
    )

    def clean_currency(self) -> str:
        return self.cleaned_data["currency"].upper()

    def to_fields(self) -> dict:
        return dict(self.cleaned_data)


class SiteForm(AccessibleFormMixin, forms.Form):
    name = forms.CharField(label="Site name", max_length=120)
    kind = forms.ChoiceField(
        label="Kind of environment",
        choices=[("", "Choose a kind"), *list(SiteKind.choices)],
        help_text="Orders ask for kinds that suit their task (e.g. kitchens for household).",
    )
    description = forms.CharField(
        label="Description", required=False, widget=forms.Textarea(attrs={"rows": 3})
    )
    objects_available = forms.CharField(
        label="Objects available",
        required=False,
        help_text="One object per line (or separated by commas), e.g. mug, sponge.",
        widget=forms.Textarea(attrs={"rows": 4}),
    )
    active = forms.BooleanField(label="Active (can receive offers)", required=False, initial=True)

    @staticmethod
    def objects_text(objects: list[str]) -> str:
        return "\n".join(objects)

    def to_fields(self) -> dict:
        data = dict(self.cleaned_data)
        raw = data["objects_available"].replace(",", "\n")
        data["objects_available"] = [line.strip() for line in raw.splitlines() if line.strip()]
        return data


class RobotForm(AccessibleFormMixin, forms.Form):
    name = forms.CharField(label="Robot name", max_length=120)
    site = forms.ChoiceField(label="Site", help_text="Where the robot records.")
    embodiment = forms.ChoiceField(label="Embodiment")
    end_effector = forms.ChoiceField(
        label="End effector", choices=[("", "Choose an end effector"), *list(EndEffector.choices)]
    )
    sensors = forms.MultipleChoiceField(
        label="Sensors", required=False, widget=forms.CheckboxSelectMultiple
    )
    active = forms.BooleanField(label="Active (can receive offers)", required=False, initial=True)

    def __init__(self, *args, sites=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["site"].choices = [("", "Choose a site")] + [
            (str(site.pk), f"{site.name} ({site.get_kind_display()})") for site in sites
        ]
        self.fields["embodiment"].choices = [("", "Choose an embodiment")] + [
            (e.slug, e.name) for e in Embodiment.objects.filter(active=True)
        ]
        self.fields["sensors"].choices = [
            (s.slug, s.name) for s in SensorAddon.objects.filter(active=True)
        ]

    def to_fields(self) -> dict:
        return dict(self.cleaned_data)


class OfferDeclineForm(AccessibleFormMixin, forms.Form):
    reason = forms.CharField(
        label="Reason (optional)",
        max_length=2000,
        required=False,
        help_text="Helps us offer you better-matching jobs.",
    )
