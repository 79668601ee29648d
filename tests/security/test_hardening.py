"""The smaller trust items of issue 14, each tried as a hostile caller would."""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.urls import reverse

from billing.admin.common import csv_cell, export_csv
from datasets.packaging import DatasetCardFacts, Provenance, render_dataset_card
from marketplace import services
from marketplace.models import ApiKey, Membership
from orders.models import Order
from orders.services import order_mark_paid
from tests.celery_worker import wait_for
from tests.factories import OrderFactory, UserFactory

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"task_type": "peg-insertion", "embodiment": "franka-fr3", "hours": "10"}


# --- What customers open: the dataset card ----------------------------------------------------


def test_names_in_the_dataset_card_are_inert_text():
    hostile = "<img src=x onerror=alert(1)> [click](http://evil.example) | x\n# Owned"
    card = render_dataset_card(
        DatasetCardFacts(
            title=hostile,
            task=hostile,
            embodiment="Franka",
            robot_type="franka-fr3",
            fps=30,
            episodes=1,
            frames=30,
            hours=Decimal("0.01"),
            environments=1,
            objects=1,
            operators=1,
            success_rate=1.0,
            qa_accepted=1,
            qa_rejected=0,
            qa_rejections_by_reason={},
            provenance=(Provenance(hostile, hostile, "lab_bench", 1, Decimal("0.01")),),
            collected_from=datetime(2026, 1, 1),
            collected_to=datetime(2026, 1, 2),
            order_id="o",
        )
    )
    # every "<" of the name is escaped (\\<: text, not a tag), no link syntax survives
    assert not re.search(r"(?<!\\)<img", card)
    assert "](" not in card and "http://" not in card
    assert "\n# Owned" not in card  # no line break to start a heading or end a table row
    provenance = [line for line in card.splitlines() if line.startswith("| \\<img")]
    assert len(provenance) == 1 and provenance[0].count(" | ") == 4  # still five cells


# --- What staff open: CSV exports ---------------------------------------------------------------


@pytest.mark.parametrize("value", ['=HYPERLINK("http://evil")', "+1+1", "-2+3", "@SUM(A1)"])
def test_csv_cells_never_start_a_formula(value):
    assert csv_cell(value) == f"'{value}"


def test_numbers_stay_numbers_in_csv():
    assert [csv_cell(v) for v in (Decimal("-150.00"), -3, None)] == ["-150.00", "-3", ""]
    response = export_csv("x.csv", ["fleet", "amount"], [("=cmd|' /C calc'!A0", Decimal("-1"))])
    assert response.content.decode().splitlines()[1] == "'=cmd|' /C calc'!A0,-1"


# --- Who the caller is: throttles behind proxies --------------------------------------------


@pytest.mark.django_db
def test_a_forged_x_forwarded_for_does_not_escape_the_anonymous_throttle(anon_client):
    codes = [
        anon_client.post(
            "/api/v1/quotes", SPEC, format="json", HTTP_X_FORWARDED_FOR=f"10.0.0.{i}"
        ).status_code
        for i in range(61)
    ]
    assert codes[:60] == [201] * 60 and codes[60] == 429


@pytest.mark.django_db
def test_behind_a_trusted_proxy_the_address_it_reports_is_the_caller(anon_client, settings):
    settings.API_NUM_PROXIES = 1
    # the client prepends what it likes; the proxy appends the address it saw
    first = [
        anon_client.post(
            "/api/v1/quotes", SPEC, format="json", HTTP_X_FORWARDED_FOR=f"6.6.6.{i}, 203.0.113.5"
        ).status_code
        for i in range(61)
    ]
    other = anon_client.post(
        "/api/v1/quotes", SPEC, format="json", HTTP_X_FORWARDED_FOR="203.0.113.9"
    )
    assert first[60] == 429 and other.status_code == 201


# --- Log-in lockout ----------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("login_url", ["/accounts/login/", "/admin/login/"])
def test_repeated_wrong_passwords_lock_that_username_out_for_a_while(client, login_url):
    user = UserFactory(is_staff=True)
    user.set_password("the-right-password-1")
    user.save()
    for _ in range(4):
        wrong = client.post(login_url, {"username": user.username, "password": "guess"})
        assert wrong.status_code == 200  # the form again, with its error
    fifth = client.post(login_url, {"username": user.username, "password": "guess"})
    assert fifth.status_code == 429  # the fifth failure locks the pair out
    locked = client.post(login_url, {"username": user.username, "password": "the-right-password-1"})
    assert locked.status_code == 429
    assert b"Too many failed log-in attempts" in locked.content
    # another account from the same address is not locked out
    other = UserFactory(is_staff=True)
    other.set_password("another-password-2")
    other.save()
    fine = client.post(login_url, {"username": other.username, "password": "another-password-2"})
    assert fine.status_code == 302


# --- What customers see of staff -----------------------------------------------------------------


