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


def test_a_signed_in_customer_quote_belongs_to_its_organization(customer, other_customer):
    # when
    response = customer.client.post("/api/v1/quotes", SPEC, format="json")
    # then
    assert response.status_code == 201
    quote_id = response.json()["id"]
    assert Quote.objects.get(pk=quote_id).organization == customer.organization
    assert customer.client.get(f"/api/v1/quotes/{quote_id}").status_code == 200
    assert other_customer.client.get(f"/api/v1/quotes/{quote_id}").status_code == 404


def test_complexity_can_be_chosen_and_changes_the_price(anon_client):
    low = anon_client.post("/api/v1/quotes", {**SPEC, "complexity": 1}, format="json").json()
    high = anon_client.post("/api/v1/quotes", {**SPEC, "complexity": 5}, format="json").json()
    assert Decimal(high["total"]) > Decimal(low["total"])


BAD_QUOTES = [
    ({"hours": "0"}, "hours"),
    ({"hours": "-5"}, "hours"),
    ({"hours": "1.555"}, "hours"),  # more than two decimal places
    ({"hours": "1e9"}, "hours"),
    ({"hours": "100000"}, "hours"),  # absurdly large
    ({"hours": "NaN"}, "hours"),
    ({"hours": "Infinity"}, "hours"),
    ({"hours": "ten"}, "hours"),
    ({"hours": [1]}, "hours"),
    ({"environments": 2.5}, "environments"),
    ({"environments": 0}, "environments"),
    ({"environments": "many"}, "environments"),
    ({"environments": 400}, "environments"),  # 120 h cannot cover 400 sites at 0.5 h each
    ({"objects_per_environment": 0}, "objects_per_environment"),
    ({"task_type": "juggling"}, "task_type"),
    ({"embodiment": "warp-drive"}, "embodiment"),
    ({"complexity": 6}, "complexity"),
    ({"complexity": "hard"}, "complexity"),
    ({"sensors": ["x-ray"]}, "sensors"),
    ({"sensors": "wrist-camera"}, "sensors"),
    ({"rush": "maybe"}, "rush"),
    ({"total": "1.00"}, "total"),  # prices are the server's
]


@pytest.mark.parametrize(("change", "field"), BAD_QUOTES)
def test_bad_quote_input_is_a_400_in_the_one_error_shape(anon_client, change, field):
    # when
    response = anon_client.post("/api/v1/quotes", {**SPEC, **change}, format="json")
    # then
    assert response.status_code == 400, response.json()
    body = response.json()
    assert set(body) == {"code", "message", "fields"}
    assert field in body["fields"], body
    assert body["message"]
    assert Quote.objects.count() == 0


@pytest.mark.parametrize("missing", ["task_type", "embodiment", "hours"])
def test_missing_required_fields_are_named(anon_client, missing):
    spec = {k: v for k, v in SPEC.items() if k != missing}
    response = anon_client.post("/api/v1/quotes", spec, format="json")
    assert response.status_code == 400
    assert missing in response.json()["fields"]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("{not json", "application/json"),
        ("[1, 2, 3]", "application/json"),
        ('"a string"', "application/json"),
        ("null", "application/json"),
        ("hours=5", "application/x-www-form-urlencoded"),
        ("\xff\xfe", "application/json"),
    ],
)
def test_malformed_bodies_are_4xx_not_500(anon_client, body, content_type):
    response = anon_client.post("/api/v1/quotes", body, content_type=content_type)
    assert 400 <= response.status_code < 500
    assert set(response.json()) == {"code", "message", "fields"}


def test_anonymous_quotes_are_throttled(anon_client, settings):
    # given: the anonymous rate from settings (60/minute by default)
    limit = 60
    codes = [
        anon_client.post("/api/v1/quotes", SPEC, format="json").status_code
        for _ in range(limit + 1)
    ]
    # then
    assert codes[:limit] == [201] * limit
    assert codes[limit] == 429


def test_throttled_answer_uses_the_error_shape(anon_client):
    for _ in range(61):
        response = anon_client.post("/api/v1/quotes", SPEC, format="json")
    assert response.status_code == 429
    assert response.json()["code"] == "throttled"


