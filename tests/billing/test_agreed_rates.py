"""Fleets are paid the rate agreed when they took the job, for accepted time up to its target,
once, and never more than the order brings in without staff looking first (issue 14)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import BillingFlag, FleetPayable, FleetPayoutAccount, Payout
from billing.services.payables import order_fleet_payables, payables_release_hold
from billing.services.payouts import payout_run
from fleets.models import Assignment, Job, Offer
from fleets.services.dispatch import bid_place, offer_accept
from fleets.services.planning import order_plan
from orders.models import Order
from orders.services import order_transition
from tests.billing.payout_helpers import delivered_order, fleet_with_account
from tests.conftest import celery_eagerly
from tests.factories import (
    CompletedJobFactory,
    OrderFactory,
    SiteFactory,
    equipped_site,
    rows_from_before_the_pay_rule,
)

pytestmark = pytest.mark.django_db


def deliver(order) -> None:
    for status in (Order.Status.IN_REVIEW, Order.Status.DELIVERED):
        order_transition(order_id=order.id, to_status=status, actor_label="test")


def plan_and_offer(customer, fleet_operator, capture, rate="50"):
    site = equipped_site(organization=fleet_operator.organization, payout_rate_per_hour=rate)
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.PAID,
        hours=Decimal("2"),
        environments=1,
    )
    with celery_eagerly(), capture(execute=True):
        order_plan(order_id=order.id)
    job = Job.objects.get(order=order)
    assert job.status == Job.Status.OFFERED, job.flag_reason
    return order, site, Offer.objects.get(job__order=order)


def test_a_fleet_raising_its_rate_after_accepting_is_paid_the_agreed_rate(
    customer, fleet_operator, django_capture_on_commit_callbacks
):
    # given: dispatch offers the job at the fleet's 50/h and the fleet accepts
    order, site, offer = plan_and_offer(
        customer, fleet_operator, django_capture_on_commit_callbacks, rate="50"
    )
    assert offer.rate_per_hour == Decimal("50")
    offered = fleet_operator.client.get("/api/v1/fleet/offers").json()["results"][0]
    assert offered["rate_per_hour"] == "50.0000" and offered["currency"] == "USD"
    assignment = offer_accept(organization=fleet_operator.organization, offer_id=offer.pk)
    assert assignment.rate_per_hour == Decimal("50")
    # when: the fleet raises its rate through the API to 10,000/h (the most a fleet may ask),
    # then delivers 2 h
    changed = fleet_operator.client.patch(
        f"/api/v1/fleet/fleets/{site.fleet.id}",
        {"payout_rate_per_hour": "10000"},
        format="json",
    )
    assert changed.status_code == 200
    job = Job.objects.get(order=order)
    Job.objects.filter(pk=job.pk).update(accepted_seconds=Decimal("7200"), status="completed")
    Order.objects.filter(pk=order.pk).update(
        accepted_seconds=Decimal("7200"), accepted_hours=Decimal("2"), status="in_collection"
    )
    deliver(order)
    [payable] = order_fleet_payables(order_id=order.id)
    # then: paid 2 h x the agreed 50/h, whatever the fleet's rate says now
    assert payable.rate_per_hour == Decimal("50")
    assert payable.amount == Decimal("100.00")
    assert not BillingFlag.objects.exists()


def test_a_winning_bid_fixes_its_price_and_bids_above_the_customer_price_are_refused(
    customer, fleet_operator, django_capture_on_commit_callbacks
):
    # given: an open job of an order paying 100/h (OrderFactory: total = hours x 100)
    site = equipped_site(organization=fleet_operator.organization, payout_rate_per_hour="70")
    order = OrderFactory(organization=customer.organization, status=Order.Status.IN_COLLECTION)
    job = Job.objects.create(
        order=order,
        sequence=1,
        environment_index=0,
        embodiment=order.embodiment,
        end_effector="parallel_gripper",
        target_hours=Decimal("2"),
        deadline=timezone.now() + timedelta(days=10),
        status=Job.Status.FLAGGED,
    )
    finish = (timezone.now() + timedelta(days=2)).isoformat()
    url = f"/api/v1/fleet/jobs/{job.id}/bids"
    # when: the fleet bids more than the customer pays per hour
    too_high = fleet_operator.client.post(
        url,
        {"site": str(site.id), "price_per_hour": "150", "earliest_finish": finish},
        format="json",
    )
    # then: refused, in the error shape
    assert too_high.status_code == 400
    assert too_high.json()["code"] == "bid_above_price"
    assert "price_per_hour" in too_high.json()["fields"]
    # when: it bids 40/h and wins
    with celery_eagerly(), django_capture_on_commit_callbacks(execute=True):
        bid = bid_place(
            organization=fleet_operator.organization,
            job_id=job.id,
            site_id=site.id,
            price_per_hour=Decimal("40"),
            earliest_finish=timezone.now() + timedelta(days=2),
        )
    assignment = Assignment.objects.get(job=job)
    # then: the assignment carries the bid's price, not the fleet's 70/h
    assert assignment.bid_id == bid.id and assignment.rate_per_hour == Decimal("40")


def test_payables_never_count_accepted_time_past_the_target():
    fleet = fleet_with_account(payout_rate_per_hour=Decimal("10"))
    order = delivered_order(jobs=[])
    CompletedJobFactory(
        order=order,
        site=SiteFactory(fleet=fleet),
        target_hours=Decimal("1"),
        accepted_seconds=Decimal("5400"),  # 1.5 h on a 1 h job (accrued before the cap)
    )
    [payable] = order_fleet_payables(order_id=order.id)
    assert payable.accepted_seconds == Decimal("3600")
    assert payable.amount == Decimal("10.00")


def test_payables_above_net_revenue_are_held_flagged_and_not_paid_until_released(connect):
    # given: a 10 h order paid 1000.00, 8 h accepted (the customer keeps paying 800.00), done
    # by a fleet whose agreed rate is 120/h: 960.00 of payables
    fleet = fleet_with_account(payout_rate_per_hour=Decimal("120"))
    with rows_from_before_the_pay_rule():  # 120/h on a 100/h order: refused since
        order = delivered_order(jobs=[(fleet, "28800")])
    # when: payables are recorded, then a payout run
    order_fleet_payables(order_id=order.id)
    payout_run(triggered_by="test")
    # then: the payable is held, staff are flagged, nothing was transferred
    payable = FleetPayable.objects.get(order=order)
    assert payable.amount == Decimal("960.00") and payable.hold_reason
    flag = BillingFlag.objects.get(
        kind=BillingFlag.Kind.PAYABLES_EXCEED_REVENUE, dedupe_key=f"payables-exceed:{order.id}"
    )
    assert flag.order_id == order.id
    # (and per job: 960.00 stands for 8 h the customer pays 800.00 for)
    assert BillingFlag.objects.filter(dedupe_key=f"payable-exceeds:{payable.job_id}").exists()
    assert connect.sent() == [] and not Payout.objects.exists()
    # when: staff review and release it
    assert payables_release_hold(payable_ids=[payable.id]) == 1
    payout_run(triggered_by="test")
    # then: the next run pays it (once)
    assert [t["amount"] for t in connect.sent()] == [96000]
    payout_run(triggered_by="test")
    assert len(connect.sent()) == 1


def test_a_refund_after_payables_holds_what_is_not_yet_paid(connect):
    # given: payables within revenue (300.00 of 800.00), not yet paid out
    from billing.models import Payment
    from billing.services.refunds import refund_request

    fleet = fleet_with_account(payout_rate_per_hour=Decimal("30"))
    order = delivered_order(jobs=[(fleet, "36000")])  # 10 h of 10
    order_fleet_payables(order_id=order.id)
    # when: staff refund 900.00 of the 1000.00 payment before the payout run
    payment = Payment.objects.get(order=order)
    with celery_eagerly():
        refund_request(payment_id=payment.id, amount=Decimal("900"), reason="staff", key="t:1")
    payout_run(triggered_by="test")
    # then: 100.00 left is less than the 300.00 owed: held and flagged, nothing sent
    assert connect.sent() == []
    assert FleetPayable.objects.get(order=order).hold_reason
    assert BillingFlag.objects.filter(kind=BillingFlag.Kind.PAYABLES_EXCEED_REVENUE).exists()


def test_accepted_work_on_a_job_of_an_order_cancelled_after_dispatch_is_paid(
    paid_order, django_capture_on_commit_callbacks
):
    # given: an order in collection whose job has 1 h accepted at the agreed 50/h
    order, _, _ = paid_order()
    fleet = fleet_with_account(payout_rate_per_hour=Decimal("50"))
    CompletedJobFactory(
        order=order,
        site=SiteFactory(fleet=fleet),
        status=Job.Status.IN_PROGRESS,
        accepted_seconds=Decimal("3600"),
    )
    Order.objects.filter(pk=order.pk).update(
        accepted_seconds=Decimal("3600"), accepted_hours=Decimal("1")
    )
    # when: the customer cancels (the cancellation signal queues refund and payables)
    with django_capture_on_commit_callbacks(execute=True), celery_eagerly():
        order_transition(order_id=order.id, to_status=Order.Status.IN_COLLECTION, actor_label="t")
        order_transition(order_id=order.id, to_status=Order.Status.CANCELLED, actor_label="t")
    # then: the fleet is owed its hour
    payable = FleetPayable.objects.get(order=order)
    assert payable.fleet_id == fleet.id and payable.amount == Decimal("50.00")
    assert FleetPayoutAccount.objects.filter(fleet=fleet).exists()
