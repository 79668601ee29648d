"""The order list without filters pages through statements compiled once per shape
(orders.representations.ORDER_PAGES under DRF's own CursorPagination): the same pages, `next`
and `previous` links as the ORM's queryset, only the caller's orders, in the same statements."""

import base64
import uuid
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from marketplace.pagination import CompiledCursorSource
from orders.models import Order
from orders.representations import ORDER_PAGES, order_rows
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db

# a filter that keeps every order: the list takes the ORM's path (django-filter's queryset)
ORM_PATH = "created_after=2000-01-01T00:00:00Z"


def _orders_with_ties(organization, count=11) -> list[Order]:
    """Orders of which several share a creation moment: the cursor needs offsets there."""
    orders = OrderFactory.create_batch(count, organization=organization)
    base = timezone.now() - timedelta(hours=1)
    moments = [base, base, base, base + timedelta(seconds=1)] * 3
    for order, moment in zip(orders, moments, strict=False):
        Order.objects.filter(pk=order.pk).update(created_at=moment)
    return orders


def _cursor(link):
    return None if link is None else parse_qs(urlsplit(link).query)["cursor"][0]


def _walk(client, url, direction="next"):
    """Every page from `url` on, following `direction` links: (results, next, previous)."""
    pages = []
    while url:
        answer = client.get(url)
        assert answer.status_code == 200, answer.content
        body = answer.json()
        pages.append((body["results"], _cursor(body["next"]), _cursor(body["previous"])))
        url = body[direction]
    return pages


@pytest.mark.parametrize("page_size", [1, 2, 3, 4, 50])
def test_pages_and_links_equal_the_orms_forwards_and_backwards(customer, other_customer, page_size):
    # given a customer's orders with tied creation moments, and another customer's
    mine = {str(order.id) for order in _orders_with_ties(customer.organization)}
    _orders_with_ties(other_customer.organization)
    ORDER_PAGES._shapes.clear()
    # when both paths walk the list forwards to its end
    compiled = _walk(customer.client, f"/api/v1/orders?page_size={page_size}")
    orm = _walk(customer.client, f"/api/v1/orders?page_size={page_size}&{ORM_PATH}")
    # then the pages and their cursors are the same, every order of the caller once, no other
    assert compiled == orm
    seen = [order["id"] for results, _, _ in compiled for order in results]
    assert sorted(seen) == sorted(mine)
    assert ORDER_PAGES._shapes, "the compiled path was not taken"
    # and walking back from the last page by the previous links agrees too
    last_previous = compiled[-1][2]
    if last_previous is not None:
        back = _walk(
            customer.client, f"/api/v1/orders?page_size={page_size}&cursor={last_previous}"
        )
        back_orm = _walk(
            customer.client,
            f"/api/v1/orders?page_size={page_size}&{ORM_PATH}&cursor={last_previous}",
        )
        assert back == back_orm
        back_all = _walk(
            customer.client,
            f"/api/v1/orders?page_size={page_size}&cursor={last_previous}",
            direction="previous",
        )
        back_all_orm = _walk(
            customer.client,
            f"/api/v1/orders?page_size={page_size}&{ORM_PATH}&cursor={last_previous}",
            direction="previous",
        )
        assert back_all == back_all_orm


def test_another_tenants_cursor_shows_only_the_callers_orders(customer, other_customer):
    # given two customers' orders, and a cursor from the other customer's first page
    mine = {str(o.id) for o in _orders_with_ties(customer.organization)}
    theirs = {str(o.id) for o in _orders_with_ties(other_customer.organization)}
    page = other_customer.client.get("/api/v1/orders?page_size=2").json()
    # when the caller follows it
    results = _walk(customer.client, page["next"])
    # then only the caller's orders appear
    seen = {order["id"] for results_, _, _ in results for order in results_}
    assert seen and seen <= mine and not seen & theirs


def test_the_page_is_one_statement_with_the_tenant_as_a_parameter(customer, other_customer):
    _orders_with_ties(customer.organization, count=3)
    _orders_with_ties(other_customer.organization, count=3)
    for tenant in (customer, other_customer):
        with CaptureQueriesContext(connection) as ctx:
            body = tenant.client.get("/api/v1/orders").json()
        (statement,) = [q["sql"] for q in ctx.captured_queries if '"orders_order"' in q["sql"]]
        assert str(tenant.organization.pk).replace("-", "") in statement.replace("-", "")
        assert {o["id"] for o in body["results"]} == {
            str(pk)
            for pk in Order.objects.filter(organization=tenant.organization).values_list(
                "pk", flat=True
            )
        }


def test_a_garbled_cursor_position_answers_as_the_orms_path(customer):
    OrderFactory(organization=customer.organization)
    cursor = base64.b64encode(b"p=not-a-moment").decode()
    compiled = customer.client.get(f"/api/v1/orders?cursor={cursor}")
    orm = customer.client.get(f"/api/v1/orders?cursor={cursor}&{ORM_PATH}")
    assert compiled.status_code == orm.status_code == 400
    assert compiled.json() == orm.json()


def test_the_compiled_source_refuses_what_it_does_not_compile():
    source = ORDER_PAGES.bind(organization_id=uuid.uuid4())
    with pytest.raises(TypeError):
        list(source.order_by("-created_at"))  # unbounded
    with pytest.raises(TypeError):
        source.order_by("-created_at").filter(status="paid")
    with pytest.raises(TypeError):
        source.filter(created_at__lt="2026-01-01 00:00:00+00:00")  # before the ordering
    with pytest.raises(TypeError):
        source.order_by("-created_at")[0:5].order_by("id")
    with pytest.raises(TypeError):
        ORDER_PAGES.bind(organization=uuid.uuid4())


def test_shapes_beyond_the_bound_are_compiled_for_their_request_only(customer):
    OrderFactory.create_batch(3, organization=customer.organization)
    source = CompiledCursorSource(
        lambda organization_id: order_rows(Order.objects.filter(organization_id=organization_id)),
        model=Order,
        position="created_at",
        max_shapes=2,
        organization_id="uuid",
    )
    expected = list(
        order_rows(Order.objects.filter(organization=customer.organization)).order_by(
            "-created_at", "-id"
        )
    )
    for stop in (1, 2, 3, 4):
        rows = list(
            source.bind(organization_id=customer.organization.pk).order_by("-created_at", "-id")[
                0:stop
            ]
        )
        assert rows == expected[:stop]
    assert len(source._shapes) == 2
