from decimal import Decimal

import pytest

from orders.models import Quote

pytestmark = pytest.mark.django_db

SPEC = {
    "task_type": "peg-insertion",
    "embodiment": "franka-fr3",
    "hours": "120",
    "environments": 4,
    "sensors": ["wrist-camera"],
}


def test_anonymous_quote_is_itemized_priced_and_stored(anon_client):
    # when
    response = anon_client.post("/api/v1/quotes", SPEC, format="json")
    # then
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["complexity"] == 4  # the task type's default
    assert body["rate_card_version"] == 1
    assert [line["code"] for line in body["lines"]] == [
        "base",
        "sensor:wrist-camera",
        "extra_environments",
        "volume_discount",
    ]
    # 120 h x 180 x 2.2 = 47520; sensor 1200; 3 extra envs x 150 = 450; 5% of 48720 = 2436
    assert Decimal(body["total"]) == Decimal("47520") + 1200 + 450 - 2436
    assert sum(Decimal(line["amount"]) for line in body["lines"]) == Decimal(body["total"])
    stored = Quote.objects.get(pk=body["id"])
    assert stored.organization is None and stored.total == Decimal(body["total"])
