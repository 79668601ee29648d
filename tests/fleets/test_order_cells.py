"""The collection plan in planning and dispatch (issue 30): an order planned by cell gets its
(environment, object) cells, and only sites that offer its plan (enough active objects within
its categories; counting scenes, a scene no other environment uses) are offered its jobs."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from fleets import matching
from fleets.models import Job, OrderCell, Scene, SiteObject
from fleets.services.dispatch import bid_place
from fleets.services.planning import order_plan, split_cell_targets
from marketplace.errors import ServiceError
from orders.models import Order
from tests.factories import OrderFactory, equipped_site


def test_cell_targets_split_the_hours_evenly_to_the_millisecond_and_sum_exactly():
    # 1 h over 7 cells: 3600000 ms = 7 x 514285 + 5
    targets = split_cell_targets(hours=Decimal("1"), environments=7, objects=1)
    assert targets[:5] == [Decimal("514.286")] * 5
    assert targets[5:] == [Decimal("514.285")] * 2
    assert sum(targets) == Decimal(3600)
    for hours, environments, objects in [("10.01", 3, 3), ("0.37", 4, 2), ("250", 32, 1)]:
        targets = split_cell_targets(
            hours=Decimal(hours), environments=environments, objects=objects
        )
        assert len(targets) == environments * objects
        assert sum(targets) == Decimal(hours) * 3600
        assert max(targets) - min(targets) <= Decimal("0.001")


def objects_at(site, *names, category=""):
    for name in names:
        SiteObject.objects.create(fleet=site.fleet, site=site, name=name, category=category)


def scenes_at(site, *names):
    for name in names:
        Scene.objects.create(
            fleet=site.fleet, site=site, name=name, arranged_at=timezone.now() - timedelta(days=1)
        )


def planned_order(customer, **kwargs):
    defaults = dict(
        status=Order.Status.PAID,
        hours=Decimal("4"),
        environments=2,
        objects_per_environment=2,
        cells_planned=True,
    )
    return OrderFactory(organization=customer.organization, **{**defaults, **kwargs})


@pytest.fixture
def dispatch(django_capture_on_commit_callbacks):
    def run(order):
        with django_capture_on_commit_callbacks(execute=True):
            order_plan(order_id=order.id)
        return list(Job.objects.filter(order=order).order_by("sequence"))

    return run


@pytest.mark.django_db
def test_planning_creates_the_cells_once_for_planned_orders_only(customer):
    # given a planned order of 2 x 3 cells over 1 h, and an order not planned by cell
    order = planned_order(customer, hours=Decimal("1"), objects_per_environment=3)
    older = OrderFactory(
        organization=customer.organization, status=Order.Status.PAID, cells_planned=False
    )
    # when both are planned (the first twice)
    order_plan(order_id=order.id)
    order_plan(order_id=order.id)
    order_plan(order_id=older.id)
    # then six unbound cells of 600 s each; none for the older order
    cells = list(OrderCell.objects.filter(order=order))
    assert [(c.environment_index, c.object_slot) for c in cells] == [
        (e, o) for e in range(2) for o in range(3)
    ]
    assert {c.target_seconds for c in cells} == {Decimal("600.000")}
    assert all(c.site_id is None and c.site_object_id is None for c in cells)
    assert not OrderCell.objects.filter(order=older).exists()


@pytest.mark.django_db
def test_only_sites_with_enough_active_objects_of_the_categories_are_offered(customer, dispatch):
    # given: a site with one object, one with two inactive-or-wrong ones, one that fits
    one = equipped_site()
    objects_at(one, "mug", category="kitchenware")
    wrong = equipped_site()
    objects_at(wrong, "bolt", "nut", category="hardware")
    SiteObject.objects.create(
        fleet=wrong.fleet, site=wrong, name="cup", category="kitchenware", active=False
    )
    fits = equipped_site()
    objects_at(fits, "mug", "cup", category="kitchenware")
    order = planned_order(customer, environments=1, object_categories=["kitchenware"])
    # when
    jobs = dispatch(order)
    # then: the only site offering two kitchenware objects gets the job
    assert [(j.status, j.site_id) for j in jobs] == [(Job.Status.OFFERED, fits.id)]


@pytest.mark.django_db
def test_an_order_not_planned_by_cell_ignores_objects(customer, dispatch):
    site = equipped_site()  # no objects registered at all
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.PAID,
        hours=Decimal("2"),
        environments=1,
        objects_per_environment=3,
    )
    jobs = dispatch(order)
    assert [(j.status, j.site_id) for j in jobs] == [(Job.Status.OFFERED, site.id)]


@pytest.mark.django_db
def test_counting_scenes_two_environments_share_a_site_with_two_scenes(customer, dispatch):
    # given: one site with two objects and two scenes; another with objects and no scene
    site = equipped_site(weekly_capacity_hours=Decimal("100"))
    objects_at(site, "mug", "cup")
    scenes_at(site, "bench-a", "bench-b")
    bare = equipped_site()
    objects_at(bare, "mug", "cup")
    order = planned_order(customer, environment_unit="scene")
    # when both environments' jobs are dispatched
    jobs = dispatch(order)
    # then: both go to the one site with scenes (a site per scene, not per environment)
    assert {j.environment_index for j in jobs} == {0, 1}
    assert [(j.status, j.site_id) for j in jobs] == [(Job.Status.OFFERED, site.id)] * 2


@pytest.mark.django_db
def test_counting_scenes_a_site_with_one_scene_takes_one_environment(customer, dispatch):
    site = equipped_site(weekly_capacity_hours=Decimal("100"))
    objects_at(site, "mug", "cup")
    scenes_at(site, "bench-a")
    order = planned_order(customer, environment_unit="scene")
    jobs = dispatch(order)
    assert sorted(j.status for j in jobs) == [Job.Status.FLAGGED, Job.Status.OFFERED]


@pytest.mark.django_db
def test_a_bound_environment_goes_back_to_its_site_and_its_scene_is_taken(customer, dispatch):
    # given: two sites that fit; environment 0 bound to the second (its scene too)
    first = equipped_site()
    second = equipped_site()
    for site in (first, second):
        objects_at(site, "mug", "cup")
        scenes_at(site, "bench")
    order = planned_order(customer, environments=2, environment_unit="scene")
    order_plan(order_id=order.id)  # cells and jobs (dispatch not run)
    scene = Scene.objects.get(site=second)
    OrderCell.objects.filter(order=order, environment_index=0).update(site=second, scene=scene)
    # when both jobs are dispatched
    jobs = dispatch(order)
    by_env = {j.environment_index: j for j in jobs}
    # then: environment 0 at its site; environment 1 at the other (the bound scene is taken)
    assert by_env[0].site_id == second.id
    assert by_env[1].site_id == first.id


@pytest.mark.django_db
def test_a_bid_from_a_site_that_cannot_offer_the_plan_is_refused(customer, fleet_operator):
    site = equipped_site(organization=fleet_operator.organization)
    objects_at(site, "mug")  # one object, two needed
    order = planned_order(customer, environments=1, status=Order.Status.IN_COLLECTION)
    order_plan(order_id=order.id)
    job = Job.objects.get(order=order)
    Job.objects.filter(pk=job.pk).update(status=Job.Status.FLAGGED)
    with pytest.raises(ServiceError) as refused:
        bid_place(
            organization=fleet_operator.organization,
            job_id=job.pk,
            site_id=site.pk,
            price_per_hour=Decimal("10"),
            earliest_finish=timezone.now() + timedelta(days=1),
        )
    assert refused.value.code == "not_eligible"
    objects_at(site, "cup")  # now it offers two
    bid = bid_place(
        organization=fleet_operator.organization,
        job_id=job.pk,
        site_id=site.pk,
        price_per_hour=Decimal("10"),
        earliest_finish=timezone.now() + timedelta(days=1),
    )
    assert bid.site_id == site.pk


def demand(job_id, env, slots=None):
    return matching.JobDemand(
        job_id=job_id,
        order_id="O",
        environment_index=env,
        hours=Decimal("1"),
        weeks=Decimal("1"),
        sites=(("s1", "F1"), ("s2", "F2")),
        scene_slots=slots,
    )


def test_the_matcher_places_environments_on_one_site_up_to_its_free_scenes():
    fleets = {
        f: matching.FleetState(f, Decimal(40), Decimal(0), Decimal(50), q)
        for f, q in (("F1", Decimal("0.9")), ("F2", Decimal("0.1")))
    }
    # s1 is the better site; with 2 free scenes it takes both environments, with 1 only one
    two = matching.assign(
        jobs=[demand("J1", 0, {"s1": 2, "s2": 1}), demand("J2", 1, {"s1": 2, "s2": 1})],
        fleets=fleets,
    )
    assert [d.site_id for d in two] == ["s1", "s1"]
    one = matching.assign(
        jobs=[demand("J1", 0, {"s1": 1, "s2": 1}), demand("J2", 1, {"s1": 1, "s2": 1})],
        fleets=fleets,
    )
    assert sorted(d.site_id for d in one) == ["s1", "s2"]
    sites = matching.assign(jobs=[demand("J1", 0), demand("J2", 1)], fleets=fleets)
    assert sorted(d.site_id for d in sites) == ["s1", "s2"]
