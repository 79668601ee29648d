"""Project-level behaviour: schema, docs, error shape on non-API errors, settings from env."""

import os

import pytest
from django.conf import settings

from tests.marketplace.helpers import run_on_embedded_defaults, run_python

pytestmark = pytest.mark.django_db


def test_openapi_schema_and_docs_are_served(anon_client):
    schema = anon_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in [
        "/api/v1/quotes",
        "/api/v1/orders",
        "/api/v1/orders/{id}/cancel",
        "/api/v1/api-keys",
    ]:
        assert path in paths
    assert "ApiKey" in schema.json()["components"]["securitySchemes"]
    assert anon_client.get("/api/docs/").status_code == 200


def test_unknown_api_paths_are_json_404s(anon_client):
    response = anon_client.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "message": "Not found.", "fields": {}}


def test_wrong_method_is_a_405_in_the_one_shape(customer):
    response = customer.client.delete("/api/v1/quotes")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_home_and_login_pages_render(client):
    home = client.get("/")
    assert home.status_code == 200
    assert b"Complexity rubric" in home.content and b"Peg-in-hole insertion" in home.content
    assert client.get("/accounts/login/").status_code == 200


def test_catalog_endpoints_are_public(anon_client):
    assert len(anon_client.get("/api/v1/catalog/task-types").json()) >= 10
    levels = anon_client.get("/api/v1/catalog/complexity-levels").json()
    assert [level["level"] for level in levels] == [1, 2, 3, 4, 5]
    card = anon_client.get("/api/v1/catalog/rate-card").json()
    assert card["version"] == 1 and card["complexity_multipliers"]["5"] == "3.000"


def test_embedded_defaults_use_sqlite_and_a_filesystem_broker_under_the_data_dir(tmp_path):
    # given: a clean environment with only MARKETPLACE_DATA_DIR
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "db = s.DATABASES['default']; "
        "print(db['ENGINE'], db['NAME'], s.CELERY_BROKER_URL,"
        " s.CELERY_BROKER_TRANSPORT_OPTIONS['data_folder_in'])"
    )
    # when
    out = run_on_embedded_defaults(code, tmp_path)
    # then
    assert out[0] == "django.db.backends.sqlite3"
    assert out[1] == str(tmp_path / "marketplace.sqlite3")
    assert out[2] == "filesystem://"
    assert out[3] == str(tmp_path / "broker" / "queue") and (tmp_path / "broker" / "queue").is_dir()


def test_production_settings_come_from_the_environment(tmp_path):
    env = dict(os.environ)
    env.update(
        MARKETPLACE_DATA_DIR=str(tmp_path),
        DATABASE_URL="postgres://u:p@db.example:5432/prod",
        CELERY_BROKER_URL="amqp://guest:guest@127.0.0.1:5672//",
        DJANGO_SECRET_KEY="s3cret-from-env",
        DJANGO_ALLOWED_HOSTS="api.example.com,www.example.com",
    )
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "db = s.DATABASES['default']; "
        "print(db['ENGINE'], db['HOST'], s.CELERY_BROKER_URL, s.SECRET_KEY,"
        " ','.join(s.ALLOWED_HOSTS))"
    )
    out = run_python(code, env)
    assert out == [
        "marketplace.postgresql",  # Django's, with a health check without a round trip
        "db.example",
        "amqp://guest:guest@127.0.0.1:5672//",
        "s3cret-from-env",
        "api.example.com,www.example.com",
    ]


def test_the_celery_app_reads_django_settings():
    from marketplace.celery import app

    assert app.conf.task_acks_late is True
    assert app.conf.broker_url == settings.CELERY_BROKER_URL
    assert app.conf.task_routes["fleets.tasks.*"] == {"queue": "dispatch"}


def test_the_openapi_schema_is_valid_and_generates_without_warnings(tmp_path):
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "s.yml"))
    assert (tmp_path / "s.yml").stat().st_size > 1000
