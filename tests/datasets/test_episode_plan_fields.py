"""Issue 30: what an episode names of the collection plan at registration: its scene (an
active one of its site, by name), the calibration of each ordered camera (the fleet's, else
the one in force), and the objects it handled in the order handled."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode
from fleets.models import CameraCalibration, OrderCell, Scene
from orders.models import Order
from orders.streams import build_stream_spec
from tests.datasets.helpers import Collection
from tests.factories import OrderFactory, RobotFactory, SiteFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]
SCENE, WRIST = "observation.images.scene", "observation.images.wrist"
IDENTITY = [[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0]]


def camera_order(customer) -> Order:
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("1"),
        environments=1,
    )
    order.stream_spec = build_stream_spec(
        embodiment=order.embodiment, sensor_slugs=["wrist-camera"]
    )
    order.save(update_fields=["stream_spec"])
    return order


@pytest.fixture
def collection(fleet_operator, customer):
    return Collection(fleet_operator, customer, order=camera_order(customer))


def register(collection, seed=0, **overrides):
    data = parquet_bytes(episode_table(frames=30, seed=seed))
    videos = [
        {"camera_key": key, "size_bytes": 100, "sha256": f"{seed:x}".rjust(64, "b")}
        for key in (SCENE, WRIST)
    ]
    return collection.register(data, videos=videos, **overrides)


def calibrate(robot, camera, *, ago=timedelta(days=1)) -> CameraCalibration:
    return CameraCalibration.objects.create(
        fleet=robot.fleet,
        robot=robot,
        camera=camera,
        calibrated_at=timezone.now() - ago,
        width=640,
        height=480,
        fx=600,
        fy=600,
        cx=320,
        cy=240,
        distortion_model="none",
        distortion_coefficients=[],
        extrinsics=IDENTITY,
    )


def scene_at(site, name="bench-left", **fields) -> Scene:
    return Scene.objects.create(
        fleet=site.fleet, site=site, name=name, arranged_at=timezone.now(), **fields
    )


# --- Scene ---------------------------------------------------------------------------------


def test_an_episode_names_an_active_scene_of_its_site(collection):
    scene = scene_at(collection.site)
    response = register(collection, scene=" bench-left ")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["scene"] == {"id": str(scene.pk), "name": "bench-left"}
    assert body["cell"] is None
    assert Episode.objects.get(pk=body["id"]).scene_id == scene.pk
    client = collection.operator.client
    detail = client.get(f"/api/v1/fleet/episodes/{body['id']}").json()
    assert detail["scene"] == {"id": str(scene.pk), "name": "bench-left"}
    listed = client.get(f"/api/v1/fleet/jobs/{collection.job.id}/episodes").json()["results"]
    assert [row["scene"] for row in listed] == [{"id": str(scene.pk), "name": "bench-left"}]
    # naming none stays possible (orders that do not count scenes)
    unnamed = register(collection, seed=1)
    assert unnamed.status_code == 201 and unnamed.json()["scene"] is None


@pytest.mark.parametrize("case", ["unknown", "inactive", "other_site", "too_long"])
def test_a_scene_not_active_at_the_episodes_site_is_refused(collection, case):
    name = "bench-left"
    if case == "inactive":
        scene_at(collection.site, active=False)
    elif case == "other_site":
        scene_at(SiteFactory(fleet=collection.site.fleet))
    elif case == "too_long":
        name = "x" * 101
    response = register(collection, scene=name)
    assert response.status_code == 400, response.json()
    assert "scene" in response.json()["fields"]
    assert not Episode.objects.exists()


# --- Calibrations --------------------------------------------------------------------------


def test_named_calibrations_are_kept_and_missing_cameras_get_the_one_in_force(collection):
    robot = collection.robot
    old_wrist = calibrate(robot, "wrist", ago=timedelta(days=30))
    calibrate(robot, "wrist", ago=timedelta(days=2))  # newer, but the fleet names the old one
    calibrate(robot, "scene", ago=timedelta(days=9))
    in_force = calibrate(robot, "scene", ago=timedelta(days=3))
    calibrate(robot, "scene", ago=-timedelta(minutes=3))  # dated ahead: not yet in force
    calibrate(RobotFactory(site=collection.site, fleet=robot.fleet), "scene", ago=timedelta(0))
    response = register(collection, camera_calibrations={WRIST: str(old_wrist.pk)})
    assert response.status_code == 201, response.json()
    expected = {"scene": str(in_force.pk), "wrist": str(old_wrist.pk)}
    assert response.json()["camera_calibrations"] == expected
    episode = Episode.objects.get(pk=response.json()["id"])
    assert episode.camera_calibrations == expected
    detail = collection.operator.client.get(f"/api/v1/fleet/episodes/{episode.pk}").json()
    assert detail["camera_calibrations"] == expected


def test_a_camera_without_any_calibration_is_left_out(collection):
    wrist = calibrate(collection.robot, "wrist")
    response = register(collection)
    assert response.status_code == 201, response.json()
    assert response.json()["camera_calibrations"] == {"wrist": str(wrist.pk)}


@pytest.mark.parametrize("case", ["other_robot", "other_camera", "not_ordered", "not_an_id"])
def test_a_calibration_not_of_the_robots_ordered_camera_is_refused(collection, case):
    robot = collection.robot
    if case == "other_robot":
        theirs = calibrate(RobotFactory(site=collection.site, fleet=robot.fleet), "wrist")
        named = {"wrist": str(theirs.pk)}
    elif case == "other_camera":
        named = {"wrist": str(calibrate(robot, "scene").pk)}
    elif case == "not_ordered":
        named = {"top": str(calibrate(robot, "top").pk)}
    else:
        named = {"wrist": "not-a-uuid"}
    response = register(collection, camera_calibrations=named)
    assert response.status_code == 400, response.json()
    assert "camera_calibrations" in response.json()["fields"]
    assert not Episode.objects.exists()


def test_another_fleets_calibration_is_refused(collection, make_tenant):
    from marketplace.models import Organization
    from tests.factories import FleetFactory

    other = FleetFactory(organization=make_tenant(Organization.Kind.FLEET_OPERATOR).organization)
    theirs = calibrate(RobotFactory(site=SiteFactory(fleet=other), fleet=other), "wrist")
    response = register(collection, camera_calibrations={"wrist": str(theirs.pk)})
    assert response.status_code == 400 and "camera_calibrations" in response.json()["fields"]


# --- Objects and cell ----------------------------------------------------------------------


def test_objects_keep_the_order_handled_without_duplicates(collection):
    response = register(collection, objects_handled=["sponge", "mug", "sponge", "apple", "mug"])
    assert response.status_code == 201, response.json()
    assert response.json()["objects_handled"] == ["sponge", "mug", "apple"]
    episode = Episode.objects.get(pk=response.json()["id"])
    assert episode.objects_handled == ["sponge", "mug", "apple"]  # the first: its cell's object


def test_the_cell_an_episode_counts_in_is_shown(collection):
    body = register(collection).json()
    cell = OrderCell.objects.create(
        order=collection.order, environment_index=0, object_slot=1, target_seconds=Decimal("60")
    )
    Episode.objects.filter(pk=body["id"]).update(cell=cell)
    detail = collection.operator.client.get(f"/api/v1/fleet/episodes/{body['id']}").json()
    assert detail["cell"] == {"environment_index": 0, "object_slot": 1}
