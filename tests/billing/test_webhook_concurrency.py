"""The same event delivered concurrently from threads, against real commits (transaction=True)."""

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from billing.models import LedgerTransaction, Payment, WebhookEvent
from orders.models import Order, OrderEvent
from tests.billing.conftest import confirm_card_payment, make_event, post_webhook
from tests.factories import OrderFactory

THREADS = 10
DELIVERIES_PER_THREAD = 10


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_concurrent_duplicates_pay_once(customer, start_payment, stripe_client):
    # given
    order = OrderFactory(organization=customer.organization)
    payment = start_payment(customer, order)
    intent = confirm_card_payment(stripe_client, payment.stripe_payment_intent_id)
    body = make_event("payment_intent.succeeded", intent)
    statuses: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def deliver_many() -> None:
        client = APIClient()
        try:
            barrier.wait(timeout=30)
            for _ in range(DELIVERIES_PER_THREAD):
                statuses.append(post_webhook(client, body).status_code)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    # when
    threads = [threading.Thread(target=deliver_many) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    # then
    assert not errors
    assert statuses == [200] * THREADS * DELIVERIES_PER_THREAD
    assert WebhookEvent.objects.count() == 1
    assert WebhookEvent.objects.get().status == WebhookEvent.Status.PROCESSED
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.CHARGE).count() == 1
    assert OrderEvent.objects.filter(order=order, to_status=Order.Status.PAID).count() == 1
    assert Payment.objects.get().status == Payment.Status.SUCCEEDED
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
