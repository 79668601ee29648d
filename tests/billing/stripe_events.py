"""Stripe events as Stripe sends them: the JSON envelope and the `Stripe-Signature` header
(t=<unix ts>,v1=HMAC-SHA256(secret, "<ts>.<body>")). Standard library only, so the Checkout
stand-in can run on its own (`python -m tests.billing.fake_checkout`)."""

import hashlib
import hmac
import json
import time
import uuid


def sign(body: str, *, secret: str, timestamp: int | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def make_event(event_type: str, obj: dict, *, event_id: str | None = None) -> str:
    return json.dumps(
        {
            "id": event_id or f"evt_{uuid.uuid4().hex[:24]}",
            "object": "event",
            "type": event_type,
            "livemode": False,
            "created": int(time.time()),
            "api_version": "2024-06-20",
            "data": {"object": obj},
        }
    )
