"""The webhook endpoint under attack: forged, replayed, altered, repeated, reordered events."""

import json
import time
from decimal import Decimal

import pytest

from billing.ledger import balances
from billing.models import (
    BillingFlag,
    LedgerTransaction,
    Payment,
    Refund,
    WebhookEvent,
)
from orders.models import Order, OrderEvent
from tests.billing.conftest import (
    confirm_card_payment,
    make_event,
    post_webhook,
    sign,
)
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def confirmed_intent(customer, start_payment, stripe_client):
    """An order whose PaymentIntent succeeded at Stripe; no webhook delivered yet."""
    order = OrderFactory(organization=customer.organization)
    payment = start_payment(customer, order)
    intent = confirm_card_payment(stripe_client, payment.stripe_payment_intent_id)
    return order, payment, intent


def deliver(client, body, capture, signature=None):
    with capture(execute=True):
        return post_webhook(client, body, signature)


def assert_unpaid(order):
    order.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT
    assert not LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.CHARGE).exists()


def test_a_signed_succeeded_event_pays_the_order_once(
    confirmed_intent, webhook_client, django_capture_on_commit_callbacks
):
    # given
    order, payment, intent = confirmed_intent
    # when
    response = deliver(
        webhook_client,
        make_event("payment_intent.succeeded", intent),
        django_capture_on_commit_callbacks,
    )
    # then
    assert response.status_code == 200
    order.refresh_from_db()
    payment.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert payment.status == Payment.Status.SUCCEEDED
    assert payment.stripe_charge_id.startswith("ch_")
    assert WebhookEvent.objects.get().status == WebhookEvent.Status.PROCESSED
    assert balances(order=order) == {
        ("stripe_balance", "USD"): Decimal("1000.00"),
        ("customer_funds", "USD"): Decimal("-1000.00"),
    }
    assert OrderEvent.objects.filter(order=order, to_status=Order.Status.PAID).count() == 1


def test_bad_signature_is_refused(
    confirmed_intent, webhook_client, django_capture_on_commit_callbacks
):
    # given
    order, _, intent = confirmed_intent
    body = make_event("payment_intent.succeeded", intent)
    # when
    wrong_secret = deliver(
        webhook_client,
        body,
        django_capture_on_commit_callbacks,
        sign(body, secret="whsec_attacker"),
    )
    no_header = webhook_client.post(
        "/billing/stripe/webhook/", data=body, content_type="application/json"
    )
    garbage = deliver(webhook_client, body, django_capture_on_commit_callbacks, "t=1,v1=abc")
    # then
    for response in (wrong_secret, no_header, garbage):
        assert response.status_code == 400
        assert response.json()["code"] == "invalid_signature"
    assert WebhookEvent.objects.count() == 0
    assert_unpaid(order)


def test_an_old_timestamp_is_refused_as_a_replay(
    confirmed_intent, webhook_client, django_capture_on_commit_callbacks
):
    # given: a correctly signed event captured an hour ago
    order, _, intent = confirmed_intent
    body = make_event("payment_intent.succeeded", intent)
    old = sign(body, timestamp=int(time.time()) - 3600)
    # when
    response = deliver(webhook_client, body, django_capture_on_commit_callbacks, old)
    # then
    assert response.status_code == 400
    assert WebhookEvent.objects.count() == 0
    assert_unpaid(order)


def test_a_changed_body_is_refused(
    confirmed_intent, webhook_client, django_capture_on_commit_callbacks
):
    # given: a valid signature over the original body, then the amount is changed
    order, _, intent = confirmed_intent
    body = make_event("payment_intent.succeeded", {**intent, "amount": 1})
    signature = sign(body)
    tampered = body.replace('"amount": 1,', '"amount": 100000,')
    assert tampered != body
    # when
    response = deliver(webhook_client, tampered, django_capture_on_commit_callbacks, signature)
    # then
    assert response.status_code == 400
    assert_unpaid(order)


def test_the_same_event_100_times_pays_once(
    confirmed_intent, webhook_client, django_capture_on_commit_callbacks
):
    # given
    order, payment, intent = confirmed_intent
    body = make_event("payment_intent.succeeded", intent)
    # when
    statuses = [
        deliver(webhook_client, body, django_capture_on_commit_callbacks).status_code
        for _ in range(100)
    ]
    # then
    assert set(statuses) == {200}
    assert WebhookEvent.objects.count() == 1
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.CHARGE).count() == 1
    assert OrderEvent.objects.filter(order=order, to_status=Order.Status.PAID).count() == 1
    payment.refresh_from_db()
    assert payment.status == Payment.Status.SUCCEEDED


def test_the_same_payment_under_new_event_ids_is_booked_once(
    confirmed_intent, webhook_client, django_capture_on_commit_callbacks
):
    # given: Stripe may send a second event for the same success
    order, _, intent = confirmed_intent
    # when
    for _ in range(3):
        deliver(
            webhook_client,
            make_event("payment_intent.succeeded", intent),
            django_capture_on_commit_callbacks,
        )
    # then
    assert WebhookEvent.objects.count() == 3
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.CHARGE).count() == 1
    assert OrderEvent.objects.filter(order=order, to_status=Order.Status.PAID).count() == 1


