"""The payables invariant per job and per currency (issue 28, item 4): a job's payable never
stands for more than the customer money for the same accepted seconds, nor in another
currency, even when the order's total is within its revenue. Such payables can only come
from rows written before the pay rule (fleets migration 0006): they are held, flagged, and
not paid out until staff look; the rest of the order is paid as usual."""

from decimal import Decimal

import pytest

from billing.models import BillingFlag, FleetPayable
from billing.services.payables import order_fleet_payables, payables_check_invariant
from billing.services.payouts import payout_run
from tests.billing.payout_helpers import delivered_order, fleet_with_account
from tests.factories import rows_from_before_the_pay_rule

pytestmark = pytest.mark.django_db


def test_a_job_paid_above_the_price_is_held_though_the_order_total_is_within(connect):
    # given: a 10 h order at 100/h (1,000.00); job A's fleet agreed 150/h before the pay rule
    # (2 h: 300.00 for time the customer pays 200.00 for), job B's 10/h (8 h: 80.00); 380.00
    # of payables is well within the order's 1,000.00
    dear = fleet_with_account(payout_rate_per_hour=Decimal("150"))
    cheap = fleet_with_account(payout_rate_per_hour=Decimal("10"))
    with rows_from_before_the_pay_rule():
        order = delivered_order(jobs=[(dear, "7200"), (cheap, "28800")])
    # when: the payables are recorded, then a payout run
    order_fleet_payables(order_id=order.id)
    payout_run(triggered_by="test")
    # then: A's payable is held and flagged per job; B's is paid
    held = FleetPayable.objects.get(order=order, fleet=dear)
    assert held.amount == Decimal("300.00") and "more than the customer pays" in held.hold_reason
    assert BillingFlag.objects.filter(
        kind=BillingFlag.Kind.PAYABLES_EXCEED_REVENUE, dedupe_key=f"payable-exceeds:{held.job_id}"
    ).exists()
    assert not BillingFlag.objects.filter(dedupe_key=f"payables-exceed:{order.id}").exists()
    assert [t["amount"] for t in connect.sent()] == [8000]
    assert FleetPayable.objects.get(order=order, fleet=cheap).payout is not None


def test_a_payable_in_another_currency_is_held_and_not_added_to_the_order_total():
    # given: a USD order whose job's payable was recorded in EUR by a row from before
    fleet = fleet_with_account()
    order = delivered_order(jobs=[(fleet, "3600")])
    (payable,) = order_fleet_payables(order_id=order.id)
    FleetPayable.objects.filter(pk=payable.pk).update(currency="EUR", amount=Decimal("5000"))
    # when
    holds = payables_check_invariant(order=order)
    # then: held per job for its currency; the order's USD total does not count its 5,000 EUR
    assert holds is False
    payable.refresh_from_db()
    assert "is in EUR, its order in USD" in payable.hold_reason
    assert not BillingFlag.objects.filter(dedupe_key=f"payables-exceed:{order.id}").exists()
