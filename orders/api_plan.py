"""The collection plan's fields on the quote and order API (issue 30): what a request may
send (orders.services checks how the fields fit together) and the supply check's and the plan
advisor's answers on a quote or an order."""

from decimal import Decimal

from rest_framework import serializers

from orders.models import EnvironmentUnit

PLAN_FIELDS = [
    "environment_unit",
    "distinct_objects",
    "object_categories",
    "demos_per_cell",
    "cell_min_share_percent",
    "cell_max_share_percent",
    "calibrated_cameras",
]


class PlanRequestFields(serializers.Serializer):
    environment_unit = serializers.ChoiceField(
        choices=EnvironmentUnit.choices,
        default=EnvironmentUnit.SITE,
        help_text="What an environment is: a distinct site, or a distinct scene.",
    )
    distinct_objects = serializers.IntegerField(
        min_value=1,
        max_value=10000000,
        required=False,
        allow_null=True,
        default=None,
        help_text="Distinct objects over the whole plan, between objects_per_environment and"
        " environments x objects_per_environment (null: as many as one environment's). Each"
        " beyond the rate card's included objects is priced.",
    )
    object_categories = serializers.ListField(
        child=serializers.CharField(max_length=60),
        required=False,
        default=list,
        max_length=20,
        help_text="Object categories allowed (lower-case names; empty: any).",
    )
    demos_per_cell = serializers.IntegerField(
        min_value=1, max_value=100000, required=False, allow_null=True, default=None
    )
    cell_min_share_percent = serializers.DecimalField(
        max_digits=5,
        decimal_places=2,
        min_value=Decimal(1),
        max_value=Decimal(100),
        default=Decimal(50),
        help_text="A cell is short below this share of its even part of the hours.",
    )
    cell_max_share_percent = serializers.DecimalField(
        max_digits=5,
        decimal_places=2,
        min_value=Decimal(100),
        max_value=Decimal("999.99"),
        default=Decimal(150),
        help_text="A cell is full at this share of its even part of the hours.",
    )
    calibrated_cameras = serializers.BooleanField(default=False)


def supply_field() -> serializers.JSONField:
    return serializers.JSONField(
        read_only=True,
        help_text="The supply check when priced: {coverable (true, false, null: unknown),"
        " shortfalls (sentences), eta (YYYY-MM-DD or null), basis, available_environments}.",
    )


def plan_advice_field() -> serializers.JSONField:
    return serializers.JSONField(
        read_only=True,
        help_text="With advise: {environments, objects_per_environment, distinct_objects,"
        " demos_per_cell, why}; else {}.",
    )
