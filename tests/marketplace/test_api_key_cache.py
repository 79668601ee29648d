"""The cheap API-key lookup (marketplace/api_key_cache.py): one SELECT of the key without joins
per request on the embedded cache, none on a warm key with a shared cache, and revocation
refused on the very next request in both, from another server process included. A quote
reads its key again before it stores anything (authentication.require_unrevoked_key): a
key revoked while the request runs stores no quote."""

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings
from rest_framework.test import APIClient

from marketplace import api_key_cache, services
from marketplace.models import ApiKey
from tests.celery_worker import wait_for

# Redis DB 13 is flushed by these tests: they run in one xdist worker (tests/README.md).
pytestmark = [pytest.mark.django_db, pytest.mark.xdist_group("redis-db-13")]
ROOT = Path(__file__).resolve().parents[2]
REDIS_DB = int(os.environ.get("TEST_REDIS_DB", "13"))  # flushed by these tests
REDIS_CACHE = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": f"redis://127.0.0.1:6379/{REDIS_DB}",
    }
}
ERROR_KEYS = {"code", "message", "fields"}
QUOTE = {"task_type": "peg-insertion", "embodiment": "franka-fr3", "hours": "12"}


def _me(client):
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/api/v1/me")
    return response, [q["sql"] for q in queries]


def _key_selects(sqls):
    return [sql for sql in sqls if sql.startswith("SELECT") and '"marketplace_apikey"' in sql]


def _org_selects(sqls):
    return [
        sql for sql in sqls if sql.startswith("SELECT") and 'FROM "marketplace_organization"' in sql
    ]


def test_embedded_cache_one_select_of_the_key_without_joins_and_the_organization_kept(customer):
    customer.client.get("/api/v1/me")  # the first use also records last_used_at
    response, sqls = _me(customer.client)
    assert response.status_code == 200
    body = response.json()
    assert body["organization"] == str(customer.organization.id)
    assert body["organization_kind"] == "customer"
    assert body["api_key_prefix"] == customer.api_key.prefix
    (select,) = _key_selects(sqls)
    assert " JOIN " not in select and '"marketplace_apikey"."prefix" = ' in select
    assert _org_selects(sqls) == []  # kept from the first request
    assert not api_key_cache.shared()


def test_embedded_cache_revoked_key_is_refused_on_the_next_request(customer):
    assert customer.client.get("/api/v1/me").status_code == 200
    # revoked behind this process's back (another process, no shared cache to tell it; the
    # base manager, as ApiKey.objects refuses a revocation by update())
    ApiKey._base_manager.filter(pk=customer.api_key.pk).update(revoked_at="2026-01-01T00:00:00Z")
    response = customer.client.get("/api/v1/me")
    assert response.status_code == 401
    assert set(response.json()) == ERROR_KEYS


@pytest.fixture
def redis_cache():
    import redis

    redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB).flushdb()
    with override_settings(CACHES=REDIS_CACHE):
        api_key_cache.forget()
        yield
    api_key_cache.forget()


def test_shared_cache_a_warm_key_runs_no_select_and_revocation_is_immediate(customer, redis_cache):
    assert api_key_cache.shared()
    assert customer.client.get("/api/v1/me").status_code == 200
    response, sqls = _me(customer.client)
    assert response.status_code == 200
    assert response.json()["api_key_prefix"] == customer.api_key.prefix
    assert _key_selects(sqls) == [] and _org_selects(sqls) == []
    # when: revoked through the service (as the API and the leaver receivers do)
    services.api_key_revoke(api_key=customer.api_key)
    response = customer.client.get("/api/v1/me")
    assert response.status_code == 401
    assert set(response.json()) == ERROR_KEYS


def test_shared_cache_a_leavers_keys_stop_at_once(customer, redis_cache):
    assert customer.client.get("/api/v1/me").status_code == 200
    customer.user.is_active = False
    customer.user.save()  # receivers: api_keys_revoke_created_by
    assert customer.client.get("/api/v1/me").status_code == 401


@pytest.mark.parametrize("shared", [False, True])
def test_hostile_keys_are_401_in_the_one_error_shape(customer, shared, request):
    if shared:
        request.getfixturevalue("redis_cache")
    assert customer.client.get("/api/v1/me").status_code == 200  # the real key is warm
    prefix = customer.api_key.prefix
    secret = customer.raw_key.split("_", 2)[2]
    headers = [
        f"Bearer mk_{prefix}_{secret[:-1]}{'A' if secret[-1] != 'A' else 'B'}",  # wrong secret
        f"Bearer mk_{'0' * len(prefix)}_{secret}",  # unknown prefix
        f"Bearer mk_{prefix}_",  # no secret
        f"Bearer mk_{prefix}_{secret}\x00",  # NUL byte
        f"Bearer mk_{prefix.upper()}_{secret}",  # outside the alphabet
        "Bearer " + "x" * 5000,
    ]
    for header in headers:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        response = client.get("/api/v1/me")
        assert response.status_code == 401, header
        assert set(response.json()) == ERROR_KEYS, header
    assert customer.client.get("/api/v1/me").status_code == 200  # untouched by the attempts


