"""Response helpers shared by the API views of every app."""

from django.utils.cache import add_never_cache_headers


def shown_once(response):
    """A response carrying a secret (an API key, a webhook signing secret): no browser or
    proxy cache may keep it (`Cache-Control: no-store` and friends)."""
    add_never_cache_headers(response)
    return response
