"""Verify the platform's webhook signatures (fleets/README.md, "Webhooks").

The agent polls offers, so it works without a public URL; a fleet that does expose one
(`fleet.webhook_url`) gets `offer.created`, `offer.expired`, `job.assigned` and
`job.cancelled` POSTs and must check `X-Marketplace-Signature` on the raw body:

    t=<unix seconds>,v1=<hex HMAC-SHA256(webhook_secret, f"{t}." + body)>

Dedupe on `X-Marketplace-Delivery` (the same on every retry) and answer 2xx quickly.
`WebhookReceiver` does all that; the agent uses it to wake up at once on an offer.
"""

import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("fleet_agent.webhooks")

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


class WebhookReceiver:
    """A tiny HTTP server for the platform's webhooks (one thread, stdlib only).

    Every POST must carry a valid signature made with the current secret (`secret()` is
    asked on each request, so a rotation takes effect at once), else it is answered 401.
    A delivery id seen before is answered 200 and not handed on again (retries). Valid
    events go to `on_event(payload)`; its exceptions are logged, never returned to the
    platform (which would only retry).
    """

    def __init__(
        self,
        *,
        secret: Callable[[], str | None],
        on_event: Callable[[dict], None],
        host: str = "127.0.0.1",
        port: int = 0,
        path: str = "/webhooks/marketplace",
    ):
        self.secret = secret
        self.on_event = on_event
        self.path = path
        self.seen: set[str] = set()
        self.rejected = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{self.path}"

    def start(self) -> str:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fleet-agent-webhooks", daemon=True
        )
        self._thread.start()
        log.info("webhook receiver listening on %s", self.url)
        return self.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, headers, body: bytes) -> int:
        """The status to answer for one POST (separate from HTTP for clarity and tests)."""
        secret = self.secret()
        if not secret or not verify(secret, headers.get(SIGNATURE_HEADER) or "", body):
            with self._lock:
                self.rejected += 1
            log.warning("webhook refused: bad or missing signature")
            return 401
        delivery = headers.get(DELIVERY_HEADER) or ""
        with self._lock:
            if delivery in self.seen:
                return 200
            self.seen.add(delivery)
        try:
            payload = json.loads(body)
            self.on_event(payload)
        except Exception:  # the platform cannot fix our handler: log, answer 200
            log.exception("webhook %s could not be handled", delivery)
        return 200

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                if self.path.split("?")[0] != receiver.path:
                    self.send_response(404)
                    self.end_headers()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, 1_000_000))
                status = receiver.handle(self.headers, body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format, *args):
                log.debug("webhook receiver: " + format, *args)

        return Handler
