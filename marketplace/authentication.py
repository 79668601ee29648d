"""`Authorization: Bearer <api key>` for programs. Session auth covers web pages."""

import hmac

from rest_framework import authentication, exceptions

from marketplace import api_key_cache
from marketplace.models import ApiKey
from marketplace.services import api_key_touch, hash_api_key, split_api_key


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
        api_key = api_key_cache.lookup(parts[0], hashed)
        if api_key is None or not hmac.compare_digest(api_key.hashed_key, hashed):
            raise exceptions.AuthenticationFailed("Invalid API key.")
        if api_key.revoked_at is not None:
            raise exceptions.AuthenticationFailed("This API key has been revoked.")
        api_key_touch(api_key=api_key)
        return (ApiKeyUser(api_key), api_key)

    def authenticate_header(self, request):
        return self.keyword


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
