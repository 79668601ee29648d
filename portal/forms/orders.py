"""Web forms for the order wizard. Shapes only: pricing and order rules are in orders.services."""

from decimal import Decimal

from django import forms

from orders.models import (
    ComplexityLevel,
    Embodiment,
    EnvironmentUnit,
    OutputFormat,
    SensorAddon,
    TaskType,
)
from orders.services import DatasetRequest, OrderDetails
from portal.forms.base import AccessibleFormMixin


class DatasetRequestForm(AccessibleFormMixin, forms.Form):
    """The priced part of an order: the same fields as `POST /api/v1/quotes`."""

    task_type = forms.ChoiceField(label="Task")
    complexity = forms.TypedChoiceField(
        label="Complexity",
        coerce=int,
        empty_value=None,
        required=False,
        help_text="Leave on the task's default unless your setup is harder or easier.",
    )
    embodiment = forms.ChoiceField(label="Robot embodiment")
    hours = forms.DecimalField(
        label="Hours of accepted data",
        min_value=Decimal("0.01"),
        max_digits=9,
        decimal_places=2,
        initial=Decimal("10"),
        help_text="Only hours that pass QA count.",
        widget=forms.NumberInput(attrs={"step": "0.5", "inputmode": "decimal"}),
    )
    environments = forms.IntegerField(
        label="Distinct environments",
        min_value=1,
        initial=2,
        help_text="Diversity beats volume: each environment is a different site.",
    )
    objects_per_environment = forms.IntegerField(
        label="Objects per environment", min_value=1, max_value=100000, initial=1
    )
    sensors = forms.MultipleChoiceField(
        label="Sensor add-ons", required=False, widget=forms.CheckboxSelectMultiple
    )
    rush = forms.BooleanField(label="Rush delivery", required=False)
    # The collection plan (issue 30): the same fields and rules as the API's.
    environment_unit = forms.ChoiceField(
        label="An environment is",
        choices=EnvironmentUnit.choices,
        initial=EnvironmentUnit.SITE,
        required=False,
        help_text="A distinct site, or a distinct scene (one arrangement of a site).",
    )
    distinct_objects = forms.IntegerField(
        label="Distinct objects in all",
        min_value=1,
        required=False,
        help_text="Optional. Between the objects per environment and environments x objects"
        " per environment; empty: as many as one environment's.",
    )
    object_categories = forms.CharField(
        label="Object categories",
        required=False,
        max_length=1300,
        help_text="Optional, comma-separated (e.g. mug, tool); empty: any object.",
    )
    demos_per_cell = forms.IntegerField(
        label="Demonstrations per cell (at least)",
        min_value=1,
        max_value=100000,
        required=False,
        help_text="Optional. A cell is one (environment, object) pair.",
    )
    cell_min_share_percent = forms.DecimalField(
        label="Cell minimum share (%)",
        min_value=Decimal(1),
        max_value=Decimal(100),
        max_digits=5,
        decimal_places=2,
        initial=Decimal(50),
        required=False,
        help_text="A cell below this share of its even part of the hours is collected again.",
    )
    cell_max_share_percent = forms.DecimalField(
        label="Cell maximum share (%)",
        min_value=Decimal(100),
        max_value=Decimal("999.99"),
        max_digits=5,
        decimal_places=2,
        initial=Decimal(150),
        required=False,
        help_text="A cell is full at this share of its even part.",
    )
    calibrated_cameras = forms.BooleanField(
        label="Calibrated cameras",
        required=False,
        help_text="Every camera carries its intrinsics and extrinsics, checked per episode.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        tasks = TaskType.objects.filter(active=True).select_related("default_complexity")
        self.fields["task_type"].choices = [
            (t.slug, f"{t.name} (default L{t.default_complexity_id})") for t in tasks
        ]
        self.fields["complexity"].choices = [("", "Task default")] + [
            (level.level, f"L{level.level} {level.name}") for level in ComplexityLevel.objects.all()
        ]
        self.fields["embodiment"].choices = [
            (e.slug, e.name) for e in Embodiment.objects.filter(active=True)
        ]
        self.fields["sensors"].choices = [
            (s.slug, s.name) for s in SensorAddon.objects.filter(active=True)
        ]

    def to_request(self) -> DatasetRequest:
        data = self.cleaned_data
        return DatasetRequest(
            task_type=data["task_type"],
            complexity=data["complexity"],
            embodiment=data["embodiment"],
            hours=data["hours"],
            environments=data["environments"],
            objects_per_environment=data["objects_per_environment"],
            sensors=tuple(data["sensors"]),
            rush=data["rush"],
            environment_unit=data["environment_unit"] or EnvironmentUnit.SITE,
            distinct_objects=data["distinct_objects"],
            object_categories=tuple(data["object_categories"]),
            demos_per_cell=data["demos_per_cell"],
            cell_min_share_percent=_or(data["cell_min_share_percent"], Decimal(50)),
            cell_max_share_percent=_or(data["cell_max_share_percent"], Decimal(150)),
            calibrated_cameras=data["calibrated_cameras"],
        )

    def clean_object_categories(self) -> list[str]:
        text = self.cleaned_data["object_categories"] or ""
        return sorted({name.strip().lower() for name in text.split(",") if name.strip()})


def _or(value, default):
    return default if value is None else value


class OrderDetailsForm(AccessibleFormMixin, forms.Form):
    """The unpriced part of an order, asked once the quote is on screen."""

    output_format = forms.ChoiceField(
        label="Output format", choices=OutputFormat.choices, initial=OutputFormat.LEROBOT_V3
    )
    deadline = forms.DateField(
        label="Deadline",
        required=False,
        help_text="Optional. Standard lead time applies unless the quote includes rush.",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    pilot_hours = forms.DecimalField(
        label="Pilot hours",
        required=False,
        min_value=Decimal("0.01"),
        max_digits=9,
        decimal_places=2,
        help_text="Optional. A small batch delivered first for your approval.",
    )
    success_criterion = forms.CharField(
        label="Success criterion",
        required=False,
        max_length=2000,
        help_text="What counts as a successful episode, e.g. 'peg fully seated'.",
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    notes = forms.CharField(
        label="Notes for the collection team",
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    waitlist = forms.BooleanField(
        label="Place it on the waitlist",
        required=False,
        help_text="Needed when the platform cannot cover the order now: collection waits"
        " until staff release it.",
    )

    def to_details(self) -> OrderDetails:
        data = self.cleaned_data
        return OrderDetails(
            output_format=data["output_format"],
            success_criterion=data["success_criterion"],
            deadline=data["deadline"],
            pilot_hours=data["pilot_hours"],
            notes=data["notes"],
            waitlist=data["waitlist"],
        )


class OrderCancelForm(AccessibleFormMixin, forms.Form):
    reason = forms.CharField(
        label="Reason (optional)",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
