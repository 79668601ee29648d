"""Operators as entities (issue 16): a fleet registers, lists and edits its operators by
pseudonym; episodes name a registered one once the fleet has any (free text before); the
figures per operator across orders (fleet) and per order (customer, pseudonym only) come
from one aggregate query, outliers against the order's median flagged; tenancy holds."""

import itertools
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode
from datasets.operator_figures import order_operator_figures
from fleets.models import Operator
from marketplace.models import Organization
from tests.datasets.helpers import Collection
from tests.factories import SiteFactory
from tests.web.conftest import logged_in

pytestmark = pytest.mark.django_db
SHA = itertools.count()


def register_operator(tenant, fleet, **fields):
    body = {"fleet": str(fleet.id), "pseudonym": "op-a", **fields}
    return tenant.client.post("/api/v1/fleet/operators", body, format="json")


def test_a_fleet_registers_lists_and_edits_its_operators(fleet_operator, customer):
    collection = Collection(fleet_operator, customer)
    fleet = collection.site.fleet
    created = register_operator(
        fleet_operator, fleet, site=str(collection.site.id), skill_notes="fast on pegs"
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["pseudonym"] == "op-a" and body["site"] == str(collection.site.id)
    # unique in the fleet; a person's name (spaces) is refused; another fleet's site too
    again = register_operator(fleet_operator, fleet)
    assert again.status_code == 400 and "pseudonym" in again.json()["fields"]
    named = register_operator(fleet_operator, fleet, pseudonym="Jane Doe")
    assert named.status_code == 400 and "pseudonym" in named.json()["fields"]
    foreign_site = SiteFactory()
    wrong = register_operator(fleet_operator, fleet, pseudonym="op-b", site=str(foreign_site.id))
    assert wrong.status_code == 400 and "site" in wrong.json()["fields"]
    # list and edit
    listed = fleet_operator.client.get(f"/api/v1/fleet/operators?fleet={fleet.id}").json()
    assert [row["pseudonym"] for row in listed["results"]] == ["op-a"]
    edited = fleet_operator.client.patch(
        f"/api/v1/fleet/operators/{body['id']}", {"skill_notes": "trains others"}, format="json"
    )
    assert edited.status_code == 200 and edited.json()["skill_notes"] == "trains others"
    assert Operator.objects.get(pk=body["id"]).site_id == collection.site.id


def test_another_fleets_operator_is_404(fleet_operator, customer, make_tenant):
    collection = Collection(fleet_operator, customer)
    operator_id = register_operator(fleet_operator, collection.site.fleet).json()["id"]
    intruder = make_tenant(Organization.Kind.FLEET_OPERATOR)
    path = f"/api/v1/fleet/operators/{operator_id}"
    assert intruder.client.get(path).status_code == 404
    assert intruder.client.patch(path, {"skill_notes": "x"}, format="json").status_code == 404
    assert intruder.client.get("/api/v1/fleet/operators").json()["results"] == []
    # nor can it register one in a fleet that is not its own
    assert register_operator(intruder, collection.site.fleet).status_code == 404
    # and a customer has no fleet API at all
    assert customer.client.get(path).status_code in (403, 404)


def test_episodes_name_a_registered_operator_once_the_fleet_has_any(fleet_operator, customer):
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    data = parquet_bytes(episode_table(frames=300, seed=11))
    # none registered: the free-text pseudonym is kept (the reference agent's way)
    free = collection.register(data, operator="op-7")
    assert free.status_code == 201, free.json()
    assert Episode.objects.get(pk=free.json()["id"]).registered_operator is None
    # from the first registered operator on, an unknown one is refused
    operator_id = register_operator(fleet_operator, collection.site.fleet).json()["id"]
    other = parquet_bytes(episode_table(frames=300, seed=12))
    unknown = collection.register(other, operator="op-7")
    assert unknown.status_code == 400 and "operator" in unknown.json()["fields"]
    known = collection.register(other, operator="op-a")
    assert known.status_code == 201, known.json()
    assert str(Episode.objects.get(pk=known.json()["id"]).registered_operator_id) == operator_id
    # a deactivated operator no longer records episodes
    fleet_operator.client.patch(
        f"/api/v1/fleet/operators/{operator_id}", {"active": False}, format="json"
    )
    third = parquet_bytes(episode_table(frames=300, seed=13))
    assert collection.register(third, operator="op-a").status_code == 400


def checked(collection, operator, *, accepted, quality, seconds="10", success=True, idle=0.05):
    return Episode.objects.create(
        job=collection.job,
        order=collection.order,
        fleet=collection.site.fleet,
        site=collection.site,
        robot=collection.robot,
        operator=operator,
        task_instruction="t",
        success=success,
        fps=30,
        size_bytes=1,
        sha256=f"{next(SHA):064x}",
        upload_key="k",
        status="accepted" if accepted else "rejected",
        frames=300,
        duration_seconds=Decimal(seconds),
        quality_score=quality,
        idle_fraction=idle,
        jerk=2.0,
    )


def three_operators(collection, *, bad="op-bad"):
    for index in range(4):
        checked(collection, "op-good", accepted=True, quality=0.95, seconds=str(10 + index))
        checked(collection, "op-ok", accepted=True, quality=0.9, success=index > 0)
        checked(collection, bad, accepted=index == 0, quality=0.4, idle=0.45)


def test_order_figures_per_operator_flag_the_outlier_in_one_query(
    fleet_operator, customer, make_tenant
):
    collection = Collection(fleet_operator, customer)
    three_operators(collection)
    with CaptureQueriesContext(connection) as queries:
        rows = order_operator_figures(order=collection.order)
    assert len(queries) == 1  # one aggregate query, not a query per operator
    by_name = {row["operator"]: row for row in rows}
    assert by_name["op-bad"]["flags"] == ["quality", "acceptance"]
    assert by_name["op-good"]["flags"] == [] and by_name["op-ok"]["flags"] == []
    good = by_name["op-good"]
    assert good["episodes"] == 4 and good["acceptance_rate"] == 1.0
    assert good["mean_duration_seconds"] == Decimal("11.5")
    assert good["duration_spread_seconds"] == Decimal("1.3")  # sample sd of 10, 11, 12, 13
    assert by_name["op-ok"]["success_rate"] == 0.75
    assert by_name["op-bad"]["idle_fraction"] == pytest.approx(0.45)
    # the customer's API: pseudonyms only
    response = customer.client.get(f"/api/v1/orders/{collection.order.id}/operators")
    assert response.status_code == 200
    api_rows = {row["operator"]: row for row in response.json()}
    assert api_rows["op-bad"]["flags"] == ["quality", "acceptance"]
    assert set(api_rows["op-good"]) == {
        "operator",
        "episodes",
        "episodes_accepted",
        "acceptance_rate",
        "success_rate",
        "mean_duration_seconds",
        "duration_spread_seconds",
        "idle_fraction",
        "jerk",
        "quality_score",
        "flags",
    }
    other = make_tenant(Organization.Kind.CUSTOMER)
    assert other.client.get(f"/api/v1/orders/{collection.order.id}/operators").status_code == 404
    # and the customer's episodes page shows them
    page = logged_in(customer).get(reverse("order-episodes-page", args=[collection.order.pk]))
    assert "low quality" in page.content.decode() and "op-bad" in page.content.decode()


def test_too_few_episodes_or_operators_flag_nobody(fleet_operator, customer):
    collection = Collection(fleet_operator, customer)
    checked(collection, "op-good", accepted=True, quality=0.95)
    checked(collection, "op-bad", accepted=False, quality=0.2)
    assert all(row["flags"] == [] for row in order_operator_figures(order=collection.order))


def test_fleet_figures_across_orders_are_its_own_only(fleet_operator, customer, make_tenant):
    first = Collection(fleet_operator, customer)
    three_operators(first)
    second = Collection(fleet_operator, customer)  # another order, the same fleet
    second.site.fleet = first.site.fleet
    for _ in range(2):
        checked(second, "op-good", accepted=True, quality=0.97, seconds="20")
    Operator.objects.create(fleet=first.site.fleet, pseudonym="op-good")
    # another fleet working the same order: its operator counts in the order's median only
    rival = make_tenant(Organization.Kind.FLEET_OPERATOR)
    rival_collection = Collection(rival, customer, order=first.order)
    checked(rival_collection, "op-rival", accepted=True, quality=0.9)
    body = fleet_operator.client.get("/api/v1/fleet/operator-figures").json()
    assert "op-rival" not in {row["operator"] for row in body}
    (good,) = [row for row in body if row["operator"] == "op-good"]
    assert good["episodes"] == 6 and good["orders"] == 2  # across both orders
    assert good["registered_operator"] is not None and good["outlier_in"] == []
    bad = next(row for row in body if row["operator"] == "op-bad")
    assert bad["outlier_in"] == [
        {"order": str(first.order.id), "reasons": ["quality", "acceptance"]}
    ]
    assert rival.client.get("/api/v1/fleet/operator-figures").json()[0]["operator"] == "op-rival"
    # the fleet's page
    page = logged_in(fleet_operator).get(reverse("fleet-operators-page"))
    assert page.status_code == 200
    text = page.content.decode()
    assert "op-bad" in text and "quality, acceptance" in text and "op-rival" not in text
