"""End to end with a real Celery worker process on RabbitMQ (127.0.0.1:5672).

Each test session gets its own RabbitMQ vhost (created with rabbitmqctl, deleted at the end,
which drops its queues), so runs never see each other's messages. The worker is a
subprocess pointed at pytest's test database; tests use transaction=True so their data is
committed and visible to it. Every wait is bounded; workers are always killed at teardown.
"""

import random
import threading
import time
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleets.models import Assignment, Job, Offer, WebhookDelivery
from fleets.services.dispatch import offer_accept
from marketplace import outbound_webhooks
from marketplace.errors import Conflict
from marketplace.models import Organization
from orders.models import Order
from orders.services import order_mark_paid
from tests.celery_worker import wait_for
from tests.factories import FleetFactory, OrderFactory, equipped_site

pytestmark = [
    pytest.mark.real_worker,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


class FlakyReceiver:
    """A webhook endpoint on 127.0.0.1 that answers 500 to the first request, then 200."""

    def __init__(self):
        self.requests: list[tuple[dict, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                self.send_response(500 if len(receiver.requests) == 1 else 200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_paid_order_is_planned_offered_accepted_and_assigned(make_worker, make_tenant):
    # given three fleet operators with one equipped site each; one has a flaky webhook endpoint
    operators = [make_tenant(Organization.Kind.FLEET_OPERATOR) for _ in range(3)]
    sites = [equipped_site(fleet=FleetFactory(organization=op.organization)) for op in operators]
    receiver = FlakyReceiver()
    try:
        hooked = sites[0].fleet
        hooked.quality_score = Decimal("1.000")  # ranked first: gets the first offer
        hooked.webhook_url = receiver.url
        hooked.save()
        customer = make_tenant(Organization.Kind.CUSTOMER)
        order = OrderFactory(organization=customer.organization, hours=Decimal("4"), environments=2)
        worker = make_worker(
            queues="dispatch,webhooks",
            FLEETS_WEBHOOK_BACKOFF_SECONDS=0.2,
            FLEETS_WEBHOOK_ALLOW_INSECURE="true",  # the receiver is on loopback
        )
        worker.start()

        # when payment is confirmed (the receiver enqueues planning on RabbitMQ)
        order_mark_paid(order_id=order.id, actor_label="test")

        # then the worker plans the jobs and offers each to a fleet, on distinct sites
        offers = wait_for(
            lambda: (
                list(Offer.objects.filter(job__order=order, status=Offer.Status.PENDING))
                if Offer.objects.filter(job__order=order, status=Offer.Status.PENDING).count() == 2
                else None
            ),
            timeout=60,
            what="two pending offers",
        )
        assert Job.objects.filter(order=order).count() == 2
        assert len({offer.site_id for offer in offers}) == 2
        order.refresh_from_db()
        assert order.status == Order.Status.IN_COLLECTION

        # when each fleet accepts its offer through the API
        by_org = {op.organization.pk: op for op in operators}
        for offer in offers:
            client = by_org[offer.fleet.organization_id].client
            response = client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
            assert response.status_code == 200, response.json()

        # then both jobs are assigned, once each
        jobs = Job.objects.filter(order=order)
        assert {job.status for job in jobs} == {Job.Status.ASSIGNED}
        assert Assignment.objects.filter(job__order=order, active=True).count() == 2

        # and the worker delivered the signed offer webhook, retrying after the first 500
        delivery = wait_for(
            lambda: WebhookDelivery.objects.filter(
                fleet=hooked, status=WebhookDelivery.Status.DELIVERED
            ).first(),
            timeout=30,
            what="webhook delivered",
        )
        assert [a["status_code"] for a in delivery.attempts] == [500, 200]
        headers, body = receiver.requests[-1]
        assert outbound_webhooks.verify_signature(
            hooked.webhook_secret, headers["X-Marketplace-Signature"], body
        )
    finally:
        receiver.close()


def test_sigkill_mid_dispatch_every_job_assigned_exactly_once(make_worker, make_tenant):
    # given 8 paid orders x 3 environments = 24 jobs, and 30 fleets with one site each
    operator = make_tenant(Organization.Kind.FLEET_OPERATOR)
    for _ in range(30):
        equipped_site(fleet=FleetFactory(organization=operator.organization))
    customer = make_tenant(Organization.Kind.CUSTOMER)
    orders = [
        OrderFactory(organization=customer.organization, hours=Decimal("6"), environments=3)
        for _ in range(8)
    ]
    # Each dispatch holds its transaction open a moment, so kills land mid-dispatch.
    worker = make_worker(app="tests.celery_slow_dispatch", TEST_DISPATCH_DELAY_SECONDS=0.25)
    for order in orders:
        order_mark_paid(order_id=order.id, actor_label="test")

    def accept_pending() -> int:
        accepted = 0
        for offer in Offer.objects.filter(job__order__in=orders, status=Offer.Status.PENDING):
            try:
                offer_accept(organization=operator.organization, offer_id=offer.pk)
                accepted += 1
            except Conflict:
                pass
        return accepted

    # when the worker is SIGKILLed several times in the middle of dispatching
    rng = random.Random(7)
    kills_with_work_pending = 0
    for _ in range(4):
        worker.start()
        time.sleep(rng.uniform(1.0, 2.0))
        unfinished = Job.objects.filter(
            order__in=orders, status__in=[Job.Status.OPEN, Job.Status.HELD]
        ).count() + (8 * 3 - Job.objects.filter(order__in=orders).count())
        worker.kill()
        kills_with_work_pending += unfinished > 0
        print(f"killed worker with {unfinished} unfinished jobs")
        accept_pending()

    # and finally restarted and left to finish, the fleets accepting offers as they come
    worker.start()

    def all_assigned() -> bool:
        accept_pending()
        jobs = Job.objects.filter(order__in=orders)
        return jobs.count() == 24 and not jobs.exclude(status=Job.Status.ASSIGNED).exists()

    wait_for(all_assigned, timeout=150, what="every job assigned", step=0.5)

    # then every kill interrupted unfinished work, nothing was lost and nothing doubled
    assert kills_with_work_pending >= 2
    jobs = Job.objects.filter(order__in=orders)
    assert jobs.count() == 24
    for job in jobs:
        assert Assignment.objects.filter(job=job).count() == 1, job
        assert Offer.objects.filter(job=job, status=Offer.Status.ACCEPTED).count() == 1, job
    assert not Offer.objects.filter(job__order__in=orders, status=Offer.Status.PENDING).exists()
    assert {o.status for o in Order.objects.filter(pk__in=[o.pk for o in orders])} == {
        Order.Status.IN_COLLECTION
    }
    # each order's environments went to distinct sites
    for order in orders:
        sites = list(Assignment.objects.filter(job__order=order).values_list("site_id", flat=True))
        assert len(set(sites)) == 3


class TricklingReceiver:
    """A webhook endpoint on 127.0.0.1 that answers one byte every half second, forever."""

    def __init__(self):
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                receiver.requests += 1
                self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                    for _ in range(120):
                        self.wfile.write(b"X")
                        self.wfile.flush()
                        time.sleep(0.5)
                except OSError:
                    pass  # cut by the sender's deadline

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_trickling_webhook_receiver_is_cut_at_the_deadline_and_never_delays_dispatch(
    make_worker, make_tenant
):
    # given: 8 fleets whose webhook endpoint trickles, a dispatch worker and a webhooks worker
    # (their own queues, as in production), each webhook attempt bounded by 2 s in all
    receiver = TricklingReceiver()
    try:
        operator = make_tenant(Organization.Kind.FLEET_OPERATOR)
        for _ in range(8):
            fleet = FleetFactory(organization=operator.organization, webhook_url=receiver.url)
            equipped_site(fleet=fleet)
        env = {
            "FLEETS_WEBHOOK_ALLOW_INSECURE": "true",
            "FLEETS_WEBHOOK_TIMEOUT_SECONDS": "2",
            "FLEETS_WEBHOOK_MAX_ATTEMPTS": "1",
        }
        make_worker(queues="dispatch", **env).start()
        make_worker(queues="webhooks", **env).start()
        customer = make_tenant(Organization.Kind.CUSTOMER)
        orders = [
            OrderFactory(organization=customer.organization, hours=Decimal("2"), environments=2)
            for _ in range(3)
        ]
        # when: the orders are paid (6 jobs, each offered with a webhook to its fleet)
        started = time.monotonic()
        for order in orders:
            order_mark_paid(order_id=order.id, actor_label="test")
        wait_for(
            lambda: Job.objects.filter(order__in=orders, status=Job.Status.OFFERED).count() == 6,
            timeout=30,
            what="every job offered",
        )
        offered_after = time.monotonic() - started
        wait_for(
            lambda: (
                not WebhookDelivery.objects.filter(status=WebhookDelivery.Status.PENDING).exists()
            ),
            timeout=60,
            what="every webhook attempt to end",
        )
        # then: dispatch did not wait for the 6 slow receivers (12 s of attempts, 2 at once)
        assert offered_after < 6, offered_after
        deliveries = list(WebhookDelivery.objects.filter(event_type="offer.created"))
        assert len(deliveries) == 6 and receiver.requests >= 6
        for delivery in deliveries:
            [attempt] = delivery.attempts
            assert attempt["error"].startswith("timed out") and attempt["ms"] < 3000
        print(f"offered_after_s={offered_after:.2f}")
    finally:
        receiver.close()
