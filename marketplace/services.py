"""Writes for accounts: organizations, memberships, API keys, the organization's webhook."""

import contextlib
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from marketplace import outbound_webhooks
from marketplace.error_codes import ErrorCode
from marketplace.errors import Conflict, ServiceError
from marketplace.models import ApiKey, Membership, Organization, OrganizationWebhookDelivery, User
from marketplace.queueing import enqueue_on_commit

API_KEY_PREFIX_LENGTH = 10


def hash_api_key(raw_key: str) -> str:
    # Keys carry 256 bits of randomness, so a fast hash is enough (no password stretching).
    return hashlib.sha256(raw_key.encode()).hexdigest()


# What api_key_create issues: a hex prefix and a URL-safe secret with "-" for "_". Checking the
# alphabet keeps anything else (a NUL byte, which PostgreSQL refuses) out of the key lookup.
API_KEY_FORMAT = re.compile(rf"mk_([0-9a-f]{{{API_KEY_PREFIX_LENGTH}}})_([A-Za-z0-9-]+)")


def split_api_key(raw_key: str) -> tuple[str, str] | None:
    """'mk_<prefix>_<secret>' -> (prefix, secret), or None when it is not our format."""
    match = API_KEY_FORMAT.fullmatch(raw_key)
    if match is None:
        return None
    return match.group(1), match.group(2)


@dataclass(frozen=True)
class IssuedApiKey:
    api_key: ApiKey
    raw_key: str  # shown once, never stored


def organization_create(*, name: str, kind: str, owner: User | None = None) -> Organization:
    if kind not in Organization.Kind.values:
        raise ServiceError(
            f"Unknown organization kind {kind!r}.", fields={"kind": ["Unknown kind."]}
        )
    with transaction.atomic():
        organization = Organization.objects.create(name=name, kind=kind)
        if owner is not None:
            Membership.objects.create(
                user=owner, organization=organization, role=Membership.Role.OWNER
            )
    return organization


