"""A small client of the marketplace's public fleet API, on the standard library only.

Every call goes through `ApiClient.request`, which retries what is worth retrying with
exponential backoff (connection errors, timeouts, 5xx, 429 honouring Retry-After) and turns
every 4xx into an `ApiError` carrying the platform's error shape
`{"code": ..., "message": ..., "fields": {...}}`.

Retrying a POST is only safe when the server can tell it is a repeat: episode registration
takes an `Idempotency-Key`, and the agent passes one. Other POSTs the agent makes (accept an
offer, complete an episode, heartbeats) are harmless to repeat: a second accept answers
409, a second complete is a no-op.
"""

from __future__ import annotations

import json
import logging
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

log = logging.getLogger("fleet_agent.client")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
USER_AGENT = "fleet-agent/0.1 (+reference client)"


class ApiError(Exception):
    """The platform refused a request (a 4xx): `code`, `message` and `fields` as it sent them."""

    def __init__(self, status: int, code: str, message: str, fields: dict | None = None):
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields or {}

    def __str__(self) -> str:
        text = f"HTTP {self.status} {self.code}: {self.message}"
        if self.fields:
            text += " " + json.dumps(self.fields, sort_keys=True)
        return text


class TransientError(Exception):
    """Retries exhausted on connection errors, timeouts, 5xx or 429."""


@dataclass
class RetryPolicy:
    """Exponential backoff: base * 2**attempt seconds, capped, with up to 25 % jitter."""

    attempts: int = 6  # total tries, the first included
    base_seconds: float = 0.5
    max_seconds: float = 30.0
    jitter: float = 0.25

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        wait = min(self.max_seconds, self.base_seconds * (2**attempt))
        wait *= 1 + random.uniform(0, self.jitter)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_seconds))
        return wait


@dataclass
class Response:
    status: int
    headers: dict  # names in lower case
    body: bytes

    def json(self):
        return json.loads(self.body) if self.body else None


