"""Demand side: the task catalog, the rate card, quotes, orders and their audit trail."""

import uuid
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from marketplace.audit import AppendOnlyModel, public_label
from marketplace.models import ApiKey, Organization

MONEY = {"max_digits": 14, "decimal_places": 4}  # rates may carry sub-cent precision
AMOUNT = {"max_digits": 14, "decimal_places": 2}  # stored totals: minor units of the currency
HOURS = {"max_digits": 9, "decimal_places": 2}


# --- Catalog -------------------------------------------------------------------------------


class ComplexityLevel(models.Model):
    """The published rubric: what L1..L5 mean. Multipliers live on the rate card."""

    level = models.PositiveSmallIntegerField(
        primary_key=True, validators=[MinValueValidator(1), MaxValueValidator(5)]
    )
    name = models.CharField(max_length=80)
    description = models.TextField()
    examples = models.TextField(blank=True)

    class Meta:
        ordering = ["level"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(level__gte=1, level__lte=5), name="complexity_level_range"
            )
        ]

    def __str__(self) -> str:
        return f"L{self.level} {self.name}"


class TaskType(models.Model):
    class Category(models.TextChoices):
        PICK_AND_PLACE = "pick_and_place", "Pick and place"
        ASSEMBLY = "assembly", "Assembly"
        HOUSEHOLD = "household", "Household"
        LOGISTICS = "logistics", "Logistics"
        TOOL_USE = "tool_use", "Tool use"
        DEFORMABLE = "deformable", "Deformable objects"
        DEXTEROUS = "dexterous", "Dexterous in-hand"

    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    description = models.TextField()
    category = models.CharField(max_length=30, choices=Category.choices)
    contact_rich = models.BooleanField(default=False)
    default_complexity = models.ForeignKey(
        ComplexityLevel, on_delete=models.PROTECT, related_name="+"
    )
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Embodiment(models.Model):
    """A robot body customers can order data for; action_dim fixes the episode vector length."""

    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    arms = models.PositiveSmallIntegerField(default=1)
    action_dim = models.PositiveSmallIntegerField(validators=[MinValueValidator(1)])
    # The stream spec (issue 15): the state and action vectors are declared separately, each
    # with its element names (the delivered features' `names`); `cameras` are the standard
    # views in the base price: [{"name": "scene", "min_width": 640, "min_height": 480}].
    state_names = models.JSONField(default=list, blank=True)
    action_names = models.JSONField(default=list, blank=True)
    cameras = models.JSONField(default=list, blank=True)
    # Content QA (issue 16): per state element [low, high] in its unit (rad, m); empty: none.
    state_limits = models.JSONField(default=list, blank=True)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SensorAddon(models.Model):
    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    # The stream the add-on adds to every episode (issue 15), one of:
    # {"kind": "camera", "name": "wrist", "min_width": 640, "min_height": 480}
    #   (key observation.images.<name>, fps = the episode's)
    # {"kind": "vector", "key": "observation.force_torque", "names": ["fx", ...]}
    #   (frame-aligned float columns in the episode's parquet)
    stream = models.JSONField(default=dict, blank=True)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


# --- Rate card (versioned by effective date) -----------------------------------------------


class RateCard(models.Model):
    """Prices in force from `effective_from` until the next version takes over.

    A version that has come into force is never edited (the admin makes it read-only);
    quotes keep their own copy of the lines they were priced with anyway.
    """

    version = models.PositiveIntegerField(unique=True)
    effective_from = models.DateTimeField()
    currency = models.CharField(max_length=3, default="USD")
    included_environments = models.PositiveSmallIntegerField(default=1)
    extra_environment_fee = models.DecimalField(**MONEY, default=Decimal("0"))
    # Distinct objects in the plan beyond those included are priced like environments.
    included_objects = models.PositiveSmallIntegerField(default=1)
    extra_object_fee = models.DecimalField(**MONEY, default=Decimal("0"))
    rush_surcharge_percent = models.DecimalField(
        max_digits=5, decimal_places=2, default=Decimal("0")
    )
    standard_lead_days = models.PositiveSmallIntegerField(default=28)
    rush_lead_days = models.PositiveSmallIntegerField(default=7)
    quote_validity_hours = models.PositiveIntegerField(default=72)
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-effective_from"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(extra_environment_fee__gte=0), name="ratecard_env_fee_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(rush_surcharge_percent__gte=0), name="ratecard_rush_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(quote_validity_hours__gte=1), name="ratecard_validity_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"Rate card v{self.version} ({self.currency}, from {self.effective_from:%Y-%m-%d})"


