"""Signed download links fetched ahead in batches (`POST /api/v1/deliveries/<id>/links`, up to
500 files a request, each recorded by the platform), handed to download workers one each.

`LinkBook` is given the paths in the order the workers will take them. A worker asking for a
path gets its link from the book; when the book runs low (`low_water` unused links), that
worker fetches the next batch before going on, so the others rarely wait. The first batch is
small (the download starts after one short request), later ones are full. A link is used
once: asking again for a path (its signed GET was refused as expired, or the file came out
wrong) signs that path alone anew. Links that expired in the book (a slow download) are
signed again together, as a batch. A refused batch (the delivery revoked, the platform gone)
fails every file still waiting for a link with that error.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MAX_BATCH = 500  # the platform's limit per request


@dataclass(frozen=True)
class Link:
    path: str
    url: str
    size: int
    sha256: str
    good_until: float  # on the local monotonic clock, a safety margin before the expiry


def links_requester(client, delivery_id: str, clock: Callable[[], float] = time.monotonic):
    """`paths -> {path: Link}` over the platform's batch endpoint (one POST per call)."""

    def request(paths: list[str]) -> dict[str, Link]:
        asked_at = clock()
        body = client.post(f"deliveries/{delivery_id}/links", {"paths": list(paths)})
        expires_in = float(body["expires_in"])
        # Keep a margin: a link must still be valid when its GET reaches storage, and the
        # signature's time (X-Amz-Date) is cut to the second, so it may expire up to 1 s early.
        good_until = asked_at + max(expires_in / 2, expires_in - 1.0 - min(30.0, expires_in / 5))
        return {
            item["path"]: Link(
                item["path"],
                item["url"],
                int(item["size_bytes"]),
                str(item.get("sha256") or ""),
                good_until,
            )
            for item in body["links"]
        }

    return request


class LinkBook:
    def __init__(
        self,
        request: Callable[[list[str]], dict[str, Link]],
        *,
        batch: int = MAX_BATCH,
        first_batch: int = 32,
        low_water: int = 128,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._request = request
        self._batch = max(1, min(batch, MAX_BATCH))
        self._next_size = max(1, min(first_batch, self._batch))
        self._low_water = low_water
        self._clock = clock
        self._links: dict[str, Link] = {}
        self._pending: deque[str] = deque()
        self._queued: set[str] = set()
        self._fetching = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self.requests = 0  # batch requests sent (for tests and the summary)

    def put(self, links: dict[str, Link]) -> None:
        with self._cond:
            self._links.update(links)
            self._cond.notify_all()

    def queue(self, paths: Iterable[str]) -> None:
        """Paths the workers will ask for, in that order."""
        with self._cond:
            for path in paths:
                if path not in self._queued:
                    self._queued.add(path)
                    self._pending.append(path)

    def url(self, path: str) -> str:
        return self.link(path).url

    def link(self, path: str) -> Link:
        fetched_for_me = False
        while True:
            chunk: list[str] | None = None
            mine: Link | None = None
            with self._cond:
                if self._error is not None and path in self._queued:
                    raise self._error
                found = self._links.pop(path, None)
                # (a link this worker has just fetched is used whatever the clock says:
                # storage has the last word, and a refusal asks for a fresh one)
                if found is not None and not fetched_for_me and found.good_until <= self._clock():
                    self._requeue_expired(found.path)
                    found = None
                if found is not None:
                    mine = found
                    if self._refill_due():
                        chunk = self._claim(None)
                elif path in self._queued:
                    if self._fetching:
                        self._cond.wait()
                        continue
                    chunk = self._claim(path)
                else:
                    self.requests += 1  # asked for again, or never queued: signed on its own
            if chunk is None:
                return mine if mine is not None else self._request([path])[path]
            fetched_for_me = mine is None
            try:
                self._fill(chunk)
            except Exception:
                if mine is None:
                    raise
                # the refill failed, this worker's own link is good: the error waits for
                # the files whose links were in that batch
            if mine is not None:
                return mine

    # --- under the lock ---------------------------------------------------------------------

    def _refill_due(self) -> bool:
        return (
            self._error is None
            and not self._fetching
            and bool(self._pending)
            and len(self._links) < self._low_water
        )

    def _requeue_expired(self, first: str) -> None:
        now = self._clock()
        expired = [p for p, link in self._links.items() if link.good_until <= now]
        for p in expired:
            del self._links[p]
        for p in reversed([first, *expired]):
            self._queued.add(p)
            self._pending.appendleft(p)

    def _claim(self, include: str | None) -> list[str]:
        """The next batch to fetch (with `include` in it); marks a fetch under way."""
        chunk: list[str] = []
        while self._pending and len(chunk) < self._next_size:
            path = self._pending.popleft()
            if path in self._queued and path not in chunk:
                chunk.append(path)
        if include is not None and include not in chunk:
            chunk.append(include)  # left in the deque; skipped there once no longer queued
        self._next_size = self._batch
        self._fetching = True
        self.requests += 1
        return chunk

    # --- outside the lock -------------------------------------------------------------------

    def _fill(self, chunk: list[str]) -> None:
        got: dict[str, Link] = {}
        try:
            got = self._request(chunk)
        except Exception as exc:
            with self._cond:
                self._error = exc  # the files of this batch, and those after, fail with it
            raise
        finally:
            with self._cond:
                self._links.update(got)
                if got:
                    self._queued.difference_update(chunk)
                self._fetching = False
                self._cond.notify_all()
