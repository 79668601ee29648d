"""Many simultaneous accepts of one offer, each on its own database connection."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from fleets.models import Assignment, Job, JobEvent, Offer
from fleets.services.planning import order_plan
from orders.models import Order
from tests.factories import FleetFactory, OrderFactory, RobotFactory, SiteFactory

ACCEPTORS = 24


@pytest.mark.django_db(transaction=True)
def test_simultaneous_accepts_one_wins_the_rest_409(fleet_operator, customer):
    # given one pending offer to the operator's fleet
    fleet = FleetFactory(organization=fleet_operator.organization)
    site = SiteFactory(fleet=fleet)
    RobotFactory(site=site, fleet=fleet)
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.PAID,
        environments=1,
        hours=Decimal("2"),
    )
    order_plan(order_id=order.id)  # commits; its on-commit dispatch runs eagerly
    job = Job.objects.get(order=order)
    offer = Offer.objects.get(job=job)
    assert offer.expires_at > timezone.now() + timedelta(minutes=1)

    barrier = threading.Barrier(ACCEPTORS)
    results: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def accept():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {fleet_operator.raw_key}")
        try:
            barrier.wait(timeout=30)
            response = client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
            with lock:
                results.append((response.status_code, response.json()))
        finally:
            connection.close()

    # when all accept at once, each thread on its own connection
    threads = [threading.Thread(target=accept) for _ in range(ACCEPTORS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # then exactly one succeeded, every other got a clear 409
    statuses = sorted(status for status, _ in results)
    assert len(results) == ACCEPTORS
    assert statuses.count(200) == 1, statuses
    assert statuses.count(409) == ACCEPTORS - 1, statuses
    assert {body["code"] for status, body in results if status == 409} == {"offer_not_pending"}
    assert Assignment.objects.filter(job=job).count() == 1
    assert JobEvent.objects.filter(job=job, to_status=Job.Status.ASSIGNED).count() == 1
    assert Offer.objects.get(pk=offer.pk).status == Offer.Status.ACCEPTED
