"""The batch dispatcher on the real database: set queries whatever the batch size, the
offers it writes, and jobs another dispatcher holds skipped (FOR UPDATE SKIP LOCKED)."""

import threading
from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleets import selectors, tasks
from fleets.models import Assignment, Bid, Fleet, Job, JobEvent, Offer, Site, WebhookDelivery
from fleets.services.dispatch import bid_place, jobs_dispatch, open_jobs_dispatch
from fleets.services.planning import order_plan
from fleets.services.sweep import dispatch_sweep
from orders.models import Order
from tests.factories import FleetFactory, OrderFactory, equipped_site


def world(customer, *, orders: int, fleets: int = 6, weekly: str = "40") -> list[Job]:
    """`fleets` fleets (webhook URL, two capable sites each) and `orders` paid orders of 4
    environments x 2 h, planned (their jobs open, not dispatched yet)."""
    for _ in range(fleets):
        fleet = FleetFactory(
            weekly_capacity_hours=Decimal(weekly), webhook_url="https://fleet.example/hook"
        )
        equipped_site(fleet=fleet)
        equipped_site(fleet=fleet)
    planned = []
    for _ in range(orders):
        order = OrderFactory(
            organization=customer.organization,
            status=Order.Status.PAID,
            hours=Decimal("8"),
            environments=4,
        )
        order_plan(order_id=order.id)  # the on-commit dispatch never runs in this test
        planned += list(Job.objects.filter(order=order))
    return planned


def counted_dispatch(jobs):
    with CaptureQueriesContext(connection) as ctx:
        results = jobs_dispatch(job_ids=[job.pk for job in jobs])
    return results, len(ctx.captured_queries)


@pytest.mark.django_db
def test_batch_queries_do_not_grow_with_jobs_and_the_offers_keep_every_rule(customer):
    # given a batch of 4 jobs and one of 48 (12 orders), on the same 6 fleets; the large
    # batch needs more than the fleets hold before the deadline, so some jobs are flagged
    small = world(customer, orders=1, weekly="1")
    large = world(customer, orders=12, fleets=0)
    # when each is dispatched as one batch
    small_results, small_queries = counted_dispatch(small)
    large_results, large_queries = counted_dispatch(large)
    # then the large batch runs exactly as many queries as the small one
    assert len(small_results) == 4 and len(large_results) == 48
    assert large_queries == small_queries <= 16  # savepoint and release included
    # and every offer is as one-job dispatch makes it
    now = timezone.now()
    offers = list(Offer.objects.filter(job__in=large).select_related("job", "fleet"))
    outcomes = [r.outcome for r in large_results.values()]
    assert len(offers) == outcomes.count("offered") > 0
    assert outcomes.count("flagged") > 0
    for offer in offers:
        assert offer.status == Offer.Status.PENDING
        assert offer.rate_per_hour == offer.fleet.payout_rate_per_hour
        assert offer.currency == offer.fleet.currency
        assert offer.expires_at > now + timedelta(minutes=30)
        assert (offer.job.status, offer.job.fleet_id, offer.job.site_id) == (
            Job.Status.OFFERED,
            offer.fleet_id,
            offer.site_id,
        )
        assert large_results[str(offer.job_id)].offer_id == offer.pk
        delivery = WebhookDelivery.objects.get(
            fleet=offer.fleet, payload__data__offer_id=str(offer.pk)
        )
        assert delivery.payload["data"]["job"]["embodiment"] == "franka-fr3"
        assert delivery.payload["data"]["rate_per_hour"] == str(offer.rate_per_hour)
    # capacity: no fleet holds more hours than it has before the deadline
    deadline = large[0].deadline
    for fleet in Fleet.objects.all():
        held = sum(j.target_hours for j in Job.objects.filter(fleet=fleet))
        assert held <= selectors.capacity_until(fleet, deadline, now)
    # diversity: each order's environments on distinct sites
    for order_id in {job.order_id for job in large}:
        sites = [o.site_id for o in offers if o.job.order_id == order_id]
        assert len(sites) == len(set(sites))
    # flagged jobs carry the reason; every job has its audit event
    for job in Job.objects.filter(pk__in=[j.pk for j in large]):
        assert job.dispatch_attempts == 1
        assert JobEvent.objects.filter(job=job, to_status=job.status).count() == 1
        if job.status == Job.Status.FLAGGED:
            assert job.flag_reason and job.fleet_id is None


