"""The cheap API-key lookup (marketplace/api_key_cache.py): one SELECT of the key without joins
per request on the embedded cache, none on a warm key with a shared cache, and revocation
refused on the very next request in both, from another server process included."""

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings
from rest_framework.test import APIClient

from marketplace import api_key_cache, services
from marketplace.models import ApiKey
from tests.celery_worker import wait_for

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
REDIS_DB = 13
REDIS_CACHE = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": f"redis://127.0.0.1:6379/{REDIS_DB}",
    }
}
ERROR_KEYS = {"code", "message", "fields"}


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
    # revoked behind this process's back (another process, no shared cache to tell it)
    ApiKey.objects.filter(pk=customer.api_key.pk).update(revoked_at="2026-01-01T00:00:00Z")
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


@pytest.mark.django_db(transaction=True)
def test_revocation_reaches_every_gunicorn_process_at_once(customer, redis_cache, tmp_path):
    from tests.faults.conftest import worker_database_url
    from tests.security.test_hardening import _free_port

    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "marketplace.settings",
        "DATABASE_URL": worker_database_url("mk_api_key_cache_web"),
        "REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "API_KEY_CACHE_SECONDS": "600",
    }
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
    base = f"http://127.0.0.1:{port}"

    def me() -> int:
        request = urllib.request.Request(
            f"{base}/api/v1/me", headers={"Authorization": f"Bearer {customer.raw_key}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return 0

    try:
        wait_for(lambda: me() == 200, timeout=45, what="gunicorn")
        before = [me() for _ in range(12)]  # every worker now holds the key
        services.api_key_revoke(api_key=customer.api_key)  # in this process
        after = [me() for _ in range(12)]
    finally:
        server.terminate()
        server.wait(timeout=15)
        log.close()
    assert before == [200] * 12
    assert after == [401] * 12
