"""The plan advisor (orders/plan_advisor.py): pure, published rules; `advise: true` on a quote
returns the proposal beside a quote priced as requested; the quote page offers it."""

import math
from decimal import Decimal

import pytest
from django.utils.html import escape
from hypothesis import given, settings
from hypothesis import strategies as st

from orders import plan_advisor
from orders.plan_advisor import advise
from orders.supply import SupplyAnswer, register_supply_check, registered_supply_check

CATEGORIES = [
    "pick_and_place",
    "assembly",
    "household",
    "logistics",
    "tool_use",
    "deformable",
    "dexterous",
]


@st.composite
def asks(draw):
    return {
        "task_category": draw(st.sampled_from(CATEGORIES)),
        "contact_rich": draw(st.booleans()),
        "complexity": draw(st.integers(min_value=1, max_value=5)),
        "hours": draw(st.decimals(min_value=Decimal(1), max_value=Decimal(10000), places=2)),
        "max_environments": draw(st.integers(min_value=1, max_value=500)),
        "available_environments": draw(st.none() | st.integers(min_value=0, max_value=300)),
    }


@settings(max_examples=500)
@given(asks())
def test_every_proposal_is_an_order_the_platform_accepts(ask):
    # when
    advice = advise(**ask)
    # then: within every bound an order has, each cell a different object
    bounds = [ask["max_environments"], int(ask["hours"] / Decimal("0.5"))]
    if ask["available_environments"]:  # 0 found: no bound (the supply check warns)
        bounds.append(ask["available_environments"])
    assert 1 <= advice.environments <= max(1, min(bounds))
    assert 1 <= advice.objects_per_environment <= plan_advisor.MAX_OBJECTS_PER_ENVIRONMENT
    assert advice.distinct_objects == advice.environments * advice.objects_per_environment
    assert advice.demos_per_cell >= 1
    assert advice.why