@pytest.mark.django_db
def test_customers_see_staff_not_a_staff_members_name(customer):
    from marketplace.tenancy import Caller

    staff = UserFactory(is_staff=True, username="alice-ops")
    order = OrderFactory(organization=customer.organization, status=Order.Status.AWAITING_PAYMENT)
    order_mark_paid(order_id=order.id, caller=Caller(None, None, user=staff))
    assert order.events.get(to_status="paid").actor_label == "staff:alice-ops"  # kept for audit
    body = customer.client.get(f"/api/v1/orders/{order.id}").json()
    labels = [event["actor_label"] for event in body["events"]]
    assert "staff" in labels and not any("alice" in label for label in labels)
    page = customer.session_client().get(reverse("order-detail-page", args=[order.id]))
    assert b"alice-ops" not in page.content


# --- Bodies: too deep, too large ------------------------------------------------------------


@pytest.mark.django_db
def test_json_nested_too_deep_is_a_400_in_the_error_shape(anon_client):
    body = "[" * 5000 + "]" * 5000
    response = anon_client.post("/api/v1/quotes", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request" and "nested" in response.json()["message"]
    # brackets inside strings are text, not nesting
    ok = anon_client.post(
        "/api/v1/quotes", {**SPEC, "notes": "[" * 5000}, format="json"
    ).status_code
    assert ok in (201, 400) and ok != 500


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/quotes", "/billing/stripe/webhook/"])
def test_an_over_large_body_is_a_413_in_the_error_shape(anon_client, path):
    body = json.dumps({"notes": "x" * (3 * 1024 * 1024)})
    response = anon_client.post(path, body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert set(response.json()) == {"code", "message", "fields"}


# --- Secrets are never cached ------------------------------------------------------------------


def assert_no_store(response):
    assert "no-store" in response["Cache-Control"], response.headers


@pytest.mark.django_db
def test_responses_that_carry_a_secret_are_not_cacheable(customer, fleet_operator, settings):
    created = customer.client.post("/api/v1/api-keys", {"name": "ci"}, format="json")
    assert created.status_code == 201 and "key" in created.json()
    assert_no_store(created)
    hook = customer.client.put(
        "/api/v1/organization/webhook", {"url": "https://93.184.216.34/h"}, format="json"
    )
    assert hook.status_code == 200 and hook.json()["secret"]
    assert_no_store(hook)
    fleet = fleet_operator.client.post(
        "/api/v1/fleet/fleets",
        {"name": "F", "weekly_capacity_hours": "40", "payout_rate_per_hour": "50"},
        format="json",
    )
    assert fleet.status_code == 201 and fleet.json()["webhook_secret"]
    assert_no_store(fleet)
    rotated = fleet_operator.client.post(f"/api/v1/fleet/fleets/{fleet.json()['id']}/rotate-secret")
    assert rotated.status_code == 200
    assert_no_store(rotated)
    page = customer.session_client().get(reverse("api-keys"))
    assert page.status_code == 200
    assert_no_store(page)


# --- API keys outlive nobody -----------------------------------------------------------------


def key_of(organization, user) -> str:
    return services.api_key_create(
        organization=organization, name="k", created_by=user, role=Membership.Role.MEMBER
    ).raw_key


def answers(raw_key: str) -> int:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client.get("/api/v1/me").status_code


@pytest.mark.django_db
def test_api_keys_stop_working_when_their_creator_leaves_or_is_deactivated(customer):
    # given: a member who created a key, and the owner who created another
    member = UserFactory()
    membership = Membership.objects.create(
        user=member, organization=customer.organization, role=Membership.Role.MEMBER
    )
    members_key, owners_key = key_of(customer.organization, member), customer.raw_key
    assert answers(members_key) == 200
    # when: the member leaves the organization (as the admin deletes a membership)
    membership.delete()
    # then: their key is refused at once; the owner's still works
    assert answers(members_key) == 401
    assert answers(owners_key) == 200
    # when: the owner is deactivated, and another creator is deleted altogether
    leaver = UserFactory()
    Membership.objects.create(user=leaver, organization=customer.organization, role="member")
    leavers_key = key_of(customer.organization, leaver)
    customer.user.is_active = False
    customer.user.save()
    leaver.delete()
    # then
    assert answers(owners_key) == 401
    assert answers(leavers_key) == 401
    assert not ApiKey.objects.filter(organization=customer.organization, revoked_at=None).exists()


# --- Shared throttle counters --------------------------------------------------------------------


@pytest.mark.xdist_group("redis-db-14")  # flushes Redis DB 14 (tests/README.md)
@pytest.mark.django_db(transaction=True)
def test_throttle_counters_are_shared_by_every_server_process_with_redis(tmp_path):
    import redis

    from tests.faults.conftest import worker_database_url

    redis.Redis(host="127.0.0.1", port=6379, db=14).flushdb()
    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "marketplace.settings",
        "DATABASE_URL": worker_database_url("mk_throttle_web"),
        "REDIS_URL": "redis://127.0.0.1:6379/14",
        "API_THROTTLE_ANON": "6/minute",
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
    try:
        wait_for(lambda: _get(f"{base}/healthz") == 200, timeout=45, what="gunicorn")
        codes = [_post(f"{base}/api/v1/quotes", SPEC) for _ in range(12)]
    finally:
        server.terminate()
        server.wait(timeout=15)
        log.close()
    # 3 processes, 6 per minute in all (not 6 per process): the 7th and later are refused
    assert codes[:6] == [201] * 6 and set(codes[6:]) == {429}, codes


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except (urllib.error.URLError, OSError):
        return 0


def _post(url: str, body: dict) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
