"""Claims and disputes (issue 28): a customer's rejection of delivered episodes is a claim with
evidence per episode, granted at once only within the rejection allowance when an automatic
re-check confirms it, else decided by staff after the fleet could answer (a dispute). Every
step is an append-only ClaimEvent. Imported by datasets/models.py; the rules are in
datasets/services/claims.py and datasets/services/disputes.py."""

import uuid

from django.db import models

from marketplace.audit import AppendOnlyModel


class Remedy(models.TextChoices):
    """What a rejected episode's hours become (EpisodeExclusion.Remedy too)."""

    RECOLLECT = "recollect", "Re-collected"
    CREDIT = "credit", "Credited"


class Claim(models.Model):
    """A customer's rejection of episodes of one delivery version, with one remedy."""

    class Status(models.TextChoices):
        CHECKING = "checking", "Being re-checked"
        DISPUTED = "disputed", "Waiting for a decision on disputed episodes"
        DECIDED = "decided", "Decided"

    Remedy = Remedy

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    order = models.ForeignKey("orders.Order", on_delete=models.PROTECT, related_name="claims")
    delivery = models.ForeignKey(
        "datasets.Delivery", on_delete=models.PROTECT, related_name="claims"
    )
    remedy = models.CharField(max_length=10, choices=Remedy.choices)
    note = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CHECKING)
    actor_label = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["order", "status"])]

    def __str__(self) -> str:
        return f"Claim {self.id} ({self.status})"


class Dispute(models.Model):
    """The episodes of one claim and one fleet that were not granted at once: the fleet may
    answer until `answer_due_at`; staff decide (never automatically)."""

    class Status(models.TextChoices):
        OPEN = "open", "Waiting for the fleet's answer"
        AWAITING_DECISION = "awaiting_decision", "Waiting for the staff's decision"
        DECIDED = "decided", "Decided"

    class Decision(models.TextChoices):
        GRANTED = "granted", "Granted"
        PARTIAL = "partial", "Partly granted"
        REFUSED = "refused", "Refused"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    claim = models.ForeignKey(Claim, on_delete=models.PROTECT, related_name="disputes")
    fleet = models.ForeignKey("fleets.Fleet", on_delete=models.PROTECT, related_name="disputes")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    answer_due_at = models.DateTimeField()
    answer = models.TextField(blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    answered_by = models.CharField(max_length=200, blank=True)
    decision = models.CharField(max_length=10, choices=Decision.choices, blank=True)
    decision_note = models.TextField(blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["claim", "fleet"], name="dispute_one_per_claim_fleet")
        ]
        indexes = [models.Index(fields=["status", "answer_due_at"])]

    def __str__(self) -> str:
        return f"Dispute {self.id} ({self.status})"


# The dispute state machine: the only moves datasets.services.disputes allows.
_S = Dispute.Status
DISPUTE_TRANSITIONS: dict[str, frozenset[str]] = {
    _S.OPEN: frozenset({_S.AWAITING_DECISION}),
    _S.AWAITING_DECISION: frozenset({_S.DECIDED}),
    _S.DECIDED: frozenset(),
}


class ClaimItem(models.Model):
    """One claimed episode: its reason, optional time range and note, what the re-check
    found, and what became of it. An episode is claimed once, whatever the version."""

    class Status(models.TextChoices):
        PENDING = "pending", "Being re-checked"
        GRANTED = "granted", "Granted"
        DISPUTED = "disputed", "In dispute"
        REFUSED = "refused", "Refused"

    class Recheck(models.TextChoices):
        NOT_RUN = "not_run", "Not re-checked"
        CONFIRMED = "confirmed", "Confirmed by the re-check"
        NOT_CONFIRMED = "not_confirmed", "Not confirmed by the re-check"

    claim = models.ForeignKey(Claim, on_delete=models.PROTECT, related_name="items")
    episode = models.OneToOneField(
        "datasets.Episode", on_delete=models.PROTECT, related_name="claim_item"
    )
    dispute = models.ForeignKey(
        Dispute, null=True, blank=True, on_delete=models.PROTECT, related_name="items"
    )
    reason_code = models.CharField(max_length=30)  # an ExclusionReason value
    start_seconds = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    end_seconds = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    note = models.TextField(blank=True)
    seconds = models.DecimalField(max_digits=12, decimal_places=3)  # the episode's duration
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    recheck = models.CharField(max_length=15, choices=Recheck.choices, default=Recheck.NOT_RUN)
    recheck_detail = models.CharField(max_length=500, blank=True)
    route = models.CharField(max_length=200, blank=True)  # why it was granted or disputed

    class Meta:
        ordering = ["claim", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(start_seconds__isnull=True, end_seconds__isnull=True)
                | models.Q(start_seconds__gte=0, end_seconds__gt=models.F("start_seconds")),
                name="claim_item_range_ordered",
            )
        ]

    def __str__(self) -> str:
        return f"{self.episode_id} ({self.reason_code}, {self.status})"


class ClaimEvent(AppendOnlyModel):
    """Every step of a claim and its disputes: filed, re-checked, granted, disputed, the
    fleet told, answered, its time up, decided. Append-only."""

    class Action(models.TextChoices):
        FILED = "filed", "Claim filed"
        RECHECKED = "rechecked", "Re-checked"
        GRANTED = "granted", "Granted at once"
        DISPUTED = "disputed", "Dispute opened"
        ANSWERED = "answered", "The fleet answered"
        ANSWER_TIME_UP = "answer_time_up", "The fleet's time to answer is over"
        DECIDED = "decided", "Decided by staff"

    claim = models.ForeignKey(Claim, on_delete=models.PROTECT, related_name="events")
    dispute = models.ForeignKey(
        Dispute, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    action = models.CharField(max_length=20, choices=Action.choices)
    actor_label = models.CharField(max_length=200)
    note = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.claim_id} {self.action} by {self.actor_label}"


class Recollection(AppendOnlyModel):
    """A job created to collect again the hours excluded from a completed job: its episodes
    are not re-collected a second time at the customer's request (staff may). Append-only."""

    job = models.OneToOneField("fleets.Job", on_delete=models.PROTECT, related_name="+")
    source_job = models.ForeignKey("fleets.Job", on_delete=models.PROTECT, related_name="+")
    seconds = models.DecimalField(max_digits=12, decimal_places=3)
    actor_label = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Job {self.job_id} re-collects {self.seconds} s of job {self.source_job_id}"