class EmbodimentRate(models.Model):
    rate_card = models.ForeignKey(
        RateCard, on_delete=models.CASCADE, related_name="embodiment_rates"
    )
    embodiment = models.ForeignKey(Embodiment, on_delete=models.PROTECT, related_name="+")
    hourly_rate = models.DecimalField(**MONEY)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rate_card", "embodiment"], name="embodiment_rate_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(hourly_rate__gt=0), name="embodiment_rate_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.embodiment} at {self.hourly_rate}/h"


class ComplexityMultiplier(models.Model):
    rate_card = models.ForeignKey(
        RateCard, on_delete=models.CASCADE, related_name="complexity_multipliers"
    )
    level = models.ForeignKey(ComplexityLevel, on_delete=models.PROTECT, related_name="+")
    multiplier = models.DecimalField(max_digits=6, decimal_places=3)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rate_card", "level"], name="complexity_multiplier_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(multiplier__gt=0), name="complexity_multiplier_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"L{self.level_id} x {self.multiplier}"


class SensorRate(models.Model):
    rate_card = models.ForeignKey(RateCard, on_delete=models.CASCADE, related_name="sensor_rates")
    sensor = models.ForeignKey(SensorAddon, on_delete=models.PROTECT, related_name="+")
    hourly_rate = models.DecimalField(**MONEY)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rate_card", "sensor"], name="sensor_rate_unique"),
            models.CheckConstraint(
                condition=models.Q(hourly_rate__gte=0), name="sensor_rate_nonneg"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.sensor} at {self.hourly_rate}/h"


class VolumeDiscountTier(models.Model):
    rate_card = models.ForeignKey(RateCard, on_delete=models.CASCADE, related_name="volume_tiers")
    min_hours = models.DecimalField(**HOURS)
    discount_percent = models.DecimalField(max_digits=5, decimal_places=2)

    class Meta:
        ordering = ["min_hours"]
        constraints = [
            models.UniqueConstraint(fields=["rate_card", "min_hours"], name="volume_tier_unique"),
            models.CheckConstraint(
                condition=models.Q(discount_percent__gte=0, discount_percent__lt=100),
                name="volume_discount_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.discount_percent}% from {self.min_hours} h"


# --- Quotes and orders ---------------------------------------------------------------------


class OutputFormat(models.TextChoices):
    LEROBOT_V3 = "lerobot_v3", "LeRobot v3.0"


class EnvironmentUnit(models.TextChoices):
    SITE = "site", "Distinct sites"
    SCENE = "scene", "Distinct scenes"


class DatasetSpec(models.Model):
    """What the customer asks for. Shared by quotes and orders."""

    task_type = models.ForeignKey(TaskType, on_delete=models.PROTECT, related_name="+")
    complexity = models.ForeignKey(ComplexityLevel, on_delete=models.PROTECT, related_name="+")
    embodiment = models.ForeignKey(Embodiment, on_delete=models.PROTECT, related_name="+")
    hours = models.DecimalField(**HOURS)
    environments = models.PositiveIntegerField()
    objects_per_environment = models.PositiveIntegerField(default=1)
    sensor_slugs = models.JSONField(default=list, blank=True)  # sorted slugs of SensorAddon
    rush = models.BooleanField(default=False)
    # The collection plan (issue 30): environments are distinct sites or distinct scenes;
    # `objects_per_environment` object cells per environment; `distinct_objects` distinct
    # objects over the whole plan (null: as many as one environment's); object categories
    # allowed (empty: any); demonstrations per cell at least `demos_per_cell` (null: by
    # hours only); each cell's accepted time between these percentages of its even share.
    environment_unit = models.CharField(
        max_length=10, choices=EnvironmentUnit.choices, default=EnvironmentUnit.SITE
    )
    distinct_objects = models.PositiveIntegerField(null=True, blank=True)
    object_categories = models.JSONField(default=list, blank=True)
    demos_per_cell = models.PositiveIntegerField(null=True, blank=True)
    cell_min_share_percent = models.DecimalField(
        max_digits=5, decimal_places=2, default=Decimal("50")
    )
    cell_max_share_percent = models.DecimalField(
        max_digits=5, decimal_places=2, default=Decimal("150")
    )
    calibrated_cameras = models.BooleanField(default=False)
    # What the plan advisor proposed and why ({} when not asked), and the supply check at
    # pricing time: {"coverable", "shortfalls": [...], "eta": "YYYY-MM-DD" | null, "basis"}.
    plan_advice = models.JSONField(default=dict, blank=True)
    supply = models.JSONField(default=dict, blank=True)

    # Price, computed by the server only (orders.pricing), frozen at creation.
    rate_card = models.ForeignKey(RateCard, on_delete=models.PROTECT, related_name="+")
    currency = models.CharField(max_length=3)
    lines = models.JSONField()  # [{"code", "description", "quantity", "unit_amount", "amount"}]
    total = models.DecimalField(**AMOUNT)

    class Meta:
        abstract = True
        constraints = [
            models.CheckConstraint(
                condition=models.Q(hours__gt=0), name="%(class)s_hours_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(environments__gte=1), name="%(class)s_envs_positive"
            ),
            models.CheckConstraint(condition=models.Q(total__gte=0), name="%(class)s_total_nonneg"),
        ]


class Quote(DatasetSpec):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.CASCADE, related_name="quotes"
    )  # null: asked anonymously; any customer may then order from it while it is valid
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta(DatasetSpec.Meta):
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Quote {self.id} ({self.total} {self.currency})"


class Order(DatasetSpec):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        AWAITING_PAYMENT = "awaiting_payment", "Awaiting payment"
        PAID = "paid", "Paid"
        IN_COLLECTION = "in_collection", "In collection"
        IN_REVIEW = "in_review", "In review"
        DELIVERED = "delivered", "Delivered"
        CLOSED = "closed", "Closed"
        CANCELLED = "cancelled", "Cancelled"
        REFUNDED = "refunded", "Refunded"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="orders")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    quote = models.OneToOneField(
        Quote, null=True, blank=True, on_delete=models.PROTECT, related_name="order"
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DRAFT)
    output_format = models.CharField(
        max_length=20, choices=OutputFormat.choices, default=OutputFormat.LEROBOT_V3
    )
    success_criterion = models.TextField(blank=True)
    deadline = models.DateField(null=True, blank=True)
    pilot_hours = models.DecimalField(**HOURS, null=True, blank=True)
    notes = models.TextField(blank=True)
    # Frozen when the order is placed (issue 15): what every episode must carry, see
    # orders/streams.py. {} on orders placed before stream specs existed (state/action only).
    stream_spec = models.JSONField(default=dict, blank=True)
    # Accepted (QA-passed) episode time, accrued by datasets to the millisecond;
    # accepted_hours is the same, rounded down to the hundredth that customers pay for.
    accepted_seconds = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal("0"))
    accepted_hours = models.DecimalField(**HOURS, default=Decimal("0"))
    # Orders placed since the collection plan (issue 30) are planned and checked by cell;
    # older ones (False) by environment only.
    cells_planned = models.BooleanField(default=False)
    # Placed although the supply check found the platform's fleets cannot cover it: dispatch
    # holds its jobs until staff release them (the console lists waitlisted orders).
    waitlisted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta(DatasetSpec.Meta):
        ordering = ["-created_at"]
        constraints = [
            *DatasetSpec.Meta.constraints,
            models.CheckConstraint(
                condition=models.Q(pilot_hours__isnull=True)
                | models.Q(pilot_hours__gt=0, pilot_hours__lt=models.F("hours")),
                name="order_pilot_within_hours",
            ),
            models.CheckConstraint(
                condition=models.Q(accepted_hours__gte=0), name="order_accepted_nonneg"
            ),
        ]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"Order {self.id} ({self.get_status_display()})"