@pytest.mark.django_db
def test_a_second_batch_counts_the_first_batch_offers(customer):
    # given 3 fleets with room for 2 jobs of 2 h each before the deadline: 6 of 8 jobs
    jobs = world(customer, orders=2, fleets=3)
    weeks = (
        Decimal((jobs[0].deadline - timezone.now()).total_seconds()) / selectors.SECONDS_PER_WEEK
    )
    Fleet.objects.update(weekly_capacity_hours=(Decimal(5) / weeks).quantize(Decimal("0.01")))
    capacity = selectors.capacity_until(Fleet.objects.first(), jobs[0].deadline, timezone.now())
    assert 4 <= capacity < 6
    first, second = jobs[:4], jobs[4:]
    jobs_dispatch(job_ids=[j.pk for j in first])
    # when the second order's jobs are dispatched in a later batch
    jobs_dispatch(job_ids=[j.pk for j in second])
    # then hours owed on the first batch's offers count: no fleet is over its capacity
    for fleet in Fleet.objects.all():
        held = sum(j.target_hours for j in Job.objects.filter(fleet=fleet))
        assert held <= capacity
    assert Job.objects.filter(status=Job.Status.OFFERED).count() == 6


@pytest.mark.django_db(transaction=True)
def test_open_jobs_dispatch_skips_jobs_another_transaction_holds(customer):
    # given two open jobs (two orders of one environment) and a transaction holding one
    equipped_site()
    orders = [
        OrderFactory(
            organization=customer.organization,
            status=Order.Status.PAID,
            hours=Decimal("2"),
            environments=1,
        )
        for _ in range(2)
    ]
    held, free = (Job.objects.create(**_job_fields(order)) for order in orders)
    locked, release = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=held.pk)
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert locked.wait(timeout=30)
    try:
        # when a batch dispatch runs meanwhile
        results = open_jobs_dispatch(limit=10)
    finally:
        release.set()
        thread.join(timeout=30)
    # then it did not wait: the free job is offered, the held one left open for later
    assert set(results) == {str(free.pk)}
    assert Job.objects.get(pk=free.pk).status == Job.Status.OFFERED
    assert Job.objects.get(pk=held.pk).status == Job.Status.OPEN
    # and the next batch takes it
    assert set(open_jobs_dispatch(limit=10)) == {str(held.pk)}


def _job_fields(order):
    return {
        "order": order,
        "sequence": 1,
        "environment_index": 0,
        "embodiment_id": order.embodiment_id,
        "end_effector": "parallel_gripper",
        "target_hours": Decimal("2"),
        "deadline": timezone.now() + timedelta(days=14),
        "status": Job.Status.OPEN,
    }


@pytest.mark.django_db
def test_the_sweeper_dispatches_stale_open_jobs_as_one_batch(
    customer, settings, django_capture_on_commit_callbacks
):
    # given 8 open jobs (2 orders) left undispatched (their tasks were lost)
    settings.FLEETS_STALE_OPEN_JOB_SECONDS = 0
    jobs = world(customer, orders=2)
    # when the sweeper runs (tasks eager, after commit)
    with (
        mock.patch.object(tasks.jobs_dispatch, "delay", wraps=tasks.jobs_dispatch.delay) as batch,
        django_capture_on_commit_callbacks(execute=True),
    ):
        result = dispatch_sweep()
    # then one batch task dispatched all of them
    assert result.jobs_redispatched == 8
    assert batch.call_count == 1
    assert sorted(batch.call_args.args) == sorted(str(job.pk) for job in jobs)
    assert Job.objects.filter(status=Job.Status.OFFERED).count() == 8


@pytest.mark.django_db
def test_a_bid_in_a_batch_wins_at_its_price_and_keeps_its_site_for_the_order(customer):
    # given an order's 4 open jobs, and a bid on the first from one of the eligible sites
    jobs = world(customer, orders=1)
    site = Site.objects.order_by("pk").first()
    bid_place(
        organization=site.fleet.organization,
        job_id=jobs[0].pk,
        site_id=site.pk,
        price_per_hour=Decimal("1.00"),
        earliest_finish=jobs[0].deadline - timedelta(days=1),
    )
    # when the order's jobs are dispatched as one batch
    results = jobs_dispatch(job_ids=[job.pk for job in jobs])
    # then the bid won at its price; the other jobs are offered on other sites
    assert results[str(jobs[0].pk)].outcome == "assigned_bid"
    assignment = Assignment.objects.get(job=jobs[0], active=True)
    assert (assignment.site_id, assignment.rate_per_hour) == (site.pk, Decimal("1.00"))
    assert Bid.objects.get(job=jobs[0]).status == Bid.Status.WON
    offered = Offer.objects.filter(job__in=jobs[1:])
    assert offered.count() == 3
    assert site.pk not in {offer.site_id for offer in offered}


