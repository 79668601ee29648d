"""Supply side: fleets, sites, robots; jobs, offers, bids, assignments; webhook deliveries.

Job states follow one explicit map (JOB_TRANSITIONS) changed only by
`fleets.services.job_transition`, which writes an append-only JobEvent per change.
"""

import secrets
import uuid
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import models

from fleets.collection_models import (  # noqa: F401 (models of this app)
    CameraCalibration,
    DistortionModel,
    OrderCell,
    Scene,
    SiteObject,
    SizeClass,
)
from fleets.currencies import fleet_pay_problems, validate_payout_currency
from marketplace.audit import AppendOnlyModel
from marketplace.models import Organization, WebhookDeliveryBase
from orders.models import Embodiment, Order

HOURS = {"max_digits": 9, "decimal_places": 2}
MONEY = {"max_digits": 14, "decimal_places": 4}


class EndEffector(models.TextChoices):
    PARALLEL_GRIPPER = "parallel_gripper", "Parallel gripper"
    SUCTION = "suction", "Suction cup"
    DEXTEROUS_HAND = "dexterous_hand", "Dexterous hand"
    TOOL_CHANGER = "tool_changer", "Tool changer"


class SiteKind(models.TextChoices):
    KITCHEN = "kitchen", "Kitchen"
    HOUSEHOLD = "household", "Household room"
    OFFICE = "office", "Office"
    WAREHOUSE_SHELF = "warehouse_shelf", "Warehouse shelf"
    RETAIL_AISLE = "retail_aisle", "Retail aisle"
    LAB_BENCH = "lab_bench", "Lab bench"
    PRODUCTION_LINE = "production_line", "Production line"


def new_webhook_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


class Fleet(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        PAUSED = "paused", "Paused"
        RETIRED = "retired", "Retired"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="fleets")
    name = models.CharField(max_length=120)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    timezone = models.CharField(max_length=64, default="UTC")
    weekly_capacity_hours = models.DecimalField(**HOURS)
    # What the fleet asks per accepted hour, in its payout currency (ISO 4217): offers carry it
    # only where the job pays at least that much (fleets/services/pay_terms.py).
    payout_rate_per_hour = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3, default="USD", validators=[validate_payout_currency])
    # 0..1, maintained by staff from QA figures; fleets cannot set it.
    quality_score = models.DecimalField(max_digits=4, decimal_places=3, default=Decimal("0.500"))
    webhook_url = models.URLField(max_length=500, blank=True)
    webhook_secret = models.CharField(max_length=80, default=new_webhook_secret)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(weekly_capacity_hours__gte=0), name="fleet_capacity_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(payout_rate_per_hour__gte=0), name="fleet_rate_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(quality_score__gte=0, quality_score__lte=1),
                name="fleet_quality_range",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["active", "paused", "retired"]),
                name="fleet_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(currency__regex=r"^[A-Z]{3}$"), name="fleet_currency_code"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """The admin's forms: the currency and rate rules of the registry service."""
        super().clean()
        problems = fleet_pay_problems(currency=self.currency, rate=self.payout_rate_per_hour)
        if problems:
            raise ValidationError(problems)


class Site(models.Model):
    """An environment: one physical place. Dispatch spreads an order over distinct sites."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="sites")
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=30, choices=SiteKind.choices)
    description = models.TextField(blank=True)
    objects_available = models.JSONField(default=list, blank=True)  # list of object names
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Operator(models.Model):
    """A person who teleoperates a fleet's robots, known by a pseudonym unique in the fleet
    (never a person's name: letters, digits, `.`, `_`, `-`, no spaces), optionally at a home
    site, with the fleet's own notes on their skills. Episodes name one (issue 16)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="operators")
    pseudonym = models.CharField(max_length=64)
    site = models.ForeignKey(
        Site, null=True, blank=True, on_delete=models.SET_NULL, related_name="operators"
    )
    skill_notes = models.TextField(blank=True)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pseudonym"]
        constraints = [
            models.UniqueConstraint(fields=["fleet", "pseudonym"], name="operator_unique_in_fleet")
        ]

    def __str__(self) -> str:
        return self.pseudonym


class Robot(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="robots")
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="robots")
    name = models.CharField(max_length=120)
    embodiment = models.ForeignKey(Embodiment, on_delete=models.PROTECT, related_name="+")
    end_effector = models.CharField(max_length=30, choices=EndEffector.choices)
    sensor_slugs = models.JSONField(default=list, blank=True)  # sorted SensorAddon slugs
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["embodiment", "end_effector", "active"])]

    def __str__(self) -> str:
        return self.name


