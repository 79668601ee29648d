"""Regression tests for what the API fuzzing found: each was a 500, now a clear 4xx."""

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from datasets.models import Delivery, DeliveryFile, DownloadEvent
from marketplace.models import Organization
from orders.models import Order
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "created_before",
    [
        "0001-01-01T00:00:00+05:00",  # before year 1 once in UTC
        "9999-12-31T23:59:59-15:00",  # after year 9999 once in UTC
    ],
)
def test_an_order_filter_date_out_of_postgresqls_range_is_a_400(make_tenant, created_before):
    # given
    customer = make_tenant(Organization.Kind.CUSTOMER)

    # when
    response = customer.client.get("/api/v1/orders", {"created_before": created_before})

    # then
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    assert "created_before" in body["fields"]


@pytest.mark.parametrize(
    ("created_after", "just_before", "just_after"),
    [
        # -20:18 is 20:18 UTC the same day: an order at 20:00 UTC is before it
        ("2020-01-01T00:00:00-20:18", "2020-01-01T20:00:00Z", "2020-01-01T20:30:00Z"),
        # +23:59 is 14:48:38 UTC the day before
        ("0101-11-28T14:47:38+23:59", "0101-11-27T14:40:00Z", "0101-11-27T15:00:00Z"),
    ],
)
def test_an_order_filter_date_with_an_offset_postgresql_refuses_is_shifted_to_utc(
    make_tenant, created_after, just_before, just_after
):
    # given: one order just before the instant (in UTC) and one just after it; read without
    # the offset, or with the filter dropped, both would be listed
    customer = make_tenant(Organization.Kind.CUSTOMER)
    before, after = OrderFactory.create_batch(2, organization=customer.organization)
    Order.objects.filter(pk=before.pk).update(created_at=parse_datetime(just_before))
    Order.objects.filter(pk=after.pk).update(created_at=parse_datetime(just_after))

    # when: ISO 8601 allows offsets up to 23:59, PostgreSQL only up to 15:59 (it was a 500)
    response = customer.client.get("/api/v1/orders", {"created_after": created_after})

    # then: the filter holds, at the same instant in UTC
    assert response.status_code == 200, response.content
    assert [row["id"] for row in response.json()["results"]] == [str(after.pk)]


@pytest.mark.parametrize("page_size", ["abc", "0", "-1", "1.5", "5.9e-123", "\u00e7"])
def test_a_page_size_that_is_not_a_whole_number_from_1_is_a_400(make_tenant, page_size):
    """Found by schemathesis' negative cases: DRF fell back to the default page size."""
    # given
    customer = make_tenant(Organization.Kind.CUSTOMER)

    # when
    response = customer.client.get("/api/v1/orders", {"page_size": page_size})

    # then
    assert response.status_code == 400, response.content
    assert response.json()["fields"] == {
        "page_size": ["A whole number from 1 (at most 200 are returned)."]
    }


def test_a_page_size_above_the_maximum_is_capped(make_tenant):
    # given: one order more than a page may hold
    customer = make_tenant(Organization.Kind.CUSTOMER)
    Order.objects.bulk_create(OrderFactory.build_batch(201, organization=customer.organization))

    # when
    response = customer.client.get("/api/v1/orders", {"page_size": "100000000000000000000000"})

    # then: a full page of exactly the cap, and a link to the one left
    assert response.status_code == 200, response.content
    body = response.json()
    assert len(body["results"]) == 200
    assert body["next"] is not None


@pytest.mark.parametrize("key", ["ab\x00c", "line\nbreak", "tab\there"])
def test_an_idempotency_key_with_control_characters_is_a_400(make_tenant, key):
    """A NUL byte in Idempotency-Key reached PostgreSQL (500). HTTP servers in front usually
    refuse such headers, but the API must not depend on it."""
    # given
    customer = make_tenant(Organization.Kind.CUSTOMER)
    body = {"task_type": "peg-insertion", "embodiment": "franka-fr3", "hours": "5"}

    # when
    response = customer.client.post("/api/v1/orders", body, format="json", HTTP_IDEMPOTENCY_KEY=key)

    # then
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_idempotency_key"


def test_an_api_key_with_a_nul_byte_in_its_prefix_is_refused_not_a_500(make_tenant):
    # given
    customer = make_tenant(Organization.Kind.CUSTOMER)
    prefix = customer.api_key.prefix
    forged = f"mk_{prefix[:4]}\x00{prefix[5:]}_secret"

    # when
    response = APIClient().get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {forged}")

    # then
    assert response.status_code == 401, response.content


@pytest.fixture
def ready_delivery(make_tenant):
    customer = make_tenant(Organization.Kind.CUSTOMER)
    order = OrderFactory(organization=customer.organization, status=Order.Status.DELIVERED)
    delivery = Delivery.objects.create(
        order=order,
        kind=Delivery.Kind.FULL,
        status=Delivery.Status.READY,
        prefix=f"deliveries/{order.id}/full",
        ready_at=timezone.now(),
    )
    DeliveryFile.objects.create(delivery=delivery, path="manifest.json", size_bytes=10)
    return customer, delivery


def test_a_download_path_with_a_nul_byte_is_not_found_not_a_500(ready_delivery):
    # given
    customer, delivery = ready_delivery

    # when
    response = customer.client.get(
        f"/api/v1/deliveries/{delivery.id}/download", {"path": "manifest.json\x00"}
    )

    # then
    assert response.status_code == 404, response.content
    assert response.json()["fields"] == {"path": ["Not in the manifest."]}
    assert not DownloadEvent.objects.exists()


@pytest.mark.usefixtures("s3")
def test_a_user_agent_with_a_nul_byte_is_recorded_without_it(ready_delivery):
    # given
    customer, delivery = ready_delivery

    # when
    response = customer.client.get(
        f"/api/v1/deliveries/{delivery.id}/download", HTTP_USER_AGENT="curl/8\x00.0"
    )

    # then
    assert response.status_code == 302, response.content
    assert DownloadEvent.objects.get().user_agent == "curl/8.0"


def test_a_pilot_rejection_reason_with_a_nul_byte_is_refused_on_the_web_page(make_tenant):
    """The API's serializer refused it already; the portal's form passed it to PostgreSQL."""
    # given
    customer = make_tenant(Organization.Kind.CUSTOMER)
    order = OrderFactory(organization=customer.organization, status=Order.Status.IN_REVIEW)
    pilot = Delivery.objects.create(
        order=order,
        kind=Delivery.Kind.PILOT,
        status=Delivery.Status.READY,
        review=Delivery.Review.PENDING,
        prefix=f"deliveries/{order.id}/pilot",
        ready_at=timezone.now(),
    )
    client = Client()
    client.force_login(customer.user)

    # when
    response = client.post(
        f"/deliveries/{pilot.id}/review/", {"decision": "reject", "reason": "too\x00dark"}
    )

    # then
    assert response.status_code in (200, 302), response.status_code
    pilot.refresh_from_db()
    assert pilot.review == Delivery.Review.PENDING
