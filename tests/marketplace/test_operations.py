"""Operations basics: probes, request ids in logs and tasks, deploy checks, headers."""

import json
import logging
import os
import subprocess
import sys

import pytest
from django.conf import settings

from marketplace.observability import JsonFormatter, RequestIdFilter, request_id_var

pytestmark = pytest.mark.django_db


def test_liveness_needs_nothing(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readiness_checks_database_broker_and_storage(client, s3):
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    assert set(response.json()["checks"]) == {"database", "broker", "storage"}
    assert all(check["ok"] for check in response.json()["checks"].values())


def test_readiness_fails_with_503_when_storage_is_down(client, settings):
    settings.S3_ENDPOINT_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not_ready" and body["checks"]["storage"] == {"ok": False}
    assert body["checks"]["database"]["ok"] is True


def test_a_request_id_is_echoed_or_made(client):
    given = client.get("/healthz", HTTP_X_REQUEST_ID="abc-123")
    assert given["X-Request-ID"] == "abc-123"
    made = client.get("/healthz", HTTP_X_REQUEST_ID="bad id with spaces\n")
    assert made["X-Request-ID"] != "bad id with spaces\n" and len(made["X-Request-ID"]) == 32


def test_log_lines_are_json_with_the_request_id():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    token = request_id_var.set("req-42")
    try:
        RequestIdFilter().filter(record)
        line = json.loads(JsonFormatter().format(record))
    finally:
        request_id_var.reset(token)
    assert line["message"] == "hello world" and line["request_id"] == "req-42"
    assert line["level"] == "INFO"


def test_the_request_id_travels_into_task_headers():
    from celery import signals

    headers = {}
    token = request_id_var.set("req-77")
    try:
        signals.before_task_publish.send(sender="some.task", headers=headers, body=None)
    finally:
        request_id_var.reset(token)
    assert headers["request_id"] == "req-77"


def test_security_headers_are_set(client):
    response = client.get("/")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    env = {
        **os.environ,
        "MARKETPLACE_DATA_DIR": str(tmp_path),
        "DJANGO_DEBUG": "false",
        "DJANGO_SECURE": "true",
        "DJANGO_REQUIRE_SECRET_KEY": "true",
        "DJANGO_SECRET_KEY": "x" * 30 + "-prod-only-" + "y" * 30,
        "DJANGO_ALLOWED_HOSTS": "api.example.com",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=env,
        capture_output=True,
        text=True,
        cwd=settings.BASE_DIR,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    env = {**os.environ, "MARKETPLACE_DATA_DIR": str(tmp_path), "DJANGO_REQUIRE_SECRET_KEY": "true"}
    env.pop("DJANGO_SECRET_KEY", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        env=env,
        capture_output=True,
        text=True,
        cwd=settings.BASE_DIR,
    )
    assert result.returncode != 0 and "DJANGO_SECRET_KEY must be set" in result.stderr
