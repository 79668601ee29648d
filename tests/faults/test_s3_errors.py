"""Fault: object storage answers 503 SlowDown, drops connections, or cannot be reached.

QA and delivery assembly must retry and finish (boto3 retries a few times, then the Celery
task retries with backoff); an episode must never be rejected because storage was down
(that would throw away a good episode); API calls that need S3 answer 503 in the error
shape, never a 500.
"""

import pytest

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery, Episode
from local_s3.launcher import free_port
from tests.celery_worker import wait_for
from tests.datasets.helpers import Collection, put
from tests.faults.conftest import (
    Stopwatch,
    assert_delivery_consistent,
    assert_each_episode_decided_once,
    complete_all,
    undecided,
    uploaded_episodes,
)

pytestmark = [pytest.mark.real_worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_qa_and_assembly_finish_through_a_third_of_requests_failing(
    s3, s3_server, publish_to, workers, s3_proxy, proxy_settings, fleet_operator, customer, figures
):
    # given: a 0.01 h order (two 20 s episodes complete it, then the delivery is assembled)
    # and storage failing a third of all requests: 503 SlowDown, or a dropped connection
    collection = Collection(fleet_operator, customer, target_hours="0.01")
    ids = []
    for seed in (1, 2):
        data = parquet_bytes(episode_table(frames=600, seed=seed))
        body = collection.register(data).json()
        assert put(body["upload"], data) == 200
        ids.append(body["id"])
    s3_proxy.fail_fraction = 0.34
    workers(publish_to, "qa,delivery", **proxy_settings)
    took = Stopwatch()
    # when
    complete_all(collection, ids)
    # then: both accepted, the delivery assembled and consistent
    wait_for(
        lambda: Delivery.objects.filter(
            order=collection.order, status=Delivery.Status.READY
        ).exists(),
        timeout=60,
        what="the delivery, through failing storage",
    )
    statuses = list(Episode.objects.filter(pk__in=ids).values_list("status", "qa_runs"))
    assert statuses == [(Episode.Status.ACCEPTED, 1)] * 2
    delivery = Delivery.objects.get(order=collection.order)
    s3_proxy.fail_fraction = 0
    figures.update(
        s3_requests=s3_proxy.requests,
        s3_failed=s3_proxy.failed,
        completed_s=took.seconds(),
        **assert_delivery_consistent(delivery, s3_server),
    )


@pytest.mark.parametrize("fault", ["slowdown", "dropped_connection"])
def test_storage_down_during_qa_keeps_episodes_undecided_until_it_is_back(
    fault, s3, publish_to, workers, s3_proxy, proxy_settings, fleet_operator, customer, figures
):
    # given: storage fails every ranged read (the parquet footer and columns), so QA gets
    # as far as reading the file and then cannot
    collection = Collection(fleet_operator, customer, target_hours="1")
    ids = uploaded_episodes(collection, 3)
    s3_proxy.fail_only = lambda request: "Range" in request.headers
    if fault == "slowdown":
        s3_proxy.fail_next = 10**6
    else:
        s3_proxy.close_connections = True
    workers(publish_to, "qa", **proxy_settings)
    # when
    complete_all(collection, ids)
    wait_for(
        lambda: s3_proxy.failed >= 15 or undecided() < 3,
        timeout=40,
        what="QA to hit the failing storage",
    )
    # then: nothing is decided, in particular nothing is rejected
    decided = Episode.objects.exclude(status=Episode.Status.UPLOADED)
    assert list(decided.values_list("status", "qa_failures")) == []
    # when: storage is back
    s3_proxy.reset()
    recovery = Stopwatch()
    wait_for(lambda: undecided() == 0, timeout=60, what="QA once storage is back")
    # then
    figures.update(assert_each_episode_decided_once(collection, ids), recovery_s=recovery.seconds())


def test_api_answers_503_in_the_error_shape_when_storage_is_unreachable(
    s3, settings, fleet_operator, customer, figures
):
    # given: a multipart-sized episode (registering it starts a multipart upload at S3),
    # and S3 that cannot be reached at all
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 1000
    collection = Collection(fleet_operator, customer, target_hours="1")
    data = parquet_bytes(episode_table(frames=120, seed=1))
    working = collection.register(data)
    assert working.status_code == 201
    settings.S3_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    took = Stopwatch()
    # when
    register = collection.register(data)
    renew = fleet_operator.client.post(
        f"/api/v1/fleet/episodes/{working.json()['id']}/upload", {}, format="json"
    )
    complete = fleet_operator.client.post(
        f"/api/v1/fleet/episodes/{working.json()['id']}/complete",
        {"parts": [{"part_number": 1, "etag": "abc"}]},
        format="json",
    )
    # then: 503 in the one error shape, nothing half-written
    for response in (register, renew, complete):
        assert response.status_code == 503, response.content
        assert set(response.json()) == {"code", "message", "fields"}
        assert response.json()["code"] == "storage_unavailable"
    assert Episode.objects.count() == 1
    assert Episode.objects.get().status == Episode.Status.REGISTERED
    figures.update(requests=3, answered_503=3, seconds=took.seconds())