class Job(models.Model):
    class Status(models.TextChoices):
        HELD = "held", "Held (waits for pilot approval)"
        OPEN = "open", "Open (to dispatch)"
        OFFERED = "offered", "Offered"
        ASSIGNED = "assigned", "Assigned"
        IN_PROGRESS = "in_progress", "In progress"
        COMPLETED = "completed", "Completed"
        FLAGGED = "flagged", "Flagged (nobody eligible)"
        CANCELLED = "cancelled", "Cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="jobs")
    sequence = models.PositiveIntegerField()
    environment_index = models.PositiveIntegerField()
    is_pilot = models.BooleanField(default=False)
    embodiment = models.ForeignKey(Embodiment, on_delete=models.PROTECT, related_name="+")
    end_effector = models.CharField(max_length=30, choices=EndEffector.choices)
    sensor_slugs = models.JSONField(default=list, blank=True)
    site_kinds = models.JSONField(default=list, blank=True)  # empty: any kind
    target_hours = models.DecimalField(**HOURS)
    # Set when the job collects an exact time finer than target_hours' hundredth of an hour (a
    # re-collection of excluded seconds): what counts and is paid stops there, not at the
    # rounded-up hours, which only plan capacity.
    exact_target_seconds = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True
    )
    progress_hours = models.DecimalField(**HOURS, default=Decimal("0"))  # fleet-reported
    # Duration of the episodes that passed QA (datasets accrues it, to the millisecond): what
    # counts toward target_hours and what the fleet is paid for.
    accepted_seconds = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal("0"))
    deadline = models.DateTimeField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    # The fleet and site holding the job while offered, assigned or in progress.
    fleet = models.ForeignKey(
        Fleet, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    site = models.ForeignKey(
        Site, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    flag_reason = models.TextField(blank=True)
    # A re-collection job (planning.job_recollect): the job whose excluded seconds it collects
    # again, the fleet that collected them and the rate agreed on that job's assignment. That
    # fleet is offered this job at that rate, any other fleet at most it (services/pay_terms).
    recollection_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="recollections"
    )
    original_fleet = models.ForeignKey(
        Fleet, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    original_rate_per_hour = models.DecimalField(**MONEY, null=True, blank=True)
    # The collection plan (issue 30): a job collecting a cell's shortfall names the cell (one
    # open such job per cell at a time).
    shortfall_cell = models.ForeignKey(
        OrderCell, null=True, blank=True, on_delete=models.PROTECT, related_name="shortfall_jobs"
    )
    dispatch_attempts = models.PositiveIntegerField(default=0)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["order", "sequence"], name="job_order_sequence"),
            models.CheckConstraint(
                condition=models.Q(target_hours__gt=0), name="job_hours_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(progress_hours__gte=0), name="job_progress_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(accepted_seconds__gte=0), name="job_accepted_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(exact_target_seconds__isnull=True)
                | models.Q(exact_target_seconds__gt=0),
                name="job_exact_target_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(original_fleet__isnull=True, original_rate_per_hour__isnull=True)
                | models.Q(original_fleet__isnull=False, original_rate_per_hour__gte=0),
                name="job_original_terms_whole",
            ),
        ]
        indexes = [models.Index(fields=["status", "updated_at"])]

    def __str__(self) -> str:
        return f"Job {self.order_id}#{self.sequence} ({self.status})"

    @property
    def target_seconds(self) -> Decimal:
        """The accepted time the job collects, counts and is paid for."""
        if self.exact_target_seconds is not None:
            return self.exact_target_seconds
        return self.target_hours * 3600


