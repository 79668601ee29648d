"""The order list's cursor pages (DRF's CursorPagination over order_rows): every order of the
caller once, forwards and back, despite tied creation moments; only the caller's orders."""

import base64
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from orders.models import Order
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db

# a filter that keeps every order: the list through django-filter's queryset
FILTERED = "created_after=2000-01-01T00:00:00Z"


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
def test_every_order_once_forwards_and_backwards(customer, other_customer, page_size):
    # given a customer's orders with tied creation moments, and another customer's
    mine = {str(order.id) for order in _orders_with_ties(customer.organization)}
    _orders_with_ties(other_customer.organization)
    # when the list is walked forwards to its end, plain and through a filter keeping all
    pages = _walk(customer.client, f"/api/v1/orders?page_size={page_size}")
    filtered = _walk(customer.client, f"/api/v1/orders?page_size={page_size}&{FILTERED}")
    # then every order of the caller appears once, newest first, no other, alike both ways
    seen = [order["id"] for results, _, _ in pages for order in results]
    assert sorted(seen) == sorted(mine) and len(seen) == len(set(seen))
    assert [results for results, _, _ in pages] == [results for results, _, _ in filtered]
    # and walking back from the last page by the previous links gives the rest, once each
    last_previous = pages[-1][2]
    if last_previous is not None:
        back = _walk(
            customer.client,
            f"/api/v1/orders?page_size={page_size}&cursor={last_previous}",
            direction="previous",
        )
        back_seen = [order["id"] for results, _, _ in back for order in results]
        assert back_seen and set(back_seen) <= mine


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


def test_a_garbled_cursor_position_is_a_400(customer):
    OrderFactory(organization=customer.organization)
    cursor = base64.b64encode(b"p=not-a-moment").decode()
    plain = customer.client.get(f"/api/v1/orders?cursor={cursor}")
    filtered = customer.client.get(f"/api/v1/orders?cursor={cursor}&{FILTERED}")
    assert plain.status_code == filtered.status_code == 400
    assert plain.json() == filtered.json()
