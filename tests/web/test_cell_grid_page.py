"""The collection plan's grid (issue 30) on the customer's live order page and in the coverage
API: environments (site pseudonym or scene name once bound) x object slots (the object's name
once bound), accepted episodes and minutes against each cell's target, short and full marked."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from fleets.models import OrderCell, Scene, SiteObject
from orders.models import Order
from tests.factories import OrderFactory, SiteFactory
from tests.web.conftest import logged_in

pytestmark = pytest.mark.django_db


def planned(customer, **fields) -> Order:
    """2 environments x 2 objects, 600 s a cell (short below 300 s, full at 900 s)."""
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("0.67"),
        environments=2,
        objects_per_environment=2,
        cells_planned=True,
        **fields,
    )
    for env in range(2):
        for slot in range(2):
            OrderCell.objects.create(
                order=order, environment_index=env, object_slot=slot, target_seconds=600
            )
    return order


def bind(order, env, slot, *, site, obj=None, scene=None, seconds=0, episodes=0):
    cell = OrderCell.objects.get(order=order, environment_index=env, object_slot=slot)
    cell.site, cell.scene, cell.accepted_seconds, cell.accepted_episodes = (
        site,
        scene,
        Decimal(seconds),
        episodes,
    )
    if obj:
        cell.site_object = SiteObject.objects.create(fleet=site.fleet, site=site, name=obj)
    cell.save()


def grid_rows(html: str) -> list[str]:
    table = html[html.index('id="cell-grid-table"') :]
    table = table[: table.index("</table>")]
    return [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip() for row in table.split("<tr>")[1:]
    ]


def test_the_order_page_shows_the_grid_of_environments_and_objects(customer):
    # given: environment 1 bound at a site (mug: 5 episodes, 15 min, full; cup: 1, 2 min,
    # short); environment 2 not bound yet
    order = planned(customer)
    site = SiteFactory(name="Acme secret lab")
    bind(order, 0, 0, site=site, obj="mug", seconds=900, episodes=5)
    bind(order, 0, 1, site=site, obj="cup", seconds=120, episodes=1)
    bind(order, 1, 0, site=None)
    # when: the customer opens the order page
    page = logged_in(customer).get(reverse("order-detail-page", args=[order.pk]))
    html = page.content.decode()
    # then: a row per environment, a column per object slot, minutes against the target
    header, first, second = grid_rows(html)
    assert header == "Environment Object 1 Object 2"
    assert first == (
        "Environment 1 · site-01 mug 5 episodes · 15.0 / 10.0 min full "
        "cup 1 episode · 2.0 / 10.0 min short"
    )
    assert second == (
        "Environment 2 · not bound yet no object yet 0 episodes · 0.0 / 10.0 min short "
        "no object yet 0 episodes · 0.0 / 10.0 min short"
    )
    assert "Acme secret lab" not in html[html.index('id="cell-grid"') :]
    assert "3 cells short." in html
    # and: the live endpoint's coverage part carries the same grid
    live = logged_in(customer).get(reverse("order-live-page", args=[order.pk])).json()
    assert grid_rows(live["sections"]["coverage"])[1] == first


def test_counting_scenes_a_row_names_its_scene(customer):
    order = planned(customer, environment_unit="scene")
    site = SiteFactory()
    scene = Scene.objects.create(
        fleet=site.fleet,
        site=site,
        name="bench by the window",
        arranged_at=timezone.now() - timedelta(days=1),
    )
    bind(order, 0, 0, site=site, scene=scene, obj="mug", seconds=400, episodes=2)
    html = logged_in(customer).get(reverse("order-detail-page", args=[order.pk])).content.decode()
    first = grid_rows(html)[1]
    assert first.startswith("Environment 1 · bench by the window mug 2 episodes · 6.7 / 10.0 min")
    assert "Each environment is a distinct scene" in html


def test_an_order_not_planned_by_cell_shows_no_grid(customer):
    order = OrderFactory(organization=customer.organization, status=Order.Status.IN_COLLECTION)
    html = logged_in(customer).get(reverse("order-detail-page", args=[order.pk])).content.decode()
    assert 'id="coverage-table"' in html and 'id="cell-grid"' not in html


def test_the_coverage_api_lists_the_cells(customer):
    order = planned(customer)
    site = SiteFactory()
    bind(order, 0, 0, site=site, obj="mug", seconds=900, episodes=5)
    body = customer.client.get(f"/api/v1/orders/{order.id}/coverage").json()
    assert len(body["cells"]) == 4
    assert body["cells"][0] == {
        "environment_index": 0,
        "object_slot": 0,
        "site": "site-01",
        "scene": None,
        "object": "mug",
        "target_seconds": "600.000",
        "minimum_seconds": "300.000",
        "maximum_seconds": "900.000",
        "accepted_seconds": "900.000",
        "accepted_episodes": 5,
        "state": "full",
    }
    assert [c["state"] for c in body["cells"][1:]] == ["short"] * 3
    unplanned = OrderFactory(organization=customer.organization, status=Order.Status.IN_COLLECTION)
    assert customer.client.get(f"/api/v1/orders/{unplanned.id}/coverage").json()["cells"] == []
