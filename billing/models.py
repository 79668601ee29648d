"""Billing: Stripe customers, payments, refunds, received webhook events, the ledger, staff flags.

Money is Decimal with a currency code everywhere here; integers in minor units exist only
inside billing/stripe_gateway.py.
"""

import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models

from fleets.models import Fleet, Job
from marketplace.audit import AppendOnlyModel
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
        BANK_TRANSFER = "bank_transfer", "Bank transfer (recorded by staff)"

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
    # Out-of-band payments (bank transfer): the bank's reference and who recorded it.
    reference = models.CharField(max_length=200, blank=True)
    recorded_by = models.CharField(max_length=200, blank=True)
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


# The payment state machine: the only moves billing.services.payments.payment_move allows.
# A canceled attempt can still succeed (money Stripe took after we stopped waiting).
_P = Payment.Status
PAYMENT_TRANSITIONS: dict[str, frozenset[str]] = {
    _P.REQUIRES_PAYMENT: frozenset({_P.SUCCEEDED, _P.REVIEW, _P.CANCELED}),
    _P.CANCELED: frozenset({_P.SUCCEEDED, _P.REVIEW}),
    _P.SUCCEEDED: frozenset(),
    _P.REVIEW: frozenset(),
}


class Refund(models.Model):
    """Money given back on a payment. `key` makes each business reason refund at most once."""

    class Reason(models.TextChoices):
        TRUE_UP = "true_up", "Hours not delivered (true-up)"
        CANCELLATION = "cancellation", "Order cancelled"
        STAFF = "staff", "Issued by staff"
        STRIPE = "stripe", "Issued in Stripe (seen by webhook)"
        CREDIT = "credit", "Delivered episodes rejected (credit)"
        PLAN_SHORTFALL = "plan_shortfall", "Environments or objects not delivered (true-up)"

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
    BANK = "bank", "Bank account (cash received by transfer)"
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
        DEDUCTION = "deduction", "Fleet payable reversed (excluded episodes)"

    key = models.CharField(max_length=255, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    memo = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


class LedgerEntry(AppendOnlyModel):
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
    # Payables and payouts: the fleet they concern (its balances sum to zero like an order's).
    fleet = models.ForeignKey(
        Fleet, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries"
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
        NO_PAYOUT_ACCOUNT = "no_payout_account", "A fleet is owed money but has no payout account"
        PAYOUT_FAILED = "payout_failed", "Stripe refused a payout transfer"
        PAYABLE_UNRECORDED = "payable_unrecorded", "Accepted hours could not become a payable"
        PAYABLES_EXCEED_REVENUE = (
            "payables_exceed_revenue",
            "Fleet payables exceed what the customer paid: payouts held",
        )

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


class FleetPayoutAccount(models.Model):
    """Where a fleet is paid: its Stripe Connect account (entered by staff in the admin)."""

    fleet = models.OneToOneField(Fleet, on_delete=models.PROTECT, related_name="payout_account")
    stripe_account_id = models.CharField(
        max_length=255, unique=True, help_text="The fleet's Stripe connected account, acct_..."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(stripe_account_id__startswith="acct_"),
                name="payout_account_id_format",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.fleet} -> {self.stripe_account_id}"


class PayoutRun(models.Model):
    """One run of the payout job (monthly beat or the admin action): what it paid, skipped."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    triggered_by = models.CharField(max_length=200)  # "beat", "staff:alice"
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # {"paid": [payout ids], "pending": [...], "failed": [...], "skipped": [{"fleet", "reason"}]}
    report = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"Payout run {self.started_at:%Y-%m-%d %H:%M} ({self.triggered_by})"


class Payout(models.Model):
    """One Stripe Connect transfer to a fleet, covering a set of its payables.

    Created `pending` with its payables attached (reserving them), then sent with the
    idempotency key `payout:<id>`. Stripe down: it stays pending and the next run re-sends it
    with the same key. Stripe refuses: `failed`, and its payables are released for a later run.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending (to send to Stripe)"
        PAID = "paid", "Paid (transfer created)"
        FAILED = "failed", "Failed (refused by Stripe; payables released)"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    fleet = models.ForeignKey(Fleet, on_delete=models.PROTECT, related_name="payouts")
    run = models.ForeignKey(
        PayoutRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="payouts"
    )
    stripe_account_id = models.CharField(max_length=255)
    amount = models.DecimalField(**AMOUNT)
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    stripe_transfer_id = models.CharField(max_length=255, unique=True, null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    failure_message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="payout_amount_pos"),
            models.CheckConstraint(
                condition=~models.Q(status="paid") | models.Q(stripe_transfer_id__isnull=False),
                name="payout_paid_has_transfer",
            ),
        ]
        indexes = [models.Index(fields=["status", "created_at"])]

    def __str__(self) -> str:
        return f"Payout {self.id} ({self.amount} {self.currency}, {self.status})"


class FleetPayable(models.Model):
    """What one job earned its fleet: accepted hours (at most the job's target) x the rate agreed
    when the fleet took the job (its assignment's), recorded once per job.

    `customer_amount` is the part of the customer's payment for those hours; the platform's
    margin is the difference. Unpaid while `payout` is empty or its payout is not `paid`; a
    payable with a `hold_reason` is never paid out automatically (staff release it).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="payable")
    fleet = models.ForeignKey(Fleet, on_delete=models.PROTECT, related_name="payables")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="fleet_payables")
    accepted_seconds = models.DecimalField(max_digits=14, decimal_places=3)
    rate_per_hour = models.DecimalField(max_digits=14, decimal_places=4)
    amount = models.DecimalField(**AMOUNT)
    customer_amount = models.DecimalField(**AMOUNT)
    currency = models.CharField(max_length=3)
    payout = models.ForeignKey(
        Payout, null=True, blank=True, on_delete=models.PROTECT, related_name="payables"
    )
    hold_reason = models.TextField(blank=True)
    hold_released_at = models.DateTimeField(null=True, blank=True)  # staff reviewed: payable
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="payable_amount_nonneg"),
            models.CheckConstraint(
                condition=models.Q(customer_amount__gte=0), name="payable_customer_nonneg"
            ),
        ]
        indexes = [models.Index(fields=["fleet", "payout"])]

    def __str__(self) -> str:
        return f"Payable {self.job_id} ({self.amount} {self.currency})"

    @property
    def margin(self) -> Decimal:
        return self.customer_amount - self.amount


class PayableDeduction(models.Model):
    """Part of a job's payable reversed because episodes it was paid for were excluded (or
    rejected after delivery). Before payout the payable itself is reduced (`in_place`); once
    paid, the amount is carried as a deduction the fleet's next payout subtracts (`payout`
    set when one did). Booked once in the ledger (`deduction:<id>`)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    payable = models.ForeignKey(FleetPayable, on_delete=models.PROTECT, related_name="deductions")
    fleet = models.ForeignKey(Fleet, on_delete=models.PROTECT, related_name="deductions")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="+")
    seconds = models.DecimalField(max_digits=14, decimal_places=3)
    amount = models.DecimalField(**AMOUNT)  # what the fleet no longer earns
    customer_amount = models.DecimalField(**AMOUNT)  # the customer's part given back
    currency = models.CharField(max_length=3)
    in_place = models.BooleanField()
    payout = models.ForeignKey(
        Payout, null=True, blank=True, on_delete=models.PROTECT, related_name="deductions"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(seconds__gt=0), name="deduction_seconds_pos"),
            models.CheckConstraint(
                condition=models.Q(amount__gte=0), name="deduction_amount_nonneg"
            ),
            models.CheckConstraint(
                condition=models.Q(customer_amount__gte=0), name="deduction_customer_nonneg"
            ),
        ]
        indexes = [models.Index(fields=["fleet", "payout"])]

    def __str__(self) -> str:
        return f"Deduction of {self.amount} {self.currency} from {self.payable_id}"


