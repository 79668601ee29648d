"""Wiring: signals to tasks, task routing to the dispatch queue, the beat sweeper, the admin."""

from decimal import Decimal
from unittest import mock

import pytest
from django.conf import settings

from fleets import tasks
from fleets.models import Job
from fleets.services.planning import order_plan
from marketplace.celery import app
from marketplace.tenancy import Caller
from orders.models import Order
from orders.services import order_cancel
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


def test_fleet_tasks_route_to_the_dispatch_queue_and_ack_late():
    for task in (tasks.order_plan, tasks.job_dispatch, tasks.dispatch_sweep):
        route = app.amqp.router.route({}, task.name)
        assert route["queue"].name == "dispatch"
        assert task.acks_late is True


def test_webhooks_to_fleets_and_customers_have_their_own_queue():
    from marketplace import tasks as marketplace_tasks

    for task in (tasks.webhook_deliver, marketplace_tasks.organization_webhook_deliver):
        assert app.amqp.router.route({}, task.name)["queue"].name == "webhooks"
        assert task.acks_late is True


def test_beat_runs_the_sweeper():
    entry = settings.CELERY_BEAT_SCHEDULE["fleets-sweep"]
    assert entry["task"] == tasks.dispatch_sweep.name
    assert entry["schedule"] == float(settings.FLEETS_SWEEP_INTERVAL_SECONDS)


def test_order_cancellation_enqueues_job_cancellation(customer, django_capture_on_commit_callbacks):
    order = OrderFactory(organization=customer.organization, status=Order.Status.PAID)
    caller = Caller(organization=customer.organization, role="owner", api_key=customer.api_key)
    with (
        mock.patch("fleets.tasks.order_cancel_jobs.delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        order_cancel(caller=caller, order_id=order.id)
    delay.assert_called_once_with(str(order.id))


def test_admin_dispatch_board_lists_flagged_jobs_and_redispatches(
    customer, admin_client, admin_user, django_capture_on_commit_callbacks
):
    # given a flagged job (no fleets) and a staff user
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.PAID,
        environments=1,
        hours=Decimal("2"),
    )
    with django_capture_on_commit_callbacks(execute=True):
        order_plan(order_id=order.id)
    job = Job.objects.get(order=order)
    assert job.status == Job.Status.FLAGGED
    client, staff = admin_client, admin_user
    # when
    board = client.get("/admin/fleets/job/?board=flagged")
    with django_capture_on_commit_callbacks(execute=True):
        action = client.post(
            "/admin/fleets/job/",
            {"action": "redispatch", "_selected_action": [str(job.pk)]},
        )
    # then
    assert board.status_code == 200
    assert str(job.pk) in board.content.decode()
    assert action.status_code == 302
    assert job.events.filter(actor_label=f"staff:{staff}").exists()
    for path in ("offer", "bid", "assignment", "webhookdelivery", "fleet", "site", "robot"):
        assert client.get(f"/admin/fleets/{path}/").status_code == 200
