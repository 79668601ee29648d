"""Billing: Stripe customers, payments, refunds, received webhook events, the ledger, staff flags.

Money is Decimal with a currency code everywhere here; integers in minor units exist only
inside billing/stripe_gateway.py.
"""

import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models

from marketplace.models import Organization
from orders.models import Order

AMOUNT = {"max_digits": 14, "decimal_places": 2}


class StripeCustomer(models.Model):
    """The Stripe Customer of one organization (created on its first payment)."""

    organization = models.OneToOneField(
        Organization, on_delete=models.PROTECT, related_name="stripe_customer"
    )
    stripe_customer_id = models.CharField(max_length=255, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.organization} -> {self.stripe_customer_id}"


class Payment(models.Model):
    """One attempt to collect an order's total through Stripe (a PaymentIntent or Checkout)."""

    class Method(models.TextChoices):
        PAYMENT_INTENT = "payment_intent", "PaymentIntent (API)"
        CHECKOUT = "checkout", "Checkout (web)"

    class Status(models.TextChoices):
        REQUIRES_PAYMENT = "requires_payment", "Awaiting the customer"
        SUCCEEDED = "succeeded", "Succeeded"
        REVIEW = "review", "Held for staff review"
        CANCELED = "canceled", "Canceled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="payments")
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    method = models.CharField(max_length=20, choices=Method.choices)
    status = models.CharField(
        max_length=20, choices=Status.choices, default=Status.REQUIRES_PAYMENT
    )
    attempt = models.PositiveIntegerField(default=1)  # per order; part of the idempotency key
    amount = models.DecimalField(**AMOUNT)
    currency = models.CharField(max_length=3)
    amount_refunded = models.DecimalField(**AMOUNT, default=Decimal("0"))  # incl. pending
    stripe_payment_intent_id = models.CharField(max_length=255, unique=True, null=True, blank=True)
    stripe_checkout_session_id = models.CharField(
        max_length=255, unique=True, null=True, blank=True
    )
    stripe_charge_id = models.CharField(max_length=255, blank=True)
    client_secret = models.CharField(max_length=255, blank=True)
    checkout_url = models.URLField(max_length=2000, blank=True)
    failure_message = models.TextField(blank=True)
    succeeded_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="payment_amount_pos"),
            models.CheckConstraint(
                condition=models.Q(amount_refunded__gte=0, amount_refunded__lte=models.F("amount")),
                name="payment_refunded_within_amount",
            ),
            models.UniqueConstraint(
                fields=["order", "attempt"], name="payment_attempt_unique_per_order"
            ),
            # Never two charges for one order, never two open attempts.
            models.UniqueConstraint(
                fields=["order"],
                condition=models.Q(status="succeeded"),
                name="payment_one_success_per_order",
            ),
            models.UniqueConstraint(
                fields=["order"],
                condition=models.Q(status="requires_payment"),
                name="payment_one_open_per_order",
            ),
        ]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"Payment {self.id} ({self.amount} {self.currency}, {self.status})"

    @property
    def refundable(self) -> Decimal:
        if self.status != self.Status.SUCCEEDED:
            return Decimal("0")
        return self.amount - self.amount_refunded


class Refund(models.Model):
    """Money given back on a payment. `key` makes each business reason refund at most once."""

    class Reason(models.TextChoices):
        TRUE_UP = "true_up", "Hours not delivered (true-up)"
        CANCELLATION = "cancellation", "Order cancelled"
        STAFF = "staff", "Issued by staff"
        STRIPE = "stripe", "Issued in Stripe (seen by webhook)"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending (sent or to send to Stripe)"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="refunds")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refunds")
    key = models.CharField(max_length=255, unique=True)
    reason = models.CharField(max_length=20, choices=Reason.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    amount = models.DecimalField(**AMOUNT)
    currency = models.CharField(max_length=3)
    stripe_refund_id = models.CharField(max_length=255, unique=True, null=True, blank=True)
    note = models.TextField(blank=True)
    failure_message = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="refund_amount_pos"),
        ]

    def __str__(self) -> str:
        return f"Refund {self.id} ({self.amount} {self.currency}, {self.status})"