@contextmanager
def _gunicorn(tmp_path, **env):
    """marketplace.wsgi on 3 workers against the test database; yields call(method, path,
    key, body) -> the status code."""
    from tests.faults.conftest import worker_database_url
    from tests.security.test_hardening import _free_port

    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "marketplace.settings",
        "DATABASE_URL": worker_database_url("mk_api_key_cache_web"),
        "API_KEY_CACHE_SECONDS": "600",
        **env,
    }
    if not env.get("REDIS_URL"):
        env.pop("REDIS_URL", None)  # the embedded per-process cache
    log = (tmp_path / "gunicorn.log").open("wb")
    gunicorn = Path(sys.executable).with_name("gunicorn")
    server = subprocess.Popen(
        [str(gunicorn), "marketplace.wsgi", "-b", f"127.0.0.1:{port}", "-w", "3"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def call(method: str, path: str, key: str, body: dict | None = None) -> int:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return 0

    try:
        yield call
    finally:
        server.terminate()
        server.wait(timeout=15)
        log.close()


@pytest.mark.django_db(transaction=True)
def test_revocation_reaches_every_gunicorn_process_at_once(customer, redis_cache, tmp_path):
    with _gunicorn(tmp_path, REDIS_URL=f"redis://127.0.0.1:6379/{REDIS_DB}") as call:
        wait_for(lambda: call("GET", "/api/v1/me", customer.raw_key) == 200, 45, "gunicorn")
        before = [call("GET", "/api/v1/me", customer.raw_key) for _ in range(12)]
        quotes = [call("POST", "/api/v1/quotes", customer.raw_key, QUOTE) for _ in range(6)]
        services.api_key_revoke(api_key=customer.api_key)  # in this process
        after = [call("GET", "/api/v1/me", customer.raw_key) for _ in range(12)]
        after += [call("POST", "/api/v1/quotes", customer.raw_key, QUOTE) for _ in range(6)]
    assert before == [200] * 12 and quotes == [201] * 6
    assert after == [401] * 18


@pytest.mark.django_db(transaction=True)
def test_without_a_shared_cache_a_key_revoked_elsewhere_stores_no_quote_in_any_process(
    customer, tmp_path
):
    from orders.models import Quote

    # given: 3 gunicorn processes on the embedded per-process cache, each quote's key held by
    # the process that took it (the first quote of each process read it)
    with _gunicorn(tmp_path, REDIS_URL="") as call:
        wait_for(lambda: call("GET", "/api/v1/me", customer.raw_key) == 200, 45, "gunicorn")
        before = [call("POST", "/api/v1/quotes", customer.raw_key, QUOTE) for _ in range(18)]
        stored = Quote.objects.filter(organization=customer.organization).count()
        # when: revoked here, which no server process hears of
        services.api_key_revoke(api_key=customer.api_key)
        after = [call("POST", "/api/v1/quotes", customer.raw_key, QUOTE) for _ in range(18)]
    # then: every quote after it refused, none stored
    assert before == [201] * 18 and stored == 18
    assert after == [401] * 18
    assert Quote.objects.filter(organization=customer.organization).count() == stored


# --- A quote reads its key again before it stores (authentication.require_unrevoked_key) ---


def _quote(client, body=None):
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/v1/quotes", body or QUOTE, format="json")
    return response, [q["sql"] for q in queries]


def _revoked_behind_this_process(api_key):
    # as another process revokes it with no shared cache to tell this one: no signal here
    ApiKey._base_manager.filter(pk=api_key.pk).update(revoked_at="2026-01-01T00:00:00Z")


@pytest.mark.parametrize("shared", [False, True])
def test_a_key_revoked_while_the_quote_is_read_stores_no_quote(
    customer, shared, request, monkeypatch
):
    from orders import api
    from orders.models import Quote

    if shared:
        request.getfixturevalue("redis_cache")
    assert _quote(customer.client)[0].status_code == 201  # the key warm, held where it is
    before = Quote.objects.count()
    read = api.QuoteRequestSerializer.to_request

    def revoked_meanwhile(serializer):
        # after the key authenticated, before the quote is stored: revoked by another process
        _revoked_behind_this_process(customer.api_key)
        return read(serializer)

    monkeypatch.setattr(api.QuoteRequestSerializer, "to_request", revoked_meanwhile)
    # when: a quote whose key is revoked while the request runs
    response, sqls = _quote(customer.client)
    # then: 401 in the one error shape, nothing stored, the key read again before any INSERT
    assert response.status_code == 401
    assert set(response.json()) == ERROR_KEYS
    assert response.json()["message"] == "This API key has been revoked."
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert Quote.objects.count() == before
    assert [sql for sql in sqls if sql.startswith("INSERT")] == []


def test_a_live_keys_quote_is_stored_for_its_organization(customer):
    from orders.models import Quote

    response, _ = _quote(customer.client)
    assert response.status_code == 201, response.json()
    stored = Quote.objects.get(pk=response.json()["id"])
    assert stored.organization_id == customer.organization.id
    assert str(stored.total) == response.json()["total"]


def test_a_key_revoked_elsewhere_is_refused_before_the_request_is_read(customer):
    from orders.models import Quote

    assert _quote(customer.client)[0].status_code == 201
    before = Quote.objects.count()
    _revoked_behind_this_process(customer.api_key)
    # when: an invalid request with the revoked key, then: 401, not 400, nothing stored
    response, _ = _quote(customer.client, {**QUOTE, "hours": "-3"})
    assert response.status_code == 401
    assert response.json()["message"] == "This API key has been revoked."
    assert Quote.objects.count() == before


def test_a_wrong_secret_stores_no_quote(customer):
    from orders.models import Quote

    assert _quote(customer.client)[0].status_code == 201  # the real key authenticated
    before = Quote.objects.count()
    prefix = customer.api_key.prefix
    secret = customer.raw_key.split("_", 2)[2]
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer mk_{prefix}_{secret[:-1]}{'A' if secret[-1] != 'A' else 'B'}"
    )
    response, sqls = _quote(client)
    assert response.status_code == 401 and len(_key_selects(sqls)) == 1
    assert Quote.objects.count() == before
