"""Throttles keyed by who calls: an API key, a signed-in user, or (anonymous) the address the
trusted proxy reports (marketplace.client_address). Counters live in the default cache:
shared by every process when REDIS_URL names Redis; per process with the embedded default
(local memory), so N processes then allow N times the rate."""

from rest_framework.throttling import AnonRateThrottle as DrfAnonRateThrottle
from rest_framework.throttling import UserRateThrottle

from marketplace.client_address import client_address


class AnonRateThrottle(DrfAnonRateThrottle):
    def get_ident(self, request):
        return client_address(request) or "unknown"


class CallerRateThrottle(UserRateThrottle):
    """Per API key (or per signed-in user); anonymous callers fall back to their address."""

    def get_ident(self, request):
        return client_address(request) or "unknown"

    def get_cache_key(self, request, view):
        api_key = getattr(request.user, "api_key", None)
        if api_key is not None:
            return self.cache_format % {"scope": self.scope, "ident": f"key-{api_key.pk}"}
        return super().get_cache_key(request, view)


__all__ = ["AnonRateThrottle", "CallerRateThrottle"]
