import threading
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from marketplace import services as account_services
from marketplace.models import Membership, Organization
from orders.models import Order, OrderEvent, Quote, RateCard
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db

SPEC = {
    "task_type": "cloth-folding",
    "embodiment": "aloha-bimanual",
    "hours": "40",
    "environments": 8,
    "objects_per_environment": 5,
    "sensors": ["wrist-camera", "force-torque"],
}


def in_days(days: int) -> str:
    return (timezone.localdate() + timedelta(days=days)).isoformat()


def test_order_from_a_full_specification_is_priced_by_the_server(customer):
    # when
    response = customer.client.post(
        "/api/v1/orders",
        {
            **SPEC,
            "deadline": in_days(45),
            "pilot_hours": "4",
            "success_criterion": "folded",
            "notes": "hi",
        },
        format="json",
    )
    # then
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "awaiting_payment"
    assert body["complexity"] == 5
    assert body["pilot_hours"] == "4.00"
    assert sum(Decimal(line["amount"]) for line in body["lines"]) == Decimal(body["total"])
    assert [(e["from_status"], e["to_status"]) for e in body["events"]] == [
        ("", "draft"),
        ("draft", "awaiting_payment"),
    ]
    order = Order.objects.get(pk=body["id"])
    assert order.organization == customer.organization
    assert order.created_by_api_key == customer.api_key
    assert order.sensor_slugs == ["force-torque", "wrist-camera"]


def test_order_from_a_quote_keeps_the_quoted_price_and_uses_the_quote_once(customer):
    # given
    quote = customer.client.post("/api/v1/quotes", SPEC, format="json").json()
    # when
    first = customer.client.post("/api/v1/orders", {"quote": quote["id"]}, format="json")
    second = customer.client.post("/api/v1/orders", {"quote": quote["id"]}, format="json")
    # then
    assert first.status_code == 201, first.json()
    assert first.json()["total"] == quote["total"]
    assert first.json()["lines"] == quote["lines"]
    assert first.json()["quote"] == quote["id"]
    assert second.status_code == 409
    assert second.json()["code"] == "quote_used"
    assert Order.objects.count() == 1


def test_an_anonymous_quote_can_be_ordered_after_signing_in(anon_client, customer):
    quote = anon_client.post("/api/v1/quotes", SPEC, format="json").json()
    response = customer.client.post("/api/v1/orders", {"quote": quote["id"]}, format="json")
    assert response.status_code == 201


def test_a_rate_card_change_does_not_change_an_existing_quote(customer):
    # given: a quote priced with v1
    quote = customer.client.post("/api/v1/quotes", SPEC, format="json").json()
    # when: v2 with every price doubled comes into force
    v1 = RateCard.objects.get(version=1)
    v2 = RateCard.objects.create(
        version=2,
        effective_from=timezone.now() - timedelta(seconds=1),
        currency="USD",
        included_environments=1,
        extra_environment_fee=v1.extra_environment_fee * 2,
    )
    for rate in v1.embodiment_rates.all():
        v2.embodiment_rates.create(embodiment=rate.embodiment, hourly_rate=rate.hourly_rate * 2)
    for rate in v1.sensor_rates.all():
        v2.sensor_rates.create(sensor=rate.sensor, hourly_rate=rate.hourly_rate * 2)
    for multiplier in v1.complexity_multipliers.all():
        v2.complexity_multipliers.create(level=multiplier.level, multiplier=multiplier.multiplier)
    # then: the stored quote and an order from it keep v1's price; a new quote uses v2
    assert customer.client.get(f"/api/v1/quotes/{quote['id']}").json()["total"] == quote["total"]
    order = customer.client.post("/api/v1/orders", {"quote": quote["id"]}, format="json").json()
    assert order["total"] == quote["total"] and order["rate_card_version"] == 1
    fresh = customer.client.post("/api/v1/quotes", SPEC, format="json").json()
    assert fresh["rate_card_version"] == 2
    assert Decimal(fresh["total"]) > Decimal(quote["total"])


@pytest.mark.parametrize("field", ["total", "price", "lines", "currency", "amount"])
def test_a_price_sent_by_the_client_is_refused(customer, field):
    quote = customer.client.post("/api/v1/quotes", SPEC, format="json").json()
    for body in ({**SPEC, field: "1"}, {"quote": quote["id"], field: "1"}):
        response = customer.client.post("/api/v1/orders", body, format="json")
        assert response.status_code == 400
        assert field in response.json()["fields"]
    assert Order.objects.count() == 0


