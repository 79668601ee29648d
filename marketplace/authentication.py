"""`Authorization: Bearer <api key>` for programs. Session auth covers web pages."""

import hmac

from rest_framework import authentication, exceptions

from marketplace import api_key_cache
from marketplace.compiled_sql import Exists
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
        view = (getattr(request, "parser_context", None) or {}).get("view")
        if getattr(view, "api_key_checked_by_write", False):
            api_key = api_key_cache.held(parts[0], hashed)
            if api_key is not None:  # its revocation is checked by the view's write
                api_key_touch(api_key=api_key)
                return (ApiKeyUser(api_key, needs_check=True), api_key)
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
    """The caller behind an API key: authenticated, tied to one organization, never staff.

    `needs_check`: the key was taken as this process held it, unread (KeyCheckedInWrite);
    its revocation is still to be checked, by the view's write or before the response."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, api_key: ApiKey, *, needs_check: bool = False):
        self.api_key = api_key
        self.needs_check = needs_check
        self.pk = None
        self.id = None
        self.username = f"api-key:{api_key.prefix}"

    def __str__(self) -> str:
        return self.username


class KeyCheckedInWrite:
    """For an API view whose only effect is one insert (a quote): an API key that
    authenticated in this process within API_KEY_CACHE_SECONDS is taken without being read
    again, and its revocation is checked by the insert itself, in the same one statement
    (`write_condition()` for CompiledInsert.save's `only_if`, then `written()`): a revoked key
    stores nothing and gets the usual 401, at once, whichever process revoked it. Any
    response that did not come through that write (a 400, a 429) has the key read as usual
    before it leaves, and a revoked key's answer becomes that 401.

    Only for views that read nothing of the key that can change but its revocation (not its
    role), and that have no other effect (the throttle's count aside)."""

    api_key_checked_by_write = True

    def write_condition(self, request) -> Exists | None:
        """The condition the write must hold to (the key still unrevoked), or None."""
        user = request.user
        if isinstance(user, ApiKeyUser) and user.needs_check:
            return api_key_cache.still_active(user.api_key)
        return None

    def written(self, request, *, stored: bool) -> None:
        """After the write under write_condition(): the key checked, or 401 if nothing was
        stored because it is revoked."""
        user = request.user
        if isinstance(user, ApiKeyUser) and user.needs_check:
            user.needs_check = False
            if not stored:
                api_key_cache.drop(user.api_key)
                raise exceptions.AuthenticationFailed(REVOKED)

    def finalize_response(self, request, response, *args, **kwargs):
        user = request.__dict__.get("_user")  # only if authentication ran
        if isinstance(user, ApiKeyUser) and user.needs_check:
            user.needs_check = False
            try:
                checked_api_key(user.api_key.prefix, user.api_key.hashed_key)
            except exceptions.AuthenticationFailed as exc:
                api_key_cache.drop(user.api_key)
                response = self.handle_exception(exc)
        return super().finalize_response(request, response, *args, **kwargs)
