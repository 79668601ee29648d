from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from fleets.models import Assignment, Bid, Fleet, Job, JobEvent, Offer
from fleets.services.dispatch import bid_place, job_dispatch, offer_accept, offer_decline
from fleets.services.jobs import (
    InvalidJobTransition,
    job_redispatch,
    job_transition,
    order_cancel_jobs,
)
from fleets.services.planning import order_plan
from fleets.services.registry import fleet_heartbeat
from fleets.services.sweep import dispatch_sweep
from orders.models import Order
from tests.factories import FleetFactory, OrderFactory, RobotFactory, SiteFactory, equipped_site

pytestmark = pytest.mark.django_db


@pytest.fixture
def dispatch(django_capture_on_commit_callbacks):
    """Plan an order and run every dispatch it triggers (tasks run eagerly)."""

    def run(order):
        with django_capture_on_commit_callbacks(execute=True):
            order_plan(order_id=order.id)
        return list(Job.objects.filter(order=order).order_by("sequence"))

    return run


@pytest.fixture
def run_on_commit(django_capture_on_commit_callbacks):
    def run(fn, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return fn(**kwargs)

    return run


def order_for(customer, **kwargs):
    defaults = {"status": Order.Status.PAID, "hours": Decimal("8"), "environments": 4}
    return OrderFactory(organization=customer.organization, **{**defaults, **kwargs})


def test_jobs_are_offered_to_capable_fleets_only(customer, dispatch):
    # given one capable site, and sites with the wrong embodiment / effector / sensors
    good = equipped_site()
    wrong_body = SiteFactory()
    RobotFactory(site=wrong_body, embodiment_id=_embodiment("ur5e"))
    wrong_effector = SiteFactory()
    RobotFactory(site=wrong_effector, end_effector="suction")
    order = order_for(customer, environments=1, hours=Decimal("2"), sensor_slugs=["tactile"])
    no_sensor = good  # lacks tactile
    with_sensor = equipped_site(sensors=["tactile", "wrist-camera"])
    # when
    [job] = dispatch(order)
    # then only the site whose robot has every capability gets the offer
    assert job.status == Job.Status.OFFERED
    offer = Offer.objects.get(job=job)
    assert offer.site_id == with_sensor.pk
    assert offer.site_id != no_sensor.pk
    assert offer.status == Offer.Status.PENDING
    assert offer.expires_at > timezone.now()


def _embodiment(slug):
    from orders.models import Embodiment

    return Embodiment.objects.get(slug=slug).pk


def test_diversity_each_environment_on_a_distinct_site(customer, dispatch, run_on_commit):
    # given 4 environments and 6 eligible sites, two of them in the same fleet
    fleet = FleetFactory(weekly_capacity_hours=Decimal("100"))
    sites = [equipped_site(fleet=fleet), equipped_site(fleet=fleet)]
    sites += [equipped_site() for _ in range(4)]
    order = order_for(customer)
    # when every offer is accepted as it comes
    jobs = dispatch(order)
    for _ in range(len(jobs)):
        for offer in Offer.objects.filter(status=Offer.Status.PENDING):
            run_on_commit(
                offer_accept,
                organization=offer.fleet.organization,
                offer_id=offer.pk,
            )
    # then four jobs, four different sites
    assignments = Assignment.objects.filter(job__order=order, active=True)
    assert assignments.count() == 4
    assert len({a.site_id for a in assignments}) == 4


def test_diversity_never_reuses_a_site_while_an_unused_one_is_eligible(customer, dispatch):
    # given 3 environments and only 2 eligible sites
    equipped_site()
    equipped_site()
    order = order_for(customer, environments=3, hours=Decimal("6"))
    # when
    jobs = dispatch(order)
    # then two jobs are offered on distinct sites and the third is flagged, never doubled up
    offered = [j for j in jobs if j.status == Job.Status.OFFERED]
    flagged = [j for j in jobs if j.status == Job.Status.FLAGGED]
    assert len(offered) == 2 and len(flagged) == 1
    assert len({j.site_id for j in offered}) == 2
    assert flagged[0].flag_reason


def test_no_eligible_fleet_flags_the_job_for_staff(customer, dispatch):
    # given no fleets at all
    order = order_for(customer, environments=1, hours=Decimal("2"))
    # when
    [job] = dispatch(order)
    # then the job is flagged, with an audit row, never dropped
    assert job.status == Job.Status.FLAGGED
    assert JobEvent.objects.filter(job=job, to_status=Job.Status.FLAGGED).exists()


def test_paused_fleets_and_full_capacity_are_not_eligible(customer, dispatch):
    # given a paused fleet and a fleet with no free capacity before the deadline
    equipped_site(status=Fleet.Status.PAUSED)
    equipped_site(weekly_capacity_hours=Decimal("0.1"))
    order = order_for(customer, environments=1, hours=Decimal("2"))
    # when
    [job] = dispatch(order)
    # then
    assert job.status == Job.Status.FLAGGED


def test_score_prefers_quality_and_headroom(customer, dispatch):
    # given two fleets that differ only in quality
    low = equipped_site(quality_score=Decimal("0.2"))
    high = equipped_site(quality_score=Decimal("0.9"))
    order = order_for(customer, environments=1, hours=Decimal("2"))
    # when
    [job] = dispatch(order)
    # then
    offer = Offer.objects.get(job=job)
    assert offer.site_id == high.pk != low.pk


def test_decline_goes_to_the_next_fleet_then_flags(customer, dispatch, run_on_commit):
    # given two eligible fleets
    first = equipped_site(quality_score=Decimal("0.9"))
    second = equipped_site(quality_score=Decimal("0.5"))
    order = order_for(customer, environments=1, hours=Decimal("2"))
    [job] = dispatch(order)
    offer = Offer.objects.get(job=job)
    assert offer.fleet_id == first.fleet_id
    # when the first declines
    run_on_commit(offer_decline, organization=first.fleet.organization, offer_id=offer.pk)
    # then the second gets it
    offer2 = Offer.objects.get(job=job, status=Offer.Status.PENDING)
    assert offer2.fleet_id == second.fleet_id
    # when the second declines too, nobody is left: flagged
    run_on_commit(offer_decline, organization=second.fleet.organization, offer_id=offer2.pk)
    job.refresh_from_db()
    assert job.status == Job.Status.FLAGGED


def test_sweeper_expires_offers_and_offers_to_the_next_fleet(customer, dispatch, run_on_commit):
    first = equipped_site(quality_score=Decimal("0.9"))
    second = equipped_site(quality_score=Decimal("0.5"))
    order = order_for(customer, environments=1, hours=Decimal("2"))
    [job] = dispatch(order)
    Offer.objects.filter(job=job).update(expires_at=timezone.now() - timedelta(seconds=1))
    # when
    result = run_on_commit(dispatch_sweep)
    # then
    assert result.offers_expired == 1
    assert Offer.objects.get(job=job, fleet=first.fleet).status == Offer.Status.EXPIRED
    assert Offer.objects.get(job=job, status=Offer.Status.PENDING).fleet_id == second.fleet_id


def test_sweeper_reclaims_jobs_from_silent_fleets(customer, dispatch, run_on_commit, settings):
    # given a job assigned to a fleet that then went silent
    settings.FLEETS_HEARTBEAT_TIMEOUT_SECONDS = 60
    silent = equipped_site(quality_score=Decimal("0.9"))
    other = equipped_site(quality_score=Decimal("0.5"))
    order = order_for(customer, environments=1, hours=Decimal("2"))
    [job] = dispatch(order)
    offer = Offer.objects.get(job=job)
    run_on_commit(offer_accept, organization=silent.fleet.organization, offer_id=offer.pk)
    long_ago = timezone.now() - timedelta(minutes=5)
    Assignment.objects.filter(job=job).update(created_at=long_ago)
    # when
    result = run_on_commit(dispatch_sweep)
    # then the job went back to dispatch and to the other fleet
    assert result.jobs_reclaimed == 1
    assert not Assignment.objects.filter(job=job, active=True).exists()
    assert Offer.objects.get(job=job, status=Offer.Status.PENDING).fleet_id == other.fleet_id


def test_sweeper_leaves_fleets_with_a_recent_heartbeat(customer, dispatch, run_on_commit, settings):
    settings.FLEETS_HEARTBEAT_TIMEOUT_SECONDS = 60
    site = equipped_site()
    order = order_for(customer, environments=1, hours=Decimal("2"))
    [job] = dispatch(order)
    offer = Offer.objects.get(job=job)
    run_on_commit(offer_accept, organization=site.fleet.organization, offer_id=offer.pk)
    Assignment.objects.filter(job=job).update(created_at=timezone.now() - timedelta(minutes=5))
    fleet_heartbeat(organization=site.fleet.organization, fleet_id=site.fleet_id)
    # when
    result = run_on_commit(dispatch_sweep)
    # then
    assert result.jobs_reclaimed == 0
    assert Assignment.objects.filter(job=job, active=True).count() == 1


def test_best_bid_wins_over_offers(customer, run_on_commit):
    # given a flagged-free open job and two eligible bidders
    cheap = equipped_site()
    dear = equipped_site()
    order = order_for(customer, environments=1, hours=Decimal("2"))
    order_plan(order_id=order.id)  # on_commit not run: the job stays open
    job = Job.objects.get(order=order)
    finish = job.deadline - timedelta(days=1)
    bid_place(
        organization=dear.fleet.organization,
        job_id=job.pk,
        site_id=dear.pk,
        price_per_hour=Decimal("90"),
        earliest_finish=finish,
    )
    bid_place(
        organization=cheap.fleet.organization,
        job_id=job.pk,
        site_id=cheap.pk,
        price_per_hour=Decimal("40"),
        earliest_finish=finish,
    )
    # when
    result = run_on_commit(job_dispatch, job_id=job.pk)
    # then
    assert result.outcome == "assigned_bid"
    assignment = Assignment.objects.get(job=job, active=True)
    assert assignment.fleet_id == cheap.fleet_id
    assert Bid.objects.get(fleet=cheap.fleet).status == Bid.Status.WON
    assert Bid.objects.get(fleet=dear.fleet).status == Bid.Status.LOST
    assert not Offer.objects.filter(job=job).exists()


def test_dispatch_is_idempotent(customer, dispatch):
    equipped_site()
    order = order_for(customer, environments=1, hours=Decimal("2"))
    [job] = dispatch(order)
    # when the same dispatch runs again (a redelivered task)
    again = job_dispatch(job_id=job.pk)
    # then nothing changes
    assert again.outcome == "skipped"
    assert Offer.objects.filter(job=job).count() == 1


def test_job_state_map_refuses_illegal_moves(customer, dispatch):
    order = order_for(customer, environments=1, hours=Decimal("2"))
    [job] = dispatch(order)  # flagged: no fleets
    with pytest.raises(InvalidJobTransition):
        job_transition(job_id=job.pk, to_status=Job.Status.COMPLETED)
    job.refresh_from_db()
    assert job.status == Job.Status.FLAGGED


def test_staff_redispatch_of_a_flagged_job(customer, dispatch, run_on_commit):
    order = order_for(customer, environments=1, hours=Decimal("2"))
    [job] = dispatch(order)
    assert job.status == Job.Status.FLAGGED
    equipped_site()  # capacity arrives
    # when
    run_on_commit(job_redispatch, job_id=job.pk, actor_label="staff:alice")
    # then
    job.refresh_from_db()
    assert job.status == Job.Status.OFFERED
    assert JobEvent.objects.filter(job=job, actor_label="staff:alice").exists()


def test_dispatched_hours_count_jobs_that_reached_a_fleet(customer, dispatch, run_on_commit):
    """billing refunds the rest on cancellation (BILLING_DISPATCHED_HOURS_PROVIDER)."""
    from fleets.selectors import order_dispatched_hours

    # given: two environments, one capable site: one job offered, then accepted
    site = equipped_site()
    order = order_for(customer, environments=2, hours=Decimal("6"))
    jobs = dispatch(order)
    assert order_dispatched_hours(order) == Decimal("0")
    offer = Offer.objects.get(job__order=order, status=Offer.Status.PENDING)
    # when
    run_on_commit(offer_accept, organization=site.fleet.organization, offer_id=offer.id)
    run_on_commit(order_cancel_jobs, order_id=order.id)
    # then: the accepted job's hours stay counted after cancellation ended its assignment
    assert order_dispatched_hours(order) == offer.job.target_hours
    assert sum(job.target_hours for job in jobs) == Decimal("6")
