"""The collection plan on quotes and orders (issue 30): distinct objects priced on the rate
card (property tests of the pure pricing, in the style of test_pricing.py), the plan's fields
validated and carried from quote to order, and the seeded fee on the price list."""

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orders.api import OrderDetailSerializer, QuoteSerializer
from orders.models import Order, Quote, RateCard
from orders.pricing import (
    PriceRequest,
    PricingError,
    RateCardTerms,
    price_dataset,
    quantize_money,
)
from tests.orders.test_pricing import priced

fees = st.decimals(min_value=Decimal("0"), max_value=Decimal("1000"), places=2)


@st.composite
def with_objects(draw):
    terms, request = draw(priced())
    terms = RateCardTerms(
        **{
            **terms.__dict__,
            "included_objects": draw(st.integers(min_value=1, max_value=5)),
            "extra_object_fee": draw(fees),
        }
    )
    objects = draw(st.integers(min_value=1, max_value=200))
    return terms, PriceRequest(**{**request.__dict__, "distinct_objects": objects})


@settings(max_examples=300)
@given(with_objects())
def test_extra_objects_are_one_flat_line_beyond_those_included(case):
    terms, request = case
    # when
    price = price_dataset(request, terms)
    # then
    lines = {line.code: line for line in price.lines}
    extra = request.distinct_objects - terms.included_objects
    if extra > 0:
        line = lines["extra_objects"]
        assert line.quantity == extra
        assert line.unit_amount == terms.extra_object_fee
        assert line.amount == quantize_money(extra * terms.extra_object_fee, terms.currency)
    else:
        assert "extra_objects" not in lines
    assert price.total == sum(line.amount for line in price.lines)
    assert price.total >= 0


@settings(max_examples=300)
@given(with_objects(), st.integers(min_value=1, max_value=50))
def test_more_distinct_objects_cost_exactly_their_fees_more(case, more):
    terms, request = case
    bigger = PriceRequest(
        **{**request.__dict__, "distinct_objects": request.distinct_objects + more}
    )
    # when
    one, two = price_dataset(request, terms), price_dataset(bigger, terms)

    # then: only the object line moves, by the fee of each object beyond those included
    def fees_of(objects: int) -> Decimal:
        extra = max(0, objects - terms.included_objects)
        return quantize_money(extra * terms.extra_object_fee, terms.currency)

    assert two.total - one.total == fees_of(bigger.distinct_objects) - fees_of(
        request.distinct_objects
    )
    assert two.total >= one.total
    assert {line.code: line.amount for line in one.lines if line.code != "extra_objects"} == {
        line.code: line.amount for line in two.lines if line.code != "extra_objects"
    }


@settings(max_examples=200)
@given(with_objects(), st.integers(min_value=2, max_value=10))
def test_the_object_line_does_not_depend_on_hours(case, factor):
    terms, request = case
    scaled = PriceRequest(**{**request.__dict__, "hours": request.hours * factor})
    one = {line.code: line.amount for line in price_dataset(request, terms).lines}
    many = {line.code: line.amount for line in price_dataset(scaled, terms).lines}
    assert one.get("extra_objects") == many.get("extra_objects")


def test_a_worked_example_with_objects():
    # given: 12 environments x 2 objects, 24 distinct; 1 environment and 1 object included
    terms = RateCardTerms(
        version=1,
        currency="USD",
        embodiment_rates={"arm": Decimal("100")},
        complexity_multipliers={1: Decimal("1")},
        included_environments=1,
        extra_environment_fee=Decimal("150"),
        included_objects=1,
        extra_object_fee=Decimal("50"),
    )
    request = PriceRequest(
        embodiment="arm", complexity=1, hours=Decimal("20"), environments=12, distinct_objects=24
    )
    # when
    price = price_dataset(request, terms)
    # then
    amounts = {line.code: line.amount for line in price.lines}
    assert amounts == {
        "base": Decimal("2000.00"),
        "extra_environments": Decimal("1650.00"),
        "extra_objects": Decimal("1150.00"),
    }
    assert price.total == Decimal("4800.00")


def test_no_object_is_unpriceable():
    terms = RateCardTerms(
        version=1,
        currency="USD",
        embodiment_rates={"arm": Decimal(100)},
        complexity_multipliers={1: Decimal(1)},
    )
    with pytest.raises(PricingError) as raised:
        price_dataset(
            PriceRequest(embodiment="arm", complexity=1, hours=Decimal(5), distinct_objects=0),
            terms,
        )
    assert raised.value.field_name == "distinct_objects"


# --- The plan on the API -------------------------------------------------------------------

SPEC = {
    "task_type": "bin-picking",
    "embodiment": "franka-fr3",
    "hours": "20",
    "environments": 4,
    "objects_per_environment": 2,
}
PLAN = {
    "environment_unit": "scene",
    "distinct_objects": 6,
    "object_categories": ["mug", "bowl"],
    "demos_per_cell": 40,
    "cell_min_share_percent": "60",
    "cell_max_share_percent": "200",
    "calibrated_cameras": True,
}


@pytest.mark.django_db
def test_the_migration_seeds_the_object_fee_and_keeps_every_other_price():
    card = RateCard.objects.get(version=1)
    assert (card.included_objects, card.extra_object_fee) == (1, Decimal("50.0000"))
    assert (card.included_environments, card.extra_environment_fee) == (1, Decimal("150.0000"))
    assert card.rush_surcharge_percent == Decimal("25.00")


