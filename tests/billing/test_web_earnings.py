"""The fleet portal's earnings and payouts page: the amounts billing recorded, per operator."""

import re
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from billing.models import Payout
from billing.services.payables import order_fleet_payables
from billing.services.payouts import payout_run
from tests.billing.payout_helpers import delivered_order, fleet_with_account
from tests.factories import FleetFactory

pytestmark = pytest.mark.django_db
URL = "/fleet/earnings/"


def browser_for(tenant) -> Client:
    client = Client()
    client.force_login(tenant.user)
    return client


def deliver(*jobs):
    order = delivered_order(jobs=list(jobs))
    order_fleet_payables(order_id=order.id)
    return order


def row(html: str, row_id: str) -> str:
    match = re.search(rf'<tr id="{row_id}">(.*?)</tr>', html, re.S)
    assert match, f"no row {row_id}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1))).strip()


@pytest.fixture
def earnings(connect, fleet_operator, make_tenant):
    """Two fleets of one operator: one paid out once and owed more, one without an account."""
    paid_fleet = fleet_with_account(
        organization=fleet_operator.organization, name="Bay 4", payout_rate_per_hour=Decimal("50")
    )
    unpaid_fleet = FleetFactory(
        organization=fleet_operator.organization, name="Line 2", payout_rate_per_hour=Decimal("40")
    )
    first = deliver((paid_fleet, "3600"), (unpaid_fleet, "5400"))
    payout_run(triggered_by="test")
    second = deliver((paid_fleet, "1800"))
    # another operator's earnings, which must not show
    stranger = fleet_with_account(name="Stranger fleet", payout_rate_per_hour=Decimal("99"))
    deliver((stranger, "7200"))
    return {"paid_fleet": paid_fleet, "unpaid_fleet": unpaid_fleet, "orders": (first, second)}


def test_the_page_shows_each_jobs_earnings_payouts_and_totals(earnings, fleet_operator):
    # when
    html = browser_for(fleet_operator).get(URL).content.decode()
    # then: totals over both fleets: 50 + 60 earned and paid 50, then 25 more
    assert re.search(r'id="total-earned-USD">\$135.00<', html)
    assert re.search(r'id="total-paid-USD">\$50.00<', html)
    assert re.search(r'id="total-pending-USD">\$85.00<', html)
    assert "3.000 h" in html and "(3 jobs)" in html
    # each job: accepted hours, rate, amount and whether it is paid
    payables = {p.fleet.name + f" {p.amount}": p for p in earnings["paid_fleet"].payables.all()}
    payables |= {p.fleet.name + f" {p.amount}": p for p in earnings["unpaid_fleet"].payables.all()}
    assert row(html, f"payable-{payables['Bay 4 50.00'].pk}").endswith(
        "Bay 4 1.000 h $50.00/h $50.00 Paid "
        + payables["Bay 4 50.00"].created_at.strftime("%Y-%m-%d")
    )
    assert "Line 2 1.500 h $40.00/h $60.00 Pending" in row(
        html, f"payable-{payables['Line 2 60.00'].pk}"
    )
    assert "Bay 4 0.500 h $50.00/h $25.00 Pending" in row(
        html, f"payable-{payables['Bay 4 25.00'].pk}"
    )
    # the payout: amount, status and its Stripe transfer
    payout = Payout.objects.get(fleet=earnings["paid_fleet"])
    assert payout.stripe_transfer_id
    payout_row = row(html, f"payout-{payout.pk}")
    assert f"Bay 4 1 $50.00 Paid {payout.stripe_transfer_id}" in payout_row
    # nothing of another operator's
    assert "Stranger fleet" not in html and "198.00" not in html


def test_the_page_is_reached_from_the_fleet_portals_navigation(fleet_operator):
    html = browser_for(fleet_operator).get(reverse("fleet-overview-page")).content.decode()
    assert f'<a href="{URL}">Earnings</a>' in html
    page = browser_for(fleet_operator).get(URL).content.decode()
    assert f'<a href="{URL}" aria-current="page">Earnings</a>' in page


def test_an_operator_with_no_earnings_sees_the_empty_states(fleet_operator):
    html = browser_for(fleet_operator).get(URL).content.decode()
    assert 'id="payables-empty"' in html and "No earnings yet." in html
    assert 'id="payouts-empty"' in html and "No payouts yet." in html
    assert "total-earned" not in html


def test_customers_are_refused_and_visitors_sent_to_login(customer, client):
    response = browser_for(customer).get(URL)
    assert response.status_code == 403
    assert b"for fleet operator organizations" in response.content
    assert client.get(URL).status_code == 302


def test_the_page_reads_in_a_fixed_number_of_queries(
    earnings, fleet_operator, django_assert_max_num_queries
):
    deliver((earnings["paid_fleet"], "900"), (earnings["unpaid_fleet"], "900"))
    client = browser_for(fleet_operator)
    with django_assert_max_num_queries(12):
        assert client.get(URL).status_code == 200


def test_nothing_paid_yet_reads_as_zero_in_the_currencys_minor_unit(fleet_operator):
    fleet = FleetFactory(organization=fleet_operator.organization, name="Bay 9")
    deliver((fleet, "1000"))  # 1000 s at 50/h = 13.888.. -> 13.89
    html = browser_for(fleet_operator).get(URL).content.decode()
    assert re.search(r'id="total-earned-USD">\$13.89<', html)
    assert re.search(r'id="total-paid-USD">\$0.00<', html)
    assert re.search(r'id="total-pending-USD">\$13.89<', html)
    assert "0.278 h" in html