@pytest.mark.django_db
def test_a_batch_that_fails_on_one_job_writes_nothing_at_all(customer):
    # given an order's 4 open jobs, one of them (inconsistently) with a pending offer already,
    # so the batch's offer INSERT breaks the one-pending-offer-per-job constraint
    jobs = world(customer, orders=1)
    site = Site.objects.order_by("pk").first()
    Offer.objects.create(
        job=jobs[0],
        fleet=site.fleet,
        site=site,
        score=0,
        rate_per_hour=Decimal("1"),
        currency="USD",
        expires_at=timezone.now() + timedelta(hours=1),
    )
    events_before = JobEvent.objects.count()
    # when the batch runs, it fails
    with pytest.raises(IntegrityError):
        jobs_dispatch(job_ids=[job.pk for job in jobs])
    # then nothing of it stays: no job moved, no offer, no event, no webhook delivery
    statuses = Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)
    assert set(statuses) == {Job.Status.OPEN}
    assert Offer.objects.count() == 1
    assert JobEvent.objects.count() == events_before
    assert not WebhookDelivery.objects.exists()


@pytest.mark.django_db
def test_a_batch_runs_with_the_cyclic_collector_held_off_and_restores_it(customer):
    # given open jobs and the collector enabled
    import gc

    from fleets import matching

    jobs = world(customer, orders=1)
    seen = []
    real_assign = matching.assign

    def assign(**kwargs):
        seen.append(gc.isenabled())
        return real_assign(**kwargs)

    gc.enable()
    # when the batch dispatcher places them, by ids and as the open-jobs sweep
    with mock.patch.object(matching, "assign", assign):
        jobs_dispatch(job_ids=[job.pk for job in jobs[:2]])
        open_jobs_dispatch()
    # then the assignment ran with no cyclic collection, and the collector is back after
    assert seen == [False, False]
    assert gc.isenabled()


@pytest.mark.django_db
def test_batch_candidates_are_the_sites_a_plain_reading_of_the_robots_finds(customer):
    import random

    from fleets.matching import SitesById
    from fleets.models import Robot
    from orders.models import Embodiment
    from tests.factories import RobotFactory, SiteFactory

    # given: fleets (one paused), sites of several kinds (some inactive), robots of two
    # embodiments and two end effectors with random sensor sets (some inactive), several
    # robots per site; and jobs asking for random sensors and site kinds
    rng = random.Random(3)
    sensors = ["wrist-camera", "rgbd-camera", "force-torque", "tactile"]
    kinds = ["kitchen", "household", "lab_bench"]
    embodiments = list(Embodiment.objects.filter(slug__in=["franka-fr3", "ur5e"]))
    for n in range(12):
        fleet = FleetFactory(status=Fleet.Status.PAUSED if n == 0 else Fleet.Status.ACTIVE)
        for _ in range(rng.randint(1, 3)):
            site = SiteFactory(fleet=fleet, kind=rng.choice(kinds), active=rng.random() > 0.15)
            for _ in range(rng.randint(1, 3)):
                RobotFactory(
                    site=site,
                    fleet=fleet,
                    embodiment=rng.choice(embodiments),
                    end_effector=rng.choice(["parallel_gripper", "suction"]),
                    sensor_slugs=sorted(rng.sample(sensors, rng.randint(0, 3))),
                    active=rng.random() > 0.15,
                )
    jobs = world(customer, orders=6, fleets=0)
    for job in jobs:
        job.embodiment = rng.choice(embodiments)
        job.end_effector = rng.choice(["parallel_gripper", "suction"])
        job.sensor_slugs = sorted(rng.sample(sensors, rng.randint(0, 2)))
        job.site_kinds = rng.sample(kinds, rng.randint(0, 2))
    # when
    candidates = selectors.batch_candidates(jobs=jobs)
    # then: each job's sites are those with an active robot that has everything it asks, at an
    # active site of the kinds it asks (any if none) of an active fleet, in site-id order
    robots = list(Robot.objects.select_related("site", "fleet"))
    for job in jobs:
        expected = {
            (robot.site_id, robot.fleet_id)
            for robot in robots
            if robot.active
            and robot.site.active
            and robot.fleet.status == Fleet.Status.ACTIVE
            and robot.embodiment_id == job.embodiment_id
            and robot.end_effector == job.end_effector
            and set(job.sensor_slugs) <= set(robot.sensor_slugs)
            and (not job.site_kinds or robot.site.kind in job.site_kinds)
        }
        sites = candidates[job.pk].sites
        assert isinstance(sites, SitesById)
        assert list(sites) == sorted(expected, key=lambda pair: pair[0].int)
    assert any(candidates[job.pk].sites for job in jobs)
    assert any(not candidates[job.pk].sites for job in jobs)