class BillingProfile(models.Model):
    """What a customer's invoices say about them: legal name, address, tax id."""

    organization = models.OneToOneField(
        Organization, on_delete=models.CASCADE, related_name="billing_profile"
    )
    legal_name = models.CharField(max_length=200)
    address = models.TextField(blank=True)
    tax_id = models.CharField(max_length=40, blank=True)
    email = models.EmailField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.legal_name


class InvoiceCounter(models.Model):
    """The last invoice number given out in a year (numbers are gapless per year)."""

    year = models.PositiveIntegerField(primary_key=True)
    last = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.year}: {self.last}"


class Invoice(models.Model):
    """One invoice per order, issued once and never changed: a snapshot of seller, buyer,
    lines, tax and the bank details to pay it by transfer (with its payment reference)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    number = models.CharField(max_length=30, unique=True)  # INV-2026-000123
    order = models.OneToOneField(Order, on_delete=models.PROTECT, related_name="invoice")
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    issued_at = models.DateTimeField()
    due_at = models.DateField()
    seller_name = models.CharField(max_length=200)
    seller_address = models.TextField()
    seller_tax_id = models.CharField(max_length=40, blank=True)
    buyer_name = models.CharField(max_length=200)
    buyer_address = models.TextField(blank=True)
    buyer_tax_id = models.CharField(max_length=40, blank=True)
    currency = models.CharField(max_length=3)
    lines = models.JSONField()  # the order's priced lines
    total = models.DecimalField(**AMOUNT)  # what is due, tax included
    tax_rate_percent = models.DecimalField(max_digits=5, decimal_places=2)
    tax_amount = models.DecimalField(**AMOUNT)
    net_amount = models.DecimalField(**AMOUNT)
    tax_note = models.CharField(max_length=300, blank=True)
    payment_reference = models.CharField(max_length=40, unique=True)
    bank_account_name = models.CharField(max_length=200)
    bank_iban = models.CharField(max_length=60)
    bank_bic = models.CharField(max_length=20)

    class Meta:
        ordering = ["-issued_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(total=models.F("net_amount") + models.F("tax_amount")),
                name="invoice_total_is_net_plus_tax",
            ),
        ]

    def __str__(self) -> str:
        return f"Invoice {self.number}"