S = Job.Status
JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    S.HELD: frozenset({S.OPEN, S.CANCELLED}),
    S.OPEN: frozenset({S.OFFERED, S.ASSIGNED, S.FLAGGED, S.CANCELLED}),
    S.OFFERED: frozenset({S.ASSIGNED, S.OPEN, S.CANCELLED}),
    S.ASSIGNED: frozenset({S.IN_PROGRESS, S.COMPLETED, S.OPEN, S.CANCELLED}),
    S.IN_PROGRESS: frozenset({S.COMPLETED, S.OPEN, S.CANCELLED}),
    S.FLAGGED: frozenset({S.OPEN, S.CANCELLED}),
    S.COMPLETED: frozenset(),
    S.CANCELLED: frozenset(),
}
# States in which a job counts against its fleet's capacity.
JOB_HOLDING_STATES = frozenset({S.OFFERED, S.ASSIGNED, S.IN_PROGRESS})
del S


class JobEvent(AppendOnlyModel):
    """Append-only audit of every job status change."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="events")
    from_status = models.CharField(max_length=20, blank=True)
    to_status = models.CharField(max_length=20, choices=Job.Status.choices)
    fleet = models.ForeignKey(
        Fleet, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_status or '-'} -> {self.to_status}"


class Offer(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        ACCEPTED = "accepted", "Accepted"
        DECLINED = "declined", "Declined"
        EXPIRED = "expired", "Expired"
        WITHDRAWN = "withdrawn", "Withdrawn"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="offers")
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="offers")
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="offers")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    score = models.FloatField()
    # The pay offered: the fleet's rate when the offer was made. Accepting it fixes the rate on
    # the assignment; changing the fleet's rate later changes future offers only.
    rate_per_hour = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3)
    expires_at = models.DateTimeField()
    responded_at = models.DateTimeField(null=True, blank=True)
    decline_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # At most one live offer per job, whatever the races.
            models.UniqueConstraint(
                fields=["job"],
                condition=models.Q(status="pending"),
                name="offer_one_pending_per_job",
            ),
        ]
        indexes = [models.Index(fields=["status", "expires_at"])]

    def __str__(self) -> str:
        return f"Offer {self.id} ({self.status})"


class Bid(models.Model):
    class Status(models.TextChoices):
        OPEN = "open", "Open"
        WON = "won", "Won"
        LOST = "lost", "Lost"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="bids")
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="bids")
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="bids")
    price_per_hour = models.DecimalField(**MONEY)
    earliest_finish = models.DateTimeField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "fleet"],
                condition=models.Q(status="open"),
                name="bid_one_open_per_fleet_job",
            ),
            models.CheckConstraint(
                condition=models.Q(price_per_hour__gte=0), name="bid_price_nonneg"
            ),
        ]

    def __str__(self) -> str:
        return f"Bid {self.id} ({self.price_per_hour}/h)"


class Assignment(models.Model):
    """A fleet holds a job. At most one active assignment per job (database-enforced)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="assignments")
    fleet = models.ForeignKey(Fleet, on_delete=models.PROTECT, related_name="assignments")
    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="assignments")
    offer = models.OneToOneField(
        Offer, null=True, blank=True, on_delete=models.PROTECT, related_name="assignment"
    )
    bid = models.OneToOneField(
        Bid, null=True, blank=True, on_delete=models.PROTECT, related_name="assignment"
    )
    # The agreed pay per accepted hour (the offer's rate or the winning bid's price), fixed
    # here: the fleet's payable is accepted hours (at most the job's target) x this rate.
    rate_per_hour = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3)
    active = models.BooleanField(default=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job"], condition=models.Q(active=True), name="assignment_one_active"
            ),
            models.CheckConstraint(
                condition=models.Q(rate_per_hour__gte=0), name="assignment_rate_nonneg"
            ),
        ]

    def __str__(self) -> str:
        return f"Assignment {self.job_id} -> {self.fleet_id}"


class WebhookDelivery(WebhookDeliveryBase):
    """One outgoing event to one fleet (sent by marketplace.outbound_webhooks)."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="webhook_deliveries")

    receiver_field = "fleet"

    class Meta(WebhookDeliveryBase.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.event_type} -> {self.fleet_id} ({self.status})"
