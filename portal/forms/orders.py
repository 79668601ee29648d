"""Web forms for the order wizard. Shapes only: pricing and order rules are in orders.services."""

from decimal import Decimal

from django import forms

from orders.models import ComplexityLevel, Embodiment, OutputFormat, SensorAddon, TaskType
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
        )


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

    def to_details(self) -> OrderDetails:
        data = self.cleaned_data
        return OrderDetails(
            output_format=data["output_format"],
            success_criterion=data["success_criterion"],
            deadline=data["deadline"],
            pilot_hours=data["pilot_hours"],
            notes=data["notes"],
        )


class OrderCancelForm(AccessibleFormMixin, forms.Form):
    reason = forms.CharField(
        label="Reason (optional)",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
