"""Outgoing webhooks, to fleets and to customers: the one module that POSTs events out.

It validates receiver URLs, signs events, sends one attempt, and logs each attempt on a
delivery row (a model built on `marketplace.models.WebhookDeliveryBase`: fleets'
`WebhookDelivery`, the organizations' `OrganizationWebhookDelivery`). The apps own their
events and their thin Celery tasks; the rules live here.

Every event is a JSON POST with these headers (documented in fleets/README.md):

    Content-Type: application/json
    X-Marketplace-Event: offer.created
    X-Marketplace-Delivery: <uuid, the same on every retry of one event: dedupe on it>
    X-Marketplace-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, f"{t}.{raw body}")>

A receiver verifies with `verify_signature` below (a few lines, copy them): recompute the
HMAC over the timestamp, a dot and the raw body bytes, compare in constant time, and refuse a
timestamp older than the tolerance (replays).
"""

import hashlib
import hmac
import ipaddress
import json
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from marketplace.error_codes import ErrorCode
from marketplace.errors import invalid

SIGNATURE_HEADER = "X-Marketplace-Signature"
EVENT_HEADER = "X-Marketplace-Event"
DELIVERY_HEADER = "X-Marketplace-Delivery"
DEFAULT_TOLERANCE_SECONDS = 300
USER_AGENT = "motion-marketplace-webhooks/1"


# --- Receiver URLs ---------------------------------------------------------------------------


def validate_url(url: str, *, field_name: str, allow_insecure: bool) -> str:
    """An absolute https URL of a public host, without credentials ('' stays '').

    `allow_insecure` (local development and the test suite's own receivers only) also accepts
    plain http and loopback or private hosts.
    """
    url = (url or "").strip()
    if not url:
        return ""

    def refuse(message: str):
        return invalid(field_name, message, ErrorCode.INVALID_WEBHOOK_URL)

    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise refuse("Enter an absolute https:// URL.")
    if parts.scheme != "https" and not allow_insecure:
        raise refuse("Webhook URLs must use https.")
    if parts.username or parts.password:
        raise refuse("No credentials in the URL.")
    host = parts.hostname
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    internal = host == "localhost" or (
        address is not None and (address.is_private or address.is_loopback or address.is_reserved)
    )
    if internal and not allow_insecure:
        raise refuse("Webhook URLs must be public addresses.")
    return url


# --- Signing ---------------------------------------------------------------------------------


def encode_body(payload: dict) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True, default=str).encode()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    message = f"{timestamp}.".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, timestamp: int | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    return f"t={timestamp},v1={sign(secret, timestamp, body)}"


def verify_signature(
    secret: str,
    header: str,
    body: bytes,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """The receiver's side: True only for our signature over this exact body, recently."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
        received = parts["v1"]
    except (ValueError, KeyError):
        return False
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), received)


# --- Sending ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostResult:
    ok: bool
    status_code: int | None
    error: str
    elapsed_ms: int


def post(
    *, url: str, secret: str, event_type: str, delivery_id: str, payload: dict, timeout: float
) -> PostResult:
    """POST one signed event. Never raises for HTTP or network failures: returns the result."""
    body = encode_body(payload)
    request = urllib.request.Request(  # noqa: S310 (the URL was validated when it was saved)
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            EVENT_HEADER: event_type,
            DELIVERY_HEADER: delivery_id,
            SIGNATURE_HEADER: signature_header(secret, body),
        },
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status_code = response.status
        error = ""
    except urllib.error.HTTPError as exc:
        status_code, error = exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        status_code, error = None, f"{type(exc).__name__}: {exc}"[:500]
    elapsed_ms = int((time.monotonic() - started) * 1000)
    ok = status_code is not None and 200 <= status_code < 300
    return PostResult(ok=ok, status_code=status_code, error=error, elapsed_ms=elapsed_ms)


def backoff_seconds(attempt: int, *, base: float, cap: float) -> float:
    """Delay before retry number `attempt` (1-based): base, 2 base, 4 base, ... up to cap."""
    return min(cap, base * (2 ** max(0, attempt - 1)))


# --- The delivery log ------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    backoff_seconds: float
    backoff_max_seconds: float
    timeout_seconds: float


@dataclass(frozen=True)
class AttemptOutcome:
    status: str  # the delivery's status after this attempt
    attempt: int
    retry_in: float | None  # seconds until the next attempt, None when done


def delivery_record(*, model, url: str, event_type: str, data: dict, **owner):
    """Store one event for one receiver; the caller sends it after commit (its task)."""
    delivery_id = uuid.uuid4()
    return model.objects.create(
        id=delivery_id,
        event_type=event_type,
        url=url,
        payload={
            "id": str(delivery_id),
            "type": event_type,
            "created": int(timezone.now().timestamp()),
            **{f"{name}_id": str(value.pk) for name, value in owner.items()},
            "data": data,
        },
        **owner,
    )


def delivery_attempt(*, model, delivery_id, policy: RetryPolicy) -> AttemptOutcome:
    """One HTTP attempt (outside any transaction), then log it on the delivery row."""
    delivery = model.objects.filter(pk=delivery_id).first()
    if delivery is None:
        return AttemptOutcome("missing", 0, None)
    if delivery.status != model.Status.PENDING:
        return AttemptOutcome(delivery.status, delivery.attempt_count, None)
    result = post(
        url=delivery.url,
        secret=delivery.signing_secret(),
        event_type=delivery.event_type,
        delivery_id=str(delivery.pk),
        payload=delivery.payload,
        timeout=policy.timeout_seconds,
    )
    now = timezone.now()
    with transaction.atomic():
        delivery = model.objects.select_for_update().get(pk=delivery_id)
        if delivery.status != model.Status.PENDING:
            return AttemptOutcome(delivery.status, delivery.attempt_count, None)
        delivery.attempt_count += 1
        delivery.attempts = [
            *delivery.attempts,
            {
                "at": now.isoformat(),
                "status_code": result.status_code,
                "error": result.error,
                "ms": result.elapsed_ms,
            },
        ]
        delivery.last_status_code = result.status_code
        retry_in = None
        if result.ok:
            delivery.status = model.Status.DELIVERED
            delivery.delivered_at = now
            delivery.next_attempt_at = None
        elif delivery.attempt_count >= policy.max_attempts:
            delivery.status = model.Status.FAILED
            delivery.next_attempt_at = None
        else:
            retry_in = backoff_seconds(
                delivery.attempt_count,
                base=policy.backoff_seconds,
                cap=policy.backoff_max_seconds,
            )
            delivery.next_attempt_at = now + timedelta(seconds=retry_in)
        delivery.save()
    return AttemptOutcome(delivery.status, delivery.attempt_count, retry_in)


def deliveries_stuck(*, model, policy: RetryPolicy, now=None, limit: int = 1000) -> list:
    """Pending deliveries whose message was lost (a crash between commit and publish).

    A receiver may then see an event twice; it dedupes on X-Marketplace-Delivery.
    """
    now = now or timezone.now()
    stuck_before = now - timedelta(seconds=max(600, 2 * policy.timeout_seconds))
    return list(
        model.objects.filter(status=model.Status.PENDING)
        .filter(
            Q(next_attempt_at__lte=stuck_before)
            | Q(next_attempt_at__isnull=True, created_at__lte=stuck_before)
        )
        .values_list("pk", flat=True)[:limit]
    )
