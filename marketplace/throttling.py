from rest_framework.throttling import AnonRateThrottle, UserRateThrottle


class CallerRateThrottle(UserRateThrottle):
    """Per API key (or per signed-in user); anonymous callers fall back to their address."""

    def get_cache_key(self, request, view):
        api_key = getattr(request.user, "api_key", None)
        if api_key is not None:
            return self.cache_format % {"scope": self.scope, "ident": f"key-{api_key.pk}"}
        return super().get_cache_key(request, view)


__all__ = ["AnonRateThrottle", "CallerRateThrottle"]
