"""Throttles keyed by who calls: an API key, a signed-in user, or (anonymous) the address the
trusted proxy reports (marketplace.client_address). Counters live in the default cache:
shared by every process when REDIS_URL names Redis; per process with the embedded default
(local memory), so N processes then allow N times the rate. The window and its history are
DRF's (SimpleRateThrottle)."""

from rest_framework.throttling import AnonRateThrottle as DrfAnonRateThrottle
from rest_framework.throttling import UserRateThrottle

from marketplace.client_address import client_address

# Not DRF's "throttle_<scope>_<ident>": the releases before DRF's own history kept theirs
# under those keys as packed bytes, which DRF would read as its list (a 500 until expired).
CACHE_FORMAT = "throttles:%(scope)s:%(ident)s"


class AnonRateThrottle(DrfAnonRateThrottle):
    cache_format = CACHE_FORMAT

    def get_ident(self, request):
        return client_address(request) or "unknown"


class CallerRateThrottle(UserRateThrottle):
    """Per API key (or per signed-in user); anonymous callers fall back to their address."""

    cache_format = CACHE_FORMAT

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