@pytest.mark.django_db
def test_a_quote_prices_the_plans_distinct_objects(anon_client):
    # when: distinct objects default to one environment's (2), then 6 distinct
    default = anon_client.post("/api/v1/quotes", SPEC, format="json").json()
    planned = anon_client.post("/api/v1/quotes", {**SPEC, **PLAN}, format="json").json()
    # then
    default_lines = {line["code"]: line for line in default["lines"]}
    planned_lines = {line["code"]: line for line in planned["lines"]}
    assert default_lines["extra_objects"]["quantity"] == "1"
    assert default_lines["extra_objects"]["amount"] == "50.00"
    assert planned_lines["extra_objects"]["quantity"] == "5"
    assert planned_lines["extra_objects"]["amount"] == "250.00"
    assert Decimal(planned["total"]) - Decimal(default["total"]) == Decimal("200.00")


@pytest.mark.django_db
def test_the_plan_is_answered_stored_and_equal_to_the_serializer(anon_client):
    # when
    response = anon_client.post("/api/v1/quotes", {**SPEC, **PLAN}, format="json")
    # then
    assert response.status_code == 201, response.json()
    body = response.json()
    assert {name: body[name] for name in PLAN} == {
        **PLAN,
        "object_categories": ["bowl", "mug"],
        "cell_min_share_percent": "60.00",
        "cell_max_share_percent": "200.00",
    }
    quote = Quote.objects.select_related("task_type", "embodiment", "rate_card").get(pk=body["id"])
    assert quote.environment_unit == "scene" and quote.distinct_objects == 6
    assert body == QuoteSerializer(quote).data
    assert body["supply"]["coverable"] is None  # no check registered in this test
    assert body["plan_advice"] == {}


BAD_PLANS = [
    ({"distinct_objects": 1}, "distinct_objects"),  # fewer than one environment's 2
    ({"distinct_objects": 9}, "distinct_objects"),  # more than 4 x 2
    ({"object_categories": ["Mug"]}, "object_categories"),
    ({"object_categories": ["a;drop"]}, "object_categories"),
    ({"object_categories": [f"c{i}" for i in range(21)]}, "object_categories"),
    ({"object_categories": "mug"}, "object_categories"),
    ({"environment_unit": "room"}, "environment_unit"),
    ({"demos_per_cell": 0}, "demos_per_cell"),
    ({"cell_min_share_percent": "0.5"}, "cell_min_share_percent"),
    ({"cell_min_share_percent": "101"}, "cell_min_share_percent"),
    ({"cell_max_share_percent": "99"}, "cell_max_share_percent"),
    ({"cell_max_share_percent": "1000"}, "cell_max_share_percent"),
    ({"calibrated_cameras": "maybe"}, "calibrated_cameras"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("change", "field"), BAD_PLANS)
def test_a_bad_plan_is_a_400_on_its_field_in_the_one_error_shape(anon_client, change, field):
    # when
    response = anon_client.post("/api/v1/quotes", {**SPEC, **change}, format="json")
    # then
    assert response.status_code == 400, response.json()
    body = response.json()
    assert set(body) == {"code", "message", "fields"}
    assert field in body["fields"]
    assert not Quote.objects.exists()


@pytest.mark.django_db
def test_an_order_from_a_quote_copies_the_plan_and_is_cell_planned(customer):
    quote = customer.client.post("/api/v1/quotes", {**SPEC, **PLAN}, format="json").json()
    # when
    response = customer.client.post("/api/v1/orders", {"quote": quote["id"]}, format="json")
    # then
    assert response.status_code == 201, response.json()
    body = response.json()
    order = Order.objects.get(pk=body["id"])
    assert order.cells_planned is True and order.waitlisted is False
    for name in PLAN:
        assert body[name] == quote[name], name
    assert (order.distinct_objects, order.object_categories) == (6, ["bowl", "mug"])
    assert order.calibrated_cameras is True and order.demos_per_cell == 40
    assert order.supply == quote["supply"] and order.total == Decimal(quote["total"])
    assert body["cells_planned"] is True and body["waitlisted"] is False
    order = Order.objects.prefetch_related("events").get(pk=order.pk)
    assert body == OrderDetailSerializer(order).data


@pytest.mark.django_db
def test_an_order_from_a_specification_takes_the_plan(customer):
    # when
    response = customer.client.post("/api/v1/orders", {**SPEC, **PLAN}, format="json")
    # then
    assert response.status_code == 201, response.json()
    order = Order.objects.get(pk=response.json()["id"])
    assert order.cells_planned and order.environment_unit == "scene"
    assert order.cell_max_share_percent == Decimal("200")
    assert any(line["code"] == "extra_objects" for line in order.lines)


@pytest.mark.django_db
def test_an_order_from_a_quote_refuses_plan_fields(customer):
    quote = customer.client.post("/api/v1/quotes", SPEC, format="json").json()
    # when
    response = customer.client.post(
        "/api/v1/orders", {"quote": quote["id"], "distinct_objects": 8}, format="json"
    )
    # then
    assert response.status_code == 400
    assert "distinct_objects" in response.json()["fields"]


@pytest.mark.django_db
def test_the_price_list_shows_the_object_fee(client):
    # when
    page = client.get("/prices/").content.decode()
    # then
    assert "Distinct objects" in page
    assert "1 included; each further distinct object in the plan $50.00" in page
