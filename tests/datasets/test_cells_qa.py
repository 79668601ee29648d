"""The collection plan in QA (issue 30), on the real database: episodes of an order planned by
cell bind its environments' sites, scenes and object slots, accrue in their cells, and are
refused with their codes (object_not_in_plan, scene_not_in_plan, cell_full,
calibration_missing, calibration_stale); exclusions take their time off their cells; a cell
left short when its environment's jobs are done gets one job collecting the shortfall.

Episodes go through the fleet API and real QA on the local S3 server (tests/datasets/helpers);
the calibration checks record a passed file check directly (the order's cameras would need
camera videos, which other tests cover): the decision is the same locked service."""

import copy
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode
from datasets.qa_checks import QAResult
from datasets.services.cells import cells_collect_shortfall
from datasets.services.exclusions import episodes_exclude
from datasets.services.qa import episode_record_qa
from fleets.models import CameraCalibration, Job, OrderCell, Scene, SiteObject
from fleets.services.planning import job_collect_shortfall, split_cell_targets
from orders.models import Order
from tests.datasets.helpers import Collection, complete, put
from tests.factories import JobFactory, OrderFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]

IDENTITY = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]


def planned_order(customer, *, environments=2, objects=2, hours="0.02", **fields) -> Order:
    """An order in collection planned by cell, with its cells as planning makes them.
    0.02 h over 2 x 2 cells: 18 s a cell, at most 27 s (150 %), short below 9 s (50 %)."""
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal(hours),
        environments=environments,
        objects_per_environment=objects,
        cells_planned=True,
        **fields,
    )
    targets = split_cell_targets(hours=order.hours, environments=environments, objects=objects)
    OrderCell.objects.bulk_create(
        OrderCell(
            order=order, environment_index=i // objects, object_slot=i % objects, target_seconds=t
        )
        for i, t in enumerate(targets)
    )
    return order


def at_site(
    fleet_operator,
    customer,
    order,
    environment=0,
    *,
    objects=("mug", "cup", "bolt"),
    target_hours="0.1",
    category="",
):
    collection = Collection(
        fleet_operator,
        customer,
        order=order,
        target_hours=target_hours,
        environment_index=environment,
    )
    for name in objects:
        SiteObject.objects.create(
            fleet=collection.site.fleet, site=collection.site, name=name, category=category
        )
    return collection


def same_site(collection, environment, target_hours="0.1"):
    """Another environment of the order collected at the same site (another job)."""
    other = copy.copy(collection)
    other.job = JobFactory(
        order=collection.order,
        site=collection.site,
        target_hours=Decimal(target_hours),
        environment_index=environment,
    )
    return other


def scene(collection, name, arranged_days_ago=1):
    return Scene.objects.create(
        fleet=collection.site.fleet,
        site=collection.site,
        name=name,
        arranged_at=timezone.now() - timedelta(days=arranged_days_ago),
    )


SEEDS = iter(range(1000, 100000))


def send(collection, capture, *objects, scene=None, frames=300) -> Episode:
    """Register, upload and complete one 10 s episode (300 frames at 30 fps) naming objects."""
    data = parquet_bytes(episode_table(frames=frames, seed=next(SEEDS)))
    response = collection.register(data, objects_handled=list(objects))
    assert response.status_code == 201, response.json()
    body = response.json()
    # as the fleet sent them (the first one counts), and the scene it names
    Episode.objects.filter(pk=body["id"]).update(objects_handled=list(objects), scene=scene)
    assert put(body["upload"], data) == 200
    return complete(collection.operator.client, body["id"], capture)


def codes(episode: Episode) -> list[str]:
    return [failure["code"] for failure in episode.qa_failures]


def cell(order, environment, slot) -> OrderCell:
    return OrderCell.objects.get(order=order, environment_index=environment, object_slot=slot)


