"""Throttles keyed by who calls: an API key, a signed-in user, or (anonymous) the address the
trusted proxy reports (marketplace.client_address). Counters live in the default cache:
shared by every process when REDIS_URL names Redis; per process with the embedded default
(local memory), so N processes then allow N times the rate.

The window is DRF's (SimpleRateThrottle): a request is allowed while fewer than the rate's
number were allowed in the last period, each allowed request's moment is recorded, and
`wait()` says the same. Only the history's form in the cache differs: DRF keeps a list of
floats, newest first, which the cache pickles and unpickles float by float on every request
(a list of up to 1,200 for the per-caller rate); here it is the moments' packed doubles,
oldest first (one bytes value). A list DRF stored earlier is still read."""

from array import array

from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache import cache as default_cache
from rest_framework.throttling import AnonRateThrottle as DrfAnonRateThrottle
from rest_framework.throttling import UserRateThrottle

from marketplace.client_address import client_address


def history_of(stored) -> array:
    """The moments of the allowed requests in a cached value, oldest first."""
    if isinstance(stored, bytes):
        history = array("d")
        history.frombytes(stored)
        return history
    if isinstance(stored, list):  # as DRF stores it: newest first
        return array("d", reversed(stored))
    return array("d")


class PackedHistoryMixin:
    """SimpleRateThrottle's decisions, its history kept as packed doubles (module docstring)."""

    def allow_request(self, request, view):
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        # the default cache's backend for this thread, looked up once instead of through the
        # proxy's lookup on each get and set
        backend = self.backend = (
            caches[DEFAULT_CACHE_ALIAS] if self.cache is default_cache else self.cache
        )
        history = self.history = history_of(backend.get(self.key))
        self.now = self.timer()
        # drop the requests that passed the duration, oldest first, as DRF does
        expired, limit = 0, self.now - self.duration
        while expired < len(history) and history[expired] <= limit:
            expired += 1
        del history[:expired]
        if len(history) >= self.num_requests:
            return self.throttle_failure()
        return self.throttle_success()

    def throttle_success(self):
        self.history.append(self.now)
        self.backend.set(self.key, self.history.tobytes(), self.duration)
        return True

    def wait(self):
        if self.history:
            remaining_duration = self.duration - (self.now - self.history[0])
        else:
            remaining_duration = self.duration
        available_requests = self.num_requests - len(self.history) + 1
        if available_requests <= 0:
            return None
        return remaining_duration / float(available_requests)


class AnonRateThrottle(PackedHistoryMixin, DrfAnonRateThrottle):
    def get_ident(self, request):
        return client_address(request) or "unknown"


class CallerRateThrottle(PackedHistoryMixin, UserRateThrottle):
    """Per API key (or per signed-in user); anonymous callers fall back to their address."""

    def get_ident(self, request):
        return client_address(request) or "unknown"

    def get_cache_key(self, request, view):
        api_key = getattr(request.user, "api_key", None)
        if api_key is not None:
            return self.cache_format % {"scope": self.scope, "ident": f"key-{api_key.pk}"}
        return super().get_cache_key(request, view)


class IdentifiedCallerRateThrottle(CallerRateThrottle):
    """CallerRateThrottle for identified callers only, beside AnonRateThrottle on endpoints open
    to anonymous callers (PUBLIC_THROTTLES): an anonymous caller is the anon rate's, by its
    address, and is not counted a second time at the (looser) per-caller rate."""

    def get_cache_key(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return None
        return super().get_cache_key(request, view)


# Endpoints open to anyone: anonymous callers at API_THROTTLE_ANON by address, callers with an
# API key or a session at API_THROTTLE_USER; each request is one throttle check.
PUBLIC_THROTTLES = (AnonRateThrottle, IdentifiedCallerRateThrottle)

__all__ = [
    "PUBLIC_THROTTLES",
    "AnonRateThrottle",
    "CallerRateThrottle",
    "IdentifiedCallerRateThrottle",
]
