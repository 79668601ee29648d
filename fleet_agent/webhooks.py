"""Verify the platform's webhook signatures (fleets/README.md, "Webhooks").

The agent polls offers, so it works without a public URL; a fleet that does expose one
(`fleet.webhook_url`) gets `offer.created`, `offer.expired`, `job.assigned` and
`job.cancelled` POSTs and must check `X-Marketplace-Signature` on the raw body:

    t=<unix seconds>,v1=<hex HMAC-SHA256(webhook_secret, f"{t}." + body)>

Dedupe on `X-Marketplace-Delivery` (the same on every retry) and answer 2xx quickly.
"""

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Marketplace-Signature"
DELIVERY_HEADER = "X-Marketplace-Delivery"
EVENT_HEADER = "X-Marketplace-Event"


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The header value the platform sends for this body (useful in tests)."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def verify(
    secret: str, header: str, body: bytes, tolerance: int = 300, now: float | None = None
) -> bool:
    """True if `header` signs `body` with `secret` and is at most `tolerance` seconds old."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        timestamp, received = int(fields["t"]), fields["v1"]
    except (ValueError, KeyError, AttributeError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False  # too old: a replay
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), received)