def test_spec_fields_beside_a_quote_are_refused(customer):
    quote = customer.client.post("/api/v1/quotes", SPEC, format="json").json()
    response = customer.client.post(
        "/api/v1/orders", {"quote": quote["id"], "hours": "1"}, format="json"
    )
    assert response.status_code == 400
    assert "hours" in response.json()["fields"]


def test_an_expired_quote_is_refused(customer):
    quote = customer.client.post("/api/v1/quotes", SPEC, format="json").json()
    Quote.objects.filter(pk=quote["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = customer.client.post("/api/v1/orders", {"quote": quote["id"]}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "quote_expired"
    assert Order.objects.count() == 0


def test_another_organizations_quote_is_not_found(customer, other_customer):
    quote = other_customer.client.post("/api/v1/quotes", SPEC, format="json").json()
    for quote_id in (quote["id"], str(uuid.uuid4())):
        response = customer.client.post("/api/v1/orders", {"quote": quote_id}, format="json")
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"
    assert Order.objects.count() == 0


BAD_ORDERS = [
    ({"hours": "0"}, "hours"),
    ({"hours": "-1"}, "hours"),
    ({"hours": "99999999"}, "hours"),
    ({"environments": 1.5}, "environments"),
    ({"task_type": "unknown"}, "task_type"),
    ({"deadline": "2020-01-01"}, "deadline"),
    ({"deadline": "tomorrow"}, "deadline"),
    ({"pilot_hours": "40"}, "pilot_hours"),  # must be less than the order
    ({"pilot_hours": "-1"}, "pilot_hours"),
    ({"output_format": "csv"}, "output_format"),
    ({"quote": "not-a-uuid"}, "quote"),
    ({"notes": 5 * "x" * 2000}, "notes"),
]


@pytest.mark.parametrize(("change", "field"), BAD_ORDERS)
def test_bad_order_input_is_a_400_in_the_one_error_shape(customer, change, field):
    response = customer.client.post("/api/v1/orders", {**SPEC, **change}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["fields"]
    assert Order.objects.count() == 0
    assert OrderEvent.objects.count() == 0


def test_a_deadline_sooner_than_the_standard_lead_time_needs_rush(customer):
    soon = {**SPEC, "deadline": in_days(10)}
    refused = customer.client.post("/api/v1/orders", soon, format="json")
    accepted = customer.client.post("/api/v1/orders", {**soon, "rush": True}, format="json")
    assert refused.status_code == 400 and "rush" in refused.json()["fields"]["deadline"][0]
    assert accepted.status_code == 201
    assert "rush" in [line["code"] for line in accepted.json()["lines"]]


def test_a_fleet_operator_key_cannot_create_or_list_orders(fleet_operator):
    assert fleet_operator.client.post("/api/v1/orders", SPEC, format="json").status_code == 403
    assert fleet_operator.client.get("/api/v1/orders").status_code == 403
    assert Order.objects.count() == 0


def test_a_billing_only_member_can_read_but_not_order(make_tenant):
    billing = make_tenant(Organization.Kind.CUSTOMER, Membership.Role.BILLING)
    assert billing.client.get("/api/v1/orders").status_code == 200
    assert billing.client.post("/api/v1/orders", SPEC, format="json").status_code == 403


def test_a_revoked_key_is_refused(customer):
    account_services.api_key_revoke(api_key=customer.api_key)
    response = customer.client.get("/api/v1/orders")
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"


def test_anonymous_callers_cannot_touch_orders(anon_client):
    assert anon_client.get("/api/v1/orders").status_code == 401
    assert anon_client.post("/api/v1/orders", SPEC, format="json").status_code == 401


def test_customers_cannot_see_or_cancel_each_others_orders(customer, other_customer):
    # given
    theirs = OrderFactory(organization=other_customer.organization)
    mine = OrderFactory(organization=customer.organization)
    # then
    listed = [o["id"] for o in customer.client.get("/api/v1/orders").json()["results"]]
    assert listed == [str(mine.id)]
    assert customer.client.get(f"/api/v1/orders/{theirs.id}").status_code == 404
    response = customer.client.post(f"/api/v1/orders/{theirs.id}/cancel", {}, format="json")
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.status == Order.Status.AWAITING_PAYMENT


def test_cancel_writes_an_event_and_is_idempotent(customer):
    order = OrderFactory(organization=customer.organization)
    # when
    first = customer.client.post(
        f"/api/v1/orders/{order.id}/cancel", {"reason": "budget"}, format="json"
    )
    again = customer.client.post(f"/api/v1/orders/{order.id}/cancel", {}, format="json")
    # then
    assert first.status_code == 200 and first.json()["status"] == "cancelled"
    assert again.status_code == 200
    events = list(order.events.values_list("from_status", "to_status", "reason"))
    assert events == [("awaiting_payment", "cancelled", "budget")]


def test_an_order_past_collection_cannot_be_cancelled_by_the_customer(customer):
    order = OrderFactory(organization=customer.organization, status=Order.Status.DELIVERED)
    response = customer.client.post(f"/api/v1/orders/{order.id}/cancel", {}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "invalid_transition"
    assert order.events.count() == 0


def test_malformed_order_ids_are_json_404s(customer):
    response = customer.client.get("/api/v1/orders/not-a-uuid")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_the_list_filters_by_status_and_task_type(customer):
    paid = OrderFactory(organization=customer.organization, status=Order.Status.PAID)
    OrderFactory(organization=customer.organization)
    by_status = customer.client.get("/api/v1/orders?status=paid").json()["results"]
    assert [o["id"] for o in by_status] == [str(paid.id)]
    by_task = customer.client.get("/api/v1/orders?task_type=peg-insertion").json()["results"]
    assert len(by_task) == 2
    assert customer.client.get("/api/v1/orders?status=bogus").status_code == 400


def test_the_list_is_cursor_paginated_without_repeats(customer):
    ids = {str(OrderFactory(organization=customer.organization).id) for _ in range(7)}
    seen, url = [], "/api/v1/orders?page_size=3"
    while url:
        page = customer.client.get(url).json()
        seen += [o["id"] for o in page["results"]]
        url = page["next"]
    assert len(seen) == 7 and set(seen) == ids


@pytest.mark.parametrize("count", [1, 200])
def test_listing_orders_costs_the_same_queries_for_1_and_200(
    customer, count, django_assert_num_queries
):
    # given
    OrderFactory.create_batch(count, organization=customer.organization)
    # then: key lookup, key touch, orders page (with catalog joins)
    with django_assert_num_queries(3):
        response = customer.client.get("/api/v1/orders?page_size=200")
    assert response.status_code == 200
    assert len(response.json()["results"]) == count


# --- Idempotency-Key -------------------------------------------------------------------------


def test_the_same_idempotency_key_twice_yields_one_order(customer):
    headers = {"HTTP_IDEMPOTENCY_KEY": "order-123"}
    first = customer.client.post("/api/v1/orders", SPEC, format="json", **headers)
    second = customer.client.post("/api/v1/orders", SPEC, format="json", **headers)
    assert first.status_code == second.status_code == 201
    assert first.json() == second.json()
    assert second["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


def test_an_idempotency_key_reused_with_another_body_is_a_409(customer):
    headers = {"HTTP_IDEMPOTENCY_KEY": "order-456"}
    customer.client.post("/api/v1/orders", SPEC, format="json", **headers)
    response = customer.client.post(
        "/api/v1/orders", {**SPEC, "hours": "41"}, format="json", **headers
    )
    assert response.status_code == 409
    assert response.json()["code"] == "idempotency_key_reused"
    assert Order.objects.count() == 1


def test_a_failed_request_does_not_burn_its_idempotency_key(customer):
    headers = {"HTTP_IDEMPOTENCY_KEY": "order-789"}
    bad = customer.client.post("/api/v1/orders", {**SPEC, "hours": "0"}, format="json", **headers)
    good = customer.client.post("/api/v1/orders", SPEC, format="json", **headers)
    assert bad.status_code == 400 and good.status_code == 201


def test_idempotency_keys_are_per_organization(customer, other_customer):
    headers = {"HTTP_IDEMPOTENCY_KEY": "shared-key"}
    customer.client.post("/api/v1/orders", SPEC, format="json", **headers)
    response = other_customer.client.post("/api/v1/orders", SPEC, format="json", **headers)
    assert response.status_code == 201
    assert Order.objects.filter(organization=other_customer.organization).count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs a server database")
def test_concurrent_posts_with_one_idempotency_key_create_one_order(make_tenant):
    # given: 8 clients on 8 database connections, released at once
    customer = make_tenant()
    barrier = threading.Barrier(8)
    results: list[tuple[int, str]] = []

    def post():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.raw_key}")
        try:
            barrier.wait(timeout=10)
            response = client.post(
                "/api/v1/orders", SPEC, format="json", HTTP_IDEMPOTENCY_KEY="race-1"
            )
            results.append((response.status_code, response.json().get("id")))
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(8)]
    # when
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # then
    assert len(results) == 8
    assert {code for code, _ in results} == {201}
    assert len({order_id for _, order_id in results}) == 1
    assert Order.objects.count() == 1
