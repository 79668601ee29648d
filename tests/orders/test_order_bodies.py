"""Order list and detail as plain dicts (orders/representations.py): equal to the serializers'
bodies field for field, in few statements, and conditional GETs (ETag / If-None-Match)."""

import uuid
from datetime import date
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from orders.api import OrderDetailSerializer, OrderSerializer
from orders.models import Order, OrderEvent
from orders.representations import (
    order_detail_representation,
    order_representation,
    order_row,
    order_rows,
)
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


def _varied_orders(organization) -> list[Order]:
    plain = OrderFactory(organization=organization)
    full = OrderFactory(
        organization=organization,
        hours=Decimal("123.4"),
        pilot_hours=Decimal("5.5"),
        deadline=None,
        notes="ünïcode ✓\n",
        success_criterion="80 % success",
        sensor_slugs=["force-torque", "wrist-camera"],
        rush=True,
        stream_spec={"cameras": [{"name": "wrist", "fps": 30}], "codec": "h264"},
        accepted_hours=Decimal("1.25"),
        status=Order.Status.IN_COLLECTION,
    )
    OrderEvent.objects.create(order=full, from_status="", to_status="awaiting_payment")
    OrderEvent.objects.create(
        order=full, from_status="awaiting_payment", to_status="paid", actor_label="staff:alice"
    )
    OrderEvent.objects.create(
        order=full, from_status="paid", to_status="in_collection", actor_label="api-key:abc"
    )
    dated = OrderFactory(organization=organization, deadline=date(2027, 2, 28), total=Decimal(0))
    return [plain, full, dated]


def test_the_bodies_equal_the_serializers_field_for_field(customer):
    orders = _varied_orders(customer.organization)
    rows = {
        row["id"]: row for row in order_rows(Order.objects.filter(pk__in=[o.pk for o in orders]))
    }
    for order in orders:
        loaded = Order.objects.prefetch_related("events").get(pk=order.pk)
        assert order_representation(rows[order.pk]) == OrderSerializer(loaded).data
        detail = order_detail_representation(rows[order.pk])
        assert detail == OrderDetailSerializer(loaded).data
        assert order_representation(order_row(loaded), []) == OrderDetailSerializer(
            Order.objects.prefetch_related("events").get(pk=order.pk)
        ).data | {"events": []}
    full = Order.objects.get(pk=orders[1].pk)
    labels = [e["actor_label"] for e in order_detail_representation(rows[full.pk])["events"]]
    assert labels == ["system", "staff", "api-key:abc"]  # staff names stay internal


def _get(client, path, **headers):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path, headers=headers)
    return response, [q["sql"] for q in queries]


def test_the_list_answers_the_serializers_bodies_in_two_statements(customer, other_customer):
    for _ in range(3):
        _varied_orders(customer.organization)
    OrderFactory(organization=other_customer.organization)
    customer.client.get("/api/v1/me")  # last_used_at recorded
    response, sqls = _get(customer.client, "/api/v1/orders?page_size=5")
    assert response.status_code == 200
    body = response.json()
    newest = Order.objects.filter(organization=customer.organization).order_by("-created_at", "-id")
    assert body["results"] == OrderSerializer(newest[:5], many=True).data
    assert body["next"] and body["previous"] is None
    # the key, the page of rows (joined), nothing per order
    assert len(sqls) == 2, sqls
    following = customer.client.get(body["next"]).json()
    assert following["results"] == OrderSerializer(newest[5:10], many=True).data


def test_the_detail_answers_the_serializers_body_in_three_statements(customer):
    order = _varied_orders(customer.organization)[1]
    customer.client.get("/api/v1/me")
    response, sqls = _get(customer.client, f"/api/v1/orders/{order.id}")
    assert response.status_code == 200
    loaded = Order.objects.prefetch_related("events").get(pk=order.pk)
    assert response.json() == OrderDetailSerializer(loaded).data
    assert len(response.json()["events"]) == 3
    assert len(sqls) == 3, sqls  # the key, the order's row, its events


