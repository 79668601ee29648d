"""Outgoing webhooks to fleets: the one module that talks HTTP to them.

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
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

SIGNATURE_HEADER = "X-Marketplace-Signature"
EVENT_HEADER = "X-Marketplace-Event"
DELIVERY_HEADER = "X-Marketplace-Delivery"
DEFAULT_TOLERANCE_SECONDS = 300


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


@dataclass(frozen=True)
class PostResult:
    ok: bool
    status_code: int | None
    error: str
    elapsed_ms: int


def post(
    *, url: str, secret: str, event_type: str, delivery_id: str, payload: dict, timeout: float
):
    """POST one signed event. Never raises for HTTP or network failures: returns the result."""
    body = encode_body(payload)
    request = urllib.request.Request(  # noqa: S310 (scheme validated when the URL was saved)
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "motion-marketplace-webhooks/1",
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
