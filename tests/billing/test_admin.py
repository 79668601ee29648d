"""Staff's billing admin: lists, refund with confirmation, summary, CSV export."""

from decimal import Decimal

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from billing.models import BillingFlag, Refund

pytestmark = pytest.mark.django_db


def test_billing_admin_pages_load(staff_client, paid_order):
    # given
    paid_order()
    # when / then
    for name in [
        "payment",
        "refund",
        "ledgerentry",
        "ledgertransaction",
        "webhookevent",
        "billingflag",
        "stripecustomer",
    ]:
        response = staff_client.get(reverse(f"admin:billing_{name}_changelist"))
        assert response.status_code == 200, name


def test_refund_action_asks_for_confirmation_then_refunds(
    staff_client, paid_order, django_capture_on_commit_callbacks
):
    # given
    _, payment, _ = paid_order()
    url = reverse("admin:billing_payment_changelist")
    # when: the action is chosen
    confirm = staff_client.post(url, {"action": "refund", ACTION_CHECKBOX_NAME: [payment.pk]})
    # then: a confirmation page, nothing refunded yet
    assert confirm.status_code == 200
    assert b"Yes, refund" in confirm.content
    assert Refund.objects.count() == 0
    # when: staff confirm with an amount and a reason
    with django_capture_on_commit_callbacks(execute=True):
        done = staff_client.post(
            url,
            {
                "action": "refund",
                ACTION_CHECKBOX_NAME: [payment.pk],
                "confirm": "yes",
                f"amount_{payment.pk}": "120.50",
                "note": "goodwill",
            },
        )
    # then
    assert done.status_code == 302
    refund = Refund.objects.get()
    assert refund.amount == Decimal("120.50")
    assert refund.status == Refund.Status.SUCCEEDED
    assert refund.reason == Refund.Reason.STAFF


def test_refund_action_refuses_more_than_refundable(staff_client, paid_order):
    # given
    _, payment, _ = paid_order()
    # when
    staff_client.post(
        reverse("admin:billing_payment_changelist"),
        {
            "action": "refund",
            ACTION_CHECKBOX_NAME: [payment.pk],
            "confirm": "yes",
            f"amount_{payment.pk}": "1000.01",
            "note": "too much",
        },
    )
    # then
    assert Refund.objects.count() == 0


def test_summary_and_csv_export(staff_client, paid_order):
    # given
    paid_order()
    BillingFlag.objects.create(kind=BillingFlag.Kind.DISPUTE, dedupe_key="x", message="look")
    # when
    summary = staff_client.get(reverse("admin:billing_revenue_summary"))
    export = staff_client.get(reverse("admin:billing_ledger_export"))
    # then
    assert summary.status_code == 200
    assert summary.context["summary"]["currencies"][0]["charged"] == Decimal("1000.00")
    assert summary.context["summary"]["currencies"][0]["balanced"] is True
    assert summary.context["summary"]["open_flags"] == 1
    assert export["Content-Type"] == "text/csv"
    lines = export.content.decode().strip().splitlines()
    assert lines[0].startswith("transaction,kind,account,amount,currency")
    assert len(lines) == 3  # header + two legs of the charge