@pytest.mark.parametrize("path", ["/api/v1/orders", "/api/v1/orders/{id}"])
def test_conditional_get_304_until_anything_in_the_body_changes(customer, path):
    order = OrderFactory(organization=customer.organization)
    url = path.format(id=order.id)
    first = customer.client.get(url)
    etag = first["ETag"]
    assert (
        first.status_code == 200
        and etag.startswith('"')
        and first["Cache-Control"] == "private, no-cache"
    )
    again = customer.client.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == etag
    assert customer.client.get(url, headers={"If-None-Match": f"W/{etag}"}).status_code == 304
    assert (
        customer.client.get(url, headers={"If-None-Match": '"other", ' + etag}).status_code == 304
    )
    assert customer.client.get(url, headers={"If-None-Match": '"other"'}).status_code == 200
    # when: the order changes (a field in the body), or it gains an event
    Order.objects.filter(pk=order.pk).update(notes="changed")
    changed = customer.client.get(url, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.json() and changed["ETag"] != etag
    changed_body = changed.json()
    assert (
        changed_body.get("notes", None) == "changed"
        or changed_body["results"][0]["notes"] == "changed"
    )
    OrderEvent.objects.create(order=order, from_status="", to_status="awaiting_payment")
    with_event = customer.client.get(url, headers={"If-None-Match": changed["ETag"]})
    if "{id}" in path:
        assert with_event.status_code == 200 and with_event["ETag"] != changed["ETag"]
    else:  # the list shows no events: its body, and so its ETag, stay
        assert with_event.status_code == 304


def test_another_tenants_order_never_answers_through_a_304(customer, other_customer, make_tenant):
    order = OrderFactory(organization=customer.organization)
    url = f"/api/v1/orders/{order.id}"
    etag = customer.client.get(url)["ETag"]
    stolen = other_customer.client.get(url, headers={"If-None-Match": etag})
    assert stolen.status_code == 404 and set(stolen.json()) == {"code", "message", "fields"}
    assert other_customer.client.get(url, headers={"If-None-Match": "*"}).status_code == 404
    unknown = customer.client.get(f"/api/v1/orders/{uuid.uuid4()}", headers={"If-None-Match": "*"})
    assert unknown.status_code == 404
    # two organizations' empty lists are the same body, never the same ETag
    empty = make_tenant()
    theirs = other_customer.client.get("/api/v1/orders")
    assert (
        theirs.json()["results"] == []
        and empty.client.get("/api/v1/orders").json() == theirs.json()
    )
    asked = empty.client.get("/api/v1/orders", headers={"If-None-Match": theirs["ETag"]})
    assert asked.status_code == 200 and asked["ETag"] != theirs["ETag"]


SPEC = {
    "task_type": "peg-insertion",
    "embodiment": "franka-fr3",
    "hours": "10",
    "environments": 2,
    "sensors": ["wrist-camera"],
}


def test_order_create_answers_the_serializers_body_in_few_statements(customer):
    customer.client.get("/api/v1/me")
    # warm, as a server is after its first request (catalog and rate card held)
    assert customer.client.post("/api/v1/quotes/preview", SPEC, format="json").status_code == 200
    with CaptureQueriesContext(connection) as queries:
        response = customer.client.post(
            "/api/v1/orders", SPEC, format="json", headers={"Idempotency-Key": "count-me"}
        )
    assert response.status_code == 201
    order = Order.objects.prefetch_related("events").get(pk=response.json()["id"])
    assert response.json() == OrderDetailSerializer(order).data
    assert [(e.from_status, e.to_status) for e in order.events.all()] == [
        ("", "draft"),
        ("draft", "awaiting_payment"),
    ]
    assert order.status == "awaiting_payment" and order.organization_id == customer.organization.id
    sqls = [q["sql"].split()[0] for q in queries]
    # the key; the idempotency row (one INSERT ... ON CONFLICT); a savepoint around the order
    # and its two events (one INSERT each); the events read for the body; the stored answer.
    # The test's own transaction stands for BEGIN/COMMIT (the outer SAVEPOINT/RELEASE here);
    # a real server adds conn_health_checks' SELECT 1: 11 in all.
    assert sqls == [
        "SELECT", "SAVEPOINT", "INSERT", "SAVEPOINT", "INSERT", "INSERT", "RELEASE",
        "SELECT", "UPDATE", "RELEASE",
    ], [q["sql"][:120] for q in queries]  # fmt: skip
    replay = customer.client.post(
        "/api/v1/orders", SPEC, format="json", headers={"Idempotency-Key": "count-me"}
    )
    assert replay.status_code == 201 and replay["Idempotent-Replayed"] == "true"
    assert replay.json() == response.json()
    assert Order.objects.filter(organization=customer.organization).count() == 1


def test_order_from_a_quote_answers_the_serializers_body(customer):
    quote = customer.client.post("/api/v1/quotes", SPEC, format="json").json()
    response = customer.client.post("/api/v1/orders", {"quote": quote["id"]}, format="json")
    assert response.status_code == 201
    order = Order.objects.prefetch_related("events").get(pk=response.json()["id"])
    assert response.json() == OrderDetailSerializer(order).data
    assert response.json()["total"] == quote["total"] and response.json()["quote"] == quote["id"]


@pytest.mark.parametrize("header", ["garbage", '"', "W/", ",,,", '"' + "x" * 10000 + '"', "W/*"])
def test_a_malformed_if_none_match_is_a_plain_200(customer, header):
    order = OrderFactory(organization=customer.organization)
    for url in ("/api/v1/orders", f"/api/v1/orders/{order.id}"):
        response = customer.client.get(url, headers={"If-None-Match": header})
        assert response.status_code == 200 and response.json(), (url, header)
