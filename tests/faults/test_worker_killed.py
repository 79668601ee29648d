"""Fault: the Celery worker is SIGKILLed (main process and pool children) in the middle of
QA and in the middle of delivery assembly. Tasks run with acks_late and
reject_on_worker_lost, so RabbitMQ hands the unacknowledged messages to the next worker;
the tasks are idempotent, so what the dead worker had already committed is not redone.
S3 answers slowly through the proxy, which keeps the worker busy mid-task when it dies.
"""

import pytest

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery, Episode
from orders.models import Order, OrderEvent
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

EPISODES = 8


def test_qa_survives_a_worker_killed_mid_task(
    s3, publish_to, workers, s3_proxy, proxy_settings, fleet_operator, customer, figures
):
    # given: 8 uploaded episodes, a worker whose S3 requests each take 0.3 s
    collection = Collection(fleet_operator, customer, target_hours="1")
    ids = uploaded_episodes(collection, EPISODES)
    s3_proxy.delay_seconds = 0.3
    worker = workers(publish_to, "qa", **proxy_settings)
    complete_all(collection, ids)
    # when: it is killed once QA has decided some episodes and is in the middle of others
    wait_for(
        lambda: Episode.objects.filter(status=Episode.Status.ACCEPTED).exists(),
        timeout=40,
        what="a first QA decision",
        step=0.05,
    )
    worker.kill()
    left_at_kill = undecided()
    assert 0 < left_at_kill < EPISODES
    # when: a new worker starts (S3 answers at full speed again)
    s3_proxy.delay_seconds = 0
    recovery = Stopwatch()
    workers(publish_to, "qa", **proxy_settings)
    wait_for(lambda: undecided() == 0, timeout=60, what="QA of every episode")
    # then: each episode decided once, its time credited once
    figures.update(
        assert_each_episode_decided_once(collection, ids),
        undecided_at_kill=left_at_kill,
        recovery_s=recovery.seconds(),
    )


def test_delivery_assembly_survives_a_worker_killed_mid_upload(
    s3, s3_server, publish_to, workers, s3_proxy, proxy_settings, fleet_operator, customer, figures
):
    # given: two 20 s episodes complete a 0.01 h order; QA runs, the delivery is opened
    collection = Collection(fleet_operator, customer, target_hours="0.01")
    ids = []
    for seed, task in [(1, "insert the peg"), (2, "wipe the table")]:
        data = parquet_bytes(episode_table(frames=600, seed=seed))
        body = collection.register(data, task_instruction=task).json()
        assert put(body["upload"], data) == 200
        ids.append(body["id"])
    qa_worker = workers(publish_to, "qa", **proxy_settings)
    complete_all(collection, ids)
    delivery = wait_for(
        lambda: Delivery.objects.filter(order=collection.order).first(), 60, "the delivery"
    )
    qa_worker.stop()
    # when: the assembler is killed while it uploads the dataset's files
    s3_proxy.delay_seconds = 0.4
    puts_by_qa = s3_proxy.methods["PUT"]  # QA's server-side copies are PUTs too
    assembler = workers(publish_to, "delivery", **proxy_settings)
    wait_for(
        lambda: s3_proxy.methods["PUT"] >= puts_by_qa + 2, timeout=40, what="uploads", step=0.05
    )
    assembler.kill()
    puts_before_kill = s3_proxy.methods["PUT"] - puts_by_qa
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.ASSEMBLING
    # when: a new worker takes the redelivered task
    s3_proxy.delay_seconds = 0
    recovery = Stopwatch()
    workers(publish_to, "delivery", **proxy_settings)
    wait_for(
        lambda: Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.READY).exists(),
        timeout=60,
        what="the delivery to be ready",
    )
    # then: one delivery, one set of files matching its manifest, the order delivered once
    delivery.refresh_from_db()
    assert Delivery.objects.filter(order=collection.order).count() == 1
    consistent = assert_delivery_consistent(delivery, s3_server)
    assert delivery.episodes == 2
    collection.order.refresh_from_db()
    assert collection.order.status == Order.Status.DELIVERED
    assert (
        OrderEvent.objects.filter(order=collection.order, to_status=Order.Status.DELIVERED).count()
        == 1
    )
    figures.update(
        published=1,
        completed=1,
        duplicated=0,
        puts_before_kill=puts_before_kill,
        recovery_s=recovery.seconds(),
        **consistent,
    )