def test_quotes_expire_per_the_rate_card(anon_client):
    body = anon_client.post("/api/v1/quotes", SPEC, format="json").json()
    quote = Quote.objects.get(pk=body["id"])
    assert (quote.expires_at - quote.created_at).total_seconds() == pytest.approx(72 * 3600, abs=5)


def test_pricing_a_quote_costs_a_fixed_number_of_queries(anon_client, django_assert_num_queries):
    first = anon_client.post("/api/v1/quotes", SPEC, format="json")  # loads catalog and terms
    # then: the catalog and the rate card come from the process's copy; only the insert is left
    with django_assert_num_queries(1):
        again = anon_client.post("/api/v1/quotes", SPEC, format="json")
    assert again.status_code == 201
    body = again.json()
    assert body["total"] == first.json()["total"] and body["lines"] == first.json()["lines"]
    assert body["rate_card_version"] == 1 and body["id"] != first.json()["id"]
    assert Quote.objects.filter(pk=body["id"], total=Decimal(body["total"])).exists()


def test_a_catalog_change_is_seen_by_the_next_quote(anon_client):
    from orders.models import Embodiment

    assert anon_client.post("/api/v1/quotes", SPEC, format="json").status_code == 201
    embodiment = Embodiment.objects.get(slug=SPEC["embodiment"])
    embodiment.active = False
    embodiment.save()  # the admin's way: the cached copy is dropped
    refused = anon_client.post("/api/v1/quotes", SPEC, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "unknown_embodiment"
    embodiment.active = True
    embodiment.save()
    assert anon_client.post("/api/v1/quotes", SPEC, format="json").status_code == 201


def test_a_change_the_process_did_not_see_is_read_after_the_cache_time(anon_client, settings):
    from orders.models import SensorAddon

    assert anon_client.post("/api/v1/quotes", SPEC, format="json").status_code == 201
    # another process's change, without the shared cache to tell this one (update() sends no
    # signal): the copy is kept until CATALOG_CACHE_SECONDS have passed
    SensorAddon.objects.filter(slug__in=SPEC["sensors"]).update(active=False)
    assert anon_client.post("/api/v1/quotes", SPEC, format="json").status_code == 201
    settings.CATALOG_CACHE_SECONDS = 0
    refused = anon_client.post("/api/v1/quotes", SPEC, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "unknown_sensor"


def test_a_rate_card_coming_into_force_is_used_from_its_date(anon_client):
    from datetime import timedelta

    from django.utils import timezone

    from orders import catalog
    from orders.models import RateCard

    assert anon_client.post("/api/v1/quotes", SPEC, format="json").json()["rate_card_version"] == 1
    starts = timezone.now() + timedelta(seconds=5)
    card = RateCard.objects.create(version=7, effective_from=starts, currency="EUR")
    assert catalog.rate_card_in_force().version == 1
    assert catalog.rate_card_in_force(starts).pk == card.pk  # decided by time, not reloaded


def test_a_rate_card_not_yet_in_force_is_not_used(anon_client):
    from datetime import timedelta

    from django.utils import timezone

    from orders.models import RateCard

    RateCard.objects.create(
        version=9, effective_from=timezone.now() + timedelta(days=1), currency="EUR"
    )
    assert anon_client.post("/api/v1/quotes", SPEC, format="json").json()["rate_card_version"] == 1


def test_a_price_preview_matches_a_quote_and_stores_nothing(anon_client):
    preview = anon_client.post("/api/v1/quotes/preview", SPEC, format="json")
    assert preview.status_code == 200
    assert Quote.objects.count() == 0
    quote = anon_client.post("/api/v1/quotes", SPEC, format="json").json()
    assert preview.json()["total"] == quote["total"] and preview.json()["lines"] == quote["lines"]
    assert "id" not in preview.json()


def test_a_price_preview_refuses_bad_input_like_quotes(anon_client):
    response = anon_client.post("/api/v1/quotes/preview", {**SPEC, "hours": "-1"}, format="json")
    assert response.status_code == 400 and "hours" in response.json()["fields"]
