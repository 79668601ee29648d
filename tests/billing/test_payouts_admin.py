"""Staff's payout tools: lists, the run with its confirmation page, summary, CSV export."""

import csv
import io
from decimal import Decimal

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from billing.models import FleetPayable, FleetPayoutAccount, Payout, PayoutRun
from billing.services.payables import order_fleet_payables
from billing.services.payouts import payout_run
from tests.billing.payout_helpers import delivered_order, fleet_with_account
from tests.factories import FleetFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def owed_fleets():
    paid = fleet_with_account(name="Fleet Alpha")
    unpaid = FleetFactory(name="Fleet Beta")
    order = delivered_order(jobs=[(paid, "3600"), (unpaid, "7200")])
    order_fleet_payables(order_id=order.id)
    return paid, unpaid


def test_payout_admin_pages_load(staff_client, owed_fleets, connect):
    # given
    payout_run(triggered_by="test")
    payout = Payout.objects.get()
    # when / then
    for url in [
        reverse("admin:billing_payout_changelist"),
        reverse("admin:billing_payout_change", args=[payout.pk]),
        reverse("admin:billing_fleetpayable_changelist"),
        reverse("admin:billing_fleetpayable_changelist") + "?paid=no",
        reverse("admin:billing_fleetpayoutaccount_changelist"),
        reverse("admin:billing_fleetpayoutaccount_add"),
        reverse("admin:billing_payoutrun_changelist"),
        reverse("admin:billing_payoutrun_change", args=[PayoutRun.objects.get().pk]),
        reverse("admin:billing_ledgerentry_changelist"),
    ]:
        response = staff_client.get(url)
        assert response.status_code == 200, url


def test_run_action_asks_for_confirmation_then_pays(
    staff_client,
    owed_fleets,
    connect,
):
    # given
    paid, _ = owed_fleets
    url = reverse("admin:billing_payout_changelist")
    # when: the action is chosen on the payables list
    confirm = staff_client.post(
        reverse("admin:billing_fleetpayable_changelist"),
        {
            "action": "run_payouts",
            ACTION_CHECKBOX_NAME: [FleetPayable.objects.first().pk],
        },
    )
    # then: a confirmation page with the plan, nothing sent yet
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "Yes, pay the fleets" in page
    assert "Fleet Alpha" in page and "$50.00" in page  # the one money format
    assert "Fleet Beta" in page and "none: skipped and flagged" in page
    assert connect.requests == []
    # when: staff confirm
    done = staff_client.post(reverse("admin:billing_payout_run"), {"confirm": "yes"}, follow=True)
    # then
    assert done.status_code == 200
    assert "1 paid" in done.content.decode()
    assert "1 fleet(s) skipped" in done.content.decode()
    assert len(connect.sent()) == 1
    assert Payout.objects.get().fleet == paid
    assert staff_client.get(url).status_code == 200
    # when: confirmed again (a double click)
    staff_client.post(reverse("admin:billing_payout_run"), {"confirm": "yes"})
    # then: nothing more paid
    assert len(connect.sent()) == 1


def test_run_page_on_get_only_confirms(staff_client, owed_fleets, connect):
    # when
    response = staff_client.get(reverse("admin:billing_payout_run"))
    # then
    assert response.status_code == 200
    assert connect.requests == []
    assert not Payout.objects.exists()


def test_payables_summary_and_csv_exports(staff_client, owed_fleets, connect):
    # given
    payout_run(triggered_by="test")
    # when
    summary = staff_client.get(reverse("admin:billing_payables_summary"))
    payables_csv = staff_client.get(reverse("admin:billing_payables_export"))
    payouts_csv = staff_client.get(reverse("admin:billing_payout_export"))
    selected_csv = staff_client.post(
        reverse("admin:billing_payout_changelist"),
        {"action": "export_payouts_csv", ACTION_CHECKBOX_NAME: [Payout.objects.get().pk]},
    )
    # then
    assert summary.status_code == 200
    assert "Fleet Beta" in summary.content.decode()
    assert "none (payouts skipped)" in summary.content.decode()
    rows = list(csv.DictReader(io.StringIO(payables_csv.content.decode())))
    assert payables_csv["Content-Type"] == "text/csv"
    assert {(r["fleet"], r["amount"], r["payout_status"]) for r in rows} == {
        ("Fleet Alpha", "50.00", "paid"),
        ("Fleet Beta", "100.00", ""),
    }
    payout_rows = list(csv.DictReader(io.StringIO(payouts_csv.content.decode())))
    assert [(r["fleet"], r["amount"], r["status"]) for r in payout_rows] == [
        ("Fleet Alpha", "50.00", "paid")
    ]
    assert payout_rows[0]["stripe_transfer_id"].startswith("tr_")
    assert selected_csv.content == payouts_csv.content
    ledger_csv = staff_client.get(reverse("admin:billing_ledger_export"))
    ledger_rows = list(csv.DictReader(io.StringIO(ledger_csv.content.decode())))
    assert {r["fleet"] for r in ledger_rows if r["kind"] == "payout"} == {"Fleet Alpha"}


def test_staff_add_a_payout_account_in_the_admin(staff_client, owed_fleets):
    # given
    _, unpaid = owed_fleets
    # when
    response = staff_client.post(
        reverse("admin:billing_fleetpayoutaccount_add"),
        {"fleet": unpaid.pk, "stripe_account_id": "acct_beta"},
    )
    # then
    assert response.status_code == 302
    assert FleetPayoutAccount.objects.get(fleet=unpaid).stripe_account_id == "acct_beta"
    assert Decimal("0") < FleetPayable.objects.get(fleet=unpaid).amount


def test_payout_admin_money_reads_in_the_one_money_format(staff_client, owed_fleets, connect):
    from orders.money import format_money, format_rate

    # given: a confirmation page before the run, then a payout and the payables after it
    payables = list(FleetPayable.objects.order_by("amount"))
    unpaid_total = sum((p.amount for p in payables), Decimal("0"))
    confirmation = staff_client.get(reverse("admin:billing_payout_run")).content.decode()
    payout_run(triggered_by="test")
    payout = Payout.objects.get()
    pages = {
        "payouts": staff_client.get(reverse("admin:billing_payout_changelist")),
        "payout": staff_client.get(reverse("admin:billing_payout_change", args=[payout.pk])),
        "payables": staff_client.get(reverse("admin:billing_fleetpayable_changelist")),
        "summary": staff_client.get(reverse("admin:billing_payables_summary")),
    }
    html = {name: response.content.decode() for name, response in pages.items()}
    # then: every amount as format_money writes it ($1,234.50), never "1234.50 USD"
    assert all(response.status_code == 200 for response in pages.values())
    for payable in payables:
        assert format_money(payable.amount, payable.currency) in confirmation
        assert format_money(payable.amount, payable.currency) in html["payables"]
        assert format_money(payable.customer_amount, payable.currency) in html["payables"]
        assert format_rate(payable.rate_per_hour, payable.currency) in html["payables"]
        assert f"{payable.amount} {payable.currency}" not in confirmation
    paid_payables = [p for p in payables if p.fleet_id == payout.fleet_id]
    assert format_money(payout.amount, payout.currency) in html["payouts"]
    assert format_money(payout.amount, payout.currency) in html["payout"]
    for paid in paid_payables:  # the payout's payables inline
        assert format_money(paid.amount, paid.currency) in html["payout"]
    assert format_money(payout.amount, payout.currency) in html["summary"]  # paid column
    assert unpaid_total > payout.amount  # (the other fleet's stay unpaid)
