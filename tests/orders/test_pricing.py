"""Property tests of the pure pricing function: no database, no floats."""

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orders.pricing import (
    PriceRequest,
    PricingError,
    RateCardTerms,
    price_dataset,
    quantize_money,
    to_minor_units,
)

money_rates = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("2000"), places=4)
multipliers = st.decimals(min_value=Decimal("0.5"), max_value=Decimal("5"), places=3)
percents = st.decimals(min_value=Decimal("0"), max_value=Decimal("99.99"), places=2)
hours_values = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("10000"), places=2)


@st.composite
def rate_cards(draw, with_tiers: bool = True):
    sensors = draw(
        st.dictionaries(st.sampled_from(["wrist", "ft", "tactile", "depth"]), money_rates)
    )
    tiers = ()
    if with_tiers:
        tiers = tuple(
            draw(
                st.lists(
                    st.tuples(st.decimals(min_value=1, max_value=5000, places=2), percents),
                    max_size=4,
                    unique_by=lambda tier: tier[0],
                )
            )
        )
    return RateCardTerms(
        version=draw(st.integers(min_value=1, max_value=50)),
        currency=draw(st.sampled_from(["USD", "EUR", "JPY"])),
        embodiment_rates={"arm": draw(money_rates)},
        complexity_multipliers={level: draw(multipliers) for level in range(1, 6)},
        sensor_rates=sensors,
        included_environments=draw(st.integers(min_value=1, max_value=4)),
        extra_environment_fee=draw(st.decimals(min_value=0, max_value=1000, places=2)),
        rush_surcharge_percent=draw(percents),
        volume_tiers=tiers,
    )


@st.composite
def requests_for(draw, terms: RateCardTerms):
    return PriceRequest(
        embodiment="arm",
        complexity=draw(st.integers(min_value=1, max_value=5)),
        hours=draw(hours_values),
        environments=draw(st.integers(min_value=1, max_value=60)),
        sensors=tuple(draw(st.lists(st.sampled_from(sorted(terms.sensor_rates)), unique=True)))
        if terms.sensor_rates
        else (),
        rush=draw(st.booleans()),
    )


@st.composite
def priced(draw, with_tiers: bool = True):
    terms = draw(rate_cards(with_tiers=with_tiers))
    return terms, draw(requests_for(terms))


@settings(max_examples=300)
@given(priced())
def test_total_is_the_sum_of_line_items_in_minor_units_and_never_negative(case):
    terms, request = case
    # when
    price = price_dataset(request, terms)
    # then
    assert price.total == sum(line.amount for line in price.lines)
    assert price.total >= 0
    for line in price.lines:
        assert isinstance(line.amount, Decimal)
        assert line.amount == quantize_money(line.amount, terms.currency)
    assert price.currency == terms.currency
    assert price.rate_card_version == terms.version


@settings(max_examples=300)
@given(priced(with_tiers=False), st.integers(min_value=2, max_value=20))
def test_hourly_price_scales_linearly_with_hours(case, factor):
    """Without volume tiers, every hour-proportional line scales by the same factor.

    Each line is rounded to the minor unit once, so k x price(h) and price(k x h) may differ
    by at most half a minor unit per line times k; the unrounded amounts match exactly.
    """
    terms, request = case
    scaled = PriceRequest(**{**request.__dict__, "hours": request.hours * factor})
    # when
    one, many = price_dataset(request, terms), price_dataset(scaled, terms)
    # then
    hourly = {"base"} | {f"sensor:{s}" for s in request.sensors}
    one_lines = {line.code: line for line in one.lines}
    many_lines = {line.code: line for line in many.lines}
    minor = Decimal(1).scaleb(-{"JPY": 0}.get(terms.currency, 2))
    for code in hourly:
        exact_one = one_lines[code].quantity * one_lines[code].unit_amount
        exact_many = many_lines[code].quantity * many_lines[code].unit_amount
        assert exact_many == exact_one * factor
        assert abs(many_lines[code].amount - one_lines[code].amount * factor) <= minor * factor
    if "extra_environments" in one_lines:  # flat fees do not depend on hours
        assert one_lines["extra_environments"].amount == many_lines["extra_environments"].amount


@settings(max_examples=500)
@given(priced())
def test_more_hours_never_cost_less_without_a_tier_change(case):
    terms, request = case
    more = PriceRequest(**{**request.__dict__, "hours": request.hours + Decimal("1")})
    if terms.discount_percent_for(more.hours) != terms.discount_percent_for(request.hours):
        return  # crossing into a volume tier may lower the total; that is the point of tiers
    assert price_dataset(more, terms).total >= price_dataset(request, terms).total


def test_rounding_is_half_up_to_minor_units():
    assert quantize_money(Decimal("1.005"), "USD") == Decimal("1.01")
    assert quantize_money(Decimal("1.0049"), "USD") == Decimal("1.00")
    assert quantize_money(Decimal("2.5"), "JPY") == Decimal("3")
    assert to_minor_units(Decimal("12.345"), "USD") == 1235
    assert to_minor_units(Decimal("100"), "JPY") == 100


def test_floats_are_refused():
    with pytest.raises(TypeError):
        quantize_money(1.5, "USD")
    terms = RateCardTerms(
        version=1,
        currency="USD",
        embodiment_rates={"arm": Decimal(100)},
        complexity_multipliers={1: Decimal(1)},
    )
    with pytest.raises(TypeError):
        price_dataset(PriceRequest(embodiment="arm", complexity=1, hours=1.5), terms)


def test_a_worked_example():
    # given: 100 h, L4 (x2.2) on a 180/h arm, a 10/h sensor, 3 environments (1 included),
    # rush +25%, and a 5% volume discount from 100 h
    terms = RateCardTerms(
        version=7,
        currency="USD",
        embodiment_rates={"arm": Decimal("180")},
        complexity_multipliers={4: Decimal("2.2")},
        sensor_rates={"wrist": Decimal("10")},
        included_environments=1,
        extra_environment_fee=Decimal("150"),
        rush_surcharge_percent=Decimal("25"),
        volume_tiers=((Decimal("100"), Decimal("5")),),
    )
    request = PriceRequest(
        embodiment="arm",
        complexity=4,
        hours=Decimal("100"),
        environments=3,
        sensors=("wrist",),
        rush=True,
    )
    # when
    price = price_dataset(request, terms)
    # then
    amounts = {line.code: line.amount for line in price.lines}
    assert amounts == {
        "base": Decimal("39600.00"),
        "sensor:wrist": Decimal("1000.00"),
        "extra_environments": Decimal("300.00"),
        "rush": Decimal("10150.00"),
        "volume_discount": Decimal("-2030.00"),
    }
    assert price.total == Decimal("49020.00")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"embodiment": "humanoid"}, "embodiment"),
        ({"complexity": 9}, "complexity"),
        ({"sensors": ("lidar",)}, "sensors"),
        ({"hours": Decimal("0")}, "hours"),
        ({"environments": 0}, "environments"),
    ],
)
def test_unpriceable_requests_name_the_field(change, field):
    terms = RateCardTerms(
        version=1,
        currency="USD",
        embodiment_rates={"arm": Decimal(100)},
        complexity_multipliers={1: Decimal(1)},
    )
    request = PriceRequest(**{"embodiment": "arm", "complexity": 1, "hours": Decimal(5), **change})
    with pytest.raises(PricingError) as raised:
        price_dataset(request, terms)
    assert raised.value.field_name == field
