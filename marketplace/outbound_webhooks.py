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

import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import json
import re
import socket
import ssl
import threading
import time
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
MAX_RESPONSE_BYTES = 64 * 1024  # of a receiver's answer: only its status matters


# --- Receiver URLs ---------------------------------------------------------------------------

# Never a webhook's destination, whatever a name resolves to: loopback, private, link-local,
# shared (CGNAT), multicast, reserved, documentation and benchmarking ranges, and the IPv6
# forms that embed or translate IPv4 (mapped, NAT64, 6to4, Teredo) or stay local (ULA).
INTERNAL_NETWORKS = tuple(
    ipaddress.ip_network(network)
    for network in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "::ffff:0:0/96",
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "100::/64",
        "2001::/23",
        "2001:db8::/32",
        "2002::/16",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
)
LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class DestinationRefused(ValueError):
    """A receiver URL whose host is (or resolves to) an address webhooks never go to."""


def _embedded(address) -> list:
    """The address and any IPv4 address an IPv6 form carries (mapped, 6to4, Teredo)."""
    found = [address]
    if address.version == 6:
        for inner in (address.ipv4_mapped, address.sixtofour):
            if inner is not None:
                found.append(inner)
        if address.teredo is not None:
            found.extend(address.teredo)
    return found


def address_allowed(address, *, allow_loopback: bool) -> bool:
    """A public unicast address (or, with allow_loopback, a loopback one)."""
    for candidate in _embedded(address):
        if allow_loopback and any(candidate in net for net in LOOPBACK_NETWORKS):
            continue
        if any(candidate in net for net in INTERNAL_NETWORKS) or not candidate.is_global:
            return False
    return True


