"""Regression tests for what the API fuzzing found: each was a 500, now a clear 4xx."""

import pytest

from marketplace.models import Organization

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
    "created_after", ["2020-01-01T00:00:00-20:18", "0101-11-28T14:47:38+23:59"]
)
def test_an_order_filter_date_with_an_offset_postgresql_refuses_is_shifted_to_utc(
    make_tenant, created_after
):
    # given
    customer = make_tenant(Organization.Kind.CUSTOMER)

    # when: ISO 8601 allows offsets up to 23:59, PostgreSQL only up to 15:59 (it was a 500)
    response = customer.client.get("/api/v1/orders", {"created_after": created_after})

    # then
    assert response.status_code == 200, response.content
