"""List endpoints cost the same number of queries for one row as for many."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleets.models import Job, Offer
from fleets.services.dispatch import job_dispatch, offer_accept
from fleets.services.planning import order_plan
from orders.models import Order
from tests.factories import FleetFactory, OrderFactory, RobotFactory, SiteFactory

pytestmark = pytest.mark.django_db


def make_rows(organization, customer_org, n):
    """n fleets with a site and robot each; 2n jobs offered to them, n of them accepted."""
    for _ in range(n):
        fleet = FleetFactory(organization=organization, weekly_capacity_hours=Decimal("1000"))
        site = SiteFactory(fleet=fleet)
        RobotFactory(site=site, fleet=fleet)
        for _ in range(2):
            order = OrderFactory(
                organization=customer_org,
                status=Order.Status.PAID,
                environments=1,
                hours=Decimal("2"),
            )
            order_plan(order_id=order.id)
            job_dispatch(job_id=Job.objects.get(order=order).pk)
    accepted = 0
    for offer in Offer.objects.filter(
        fleet__organization=organization, status=Offer.Status.PENDING
    ):
        if accepted < n:
            offer_accept(organization=organization, offer_id=offer.pk)
            accepted += 1


def count(client, url):
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries), len(response.json()["results"])


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/fleet/fleets",
        "/api/v1/fleet/sites",
        "/api/v1/fleet/robots",
        "/api/v1/fleet/offers",
        "/api/v1/fleet/jobs",
        "/api/v1/fleet/jobs/open",
    ],
)
def test_list_query_count_does_not_grow_with_rows(
    make_tenant, customer, url, django_assert_num_queries
):
    from marketplace.models import Organization

    # given one operator with 1 row of everything and another with 6
    small = make_tenant(Organization.Kind.FLEET_OPERATOR)
    large = make_tenant(Organization.Kind.FLEET_OPERATOR)
    make_rows(small.organization, customer.organization, 1)
    make_rows(large.organization, customer.organization, 6)
    # when
    small_queries, small_rows = count(small.client, url)
    # then the large listing runs exactly as many queries
    with django_assert_num_queries(small_queries):
        response = large.client.get(url)
    assert response.status_code == 200
    if url != "/api/v1/fleet/jobs/open":
        assert small_rows >= 1
        assert len(response.json()["results"]) > small_rows