def test_another_orders_amount_is_flagged_and_does_not_pay(
    customer, confirmed_intent, webhook_client, django_capture_on_commit_callbacks
):
    # given: a genuine, signed event for our intent carrying another order's amount
    order, payment, intent = confirmed_intent
    expensive = OrderFactory(organization=customer.organization, hours=Decimal("20"))
    forged = {**intent, "amount": 200000}
    # when
    response = deliver(
        webhook_client,
        make_event("payment_intent.succeeded", forged),
        django_capture_on_commit_callbacks,
    )
    # then
    assert response.status_code == 200
    assert_unpaid(order)
    expensive.refresh_from_db()
    assert expensive.status == Order.Status.AWAITING_PAYMENT
    payment.refresh_from_db()
    assert payment.status == Payment.Status.REVIEW
    flag = BillingFlag.objects.get()
    assert flag.kind == BillingFlag.Kind.AMOUNT_MISMATCH
    assert flag.order_id == order.id
    # when: the genuine event arrives afterwards, the held payment stays with staff
    deliver(
        webhook_client,
        make_event("payment_intent.succeeded", intent),
        django_capture_on_commit_callbacks,
    )
    # then
    assert_unpaid(order)
    # when: staff settle it by refunding in Stripe
    charge = {
        "id": intent["latest_charge"]["id"],
        "object": "charge",
        "payment_intent": intent["id"],
        "refunds": {"data": [{"id": "re_settle", "amount": 200000, "currency": "usd"}]},
    }
    deliver(
        webhook_client, make_event("charge.refunded", charge), django_capture_on_commit_callbacks
    )
    # then: nothing booked for a charge that was never booked, nothing left waiting
    assert not Refund.objects.exists()
    assert not WebhookEvent.objects.filter(status=WebhookEvent.Status.DEFERRED).exists()


def test_another_currency_is_flagged_and_does_not_pay(
    confirmed_intent, webhook_client, django_capture_on_commit_callbacks
):
    # given
    order, _, intent = confirmed_intent
    # when
    deliver(
        webhook_client,
        make_event("payment_intent.succeeded", {**intent, "currency": "eur"}),
        django_capture_on_commit_callbacks,
    )
    # then
    assert_unpaid(order)
    assert BillingFlag.objects.get().kind == BillingFlag.Kind.AMOUNT_MISMATCH


def test_refund_before_payment_succeeded_waits_and_is_booked_once(
    confirmed_intent, stripe_client, webhook_client, django_capture_on_commit_callbacks
):
    # given: a refund issued in Stripe's dashboard, whose event overtakes the payment's
    order, payment, intent = confirmed_intent
    stripe_client.v1.refunds.create(params={"payment_intent": intent["id"], "amount": 30000})
    charge = stripe_client.v1.charges.retrieve(intent["latest_charge"]["id"]).to_dict()
    refunded = make_event("charge.refunded", charge)
    # when
    early = deliver(webhook_client, refunded, django_capture_on_commit_callbacks)
    # then: recorded, deferred, nothing booked, nothing paid
    assert early.status_code == 200
    event = WebhookEvent.objects.get()
    assert event.status == WebhookEvent.Status.DEFERRED
    assert Refund.objects.count() == 0
    assert_unpaid(order)
    # when: the payment's own event arrives, then the refund event is redelivered
    deliver(
        webhook_client,
        make_event("payment_intent.succeeded", intent),
        django_capture_on_commit_callbacks,
    )
    deliver(webhook_client, refunded, django_capture_on_commit_callbacks)
    # then
    event.refresh_from_db()
    assert event.status == WebhookEvent.Status.PROCESSED
    refund = Refund.objects.get()
    assert refund.amount == Decimal("300.00")
    assert refund.reason == Refund.Reason.STRIPE
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("300.00")
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert balances(order=order) == {
        ("stripe_balance", "USD"): Decimal("700.00"),
        ("customer_funds", "USD"): Decimal("-700.00"),
    }


def test_a_refund_event_larger_than_the_charge_is_flagged_not_booked(
    confirmed_intent, webhook_client, django_capture_on_commit_callbacks
):
    # given: a paid order
    order, payment, intent = confirmed_intent
    deliver(
        webhook_client,
        make_event("payment_intent.succeeded", intent),
        django_capture_on_commit_callbacks,
    )
    charge = {
        "id": intent["latest_charge"]["id"],
        "object": "charge",
        "payment_intent": intent["id"],
        "amount": 100000,
        "currency": "usd",
        "refunds": {"data": [{"id": "re_big", "amount": 500000, "currency": "usd"}]},
    }
    # when
    response = deliver(
        webhook_client, make_event("charge.refunded", charge), django_capture_on_commit_callbacks
    )
    # then
    assert response.status_code == 200
    assert Refund.objects.count() == 0
    assert BillingFlag.objects.get().kind == BillingFlag.Kind.REFUND_EXCEEDS
    payment.refresh_from_db()
    assert payment.amount_refunded == 0
    order.refresh_from_db()
    assert order.status == Order.Status.PAID