def pool_peak_rss_bytes(worker) -> int:
    """The largest peak RSS (VmHWM) of the worker's processes: main and pool children."""
    peaks = []
    for pid in [worker.process.pid, *_children(worker.process.pid)]:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        peaks.append(int(line.split()[1]) * 1024)
        except FileNotFoundError:
            continue
    return max(peaks)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(child) for child in children.read().split()]
    except FileNotFoundError:
        return []


QA_WORKER_RSS_CEILING = 400 * 1024**2


def test_hostile_files_leave_the_qa_worker_small_and_are_decided_in_bounded_time(
    s3, publish_to, workers, fleet_operator, customer, figures
):
    from tests.datasets.test_qa_limits import HOSTILE

    # given: one upload of each hostile kind and a QA worker on RabbitMQ
    collection = Collection(fleet_operator, customer, target_hours="10")
    ids = []
    for build, _ in HOSTILE:
        data = build()
        response = collection.register(data, frames=3000)
        assert response.status_code == 201, response.json()
        assert put(response.json()["upload"], data) == 200
        ids.append(response.json()["id"])
    worker = workers(publish_to, "qa", **s3.settings())
    # when: they are completed and checked
    watch = Stopwatch()
    complete_all(collection, ids)
    wait_for(lambda: undecided() == 0, timeout=60, what="QA of the hostile files")
    # then: every one is rejected for its reason; no worker process grew past the ceiling
    codes = {
        str(e.id): {f["code"] for f in e.qa_failures} for e in Episode.objects.filter(pk__in=ids)
    }
    for episode_id, (_, code) in zip(ids, HOSTILE, strict=True):
        assert code in codes[episode_id] or "frame_count" in codes[episode_id], codes
    assert not Episode.objects.filter(pk__in=ids, status=Episode.Status.ACCEPTED).exists()
    peak = pool_peak_rss_bytes(worker)
    assert peak < QA_WORKER_RSS_CEILING
    figures.update(
        hostile_files=len(ids), seconds=watch.seconds(), worker_peak_rss_mb=peak // 2**20
    )


def test_a_qa_run_killed_again_and_again_is_given_up_not_looped(
    s3, publish_to, workers, s3_proxy, proxy_settings, fleet_operator, customer, figures
):
    # given: one uploaded episode; every S3 request takes 4 s, so QA is always mid-run
    collection = Collection(fleet_operator, customer, target_hours="1")
    [episode_id] = uploaded_episodes(collection, 1)
    s3_proxy.delay_seconds = 4
    settings = {**proxy_settings, "EPISODE_QA_MAX_ATTEMPTS": 2}
    complete_all(collection, [episode_id])
    # when: its worker is SIGKILLed twice while QA runs (RabbitMQ redelivers each time)
    for runs_before in range(2):
        worker = workers(publish_to, "qa", **settings)
        wait_for(
            lambda n=runs_before: Episode.objects.filter(
                pk=episode_id, qa_started_at__isnull=False, qa_unfinished_runs=n
            ).exists(),
            timeout=40,
            what="QA to start",
            step=0.05,
        )
        worker.kill()
    # then: the next worker counts the second unfinished run and gives the episode up
    watch = Stopwatch()
    workers(publish_to, "qa", **settings)
    wait_for(lambda: undecided() == 0, timeout=60, what="the episode to be decided")
    episode = Episode.objects.get(pk=episode_id)
    assert episode.status == Episode.Status.REJECTED
    assert [f["code"] for f in episode.qa_failures] == ["qa_failed"]
    assert episode.qa_unfinished_runs == 2
    figures.update(kills=2, decided_after_s=watch.seconds())
