"""API keys as the authentication reads them on every request: cheap, and revocation immediate.

Two modes, chosen by whether the default cache is shared between processes:

- With a shared cache (Redis, named by REDIS_URL): a key that authenticated is kept in this
  process's memory for API_KEY_CACHE_SECONDS, keyed by prefix and the secret's SHA-256, with
  its organization. Every request reads one version counter from the shared cache; any save or
  delete of an API key or an organization (a revocation included, through the ORM or the
  admin) bumps it, at once and again after commit, so every process drops its copies before
  its next request. A warm request runs no SELECT for the key.
- With the embedded per-process cache another process cannot see a bump, so the key itself is
  read on every request: one SELECT by its unique prefix (no joins once the organization is
  held; joined to it, in the same one statement, when not), so `revoked_at` is always
  the database's. Only the organization (id, kind, name: nothing a revocation changes) comes
  from this process's memory, for at most API_KEY_CACHE_SECONDS; what can change on it while
  a client waits (the webhook URL) is read from the database where it is shown.

A write that must not happen once the key is revoked, even by a revocation that commits
while the request runs, locks the key's row first (authentication.unrevoked_key_held).

Only keys that authenticated are kept (a wrong secret is never cached, so it always reaches the
database and the hash comparison); `created_by` is not loaded (nothing on the request path
reads it; it loads lazily if something does).
"""

import hmac
import threading
import time

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from marketplace.compiled_sql import CompiledQuery
from marketplace.models import ApiKey, Organization

VERSION_KEY = "marketplace:api_keys:version"
_PER_PROCESS_BACKENDS = (
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
)
_MAX_ENTRIES = 10_000

_lock = threading.Lock()
# (prefix, sha256 hex) -> (version, monotonic time loaded, key with its organization)
_keys: dict[tuple[str, str], tuple[int, float, ApiKey]] = {}
# organization id -> (version, monotonic time loaded, organization); key prefix -> its org id
_organizations: dict[object, tuple[int, float, Organization]] = {}
_organization_of: dict[str, object] = {}
# the key by its prefix, as `.first()` would read it: compiled once (marketplace/compiled_sql.py)
_KEY_BY_PREFIX = CompiledQuery(
    lambda prefix: ApiKey.objects.filter(prefix=prefix).order_by("pk")[:1], prefix="str"
)


def shared() -> bool:
    """Whether the default cache is seen by every process (so a version bump reaches them)."""
    return settings.CACHES["default"]["BACKEND"] not in _PER_PROCESS_BACKENDS


def lookup(prefix: str, hashed_key: str) -> ApiKey | None:
    """The key with this prefix, its organization attached, or None. The caller compares the
    hash and checks `revoked_at` (a cached entry was valid when stored and dropped on change)."""
    version = cache.get(VERSION_KEY, 0)
    now = time.monotonic()
    ttl = settings.API_KEY_CACHE_SECONDS
    if shared():
        held = _keys.get((prefix, hashed_key))
        if held is not None and held[0] == version and now - held[1] < ttl:
            return held[2]
    organization = _fresh_organization(_organization_of.get(prefix), version, now, ttl)
    if organization is None:  # not held: the organization joined into the same one statement
        api_key = ApiKey.objects.filter(prefix=prefix).select_related("organization").first()
    else:
        api_key = next(iter(_KEY_BY_PREFIX.models(prefix=prefix)), None)
    if api_key is None:
        return None
    if organization is None or organization.pk != api_key.organization_id:
        organization = api_key.organization
        with _lock:
            if len(_organizations) >= _MAX_ENTRIES:
                _organizations.clear()
                _organization_of.clear()
            _organizations[organization.pk] = (version, now, organization)
            _organization_of[prefix] = organization.pk
    api_key.organization = organization
    if api_key.revoked_at is None and hmac.compare_digest(api_key.hashed_key, hashed_key):
        with _lock:
            if len(_keys) >= _MAX_ENTRIES:
                _keys.clear()
            _keys[(prefix, hashed_key)] = (version, now, api_key)
    return api_key


def _fresh_organization(organization_id, version: int, now: float, ttl: float):
    held = _organizations.get(organization_id)
    if held is not None and held[0] == version and now - held[1] < ttl:
        return held[2]
    return None


def forget() -> None:
    """Drop this process's copies and tell the others (through the shared cache)."""
    with _lock:
        _keys.clear()
        _organizations.clear()
        _organization_of.clear()
    try:
        cache.incr(VERSION_KEY)
    except ValueError:  # not set yet (or evicted): any new value differs from the copies'
        cache.set(VERSION_KEY, time.time_ns(), timeout=None)


def _changed(sender, **kwargs) -> None:
    # now, and again once committed (a process reading in between would cache the old row)
    forget()
    transaction.on_commit(forget)


for _model in (ApiKey, Organization):
    post_save.connect(_changed, sender=_model, dispatch_uid=f"api-keys-{_model.__name__}-save")
    post_delete.connect(_changed, sender=_model, dispatch_uid=f"api-keys-{_model.__name__}-del")
