"""Accounts: users, organizations (customers and fleet operators), memberships, API keys.

Plus the stored responses behind the `Idempotency-Key` header, which every app's
create/pay endpoints share.
"""

import uuid

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models


class User(AbstractUser):
    """A person. Admins are Django staff; everyone else acts through an organization."""

    email = models.EmailField(unique=True)


class Organization(models.Model):
    class Kind(models.TextChoices):
        CUSTOMER = "customer", "Customer"
        FLEET_OPERATOR = "fleet_operator", "Fleet operator"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # Where signed event notifications go (customers: delivery.ready); the secret signs them.
    webhook_url = models.URLField(max_length=500, blank=True)
    webhook_secret = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=["customer", "fleet_operator"]),
                name="organization_kind_valid",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"

    @property
    def is_customer(self) -> bool:
        return self.kind == self.Kind.CUSTOMER

    @property
    def is_fleet_operator(self) -> bool:
        return self.kind == self.Kind.FLEET_OPERATOR


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"  # everything, including keys and members
        MEMBER = "member", "Member"  # day-to-day work: orders, jobs
        BILLING = "billing", "Billing"  # payments and invoices, read the rest

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "organization"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} as {self.role}"


class ApiKeyQuerySet(models.QuerySet):
    """A bulk write may only touch `last_used_at`. Anything authentication reads (a revocation
    above all) changes through `save()`, whose post_save bumps the key cache's version
    (marketplace/api_key_cache.py); `update()` and `bulk_update()` send no signal, so every
    process would go on accepting a key revoked that way for up to API_KEY_CACHE_SECONDS."""

    BULK_WRITABLE = frozenset({"last_used_at"})

    def update(self, **kwargs):
        self._refuse_unheard(kwargs)
        return super().update(**kwargs)

    def bulk_update(self, objs, fields, batch_size=None):
        self._refuse_unheard(fields)
        return super().bulk_update(objs, fields, batch_size=batch_size)

    def _refuse_unheard(self, fields) -> None:
        unheard = sorted(set(fields) - self.BULK_WRITABLE)
        if unheard:
            raise TypeError(
                f"API keys' {', '.join(unheard)} change through save() (services.api_key_revoke"
                " for a revocation), so the key cache hears of it; not with a bulk write."
            )


class ApiKey(models.Model):
    """A secret for programs. Only its SHA-256 is stored; the prefix is shown to people."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    hashed_key = models.CharField(max_length=64)
    role = models.CharField(
        max_length=20, choices=Membership.Role.choices, default=Membership.Role.MEMBER
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class IdempotencyKey(models.Model):
    """The first response to a POST carrying `Idempotency-Key`, replayed on retries."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    scope = models.CharField(max_length=100)  # which endpoint, e.g. "orders.create"
    key = models.CharField(max_length=255)
    request_fingerprint = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField(null=True)
    response_body = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "scope", "key"], name="idempotency_key_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.key}"


class WebhookDeliveryBase(models.Model):
    """One outgoing event to one receiver, with every attempt logged in `attempts`.

    Sent and logged by marketplace.outbound_webhooks; concrete models add their owner and
    `signing_secret()`: fleets.WebhookDelivery (to a fleet), OrganizationWebhookDelivery.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (gave up)"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    event_type = models.CharField(max_length=60)
    payload = models.JSONField()
    url = models.URLField(max_length=500)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempt_count = models.PositiveIntegerField(default=0)
    attempts = models.JSONField(default=list)  # [{"at", "status_code", "error", "ms"}]
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"

    receiver_field = ""  # the concrete model's foreign key to whoever receives the events

    @property
    def receiver(self):
        return getattr(self, self.receiver_field)

    def signing_secret(self) -> str:
        return self.receiver.webhook_secret


class OrganizationWebhookDelivery(WebhookDeliveryBase):
    """An event to an organization's own webhook (customers: delivery.ready)."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="webhook_deliveries"
    )

    class Meta(WebhookDeliveryBase.Meta):
        verbose_name = "organization webhook delivery"
        verbose_name_plural = "organization webhook deliveries"

    receiver_field = "organization"

    def __str__(self) -> str:
        return f"{self.event_type} -> {self.organization_id} ({self.status})"
