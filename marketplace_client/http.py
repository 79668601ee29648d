"""The platform's HTTP client, shared by the reference fleet agent and the customer download
command: standard library only (it never imports the Django project).

Every JSON call goes through `ApiClient.request`, which retries what is worth retrying with
exponential backoff (connection errors, timeouts, 5xx, 429 honouring Retry-After) and turns
every 4xx into an `ApiError` carrying the platform's error shape
`{"code": ..., "message": ..., "fields": {...}}`.

Downloads use `ApiClient.redirect_target` (the audited link endpoint answers 302 to a signed
storage URL; the API key is never sent to storage) and `ApiClient.stream_to` (a ranged,
streamed GET into a file, never past the size the caller expects: `limit`), both over
keep-alive connections kept per thread. No answer is read whole past `MAX_API_BODY_BYTES`.

Retrying a POST is only safe when the server can tell it is a repeat (an `Idempotency-Key`,
or an operation that is harmless to repeat).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

log = logging.getLogger("marketplace_client")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
USER_AGENT = "marketplace-client/0.1 (+reference client)"
MAX_API_BODY_BYTES = 32 * 2**20  # a JSON answer (a page, 500 links) is far smaller


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


class BodyCutOff(Exception):
    """A response ended before its Content-Length (http.client's readinto does not say so)."""


class BodyOverrun(Exception):
    """A response that promised or sent more bytes than the caller expects: what lies past
    the expected size was never written (the caller discards the partial file)."""


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


@dataclass(frozen=True)
class Streamed:
    """What `ApiClient.stream_to` wrote: the whole file's SHA-256 (hex), size, mtime."""

    sha256: str
    size: int
    mtime_ns: int


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
    user_agent: str = USER_AGENT
    _local: threading.local = field(
        default_factory=threading.local, init=False, repr=False, compare=False
    )

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
        headers.setdefault("User-Agent", self.user_agent)
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
                    return Response(raw.status, _lower(raw.headers), _bounded(raw, url))
            except urllib.error.HTTPError as exc:
                body = exc.read(MAX_API_BODY_BYTES)
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

    # --- keep-alive transport for downloads ------------------------------------------------
    # One connection per (thread, host): a download worker reuses its connection to the API
    # and to storage from file to file instead of opening one per request.

    @staticmethod
    def _connection_key(url: str) -> tuple:
        parts = urllib.parse.urlsplit(url)
        return (parts.scheme, parts.hostname, parts.port)

    def _connection(self, url: str):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"Only http(s) URLs: {_redact(url)!r}")
        key = self._connection_key(url)
        pool = self._local.__dict__.setdefault("connections", {})
        reused = key in pool
        if not reused:
            cls = (
                http.client.HTTPSConnection
                if parts.scheme == "https"
                else http.client.HTTPConnection
            )
            pool[key] = cls(parts.hostname, parts.port, timeout=self.timeout)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return key, pool[key], target, reused

    def _drop(self, key) -> None:
        connection = self._local.__dict__.get("connections", {}).pop(key, None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        """Close this thread's kept-alive connections."""
        for key in list(self._local.__dict__.get("connections", {})):
            self._drop(key)

    def _pooled(self, method: str, url: str, headers: dict, handle: Callable):
        """One exchange over a kept-alive connection with the retry policy. `handle(response)`
        gets every 1xx-3xx response and must read its body; a 4xx raises ApiError. A kept-alive
        connection the server had closed is reopened once without counting as a try."""
        last_problem = ""
        attempt = 0
        free_retry = True
        while attempt < self.retry.attempts:
            retry_after = None
            key, connection, target, reused = self._connection(url)
            try:
                connection.request(method, target, headers=headers)
                response = connection.getresponse()
                if response.status < 400:
                    return handle(response)
                body = response.read(MAX_API_BODY_BYTES)
                if response.status not in RETRY_STATUSES:
                    raise _api_error(response.status, body)
                last_problem = f"HTTP {response.status}"
                retry_after = _retry_after(response.getheader("Retry-After"))
            except ApiError:
                raise
            except (http.client.HTTPException, OSError) as exc:
                self._drop(key)
                last_problem = f"{exc.__class__.__name__}: {exc}"
                if reused and free_retry:
                    free_retry = False
                    continue
            attempt += 1
            if attempt < self.retry.attempts:
                wait = self.retry.delay(attempt - 1, retry_after)
                log.warning(
                    "%s %s failed (%s); retry %d/%d in %.1fs",
                    method,
                    _redact(url),
                    last_problem,
                    attempt,
                    self.retry.attempts - 1,
                    wait,
                )
                self.sleep(wait)
        raise TransientError(
            f"{method} {_redact(url)} failed after {self.retry.attempts} tries: {last_problem}"
        )

    def redirect_target(self, endpoint: str, **params) -> str:
        """GET an API endpoint that answers a redirect (the audited download link) and return
        where it points, without following it: the API key never goes to storage."""
        url = self.url(endpoint)
        if params:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(params)
        headers = {
            "User-Agent": self.user_agent,
            "Authorization": f"Bearer {self.api_key}",
            "Accept": "application/json",
        }

        def location(response) -> str:
            _bounded(response, url)
            target = response.getheader("Location")
            if not (300 <= response.status < 400) or not target:
                raise ApiError(
                    response.status, "no_redirect", f"Expected a redirect from {endpoint}."
                )
            return urllib.parse.urljoin(url, target)

        return self._pooled("GET", url, headers, location)

    def stream_to(
        self,
        url: str,
        path,
        *,
        resume: bool = True,
        chunk_bytes: int = 1024 * 1024,
        progress: Callable[[int], None] | None = None,
        limit: int | None = None,
    ) -> Streamed:
        """GET a storage URL (no API key) into `path`. With `resume`, continue after what
        `path` already holds (an HTTP Range request); without, start it afresh (no read-back:
        a new file costs no more system calls than a plain download). Returns the SHA-256 of
        the whole file, its size and modification time. With `limit` (the size the file
        must have), an answer promising more, or one byte more than `limit` in all, raises
        `BodyOverrun` with nothing past `limit` written: an endless body costs `limit` bytes."""
        with open(path, "ab+" if resume else "wb") as file:
            digest = hashlib.sha256()
            if resume:
                file.seek(0)
                for block in iter(lambda: file.read(chunk_bytes), b""):
                    digest.update(block)
            state = {"digest": digest, "size": file.tell()}

            def receive(response) -> None:
                if response.status not in (200, 206):
                    _bounded(response, url)
                    raise ApiError(response.status, "unexpected_status", "Unexpected answer.")
                start = state["size"] if response.status == 206 else 0
                promised = start + (response.length or 0)
                if limit is not None and promised > limit:
                    response.close()  # (the socket closes with the connection only then)
                    raise BodyOverrun(f"the answer promises {promised} bytes of {limit}")
                if response.status == 200 and state["size"]:
                    file.seek(0)
                    file.truncate(0)  # the server sent the whole file, not the range
                    state["digest"], state["size"] = hashlib.sha256(), 0
                # into one buffer per thread, reused: no new megabyte (and its page faults)
                # for every block
                buffer = self._local.__dict__.get("buffer")
                if buffer is None or len(buffer) != chunk_bytes:
                    buffer = self._local.buffer = memoryview(bytearray(chunk_bytes))
                while count := response.readinto(_room(buffer, limit, state["size"])):
                    if limit is not None and state["size"] + count > limit:
                        response.close()
                        raise BodyOverrun(f"more than the {limit} bytes expected arrived")
                    block = buffer[:count]
                    file.write(block)
                    state["digest"].update(block)
                    state["size"] += count
                    if progress is not None:
                        progress(count)
                file.flush()
                if response.length:  # bytes promised that never came: the connection was cut
                    raise BodyCutOff(f"{response.length} bytes short")

            attempts_left = self.retry.attempts
            while True:
                headers = {"User-Agent": self.user_agent}
                if state["size"]:
                    headers["Range"] = f"bytes={state['size']}-"
                try:
                    self._pooled("GET", url, headers, receive)
                    break
                except BodyOverrun:
                    self._drop(self._connection_key(url))  # the rest of the body is unread
                    raise
                except (TransientError, BodyCutOff) as exc:
                    # A body cut off mid-way: go on from what arrived, within the same budget.
                    attempts_left -= 1
                    if attempts_left <= 0:
                        raise TransientError(f"GET {_redact(url)}: {exc}") from None
                    self._drop(self._connection_key(url))
                    self.sleep(self.retry.delay(self.retry.attempts - attempts_left - 1))
                    state["size"] = file.seek(0, os.SEEK_END)  # what did reach the file
            stat = os.fstat(file.fileno())
        return Streamed(state["digest"].hexdigest(), stat.st_size, stat.st_mtime_ns)


def _room(buffer: memoryview, limit: int | None, held: int) -> memoryview:
    """What the next read may take: the buffer, or at most one byte past `limit` (the byte
    that shows the body is longer than expected)."""
    return buffer if limit is None else buffer[: max(1, min(len(buffer), limit - held + 1))]


def _bounded(response, url: str) -> bytes:
    """A whole answer, refused past MAX_API_BODY_BYTES instead of read on without end."""
    body = response.read(MAX_API_BODY_BYTES + 1)
    if len(body) > MAX_API_BODY_BYTES:
        raise TransientError(f"{_redact(url)}: an answer of more than {MAX_API_BODY_BYTES} bytes")
    return body


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