@dataclass
class ApiClient:
    """`base_url` is the site root (e.g. http://127.0.0.1:8000); paths are under /api/v1/."""

    base_url: str
    api_key: str
    timeout: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self):
        self.base_url = self.base_url.rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be http(s): {self.base_url!r}")

    # --- transport ---------------------------------------------------------------------

    def url(self, path: str) -> str:
        if "://" in path:
            if not path.startswith(("http://", "https://")):
                raise ValueError(f"Only http(s) URLs: {path!r}")
            return path
        return f"{self.base_url}/api/v1/{path.lstrip('/')}"

    def send(
        self,
        method: str,
        url: str,
        *,
        data: bytes | None = None,
        headers: dict | None = None,
        authenticate: bool = True,
    ) -> Response:
        """One HTTP exchange with retries; returns 2xx/3xx, raises ApiError on 4xx."""
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Only http(s) URLs: {url!r}")
        headers = dict(headers or {})
        headers.setdefault("User-Agent", USER_AGENT)
        if authenticate:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last_problem = ""
        for attempt in range(self.retry.attempts):
            retry_after = None
            request = urllib.request.Request(  # noqa: S310 (http(s) only, checked above)
                url, data=data, method=method, headers=headers
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as raw:  # noqa: S310
                    return Response(raw.status, _lower(raw.headers), raw.read())
            except urllib.error.HTTPError as exc:
                body = exc.read()
                if exc.code not in RETRY_STATUSES:
                    raise _api_error(exc.code, body) from None
                last_problem = f"HTTP {exc.code}"
                retry_after = _retry_after(exc.headers.get("Retry-After"))
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                last_problem = f"{exc.__class__.__name__}: {getattr(exc, 'reason', exc)}"
            if attempt + 1 < self.retry.attempts:
                wait = self.retry.delay(attempt, retry_after)
                log.warning(
                    "%s %s failed (%s); retry %d/%d in %.1fs",
                    method,
                    _redact(url),
                    last_problem,
                    attempt + 1,
                    self.retry.attempts - 1,
                    wait,
                )
                self.sleep(wait)
        raise TransientError(
            f"{method} {_redact(url)} failed after {self.retry.attempts} tries: {last_problem}"
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body=None,
        params: dict | None = None,
        headers: dict | None = None,
    ):
        """A JSON API call; returns the decoded body (None for an empty one)."""
        url = self.url(path)
        if params:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(params)
        headers = {"Accept": "application/json", **(headers or {})}
        data = None
        if json_body is not None:
            data = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        return self.send(method, url, data=data, headers=headers).json()

    def get(self, path: str, **params):
        return self.request("GET", path, params=params or None)

    def post(self, path: str, body=None, *, headers: dict | None = None):
        body = {} if body is None else body
        return self.request("POST", path, json_body=body, headers=headers)

    def patch(self, path: str, body: dict):
        return self.request("PATCH", path, json_body=body)

    def list_all(self, path: str, **params) -> Iterator[dict]:
        """Every item of a list endpoint, following cursor pagination (`next`) if any."""
        page = self.get(path, **params)
        while True:
            if isinstance(page, list):  # unpaginated endpoints answer a bare list
                yield from page
                return
            yield from page.get("results", [])
            if not page.get("next"):
                return
            page = self.request("GET", page["next"])

    def put_bytes(self, url: str, data: bytes, headers: dict) -> Response:
        """PUT bytes to a presigned storage URL with exactly the headers given; no API key."""
        return self.send("PUT", url, data=data, headers=headers, authenticate=False)

    # --- the fleet API -----------------------------------------------------------------

    def embodiments(self) -> dict[str, dict]:
        return {e["slug"]: e for e in self.list_all("catalog/embodiments")}

    def fleets(self) -> list[dict]:
        return list(self.list_all("fleet/fleets"))

    def create_fleet(self, body: dict) -> dict:
        return self.post("fleet/fleets", body)

    def update_fleet(self, fleet_id: str, body: dict) -> dict:
        return self.patch(f"fleet/fleets/{fleet_id}", body)

    def rotate_secret(self, fleet_id: str) -> dict:
        return self.post(f"fleet/fleets/{fleet_id}/rotate-secret")

    def heartbeat(self, fleet_id: str) -> dict:
        return self.post(f"fleet/fleets/{fleet_id}/heartbeat")

    def sites(self) -> list[dict]:
        return list(self.list_all("fleet/sites"))

    def create_site(self, body: dict) -> dict:
        return self.post("fleet/sites", body)

    def update_site(self, site_id: str, body: dict) -> dict:
        return self.patch(f"fleet/sites/{site_id}", body)

    def robots(self) -> list[dict]:
        return list(self.list_all("fleet/robots"))

    def create_robot(self, body: dict) -> dict:
        return self.post("fleet/robots", body)

    def update_robot(self, robot_id: str, body: dict) -> dict:
        return self.patch(f"fleet/robots/{robot_id}", body)

    def offers(self, status: str = "pending") -> list[dict]:
        return list(self.list_all("fleet/offers", status=status))

    def accept_offer(self, offer_id: str) -> dict:
        return self.post(f"fleet/offers/{offer_id}/accept")

    def decline_offer(self, offer_id: str, reason: str = "") -> dict:
        return self.post(f"fleet/offers/{offer_id}/decline", {"reason": reason})

    def jobs(self) -> list[dict]:
        return list(self.list_all("fleet/jobs"))

    def report_progress(self, job_id: str, progress_hours: str | None = None) -> dict:
        return self.post(f"fleet/jobs/{job_id}/progress", {"progress_hours": progress_hours})

    def episodes(self, job_id: str) -> list[dict]:
        return list(self.list_all(f"fleet/jobs/{job_id}/episodes", page_size=200))

    def register_episode(self, job_id: str, body: dict, idempotency_key: str) -> dict:
        return self.post(
            f"fleet/jobs/{job_id}/episodes", body, headers={"Idempotency-Key": idempotency_key}
        )

    def renew_upload(self, episode_id: str) -> dict:
        return self.post(f"fleet/episodes/{episode_id}/upload")

    def complete_episode(self, episode_id: str, parts: list[dict] | None = None) -> dict:
        return self.post(f"fleet/episodes/{episode_id}/complete", {"parts": parts} if parts else {})


def _api_error(status: int, body: bytes) -> ApiError:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        payload = None
    if isinstance(payload, dict) and "code" in payload:
        return ApiError(
            status,
            str(payload.get("code")),
            str(payload.get("message", "")),
            payload.get("fields") or {},
        )
    text = body[:300].decode("utf-8", "replace").strip() or "(empty body)"
    return ApiError(status, "http_error", text)


def _lower(headers) -> dict:
    return {name.lower(): value for name, value in headers.items()}


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _redact(url: str) -> str:
    """Presigned URLs carry signatures in their query: log only scheme, host and path."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