class OrderEvent(AppendOnlyModel):
    """Append-only audit of every status change: who, when, from, to, why."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="events")
    from_status = models.CharField(max_length=20, blank=True)
    to_status = models.CharField(max_length=20, choices=Order.Status.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200, blank=True)  # "system", "staff:alice", ...
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.order_id}: {self.from_status or '-'} -> {self.to_status}"

    @property
    def public_actor_label(self) -> str:
        return public_label(self.actor_label)


# The order state machine: the only moves order_transition allows.
S = Order.Status
ORDER_TRANSITIONS: dict[str, frozenset[str]] = {
    S.DRAFT: frozenset({S.AWAITING_PAYMENT, S.CANCELLED}),
    S.AWAITING_PAYMENT: frozenset({S.PAID, S.CANCELLED}),
    S.PAID: frozenset({S.IN_COLLECTION, S.CANCELLED, S.REFUNDED}),
    # in_review: a pilot (or the full set) is with the customer; approval goes back to collection.
    S.IN_COLLECTION: frozenset({S.IN_REVIEW, S.CANCELLED}),
    S.IN_REVIEW: frozenset({S.IN_COLLECTION, S.DELIVERED, S.CANCELLED}),
    # delivered -> in_collection: delivered episodes were excluded and their hours go back
    # to collection (a new version of the dataset follows).
    S.DELIVERED: frozenset({S.IN_COLLECTION, S.CLOSED, S.REFUNDED}),
    S.CLOSED: frozenset(),
    S.CANCELLED: frozenset({S.REFUNDED}),
    S.REFUNDED: frozenset(),
}
# States from which the customer may cancel on their own (later ones go through staff).
CUSTOMER_CANCELLABLE = frozenset({S.DRAFT, S.AWAITING_PAYMENT, S.PAID, S.IN_COLLECTION})
del S