def api_key_create(
    *,
    organization: Organization,
    name: str,
    created_by: User | None = None,
    role: str = Membership.Role.MEMBER,
) -> IssuedApiKey:
    if role not in Membership.Role.values:
        raise ServiceError(f"Unknown role {role!r}.", fields={"role": ["Unknown role."]})
    prefix = secrets.token_hex(API_KEY_PREFIX_LENGTH // 2)
    raw_key = f"mk_{prefix}_{secrets.token_urlsafe(32).replace('_', '-')}"
    api_key = ApiKey.objects.create(
        organization=organization,
        name=name,
        prefix=prefix,
        hashed_key=hash_api_key(raw_key),
        role=role,
        created_by=created_by,
    )
    return IssuedApiKey(api_key=api_key, raw_key=raw_key)


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    with transaction.atomic():
        api_key = ApiKey.objects.select_for_update().get(pk=api_key.pk)
        if api_key.revoked_at is not None:
            raise Conflict("This API key is already revoked.", code=ErrorCode.ALREADY_REVOKED)
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key


def api_keys_revoke_created_by(*, user, organization_id=None) -> int:
    """A person left the organization (or was deactivated): the keys they created stop
    working at once (an API key acts for its organization, but only while whoever issued it
    may still act for it). Returns how many were revoked."""
    keys = ApiKey.objects.filter(created_by=user, revoked_at__isnull=True)
    if organization_id is not None:
        keys = keys.filter(organization_id=organization_id)
    revoked = 0
    for api_key in keys:
        with contextlib.suppress(Conflict):  # revoked meanwhile
            api_key_revoke(api_key=api_key)
            revoked += 1
    return revoked


def api_key_touch(*, api_key: ApiKey, min_interval_seconds: int = 60) -> None:
    """Record use, at most once a minute per key so reads do not all turn into writes."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=min_interval_seconds)
    if api_key.last_used_at is not None and api_key.last_used_at >= cutoff:
        return  # fresh as just read: no UPDATE round trip on every request
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=cutoff)
    # unrevoked only: a key revoked since this request read it stays as revoked
    ApiKey.objects.filter(stale, pk=api_key.pk, revoked_at__isnull=True).update(last_used_at=now)
    # recorded, or already recorded within the minute by another process (a copy held in this
    # process would otherwise try again on every request until it is read anew)
    api_key.last_used_at = now


def customer_signup(
    *, username: str, email: str, password: str, organization_name: str
) -> Organization:
    """A new person and their customer organization, with the person as its owner."""
    return _signup(
        username=username,
        email=email,
        password=password,
        organization_name=organization_name,
        kind=Organization.Kind.CUSTOMER,
    )


def operator_signup(
    *, username: str, email: str, password: str, organization_name: str
) -> Organization:
    """A new person and their fleet-operator organization, with the person as its owner."""
    return _signup(
        username=username,
        email=email,
        password=password,
        organization_name=organization_name,
        kind=Organization.Kind.FLEET_OPERATOR,
    )


def _signup(
    *, username: str, email: str, password: str, organization_name: str, kind: str
) -> Organization:
    """A new person and their organization of `kind`, with the person as its owner.

    Password strength is the form's job (Django's validators); uniqueness is checked here so
    every caller gets the same field errors.
    """
    username = username.strip()
    email = User.objects.normalize_email(email.strip())
    fields: dict[str, list[str]] = {}
    if User.objects.filter(username__iexact=username).exists():
        fields["username"] = ["This username is taken."]
    if User.objects.filter(email__iexact=email).exists():
        fields["email"] = ["An account with this email already exists."]
    if not organization_name.strip():
        fields["organization_name"] = ["Name your organization."]
    if fields:
        raise ServiceError(
            "Could not create the account.", code=ErrorCode.SIGNUP_REFUSED, fields=fields
        )
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=username, email=email, password=password)
            return organization_create(name=organization_name.strip(), kind=kind, owner=user)
    except IntegrityError as exc:  # the same name registered at the same moment
        raise ServiceError(
            "Could not create the account.",
            code=ErrorCode.SIGNUP_REFUSED,
            fields={"username": ["This username or email was just taken."]},
        ) from exc


def organization_set_webhook(*, organization: Organization, url: str) -> str:
    """Set (or, with an empty url, remove) where the organization's events are POSTed.
    Returns the new signing secret, shown once; an empty string when removed."""
    url = outbound_webhooks.validate_url(
        url, field_name="url", allow_insecure=settings.CUSTOMER_WEBHOOK_ALLOW_INSECURE
    )
    with transaction.atomic():
        organization = Organization.objects.select_for_update().get(pk=organization.pk)
        organization.webhook_url = url
        organization.webhook_secret = secrets.token_hex(32) if url else ""
        organization.save(update_fields=["webhook_url", "webhook_secret"])
    return organization.webhook_secret


def organization_webhook_policy() -> outbound_webhooks.RetryPolicy:
    return outbound_webhooks.RetryPolicy(
        max_attempts=settings.CUSTOMER_WEBHOOK_MAX_ATTEMPTS,
        backoff_seconds=settings.FLEETS_WEBHOOK_BACKOFF_SECONDS,
        backoff_max_seconds=settings.FLEETS_WEBHOOK_BACKOFF_MAX_SECONDS,
        timeout_seconds=settings.FLEETS_WEBHOOK_TIMEOUT_SECONDS,
        allow_loopback=settings.CUSTOMER_WEBHOOK_ALLOW_INSECURE,
    )


def organization_webhook_enqueue(
    *, organization: Organization, event_type: str, data: dict
) -> OrganizationWebhookDelivery | None:
    """Record an event for the organization's webhook and send it after commit."""
    if not organization.webhook_url:
        return None
    delivery = outbound_webhooks.delivery_record(
        model=OrganizationWebhookDelivery,
        url=organization.webhook_url,
        event_type=event_type,
        data=data,
        organization=organization,
    )
    enqueue_on_commit("marketplace.tasks.organization_webhook_deliver", delivery.pk)
    return delivery


def organization_webhook_attempt(*, delivery_id) -> outbound_webhooks.AttemptOutcome:
    return outbound_webhooks.delivery_attempt(
        model=OrganizationWebhookDelivery,
        delivery_id=delivery_id,
        policy=organization_webhook_policy(),
    )
