"""QA on real worker processes: 50 episodes of one job on 2 prefork processes (RabbitMQ).

Concurrent decisions must not lose an update: the job's and the order's accepted time equal
the sum of the accepted episodes' durations exactly.
"""

import hashlib
import urllib.request
from decimal import Decimal

import pytest

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode
from orders.models import Order
from tests.celery_worker import wait_for
from tests.datasets.helpers import frames_in
from tests.factories import FleetFactory, JobFactory, OrderFactory, RobotFactory, SiteFactory

pytestmark = [pytest.mark.real_worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EPISODES = 50


def test_qa_of_50_episodes_on_2_processes_accrues_exactly(
    s3, make_worker, fleet_operator, customer
):
    # given: one job and 50 uploaded episodes of different lengths (3 of them broken)
    fleet = FleetFactory(organization=fleet_operator.organization)
    site = SiteFactory(fleet=fleet)
    robot = RobotFactory(site=site, fleet=fleet)
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("5"),
        environments=1,
    )
    job = JobFactory(order=order, site=site, target_hours=Decimal("5"))
    ids = []
    for index in range(EPISODES):
        columns = episode_table(frames=60 + 7 * index, seed=index)
        if index % 17 == 3:
            columns["timestamp"][30:] += 1.0  # a gap QA must reject
        data = parquet_bytes(columns)
        response = fleet_operator.client.post(
            f"/api/v1/fleet/jobs/{job.id}/episodes",
            {
                "site": str(site.id),
                "robot": str(robot.id),
                "operator": f"op-{index % 4}",
                "task_instruction": "t",
                "success": True,
                "fps": 30,
                "size_bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "frames": frames_in(data),
            },
            format="json",
        )
        upload = response.json()["upload"]
        request = urllib.request.Request(
            upload["url"], data=data, method="PUT", headers=upload["headers"]
        )
        urllib.request.urlopen(request, timeout=10).close()
        ids.append(response.json()["id"])
    worker = make_worker(queues="qa", **s3.settings())
    worker.start()
    # when: every episode is completed (each enqueues its QA on the broker)
    for episode_id in ids:
        assert (
            fleet_operator.client.post(
                f"/api/v1/fleet/episodes/{episode_id}/complete", {}, format="json"
            ).status_code
            == 200
        )
    wait_for(
        lambda: not Episode.objects.filter(status=Episode.Status.UPLOADED).exists(),
        timeout=180,
        what="QA of every episode",
    )
    # then
    accepted = Episode.objects.filter(status=Episode.Status.ACCEPTED)
    expected = sum(e.duration_seconds for e in accepted)
    assert accepted.count() == EPISODES - 3
    assert Episode.objects.filter(status=Episode.Status.REJECTED).count() == 3
    job.refresh_from_db()
    order.refresh_from_db()
    assert job.accepted_seconds == expected == order.accepted_seconds
    assert expected == sum(
        Decimal(60 + 7 * i) / 30 for i in range(EPISODES) if i % 17 != 3
    ).quantize(Decimal("0.001"))
    assert set(Episode.objects.values_list("qa_runs", flat=True)) == {1}
