"""`Authorization: Bearer <api key>` for programs. Session auth covers web pages."""

import hmac

from rest_framework import authentication, exceptions

from marketplace import api_key_cache
from marketplace.models import ApiKey
from marketplace.services import api_key_touch, hash_api_key, split_api_key

REVOKED = "This API key has been revoked."


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw_key = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        raw_key = raw_key.strip()
        parts = split_api_key(raw_key)
        if parts is None:
            raise exceptions.AuthenticationFailed("Malformed API key.")
        hashed = hash_api_key(raw_key)
        api_key = checked_api_key(parts[0], hashed)
        api_key_touch(api_key=api_key)
        return (ApiKeyUser(api_key), api_key)

    def authenticate_header(self, request):
        return self.keyword


def checked_api_key(prefix: str, hashed: str) -> ApiKey:
    """The key, read as every request reads it (marketplace/api_key_cache.py), or 401."""
    api_key = api_key_cache.lookup(prefix, hashed)
    if api_key is None or not hmac.compare_digest(api_key.hashed_key, hashed):
        raise exceptions.AuthenticationFailed("Invalid API key.")
    if api_key.revoked_at is not None:
        raise exceptions.AuthenticationFailed(REVOKED)
    return api_key


class ApiKeyUser:
    """The caller behind an API key: authenticated, tied to one organization, never staff."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, api_key: ApiKey):
        self.api_key = api_key
        self.pk = None
        self.id = None
        self.username = f"api-key:{api_key.prefix}"

    def __str__(self) -> str:
        return self.username


def require_unrevoked_key(request) -> None:
    """Before a write that must not follow the caller's API key's revocation (a quote): the
    key read again, 401 if it was revoked since it authenticated. The check and the write
    each see committed data: a revocation that commits between them orders the write before
    it, as one statement's snapshot would (no lock: one key's concurrent writes do not queue
    behind each other). Nothing to check without an API key."""
    api_key = getattr(request.user, "api_key", None)
    if api_key is None:
        return
    if not ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).exists():
        api_key_cache.forget()  # this process's copy is stale: every process reads it again
        raise exceptions.AuthenticationFailed(REVOKED)