def test_an_event_for_an_unknown_object_is_recorded_not_a_crash(
    webhook_client, stripe_on, django_capture_on_commit_callbacks
):
    # given
    unknown_intent = {"id": "pi_nobody", "object": "payment_intent", "amount": 5, "currency": "usd"}
    bodies = [
        make_event("payment_intent.succeeded", unknown_intent),
        make_event("charge.refunded", {"id": "ch_nobody", "object": "charge"}),
        make_event("charge.dispute.created", {"id": "dp_nobody", "charge": "ch_nobody"}),
        make_event("customer.created", {"id": "cus_x", "object": "customer"}),
        make_event("payment_intent.succeeded", "not an object"),  # type: ignore[arg-type]
    ]
    # when
    responses = [
        deliver(webhook_client, body, django_capture_on_commit_callbacks) for body in bodies
    ]
    # then
    assert [r.status_code for r in responses] == [200] * 5
    statuses = dict(WebhookEvent.objects.values_list("type", "status").order_by("received_at"))
    assert statuses["customer.created"] == WebhookEvent.Status.IGNORED
    assert set(WebhookEvent.objects.values_list("status", flat=True)) == {
        WebhookEvent.Status.UNMATCHED,
        WebhookEvent.Status.IGNORED,
    }


def test_malformed_bodies_are_400_not_500(webhook_client, stripe_on):
    # given
    for body in ["not json", json.dumps([1, 2]), json.dumps({"no": "id"})]:
        # when
        response = post_webhook(webhook_client, body)
        # then
        assert response.status_code == 400


def test_webhooks_without_a_secret_ask_stripe_to_retry(webhook_client, settings):
    # given
    settings.STRIPE_WEBHOOK_SECRET = ""
    body = make_event("payment_intent.succeeded", {"id": "pi_x"})
    # when
    response = post_webhook(webhook_client, body)
    # then
    assert response.status_code == 503


def test_payment_failed_keeps_the_order_unpaid_with_the_reason(
    customer, start_payment, webhook_client, django_capture_on_commit_callbacks
):
    # given
    order = OrderFactory(organization=customer.organization)
    payment = start_payment(customer, order)
    failed = {
        "id": payment.stripe_payment_intent_id,
        "object": "payment_intent",
        "amount": 100000,
        "currency": "usd",
        "status": "requires_payment_method",
        "last_payment_error": {"message": "Your card was declined."},
        "metadata": {"payment_id": str(payment.id)},
    }
    # when
    deliver(
        webhook_client,
        make_event("payment_intent.payment_failed", failed),
        django_capture_on_commit_callbacks,
    )
    # then
    payment.refresh_from_db()
    assert payment.failure_message == "Your card was declined."
    assert payment.status == Payment.Status.REQUIRES_PAYMENT
    assert_unpaid(order)


def test_a_dispute_is_flagged_and_booked_once(
    paid_order, webhook_client, django_capture_on_commit_callbacks
):
    # given
    order, payment, intent = paid_order()
    dispute = {
        "id": "dp_1",
        "object": "dispute",
        "charge": payment.stripe_charge_id,
        "payment_intent": intent["id"],
        "amount": 100000,
        "currency": "usd",
        "reason": "fraudulent",
    }
    body = make_event("charge.dispute.created", dispute)
    # when
    for _ in range(3):
        deliver(webhook_client, body, django_capture_on_commit_callbacks)
    deliver(
        webhook_client,
        make_event("charge.dispute.created", dispute),
        django_capture_on_commit_callbacks,
    )
    # then
    assert BillingFlag.objects.filter(kind=BillingFlag.Kind.DISPUTE).count() == 1
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.DISPUTE).count() == 1
    assert balances(order=order)[("disputes", "USD")] == Decimal("1000.00")
    assert sum(balances(order=order).values()) == 0


def test_the_same_refund_event_100_times_refunds_once(
    paid_order, stripe_client, webhook_client, django_capture_on_commit_callbacks
):
    # given: a refund made in Stripe's dashboard
    order, payment, intent = paid_order()
    stripe_client.v1.refunds.create(params={"payment_intent": intent["id"], "amount": 12345})
    charge = stripe_client.v1.charges.retrieve(payment.stripe_charge_id).to_dict()
    body = make_event("charge.refunded", charge)
    # when: redelivered 100 times, and sent again under 5 new event ids
    statuses = [
        deliver(webhook_client, body, django_capture_on_commit_callbacks).status_code
        for _ in range(100)
    ]
    for _ in range(5):
        deliver(
            webhook_client,
            make_event("charge.refunded", charge),
            django_capture_on_commit_callbacks,
        )
    # then
    assert set(statuses) == {200}
    refund = Refund.objects.get()
    assert refund.amount == Decimal("123.45")
    payment.refresh_from_db()
    assert payment.amount_refunded == Decimal("123.45")
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.REFUND).count() == 1
    assert sum(balances(order=order).values()) == 0
