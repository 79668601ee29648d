import hashlib

import pytest
from rest_framework.test import APIClient

from marketplace import services
from marketplace.models import ApiKey, Membership, Organization

pytestmark = pytest.mark.django_db


def test_a_key_is_stored_hashed_with_a_visible_prefix(customer):
    stored = ApiKey.objects.get(pk=customer.api_key.pk)
    assert customer.raw_key.startswith(f"mk_{stored.prefix}_")
    assert stored.hashed_key == hashlib.sha256(customer.raw_key.encode()).hexdigest()
    assert customer.raw_key not in str(ApiKey.objects.filter(pk=stored.pk).values().get())


def test_me_reports_the_keys_organization_and_records_last_use(customer):
    assert customer.api_key.last_used_at is None
    body = customer.client.get("/api/v1/me").json()
    assert body["organization"] == str(customer.organization.id)
    assert body["organization_kind"] == "customer"
    assert body["api_key_prefix"] == customer.api_key.prefix
    customer.api_key.refresh_from_db()
    assert customer.api_key.last_used_at is not None


@pytest.mark.parametrize(
    "header",
    [
        "Bearer mk_0000000000_wrongsecret",
        "Bearer not-a-key",
        "Bearer ",
        "Bearer mk_short_x",
    ],
)
def test_unknown_or_malformed_keys_are_401(header, customer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/me")
    assert response.status_code == 401
    assert set(response.json()) == {"code", "message", "fields"}


def test_a_key_with_the_right_prefix_but_a_wrong_secret_is_refused(customer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer mk_{customer.api_key.prefix}_guessed")
    assert client.get("/api/v1/me").status_code == 401


def test_an_owner_creates_a_key_shown_once_and_can_revoke_it(customer):
    # when
    created = customer.client.post("/api/v1/api-keys", {"name": "ci"}, format="json")
    # then
    assert created.status_code == 201
    raw = created.json()["key"]
    listed = customer.client.get("/api/v1/api-keys").json()["results"]
    assert all("key" not in item for item in listed)
    new_client = APIClient()
    new_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert new_client.get("/api/v1/me").status_code == 200
    # when revoked, refused at once
    revoked = customer.client.post(f"/api/v1/api-keys/{created.json()['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["is_active"] is False
    assert new_client.get("/api/v1/me").status_code == 401
    again = customer.client.post(f"/api/v1/api-keys/{created.json()['id']}/revoke")
    assert again.status_code == 409


def test_members_cannot_manage_keys_and_other_orgs_keys_are_invisible(make_tenant, customer):
    member = make_tenant(Organization.Kind.CUSTOMER, Membership.Role.MEMBER)
    assert member.client.get("/api/v1/api-keys").status_code == 403
    assert member.client.post("/api/v1/api-keys", {"name": "x"}, format="json").status_code == 403
    response = customer.client.post(f"/api/v1/api-keys/{member.api_key.id}/revoke")
    assert response.status_code == 404
    member.api_key.refresh_from_db()
    assert member.api_key.revoked_at is None


def test_session_auth_works_for_signed_in_people(customer):
    client = customer.session_client()
    body = client.get("/api/v1/me").json()
    assert body["user"] == customer.user.username
    assert body["organization"] == str(customer.organization.id)


def test_a_person_in_two_organizations_picks_one_and_cannot_pick_a_foreign_one(
    customer, other_customer
):
    second = services.organization_create(name="Second lab", kind="customer", owner=customer.user)
    client = customer.session_client()
    assert client.get("/api/v1/me", HTTP_X_ORGANIZATION=str(second.id)).json()[
        "organization"
    ] == str(second.id)
    foreign = client.get("/api/v1/me", HTTP_X_ORGANIZATION=str(other_customer.organization.id))
    assert foreign.status_code == 404
    assert client.get("/api/v1/me", HTTP_X_ORGANIZATION="junk").status_code == 404


def test_session_writes_need_csrf(customer):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(customer.user)
    response = client.post("/api/v1/api-keys", {"name": "x"}, format="json")
    assert response.status_code == 403


def test_a_key_used_within_the_minute_is_not_written_again(customer):
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    def key_updates() -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            assert customer.client.get("/api/v1/me").status_code == 200
        return [q["sql"] for q in queries if q["sql"].startswith('UPDATE "marketplace_apikey"')]

    # given: a key just used
    assert len(key_updates()) == 1
    # when / then: used again at once, authenticating it writes nothing
    assert key_updates() == []
    # when / then: used again more than a minute later, its last use is recorded
    ApiKey.objects.filter(pk=customer.api_key.pk).update(
        last_used_at=timezone.now() - timedelta(minutes=2)
    )
    assert len(key_updates()) == 1


def test_a_copy_older_than_the_recorded_use_is_written_at_most_once(customer):
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    # given: this process's copy of the key last used 2 minutes ago, while another process
    # recorded a use just now (a held copy, api_key_cache)
    now = timezone.now()
    copy = ApiKey.objects.get(pk=customer.api_key.pk)
    copy.last_used_at = now - timedelta(minutes=2)
    ApiKey.objects.filter(pk=copy.pk).update(last_used_at=now)
    # when: it is touched twice
    with CaptureQueriesContext(connection) as first:
        services.api_key_touch(api_key=copy)
    with CaptureQueriesContext(connection) as second:
        services.api_key_touch(api_key=copy)
    # then: one UPDATE that found the use recorded, then nothing for the minute
    assert len(first.captured_queries) == 1 and second.captured_queries == []
    assert ApiKey.objects.get(pk=copy.pk).last_used_at == now
    # and a revoked key's use is not recorded
    services.api_key_revoke(api_key=copy)
    ApiKey.objects.filter(pk=copy.pk).update(last_used_at=None)
    services.api_key_touch(api_key=ApiKey.objects.get(pk=copy.pk))
    assert ApiKey.objects.get(pk=copy.pk).last_used_at is None