@settings(max_examples=300)
@given(asks())
def test_diversity_over_count_cells_hold_about_the_aim_when_unbounded(ask):
    ask = {**ask, "max_environments": 100000, "available_environments": None}
    advice = advise(**ask)
    early = (
        ask["contact_rich"]
        or ask["complexity"] >= 4
        or ask["task_category"] in {"deformable", "dexterous"}
    )
    aim = 30 if early else 50
    demonstrations = int(ask["hours"] * 3600 // plan_advisor.DEMO_SECONDS[ask["complexity"]])
    cells = advice.environments * advice.objects_per_environment
    # never more than the aim per cell unless the environment floor is what binds
    floor = max(2, math.ceil(ask["hours"] / 10))
    if advice.environments > floor:
        assert advice.demos_per_cell <= 2 * aim
    assert advice.environments >= min(floor, int(ask["hours"] / Decimal("0.5")))
    assert cells * advice.demos_per_cell <= demonstrations


def test_the_recipe_thirty_two_environments_of_fifty_demonstrations():
    # 32 x 50 demonstrations of 45 s (L3) = 20 h; an assembly task (not object-centric)
    advice = advise(
        task_category="assembly",
        contact_rich=False,
        complexity=3,
        hours=Decimal("20"),
        max_environments=500,
    )
    assert (advice.environments, advice.objects_per_environment) == (32, 1)
    assert advice.demos_per_cell == 50 and advice.distinct_objects == 32
    assert "about 50 demonstrations per" in advice.why


def test_contact_rich_work_gets_more_environments_early():
    ask = {"task_category": "assembly", "complexity": 3, "hours": Decimal(20)}
    plain = advise(contact_rich=False, max_environments=500, **ask)
    rich = advise(contact_rich=True, max_environments=500, **ask)
    assert rich.environments > plain.environments
    assert "contact-rich" in rich.why and "contact-rich" not in plain.why


def test_object_centric_tasks_take_two_objects_per_environment():
    advice = advise(
        task_category="pick_and_place",
        contact_rich=False,
        complexity=1,
        hours=Decimal(10),
        max_environments=500,
    )
    # 1800 demonstrations of 20 s, 36 cells of 50: 18 environments x 2 objects
    assert (advice.environments, advice.objects_per_environment) == (18, 2)


def test_the_supply_bounds_the_environments_and_objects_keep_the_variety():
    unbounded = advise(
        task_category="assembly",
        contact_rich=False,
        complexity=3,
        hours=Decimal("20"),
        max_environments=500,
    )
    bounded = advise(
        task_category="assembly",
        contact_rich=False,
        complexity=3,
        hours=Decimal("20"),
        max_environments=500,
        available_environments=8,
    )
    assert unbounded.environments == 32
    assert (bounded.environments, bounded.objects_per_environment) == (8, 4)
    assert "fleets offer now (8)" in bounded.why


def test_the_rules_are_published_on_the_price_list(client, db):
    page = client.get("/prices/").content.decode()
    assert 'id="plan-rules"' in page
    for rule in plan_advisor.RULES:
        assert escape(rule) in page


SPEC = {
    "task_type": "cable-routing",
    "embodiment": "franka-fr3",
    "hours": "30",
    "environments": 2,
}


@pytest.fixture
def eight_environments():
    """A supply check that says 8 environments are available now."""
    saved = registered_supply_check()
    register_supply_check(
        lambda question: SupplyAnswer(
            coverable=True, basis="stub", available_environments=8, shortfalls=()
        )
    )
    yield
    register_supply_check(saved)


@pytest.mark.django_db
def test_advise_returns_the_proposal_beside_the_quote_priced_as_requested(anon_client):
    # when
    plain = anon_client.post("/api/v1/quotes", SPEC, format="json").json()
    advised = anon_client.post("/api/v1/quotes", {**SPEC, "advise": True}, format="json").json()
    # then: the same price, and a proposal for cable routing (assembly, contact-rich, L4)
    assert plain["plan_advice"] == {}
    assert advised["total"] == plain["total"] and advised["environments"] == 2
    expected = advise(
        task_category="assembly",
        contact_rich=True,
        complexity=4,
        hours=Decimal("30.00"),
        max_environments=500,
    )
    assert advised["plan_advice"] == expected.as_json()


@pytest.mark.django_db
def test_advise_stays_within_the_supply_checks_environments(anon_client, eight_environments):
    advised = anon_client.post("/api/v1/quotes", {**SPEC, "advise": True}, format="json").json()
    assert advised["plan_advice"]["environments"] == 8


@pytest.mark.django_db
def test_the_chosen_plan_sets_the_price(anon_client):
    advised = anon_client.post("/api/v1/quotes", {**SPEC, "advise": True}, format="json").json()
    plan = advised["plan_advice"]
    # when: the proposal is taken
    chosen = anon_client.post(
        "/api/v1/quotes",
        {
            **SPEC,
            **{
                name: plan[name]
                for name in ("environments", "objects_per_environment", "distinct_objects")
            },
        },
        format="json",
    ).json()
    # then
    lines = {line["code"]: line for line in chosen["lines"]}
    assert lines["extra_environments"]["quantity"] == str(plan["environments"] - 1)
    assert lines["extra_objects"]["quantity"] == str(plan["distinct_objects"] - 1)
    assert Decimal(chosen["total"]) > Decimal(advised["total"])


@pytest.mark.django_db
def test_the_quote_page_offers_the_plan_and_use_this_plan_fills_the_form(customer):
    client = customer.session_client()
    response = client.post(
        "/orders/new/",
        {
            "task_type": "cable-routing",
            "embodiment": "franka-fr3",
            "hours": "30",
            "environments": "2",
            "objects_per_environment": "1",
            "environment_unit": "site",
            "cell_min_share_percent": "50",
            "cell_max_share_percent": "150",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    page = client.get(response["Location"]).content.decode()
    assert 'id="plan-advice"' in page and "Use this plan" in page
    start = page.index('id="use-plan" href="') + len('id="use-plan" href="')
    url = page[start : page.index('"', start)].replace("&amp;", "&")
    form_page = client.get(url).content.decode()
    # the form comes back with the proposal in it
    assert 'name="environments" value="' in form_page
    from orders.models import Quote

    advice = Quote.objects.get(organization=customer.organization).plan_advice
    assert f'name="environments" value="{advice["environments"]}"' in form_page
    assert f'name="distinct_objects" value="{advice["distinct_objects"]}"' in form_page
