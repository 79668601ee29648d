"""The orjson renderer (marketplace/renderers.py) says what DRF's JSONRenderer says: real
endpoints' responses rendered by both parse to the same JSON (the bytes differ only in how a
float's exponent is spelled, 1e-7 against 1e-07), and the types a view can hand it (lazy
translations, datetimes, Decimals, UUIDs, non-string keys...) come out as DRF writes them."""

import datetime
import ipaddress
import json
import uuid
from decimal import Decimal

import numpy as np
import pytest
from django.utils.translation import gettext_lazy
from rest_framework.renderers import JSONRenderer

from marketplace.models import Membership
from marketplace.renderers import ApiJSONRenderer
from tests.factories import JobFactory, OrderFactory, SiteFactory

pytestmark = pytest.mark.django_db

UTC = datetime.UTC


def _both(data, media_type="application/json"):
    return (
        ApiJSONRenderer().render(data, media_type, {}),
        JSONRenderer().render(data, media_type, {}),
    )


def test_the_api_answers_with_the_orjson_renderer(customer):
    response = customer.client.get("/api/v1/me")
    assert response.status_code == 200
    assert isinstance(response.accepted_renderer, ApiJSONRenderer)
    assert response["Content-Type"] == "application/json"


def test_real_endpoints_render_the_same_with_both(customer, other_customer, fleet_operator):
    order = OrderFactory(organization=customer.organization, notes='ünïcode ✓ "quoted"\n')
    OrderFactory(organization=customer.organization, status="cancelled")
    OrderFactory(organization=other_customer.organization)
    site = SiteFactory(fleet__organization=fleet_operator.organization)
    JobFactory(order__organization=customer.organization, site=site)
    quote = customer.client.post(
        "/api/v1/quotes",
        {"task_type": "peg-insertion", "embodiment": "ur5e", "hours": "10.5", "rush": True},
        format="json",
    )
    assert quote.status_code == 201
    calls = [
        (customer.client, "/api/v1/me"),
        (customer.client, "/api/v1/api-keys"),
        (customer.client, "/api/v1/catalog/task-types"),
        (customer.client, "/api/v1/catalog/embodiments"),
        (customer.client, "/api/v1/catalog/sensors"),
        (customer.client, "/api/v1/catalog/rate-card"),
        (customer.client, f"/api/v1/quotes/{quote.json()['id']}"),
        (customer.client, "/api/v1/orders"),
        (customer.client, f"/api/v1/orders/{order.id}"),
        (customer.client, f"/api/v1/orders/{order.id}/coverage"),
        (customer.client, f"/api/v1/orders/{uuid.uuid4()}"),  # the error shape, 404
        (customer.client, "/api/v1/orders?page_size=abc"),  # 400 with fields
        (fleet_operator.client, "/api/v1/fleet/fleets"),
        (fleet_operator.client, "/api/v1/fleet/sites"),
        (fleet_operator.client, "/api/v1/fleet/jobs"),
    ]
    responses = [quote] + [client.get(path) for client, path in calls]
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) >= 12 and 404 in statuses and 400 in statuses, statuses
    for response in responses:
        ours, drfs = _both(response.data)
        assert json.loads(ours) == json.loads(drfs), response.request["PATH_INFO"]
        assert json.loads(response.content) == json.loads(drfs)


def test_the_types_a_view_can_hand_over_come_out_as_drf_writes_them():
    data = {
        "lazy": gettext_lazy("Not found."),
        "utc": datetime.datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC),
        "utc_whole": datetime.datetime(2026, 3, 1, 12, 30, tzinfo=UTC),
        "offset": datetime.datetime(
            2026, 3, 1, 12, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
        ),
        "naive": datetime.datetime(2026, 3, 1, 12, 30),
        "date": datetime.date(2026, 3, 1),
        "time": datetime.time(7, 8, 9, 10),
        "duration": datetime.timedelta(hours=1, seconds=0.5),
        "decimal": Decimal("12.50"),
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "ip": ipaddress.ip_address("10.0.0.1"),
        "bytes": b"raw",
        "tuple": (1, 2),
        "set": {3},
        "choice": Membership.Role.OWNER,
        "numpy": np.array([1.5, 2.5]),
        "numpy_scalar": np.int64(7),
        "nested": [{"x": None, "y": True, "z": 1.25, "e": 1e-7, "big": 2**62}],
        1: "int key",
        None: "none key",
        2.5: "float key",
        False: "bool key",
        "unicode": "ünïcode ✓ \u2028 \x00",
    }
    ours, drfs = _both(data)
    assert json.loads(ours) == json.loads(drfs)
    parsed = json.loads(ours)
    assert (
        parsed["utc"] == "2026-03-01T12:30:05.123456Z"
        and parsed["utc_whole"] == "2026-03-01T12:30:00Z"
    )
    assert (
        parsed["decimal"] == 12.5
    )  # a raw Decimal is a number in DRF's encoder (serializers give strings)
    assert (
        parsed["1"] == "int key" and parsed["null"] == "none key" and parsed["false"] == "bool key"
    )


def test_what_orjson_refuses_is_rendered_or_refused_by_drf_itself():
    huge = {"n": 2**70}
    ours, drfs = _both(huge)
    assert ours == drfs == b'{"n":1180591620717411303424}'
    with pytest.raises(ValueError):  # DRF: "JSON can't represent timezone-aware times."
        ApiJSONRenderer().render({"t": datetime.time(1, tzinfo=UTC)})
    with pytest.raises(TypeError):
        ApiJSONRenderer().render({"o": object()})
    assert ApiJSONRenderer().render(None) == JSONRenderer().render(None) == b""


def test_for_the_browsable_api_the_body_is_indented_and_the_same_json():
    # BrowsableAPIRenderer (DEBUG) renders the body with the first JSON renderer, as text/html
    data = {"a": Decimal("1.5"), "when": datetime.datetime(2026, 1, 1, tzinfo=UTC), "l": [1]}
    ours, drfs = _both(data, media_type="text/html")
    assert b"\n  " in ours
    assert json.loads(ours) == json.loads(drfs)
