"""Fault: RabbitMQ restarts while work is queued and a worker is busy.

A private RabbitMQ node (tests/faults/private_rabbit.py; the shared one is never touched)
is stopped and started again on the same data folder. Celery declares durable queues and
publishes persistent messages, so what was queued before the restart is still there after
it; the worker reconnects by itself; a request that has to enqueue while the broker is down
still succeeds (its data is committed) and the sweeper (qa_sweep, run by celery beat)
queues the work it could not.
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from kombu import Connection

from billing.ledger import post_charge
from billing.models import Payment, Refund
from billing.services.sweep import billing_sweep
from datasets import tasks
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery
from datasets.services.qa import episode_run_qa
from fleets.models import Job
from fleets.services.sweep import dispatch_sweep
from orders.models import Order, OrderEvent
from orders.services import order_mark_paid
from tests.billing.factories import PaymentFactory
from tests.celery_worker import wait_for
from tests.datasets.helpers import Collection, put
from tests.factories import JobFactory, OrderFactory
from tests.faults.conftest import (
    Stopwatch,
    assert_delivery_consistent,
    assert_each_episode_decided_once,
    complete_all,
    undecided,
    uploaded_episodes,
)

pytestmark = [pytest.mark.real_worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BEFORE, DURING = 8, 3


def ready_messages(url: str, queue: str) -> int:
    with Connection(url, connect_timeout=5) as conn:
        return conn.default_channel.queue_declare(queue, passive=True).message_count


def test_queued_work_survives_a_broker_restart_and_nothing_runs_twice(
    s3, private_broker, workers, s3_proxy, proxy_settings, fleet_operator, customer, figures
):
    # given: 11 uploaded episodes; a worker on the private broker, slowed by S3 latency
    collection = Collection(fleet_operator, customer, target_hours="1")
    ids = uploaded_episodes(collection, BEFORE + DURING)
    before, during = ids[:BEFORE], ids[BEFORE:]
    s3_proxy.delay_seconds = 0.2
    workers(private_broker.url, "qa", EPISODE_QA_STALE_SECONDS=1, **proxy_settings)
    complete_all(collection, before)
    wait_for(lambda: undecided() < BEFORE, timeout=40, what="a first QA decision", step=0.05)
    queued_before = ready_messages(private_broker.url, "qa")
    assert queued_before > 0
    # when: the broker goes down
    stop_s = private_broker.stop()
    # when: fleets complete uploads while it is down
    outage = Stopwatch()
    complete_all(collection, during)
    publish_failure_s = outage.seconds()
    # when: the broker is back, on the same data
    start_s = private_broker.start()
    queued_after = ready_messages(private_broker.url, "qa")
    recovery = Stopwatch()
    # then: the queued messages survived (and unacknowledged ones came back)
    assert queued_after >= queued_before
    # then: the worker reconnects and finishes what was queued
    wait_for(lambda: undecided() == DURING, timeout=60, what="the worker to reconnect and drain")
    reconnect_s = recovery.seconds()
    # when: the sweeper runs (celery beat's qa_sweep), the work enqueued during the outage
    tasks.qa_sweep.delay()
    wait_for(lambda: undecided() == 0, timeout=40, what="the swept episodes' QA")
    # then: every episode decided once, credited once
    figures.update(
        assert_each_episode_decided_once(collection, ids),
        queued_at_stop=queued_before,
        queued_after_start=queued_after,
        broker_stop_s=round(stop_s, 2),
        broker_start_s=round(start_s, 2),
        requests_during_outage=DURING,
        outage_requests_s=publish_failure_s,
        worker_drained_s=reconnect_s,
        recovery_s=recovery.seconds(),
    )


def test_an_assembly_that_could_not_be_queued_is_swept_once_the_broker_is_back(
    s3, s3_server, private_broker, workers, fleet_operator, customer, figures
):
    # given: two uploaded 20 s episodes that complete a 0.01 h order, a delivery worker
    collection = Collection(fleet_operator, customer, target_hours="0.01")
    ids = []
    for seed in (1, 2):
        data = parquet_bytes(episode_table(frames=600, seed=seed))
        body = collection.register(data).json()
        assert put(body["upload"], data) == 200
        ids.append(body["id"])
    complete_all(collection, ids)
    workers(private_broker.url, "delivery", DELIVERY_ASSEMBLY_STALE_SECONDS=0, **s3.settings())
    # when: the broker is down as QA accepts the last episode and opens the delivery
    private_broker.stop()
    for episode_id in ids:
        episode_run_qa(episode_id=episode_id)
    # then: QA's decisions stand, the delivery is open, its assembly not queued (no error)
    delivery = Delivery.objects.get(order=collection.order)
    assert delivery.status == Delivery.Status.ASSEMBLING
    # when: the broker is back and celery beat's delivery_sweep runs
    private_broker.start()
    recovery = Stopwatch()
    tasks.delivery_sweep.delay()
    wait_for(
        lambda: Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.READY).exists(),
        timeout=60,
        what="the swept delivery to be assembled",
    )
    # then: assembled once, consistent, the order delivered once
    delivery.refresh_from_db()
    collection.order.refresh_from_db()
    assert collection.order.status == Order.Status.DELIVERED
    assert (
        OrderEvent.objects.filter(order=collection.order, to_status=Order.Status.DELIVERED).count()
        == 1
    )
    figures.update(
        published_during_outage=0,
        swept=1,
        completed=1,
        duplicated=Delivery.objects.filter(order=collection.order).count() - 1,
        recovery_s=recovery.seconds(),
        **assert_delivery_consistent(delivery, s3_server),
    )


def test_orders_paid_or_cancelled_while_the_broker_is_down_are_swept(
    private_broker, workers, customer, settings, figures
):
    # given: an order awaiting payment, and an order in collection (paid, one job of its
    # 10 h assigned to a fleet)
    to_pay = OrderFactory(organization=customer.organization, status=Order.Status.AWAITING_PAYMENT)
    to_cancel = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("10"),
        total=Decimal("1000.00"),
    )
    payment = PaymentFactory(
        order=to_cancel, status=Payment.Status.SUCCEEDED, succeeded_at=timezone.now()
    )
    post_charge(payment)
    job = JobFactory(order=to_cancel, target_hours=Decimal("2"))
    # when: the broker is down as one order is paid and the customer cancels the other
    private_broker.stop()
    order_mark_paid(order_id=to_pay.id, actor_label="staff:test")
    response = customer.client.post(
        f"/api/v1/orders/{to_cancel.id}/cancel", {"reason": "changed plans"}, format="json"
    )
    # then: the customer's cancellation stands (its follow-up work is left to the sweepers)
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == Order.Status.CANCELLED
    # when: the broker is back, a worker runs, and celery beat's sweepers run (twice)
    private_broker.start()
    workers(private_broker.url, "dispatch,billing")
    recovery = Stopwatch()
    settings.FLEETS_STALE_OPEN_JOB_SECONDS = 0
    later = timezone.now() + timedelta(minutes=3)
    for _ in range(2):
        swept = dispatch_sweep()
        billing_sweep(now=later)
    # then: the paid order is planned, the cancelled order's job cancelled and refunded once
    wait_for(
        lambda: (
            Job.objects.filter(order=to_pay).exists()
            and Refund.objects.filter(order=to_cancel).exists()
        ),
        timeout=40,
        what="the swept orders' planning and refund",
    )
    job.refresh_from_db()
    assert job.status == Job.Status.CANCELLED
    refunds = Refund.objects.filter(order=to_cancel, reason=Refund.Reason.CANCELLATION)
    assert refunds.count() == 1
    assert refunds.get().amount == Decimal("800.00")  # the 8 h never dispatched
    figures.update(
        orders_planned=1,
        jobs_cancelled=1,
        cancellation_refunds=refunds.count(),
        swept_twice_duplicates=refunds.count() - 1 + swept.jobs_of_cancelled_orders,
        recovery_s=recovery.seconds(),
    )