def resolve(host: str, port: int) -> list:
    """Every address the host stands for: an IP literal, a legacy numeric spelling
    (2130706433, 0x7f.1, 0177.0.0.1, 127.1: what the C resolver accepts), or a DNS name."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos}, key=str)


def _split(url: str) -> tuple[str, str, int, str]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return parts.scheme, parts.hostname or "", port, path


def destination(url: str, *, allow_loopback: bool) -> list:
    """The addresses a request to `url` may connect to; DestinationRefused when the host is,
    or any of its addresses is, internal (a name that also resolves inside is refused whole)."""
    _, host, port, _ = _split(url)
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise DestinationRefused(f"{host} does not resolve ({exc})") from exc
    refused = [a for a in addresses if not address_allowed(a, allow_loopback=allow_loopback)]
    if refused or not addresses:
        raise DestinationRefused(
            f"{host} resolves to {', '.join(map(str, refused or addresses))}: not a public address"
        )
    return addresses


# A host that "ends in a number" is an IPv4 address to a browser or a C resolver (WHATWG URL:
# 2130706433, 0x7f.1, 0177.0.0.1 and 127.1 all mean 127.0.0.1): it must then be written as
# four decimal numbers, nothing else.
NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")
DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def _host(netloc: str, hostname: str, *, allow_insecure: bool):
    """The URL's host as an IP address (a literal) or a DNS name; DestinationRefused for
    any other spelling, and for loopback names unless `allow_insecure`."""
    if "%" in hostname:  # a percent-encoded name, or an IPv6 zone (%eth0)
        raise DestinationRefused(f"{hostname!r} is not a host name")
    if netloc.rpartition("@")[2].startswith("["):
        try:
            return ipaddress.IPv6Address(hostname)
        except ValueError:
            raise DestinationRefused(f"{hostname!r} is not an IPv6 address") from None
    try:
        name = hostname.encode("idna").decode("ascii")  # (NFKC: a fullwidth digit is a digit)
    except UnicodeError:
        raise DestinationRefused(f"{hostname!r} is not a host name") from None
    if name.endswith("."):
        raise DestinationRefused(f"write {hostname!r} without the trailing dot")
    labels = name.split(".")
    if NUMERIC_LABEL.fullmatch(labels[-1]):
        try:
            address = ipaddress.IPv4Address(name)
        except ValueError:
            address = None
        if address is None or str(address) != hostname:  # as written, not as IDNA maps it
            raise DestinationRefused(
                f"{hostname!r} is an IPv4 address written another way: write it as a.b.c.d"
            )
        return address
    if len(name) > 253 or not all(DNS_LABEL.fullmatch(label) for label in labels):
        raise DestinationRefused(f"{hostname!r} is not a host name")
    if labels[-1] == "localhost" and not allow_insecure:  # RFC 6761: always loopback
        raise DestinationRefused(f"{hostname} is a loopback name")
    return name


def checked_destination(url: str, *, allow_insecure: bool, must_resolve: bool) -> list:
    """The one webhook-URL check, for fleets and customers, at registration and at every
    send: an absolute https URL without credentials whose host is a plain IP address or DNS
    name that is not, and does not resolve to, an internal address. Returns the addresses a
    request may connect to (none: a name that does not resolve, accepted only without
    `must_resolve`, i.e. at registration); DestinationRefused with the reason otherwise.

    `allow_insecure` (local development and the test suite's own receivers only) also
    accepts plain http and loopback hosts; private and other internal ranges never.
    """
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise DestinationRefused("Not a valid URL (it holds spaces or control characters).")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError as exc:
        raise DestinationRefused(f"Not a valid URL ({exc}).") from exc
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise DestinationRefused("Enter an absolute https:// URL.")
    if parts.scheme != "https" and not allow_insecure:
        raise DestinationRefused("Webhook URLs must use https.")
    if parts.username is not None or parts.password is not None:
        raise DestinationRefused("No credentials in the URL.")
    try:
        host = _host(parts.netloc, parts.hostname, allow_insecure=allow_insecure)
        if not isinstance(host, str):  # an IP literal: no resolver involved
            if not address_allowed(host, allow_loopback=allow_insecure):
                raise DestinationRefused(f"{host} is not a public address")
            return [host]
        try:
            return destination(url, allow_loopback=allow_insecure)
        except DestinationRefused as exc:
            if must_resolve or "does not resolve" not in str(exc):
                raise
            return []
    except DestinationRefused as exc:
        raise DestinationRefused(f"Webhook URLs must be public addresses: {exc}.") from exc


def validate_url(url: str, *, field_name: str, allow_insecure: bool) -> str:
    """`checked_destination` at registration ('' stays ''): a name that does not resolve yet
    is accepted, since the same check runs again at every send, on the addresses the request
    then connects to."""
    url = (url or "").strip()
    if not url:
        return ""
    try:
        checked_destination(url, allow_insecure=allow_insecure, must_resolve=False)
    except DestinationRefused as exc:
        raise invalid(field_name, str(exc), ErrorCode.INVALID_WEBHOOK_URL) from exc
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
    permanent: bool = False  # the destination is refused: retrying cannot help


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the address checked beforehand, not to whatever the name resolves to now."""

    def __init__(self, host: str, port: int, *, address, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._address = str(address)

    def connect(self):
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """TLS to the checked address, verified against the URL's host name."""

    def __init__(self, host: str, port: int, *, address, timeout: float):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = str(address)

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post(
    *,
    url: str,
    secret: str,
    event_type: str,
    delivery_id: str,
    payload: dict,
    timeout: float,
    allow_loopback: bool = False,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
) -> PostResult:
    """POST one signed event to a destination checked now (the host is resolved at send
    time and the connection pinned to the address checked, so a name re-pointed inside since
    it was saved, DNS rebinding included, is refused). No redirects are followed; `timeout`
    bounds the whole request, connect to last byte, and at most `max_response_bytes` of the
    answer are read. Never raises for HTTP or network failures: returns the result."""
    started = time.monotonic()
    body = encode_body(payload)

    def done(**fields) -> PostResult:
        elapsed_ms = int((time.monotonic() - started) * 1000)
        return PostResult(elapsed_ms=elapsed_ms, **fields)

    try:
        address = checked_destination(url, allow_insecure=allow_loopback, must_resolve=True)[0]
    except DestinationRefused as exc:
        return done(ok=False, status_code=None, error=f"refused: {exc}"[:500], permanent=True)
    scheme, host, port, path = _split(url)
    kind = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
    connection = kind(host, port, address=address, timeout=timeout)
    # The socket timeout bounds each read; this timer bounds the whole exchange, so a
    # receiver trickling a byte at a time cannot hold a worker past the deadline.
    cut = threading.Event()
    deadline = threading.Timer(timeout, _cut, args=(connection, cut))
    deadline.daemon = True
    deadline.start()
    try:
        connection.request(
            "POST",
            path,
            body=body,
            headers={
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
                EVENT_HEADER: event_type,
                DELIVERY_HEADER: delivery_id,
                SIGNATURE_HEADER: signature_header(secret, body),
            },
        )
        response = connection.getresponse()
        response.read(max_response_bytes)
        status_code = response.status
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if cut.is_set():
            return done(ok=False, status_code=None, error=f"timed out after {timeout:g} s")
        return done(ok=False, status_code=None, error=f"{type(exc).__name__}: {exc}"[:500])
    finally:
        deadline.cancel()
        connection.close()
    if cut.is_set():  # what was read when the deadline cut the connection proves nothing
        return done(ok=False, status_code=None, error=f"timed out after {timeout:g} s")
    ok = 200 <= status_code < 300
    error = (
        ""
        if ok
        else f"HTTP {status_code}"
        + (" (redirects are not followed)" if 300 <= status_code < 400 else "")
    )
    return done(ok=ok, status_code=status_code, error=error)


def _cut(connection, cut: threading.Event) -> None:
    cut.set()
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def backoff_seconds(attempt: int, *, base: float, cap: float) -> float:
    """Delay before retry number `attempt` (1-based): base, 2 base, 4 base, ... up to cap."""
    return min(cap, base * (2 ** max(0, attempt - 1)))


# --- The delivery log ------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    backoff_seconds: float
    backoff_max_seconds: float
    timeout_seconds: float  # of one attempt, connect to last byte
    allow_loopback: bool = False  # local development and the test suite's own receivers


@dataclass(frozen=True)
class AttemptOutcome:
    status: str  # the delivery's status after this attempt
    attempt: int
    retry_in: float | None  # seconds until the next attempt, None when done


def delivery_record(*, model, url: str, event_type: str, data: dict, **owner):
    """Store one event for one receiver; the caller sends it after commit (its task)."""
    delivery = delivery_build(model=model, url=url, event_type=event_type, data=data, **owner)
    delivery.save(force_insert=True)
    return delivery


def delivery_build(*, model, url: str, event_type: str, data: dict, **owner):
    """One event for one receiver, not saved yet (several are stored with bulk_create)."""
    delivery_id = uuid.uuid4()
    return model(
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
        allow_loopback=policy.allow_loopback,
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
        elif result.permanent or delivery.attempt_count >= policy.max_attempts:
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
