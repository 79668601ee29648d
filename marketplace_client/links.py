"""Signed download links fetched ahead in batches (`POST /api/v1/deliveries/<id>/links`, up to
500 files a request, each recorded by the platform), handed to download workers one each.

`LinkBook` is given the paths in the order the workers will take them. One prefetch thread
keeps links ahead of the workers: batches grow from `first_batch` (the download starts after
one short request) by doubling up to `batch`, and the next batch is asked for as soon as
fewer links are left than the last batch held, so one batch is always on its way while the
workers use the previous one, and no worker stops to fetch links. A link is used once:
asking again for a path (its signed GET was refused as expired, or the file came out wrong)
signs that path alone anew. Links that expired in the book (a slow download) go back to the
front of the queue and are signed again together. A refused batch (the delivery revoked,
the platform gone) fails every file still waiting for a link with that error.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from marketplace_client.http import ApiError

MAX_BATCH = 500  # the platform's limit per request


@dataclass(frozen=True)
class Link:
    path: str
    url: str
    size: int
    sha256: str
    good_until: float  # on the local monotonic clock, a safety margin before the expiry
    fresh_for_asker: bool = False  # stale on arrival: handed out anyway, once


def links_requester(client, delivery_id: str, clock: Callable[[], float] = time.monotonic):
    """`paths -> {path: Link}` over the platform's batch endpoint (one POST per call)."""

    def request(paths: list[str]) -> dict[str, Link]:
        asked_at = clock()
        body = client.post(f"deliveries/{delivery_id}/links", {"paths": list(paths)})
        asked = set(paths)
        try:
            expires_in = float(body["expires_in"])
            # Keep a margin: a link must still be valid when its GET reaches storage, and the
            # signature's time (X-Amz-Date) is cut to the second: it may expire 1 s early.
            good_until = asked_at + max(
                expires_in / 2, expires_in - 1.0 - min(30.0, expires_in / 5)
            )
            links = {
                item["path"]: Link(
                    item["path"],
                    str(item["url"]),
                    int(item["size_bytes"]),
                    str(item.get("sha256") or ""),
                    good_until,
                )
                for item in body["links"]
                if item["path"] in asked  # a link for a path not asked for is not kept
            }
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise ApiError(200, "malformed_links", f"Links that do not parse ({exc}).") from None
        missing = [path for path in paths if path not in links]
        if missing:
            raise ApiError(200, "missing_links", f"No link came for {missing[0]!r}.")
        return links

    return request


class LinkBook:
    def __init__(
        self,
        request: Callable[[list[str]], dict[str, Link]],
        *,
        batch: int = MAX_BATCH,
        first_batch: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._request = request
        self._batch = max(1, min(batch, MAX_BATCH))
        self._next_size = max(1, min(first_batch, self._batch))
        self._last_size = 0
        self._clock = clock
        self._links: dict[str, Link] = {}
        self._pending: deque[str] = deque()
        self._queued: set[str] = set()
        self._wanted: set[str] = set()  # paths workers wait for
        self._in_flight: set[str] = set()  # the batch on its way
        self._error: BaseException | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.requests = 0  # requests sent: batches and single renewals
        self.batch_sizes: list[int] = []

    def put(self, links: dict[str, Link]) -> None:
        with self._cond:
            self._links.update(links)
            self._cond.notify_all()

    def queue(self, paths: Iterable[str]) -> None:
        """Paths the workers will ask for, in that order; starts the prefetch thread."""
        with self._cond:
            for path in paths:
                if path not in self._queued:
                    self._queued.add(path)
                    self._pending.append(path)
            if self._thread is None and self._pending:
                self._thread = threading.Thread(
                    target=self._prefetch, name="link-prefetch", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def url(self, path: str) -> str:
        return self.link(path).url

    def link(self, path: str) -> Link:
        with self._cond:
            while True:
                if self._error is not None and path in self._queued:
                    raise self._error
                found = self._links.pop(path, None)
                if found is not None and found.good_until > self._clock():
                    self._cond.notify_all()  # the prefetcher may be due
                    return found
                if found is not None and not found.fresh_for_asker:
                    self._requeue_expired(found.path)
                elif found is not None:
                    return found  # fetched because this worker waited for it: storage decides
                if path not in self._queued:
                    break  # asked for again, or never queued: signed on its own below
                self._wanted.add(path)
                self._cond.notify_all()
                try:
                    self._cond.wait()
                finally:
                    self._wanted.discard(path)
            self.requests += 1
        return self._request([path])[path]

    # --- under the lock ---------------------------------------------------------------------

    def _due(self) -> bool:
        if not self._pending:
            return False
        if any(path not in self._in_flight for path in self._wanted):
            return True  # a worker waits for a link no request is bringing
        return len(self._links) < max(self._last_size, 1)

    def _requeue_expired(self, first: str) -> None:
        now = self._clock()
        expired = [p for p, link in self._links.items() if link.good_until <= now]
        for p in expired:
            del self._links[p]
        for p in reversed([first, *expired]):
            self._queued.add(p)
            self._pending.appendleft(p)

    def _claim(self) -> list[str]:
        # what workers wait for first, then the queue in order
        chunk = [p for p in self._wanted if p in self._queued and p not in self._in_flight]
        seen = set(chunk)
        while self._pending and len(chunk) < self._next_size:
            path = self._pending.popleft()
            if path in self._queued and path not in seen:
                chunk.append(path)
                seen.add(path)
        self._in_flight = seen
        self._last_size = len(chunk)
        self._next_size = min(self._batch, self._next_size * 2)
        self.requests += 1
        self.batch_sizes.append(len(chunk))
        return chunk

    # --- the prefetch thread ----------------------------------------------------------------

    def _prefetch(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._due():
                    self._cond.wait()
                if self._closed:
                    return
                chunk = self._claim()
            if not chunk:
                continue
            try:
                got = self._request(chunk)
            except Exception as exc:
                with self._cond:
                    self._error = exc  # the files of this batch, and those after, fail with it
                    for path in chunk:
                        self._pending.appendleft(path)
                    self._in_flight = set()
                    self._cond.notify_all()
                return
            now = self._clock()
            with self._cond:
                for path, link in got.items():
                    # stale on arrival (links shorter-lived than the margin): the worker
                    # waiting for it still gets it, and storage has the last word
                    if link.good_until <= now:
                        link = replace(link, fresh_for_asker=True)
                    self._links[path] = link
                self._queued.difference_update(got)
                self._in_flight = set()
                self._cond.notify_all()