def test_episodes_bind_the_environment_and_its_object_slots_and_accrue_in_their_cells(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    order = planned_order(customer)
    env0 = at_site(fleet_operator, customer, order, 0)
    # when: a mug episode, then a cup one, then a mug one (the fleet lists the mug first)
    first = send(env0, capture, "mug", "block")
    second = send(env0, capture, "cup", "mug")
    third = send(env0, capture, "mug")
    # then: all accepted; the mug binds slot 0, the cup slot 1; both cells bound to the site
    assert [e.status for e in (first, second, third)] == [Episode.Status.ACCEPTED] * 3, [
        e.qa_failures for e in (first, second, third)
    ]
    mug, cup = cell(order, 0, 0), cell(order, 0, 1)
    assert (mug.site_id, mug.site_object.name) == (env0.site.id, "mug")
    assert (cup.site_id, cup.site_object.name) == (env0.site.id, "cup")
    assert (mug.accepted_seconds, mug.accepted_episodes) == (Decimal("20.000"), 2)
    assert (cup.accepted_seconds, cup.accepted_episodes) == (Decimal("10.000"), 1)
    assert [Episode.objects.get(pk=e.pk).cell_id for e in (first, second, third)] == [
        mug.id,
        cup.id,
        mug.id,
    ]
    # and: environment 1 is untouched
    assert not OrderCell.objects.filter(order=order, environment_index=1, site__isnull=False)


def test_an_object_not_in_the_plan_is_rejected(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    order = planned_order(customer, object_categories=["kitchenware"])
    env0 = at_site(fleet_operator, customer, order, 0, category="kitchenware")
    SiteObject.objects.create(
        fleet=env0.site.fleet, site=env0.site, name="wrench", category="tools"
    )
    # an unregistered object, one of another category, none named
    assert codes(send(env0, capture, "spoon")) == ["object_not_in_plan"]
    assert codes(send(env0, capture, "wrench")) == ["object_not_in_plan"]
    assert codes(send(env0, capture)) == ["object_not_in_plan"]
    # a third object once the environment's two slots are bound
    send(env0, capture, "mug")
    send(env0, capture, "cup")
    refused = send(env0, capture, "bolt")
    assert refused.status == Episode.Status.REJECTED
    assert codes(refused) == ["object_not_in_plan"]
    assert refused.cell_id is None
    # another site's episode for the environment bound to this one
    elsewhere = at_site(fleet_operator, customer, order, 0)
    assert codes(send(elsewhere, capture, "mug")) == ["object_not_in_plan"]
    # nothing of the refused ones counted
    assert cell(order, 0, 0).accepted_seconds + cell(order, 0, 1).accepted_seconds == 20


def test_a_full_cell_rejects_cell_full(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    order = planned_order(customer)  # 18 s a cell, at most 27 s
    env0 = at_site(fleet_operator, customer, order, 0)
    assert send(env0, capture, "mug").status == Episode.Status.ACCEPTED
    assert send(env0, capture, "mug").status == Episode.Status.ACCEPTED
    full = send(env0, capture, "mug")
    assert codes(full) == ["cell_full"]
    assert cell(order, 0, 0).accepted_seconds == Decimal("20.000")
    # the other object's cell still takes episodes
    assert send(env0, capture, "cup").status == Episode.Status.ACCEPTED


def test_counting_scenes_each_environment_binds_its_own_scene(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    order = planned_order(customer, environment_unit="scene", distinct_objects=4)
    env0 = at_site(fleet_operator, customer, order, 0)
    env1 = same_site(env0, 1)
    bench_a, bench_b = scene(env0, "bench-a"), scene(env0, "bench-b")
    # no scene named
    assert codes(send(env0, capture, "mug")) == ["scene_not_in_plan"]
    # environment 0 binds bench-a (its two objects: mug, cup)
    assert send(env0, capture, "mug", scene=bench_a).status == Episode.Status.ACCEPTED
    assert send(env0, capture, "cup", scene=bench_a).status == Episode.Status.ACCEPTED
    assert cell(order, 0, 1).scene_id == bench_a.id
    # environment 1 cannot use bench-a, nor environment 0 bench-b
    assert codes(send(env1, capture, "bolt", scene=bench_a)) == ["scene_not_in_plan"]
    assert codes(send(env0, capture, "mug", scene=bench_b)) == ["scene_not_in_plan"]
    # distinct_objects=4: environment 1 may not reuse the mug; the bolt binds
    assert codes(send(env1, capture, "mug", scene=bench_b)) == ["object_not_in_plan"]
    accepted = send(env1, capture, "bolt", scene=bench_b)
    assert accepted.status == Episode.Status.ACCEPTED
    bound = cell(order, 1, 0)
    assert (bound.site_id, bound.scene_id, bound.site_object.name) == (
        env0.site.id,
        bench_b.id,
        "bolt",
    )


def test_reusing_an_object_is_fine_while_the_distinct_target_stays_reachable(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    order = planned_order(customer, environment_unit="scene", distinct_objects=3)
    env0 = at_site(fleet_operator, customer, order, 0)
    env1 = same_site(env0, 1)
    bench_a, bench_b = scene(env0, "bench-a"), scene(env0, "bench-b")
    send(env0, capture, "mug", scene=bench_a)
    send(env0, capture, "cup", scene=bench_a)
    # 2 distinct bound, 2 slots left, 3 needed: one reuse is fine, the second is not
    assert send(env1, capture, "mug", scene=bench_b).status == Episode.Status.ACCEPTED
    assert codes(send(env1, capture, "cup", scene=bench_b)) == ["object_not_in_plan"]
    assert send(env1, capture, "bolt", scene=bench_b).status == Episode.Status.ACCEPTED


def calibration(collection, camera, days_ago=1) -> CameraCalibration:
    return CameraCalibration.objects.create(
        fleet=collection.site.fleet,
        robot=collection.robot,
        camera=camera,
        calibrated_at=timezone.now() - timedelta(days=days_ago),
        width=640,
        height=480,
        fx=500,
        fy=500,
        cx=320,
        cy=240,
        distortion_model="none",
        extrinsics=IDENTITY,
    )


CAMERAS = {
    "cameras": [
        {"key": "observation.images.wrist", "name": "wrist", "min_width": 32, "min_height": 24},
        {"key": "observation.images.top", "name": "top", "min_width": 32, "min_height": 24},
    ]
}


def decided(collection, *, calibrations: dict, scene=None) -> Episode:
    """A registered episode (mug) whose file passed its checks, decided by the QA service on
    an order with two cameras (set once the episode is registered: its videos are not sent)."""
    data = parquet_bytes(episode_table(frames=300, seed=next(SEEDS)))
    Order.objects.filter(pk=collection.order.pk).update(stream_spec={})
    body = collection.register(data, objects_handled=["mug"]).json()
    Order.objects.filter(pk=collection.order.pk).update(stream_spec=CAMERAS)
    Episode.objects.filter(pk=body["id"]).update(
        status=Episode.Status.UPLOADED,
        scene=scene,
        camera_calibrations={camera: str(c.id) for camera, c in calibrations.items()},
    )
    result = QAResult(frames=300, duration_seconds=Decimal("10.000"))
    return episode_record_qa(episode_id=body["id"], result=result, stored_key="")


def test_cameras_need_a_fresh_calibration_of_the_robot(fleet_operator, customer, settings):
    settings.CALIBRATION_MAX_AGE_DAYS = 30
    order = planned_order(customer, calibrated_cameras=True, hours="0.1")
    env0 = at_site(fleet_operator, customer, order, 0)
    wrist, top = calibration(env0, "wrist"), calibration(env0, "top")
    # a camera without one; one of another robot's camera
    assert codes(decided(env0, calibrations={"wrist": wrist})) == ["calibration_missing"]
    other = at_site(fleet_operator, customer, order, 1)
    assert codes(
        decided(env0, calibrations={"wrist": wrist, "top": calibration(other, "top")})
    ) == ["calibration_missing"]
    # older than 30 days
    old = calibration(env0, "top", days_ago=31)
    assert codes(decided(env0, calibrations={"wrist": wrist, "top": old})) == ["calibration_stale"]
    # made before the scene was last arranged (12 h ago, calibrated a day ago)
    moved = Scene.objects.create(
        fleet=env0.site.fleet,
        site=env0.site,
        name="moved",
        arranged_at=timezone.now() - timedelta(hours=12),
    )
    assert codes(decided(env0, calibrations={"wrist": wrist, "top": top}, scene=moved)) == [
        "calibration_stale"
    ]
    # fresh: accepted, in its cell
    accepted = decided(env0, calibrations={"wrist": wrist, "top": top})
    assert accepted.status == Episode.Status.ACCEPTED
    assert accepted.cell_id == cell(order, 0, 0).id


def test_an_excluded_episode_takes_its_time_off_its_cell(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    order = planned_order(customer)
    env0 = at_site(fleet_operator, customer, order, 0)
    first = send(env0, capture, "mug")
    send(env0, capture, "mug")
    send(env0, capture, "cup")
    with capture(execute=True):
        episodes_exclude(
            order_id=order.id,
            reason_code="other",
            note="blurry",
            staff_label="staff:ann",
            episode_ids=[first.id],
        )
    mug, cup = cell(order, 0, 0), cell(order, 0, 1)
    assert (mug.accepted_seconds, mug.accepted_episodes) == (Decimal("10.000"), 1)
    assert (cup.accepted_seconds, cup.accepted_episodes) == (Decimal("10.000"), 1)
    # and: excluding it again changes nothing
    with capture(execute=True):
        episodes_exclude(
            order_id=order.id,
            reason_code="other",
            note="blurry",
            staff_label="staff:ann",
            episode_ids=[first.id],
        )
    assert cell(order, 0, 0).accepted_seconds == Decimal("10.000")


def test_a_short_cell_gets_one_job_collecting_its_shortfall(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    # given: one environment of two objects over 0.01 h (36 s: 18 s a cell, at most 27 s, at
    # least 90 % here: 16.2 s), its one job of 36 s
    order = planned_order(
        customer, environments=1, hours="0.01", cell_min_share_percent=Decimal("90")
    )
    env0 = at_site(fleet_operator, customer, order, 0, target_hours="0.01")
    # when: the job is collected with 26 s of the mug and 10 s of the cup
    send(env0, capture, "mug")
    send(env0, capture, "cup")
    send(env0, capture, "mug")
    assert not Job.objects.filter(order=order, shortfall_cell__isnull=False).exists()
    assert send(env0, capture, "mug", frames=180).status == Episode.Status.ACCEPTED  # 6 s
    # then: the job is done; the cup's cell holds 10 s of its 16.2 s minimum: one job of
    # its environment collects the 6.2 s, and the order stays in collection
    assert Job.objects.get(pk=env0.job.pk).status == Job.Status.COMPLETED
    shortfall = Job.objects.get(order=order, shortfall_cell__isnull=False)
    assert shortfall.shortfall_cell == cell(order, 0, 1)
    assert shortfall.environment_index == 0
    assert shortfall.target_seconds == Decimal("6.200")
    assert shortfall.original_fleet_id == env0.site.fleet_id
    order.refresh_from_db()
    assert order.status == Order.Status.IN_COLLECTION
    # and: it was offered to the environment's site's fleet, naming the object to collect
    offers = fleet_operator.client.get("/api/v1/fleet/offers").json()["results"]
    offered = [o["job"] for o in offers if o["job"]["id"] == str(shortfall.id)]
    assert [job["plan"]["shortfall"] for job in offered] == [{"object_slot": 1, "object": "cup"}]
    # when: the check runs again
    with transaction.atomic():
        locked = Order.objects.select_for_update().get(pk=order.pk)
        assert cells_collect_shortfall(order=locked, environment_index=0) == []
        # and even asked directly, the cell's open shortfall job is the only one
        assert job_collect_shortfall(cell_id=shortfall.shortfall_cell_id, seconds=1) is None
    assert Job.objects.filter(order=order, shortfall_cell__isnull=False).count() == 1