class WebhookEvent(models.Model):
    """A verified Stripe event exactly as received; the unique event id is the dedupe."""

    class Status(models.TextChoices):
        RECEIVED = "received", "Received, not processed yet"
        PROCESSED = "processed", "Processed"
        IGNORED = "ignored", "Ignored (type we do not handle)"
        UNMATCHED = "unmatched", "Recorded: refers to nothing we know"
        DEFERRED = "deferred", "Deferred until an earlier event arrives"
        FAILED = "failed", "Failed (see error)"

    stripe_event_id = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=100)
    livemode = models.BooleanField(default=False)
    raw_body = models.TextField()
    payload = models.JSONField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RECEIVED)
    waiting_for = models.CharField(max_length=255, blank=True)  # a PaymentIntent id, if deferred
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    received_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-received_at"]
        indexes = [models.Index(fields=["status", "received_at"])]

    def __str__(self) -> str:
        return f"{self.type} {self.stripe_event_id} ({self.status})"


class LedgerAccount(models.TextChoices):
    """Where money sits. Debits are positive, credits negative; every transaction sums to 0."""

    STRIPE_BALANCE = "stripe_balance", "Stripe balance (cash)"
    CUSTOMER_FUNDS = "customer_funds", "Customer funds held for orders"
    DISPUTES = "disputes", "Disputed funds"
    # Added by fleet payables/payouts (issue 6, item 6): the columns already carry them.
    FLEET_PAYABLE = "fleet_payable", "Owed to fleets"
    PLATFORM_REVENUE = "platform_revenue", "Platform margin"


class LedgerTransaction(models.Model):
    """A balanced group of entries. `key` (e.g. "charge:<payment id>") posts each fact once."""

    class Kind(models.TextChoices):
        CHARGE = "charge", "Customer charge"
        REFUND = "refund", "Refund"
        DISPUTE = "dispute", "Dispute opened"
        PAYABLE = "payable", "Fleet payable"
        PAYOUT = "payout", "Fleet payout"

    key = models.CharField(max_length=255, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    memo = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


class LedgerEntry(models.Model):
    """One leg of a transaction. Append-only."""

    transaction = models.ForeignKey(
        LedgerTransaction, on_delete=models.PROTECT, related_name="entries"
    )
    account = models.CharField(max_length=30, choices=LedgerAccount.choices)
    amount = models.DecimalField(**AMOUNT)  # debit > 0, credit < 0
    currency = models.CharField(max_length=3)
    order = models.ForeignKey(
        Order, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries"
    )
    # The counterparty: the customer for charges and refunds, the fleet for payables/payouts.
    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    payment = models.ForeignKey(
        Payment, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries"
    )
    refund = models.ForeignKey(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "ledger entries"
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(amount=0), name="ledger_entry_amount_nonzero"
            ),
        ]
        indexes = [models.Index(fields=["account", "currency"])]

    def __str__(self) -> str:
        return f"{self.account} {self.amount} {self.currency}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("Ledger entries are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("Ledger entries are append-only.")


class BillingFlag(models.Model):
    """Something staff must look at: a mismatched amount, a dispute, a duplicate payment..."""

    class Kind(models.TextChoices):
        AMOUNT_MISMATCH = "amount_mismatch", "Amount or currency does not match the order"
        DUPLICATE_PAYMENT = "duplicate_payment", "A second payment succeeded for an order"
        PAID_AFTER_CANCEL = "paid_after_cancel", "Payment succeeded for a cancelled order"
        DISPUTE = "dispute", "Dispute opened"
        EXTERNAL_REFUND = "external_refund", "Refund issued outside the platform"
        REFUND_EXCEEDS = "refund_exceeds", "Refund larger than what is refundable"
        REFUND_FAILED = "refund_failed", "Stripe refused a refund"
        MANUAL_REFUND = "manual_refund", "A refund needs a staff decision"
        STUCK_EVENT = "stuck_event", "A webhook event could not be processed"

    kind = models.CharField(max_length=30, choices=Kind.choices)
    dedupe_key = models.CharField(max_length=255, unique=True)
    message = models.TextField()
    order = models.ForeignKey(
        Order, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    payment = models.ForeignKey(
        Payment, null=True, blank=True, on_delete=models.PROTECT, related_name="flags"
    )
    webhook_event = models.ForeignKey(
        WebhookEvent, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.message[:60]}"
