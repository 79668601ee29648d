"""The collection plan's registry through the fleet API (issue 30): objects and scenes of a
site, camera calibrations of a robot. Tenancy (another organization's rows are 404),
names unique in a site (409 name_taken), and calibrations no real camera has refused
(400 invalid_calibration) with nothing written."""

import importlib
import json
import math
from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone

from fleets.models import CameraCalibration, Scene, Site, SiteObject
from tests.factories import FleetFactory, RobotFactory, SiteFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(fleet_operator):
    return FleetFactory(organization=fleet_operator.organization)


@pytest.fixture
def site(fleet):
    return SiteFactory(fleet=fleet)


@pytest.fixture
def robot(site):
    return RobotFactory(site=site, fleet=site.fleet)


@pytest.fixture
def other(make_tenant):
    """Another fleet operator with its own site and robot."""
    from marketplace.models import Organization

    tenant = make_tenant(Organization.Kind.FLEET_OPERATOR)
    other_fleet = FleetFactory(organization=tenant.organization)
    tenant.site = SiteFactory(fleet=other_fleet)
    tenant.robot = RobotFactory(site=tenant.site, fleet=other_fleet)
    return tenant


def rotation_z(degrees: float) -> list[list[float]]:
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return [[c, -s, 0.0, 0.12], [s, c, 0.0, -0.03], [0.0, 0.0, 1.0, 0.45], [0.0, 0.0, 0.0, 1.0]]


def calibration(robot, **overrides) -> dict:
    return {
        "robot": str(robot.pk),
        "camera": "wrist",
        "calibrated_at": (timezone.now() - timedelta(hours=1)).isoformat(),
        "width": 640,
        "height": 480,
        "fx": 610.5,
        "fy": 611.25,
        "cx": 320.1,
        "cy": 239.8,
        "distortion_model": "plumb_bob",
        "distortion_coefficients": [0.1, -0.25, 0.001, 0.0005, 0.08],
        "extrinsics": rotation_z(30),
        **overrides,
    }


# --- Objects -------------------------------------------------------------------------------


def test_an_object_is_registered_listed_read_and_changed(fleet_operator, site):
    client = fleet_operator.client
    response = client.post(
        "/api/v1/fleet/objects",
        {
            "site": str(site.pk),
            "name": "  red mug  ",
            "category": " Mug ",
            "size_class": "small",
            "photo_url": "https://img.example.com/mug.jpg",
            "notes": "chipped handle\nleft side",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert {k: body[k] for k in ("site", "name", "category", "size_class", "active")} == {
        "site": str(site.pk),
        "name": "red mug",
        "category": "mug",
        "size_class": "small",
        "active": True,
    }
    assert body["notes"] == "chipped handle\nleft side" and body["created_at"]
    listed = client.get(f"/api/v1/fleet/objects?site={site.pk}").json()
    assert [row["id"] for row in listed["results"]] == [body["id"]]
    assert client.get("/api/v1/fleet/objects?active=false").json()["results"] == []

    changed = client.patch(
        f"/api/v1/fleet/objects/{body['id']}",
        {"category": "cup", "active": False, "photo_url": ""},
        format="json",
    )
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["category"], changed.json()["active"]) == ("cup", False)
    assert changed.json()["photo_url"] == ""
    read = client.get(f"/api/v1/fleet/objects/{body['id']}").json()
    assert (read["name"], read["category"], read["active"]) == ("red mug", "cup", False)


def test_an_objects_name_never_changes(fleet_operator, site):
    found = SiteObject.objects.create(fleet=site.fleet, site=site, name="sponge")
    response = fleet_operator.client.patch(
        f"/api/v1/fleet/objects/{found.pk}", {"name": "towel", "notes": "x"}, format="json"
    )
    assert response.status_code == 400
    assert "name" in response.json()["fields"]
    found.refresh_from_db()
    assert (found.name, found.notes) == ("sponge", "")


def test_a_second_object_of_the_same_name_in_a_site_is_409(fleet_operator, fleet, site):
    client = fleet_operator.client
    first = client.post(
        "/api/v1/fleet/objects", {"site": str(site.pk), "name": "peg"}, format="json"
    )
    assert first.status_code == 201
    again = client.post(
        "/api/v1/fleet/objects", {"site": str(site.pk), "name": " peg "}, format="json"
    )
    assert again.status_code == 409
    assert again.json()["code"] == "name_taken" and "name" in again.json()["fields"]
    # the same name at another site of the fleet is another object
    second_site = SiteFactory(fleet=fleet)
    assert (
        client.post(
            "/api/v1/fleet/objects", {"site": str(second_site.pk), "name": "peg"}, format="json"
        )
    ).status_code == 201
    assert SiteObject.objects.filter(name="peg").count() == 2


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "tab\tbed"}, "name"),
        ({"size_class": "huge"}, "size_class"),
        ({"photo_url": "javascript:alert(1)"}, "photo_url"),
        ({"photo_url": "ftp://files.example.com/mug.jpg"}, "photo_url"),
        ({"photo_url": "file:///etc/passwd"}, "photo_url"),
        ({"photo_url": "https://" + "a" * 600 + ".com/x.jpg"}, "photo_url"),
        ({"category": "c" * 61}, "category"),
        ({"site": "not-a-uuid"}, "site"),
    ],
)
def test_hostile_object_fields_are_refused_and_nothing_is_written(
    fleet_operator, site, overrides, field
):
    body = {"site": str(site.pk), "name": "mug", **overrides}
    response = fleet_operator.client.post("/api/v1/fleet/objects", body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["fields"]
    assert not SiteObject.objects.exists()


def test_another_operators_site_and_objects_do_not_exist(fleet_operator, site, other):
    client = fleet_operator.client
    response = client.post(
        "/api/v1/fleet/objects", {"site": str(other.site.pk), "name": "mug"}, format="json"
    )
    assert response.status_code == 404 and "site" in response.json()["fields"]
    theirs = SiteObject.objects.create(fleet=other.site.fleet, site=other.site, name="bowl")
    assert client.get(f"/api/v1/fleet/objects/{theirs.pk}").status_code == 404
    patched = client.patch(f"/api/v1/fleet/objects/{theirs.pk}", {"active": False}, format="json")
    assert patched.status_code == 404
    assert client.get(f"/api/v1/fleet/objects?site={other.site.pk}").json()["results"] == []
    assert client.get("/api/v1/fleet/objects").json()["results"] == []
    theirs.refresh_from_db()
    assert theirs.active


def test_customers_cannot_use_the_registry(customer):
    assert customer.client.get("/api/v1/fleet/objects").status_code == 403
    assert customer.client.get("/api/v1/fleet/calibrations").status_code == 403


# --- Site names become objects ------------------------------------------------------------


def test_a_sites_object_names_become_objects_and_none_is_deleted(fleet_operator, fleet):
    client = fleet_operator.client
    created = client.post(
        "/api/v1/fleet/sites",
        {
            "fleet": str(fleet.pk),
            "name": "Kitchen",
            "kind": "kitchen",
            "objects_available": ["mug", "plate", "mug"],
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    site = Site.objects.get(pk=created.json()["id"])
    assert set(SiteObject.objects.filter(site=site).values_list("name", flat=True)) == {
        "mug",
        "plate",
    }
    SiteObject.objects.filter(site=site, name="plate").update(active=False, category="dish")
    patched = client.patch(
        f"/api/v1/fleet/sites/{site.pk}", {"objects_available": ["plate", "fork"]}, format="json"
    )
    assert patched.status_code == 200, patched.json()
    rows = {o.name: o for o in SiteObject.objects.filter(site=site)}
    assert set(rows) == {"mug", "plate", "fork"}  # mug stays: never deleted
    assert (rows["plate"].active, rows["plate"].category) == (False, "dish")  # left as it was
    assert rows["fork"].active and rows["fork"].fleet_id == fleet.pk
    too_long = client.patch(
        f"/api/v1/fleet/sites/{site.pk}", {"objects_available": ["x" * 101]}, format="json"
    )
    assert too_long.status_code == 400 and "objects_available" in too_long.json()["fields"]


def test_the_data_migration_makes_objects_of_existing_sites_names(fleet):
    kept = SiteFactory(fleet=fleet, objects_available=["bowl", " cup ", "x" * 101, "bad\x01"])
    SiteObject.objects.create(fleet=fleet, site=kept, name="bowl", category="dish")
    SiteFactory(fleet=fleet, objects_available=[])
    migration = importlib.import_module("fleets.migrations.0008_site_objects_from_names")
    migration.objects_from_names(apps, None)
    migration.objects_from_names(apps, None)  # twice: nothing doubled
    rows = {o.name: o.category for o in SiteObject.objects.all()}
    assert rows == {"bowl": "dish", "cup": ""}


# --- Scenes --------------------------------------------------------------------------------


def test_a_scene_is_registered_and_only_its_notes_and_active_change(fleet_operator, site):
    client = fleet_operator.client
    before = timezone.now()
    response = client.post(
        "/api/v1/fleet/scenes",
        {
            "site": str(site.pk),
            "name": "bench-left",
            "table": "oak, 120x80",
            "background": "white wall",
            "lighting": "daylight 5600K",
            "camera_placement": "wrist + scene at 45 deg",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    scene = Scene.objects.get(pk=body["id"])
    assert before <= scene.arranged_at <= timezone.now()  # default: now
    assert (body["lighting"], body["active"]) == ("daylight 5600K", True)

    moved = client.patch(
        f"/api/v1/fleet/scenes/{scene.pk}", {"camera_placement": "moved"}, format="json"
    )
    assert moved.status_code == 400
    assert "new scene" in moved.json()["message"]
    assert "camera_placement" in moved.json()["fields"]
    done = client.patch(
        f"/api/v1/fleet/scenes/{scene.pk}", {"notes": "retired", "active": False}, format="json"
    )
    assert done.status_code == 200
    scene.refresh_from_db()
    assert (scene.camera_placement, scene.notes, scene.active) == (
        "wrist + scene at 45 deg",
        "retired",
        False,
    )
    assert client.get(f"/api/v1/fleet/scenes?site={site.pk}&active=false").json()["results"]
    again = client.post(
        "/api/v1/fleet/scenes", {"site": str(site.pk), "name": "bench-left"}, format="json"
    )
    assert again.status_code == 409 and again.json()["code"] == "name_taken"


def test_a_scene_arranged_in_the_future_is_refused(fleet_operator, site):
    late = (timezone.now() + timedelta(hours=1)).isoformat()
    response = fleet_operator.client.post(
        "/api/v1/fleet/scenes",
        {"site": str(site.pk), "name": "later", "arranged_at": late},
        format="json",
    )
    assert response.status_code == 400 and "arranged_at" in response.json()["fields"]
    soon = (timezone.now() + timedelta(minutes=2)).isoformat()  # clock drift is tolerated
    response = fleet_operator.client.post(
        "/api/v1/fleet/scenes",
        {"site": str(site.pk), "name": "drift", "arranged_at": soon},
        format="json",
    )
    assert response.status_code == 201


def test_another_operators_scenes_do_not_exist(fleet_operator, other):
    theirs = Scene.objects.create(
        fleet=other.site.fleet, site=other.site, name="s", arranged_at=timezone.now()
    )
    client = fleet_operator.client
    assert client.get(f"/api/v1/fleet/scenes/{theirs.pk}").status_code == 404
    assert (
        client.patch(f"/api/v1/fleet/scenes/{theirs.pk}", {"active": False}, format="json")
    ).status_code == 404
    created = client.post(
        "/api/v1/fleet/scenes", {"site": str(other.site.pk), "name": "s2"}, format="json"
    )
    assert created.status_code == 404
    assert client.get("/api/v1/fleet/scenes").json()["results"] == []


# --- Calibrations --------------------------------------------------------------------------


def test_a_calibration_is_registered_read_and_listed_by_robot_and_camera(
    fleet_operator, robot, site
):
    client = fleet_operator.client
    response = client.post(
        "/api/v1/fleet/calibrations",
        calibration(robot, camera="observation.images.wrist"),
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["camera"] == "wrist"  # the order's camera name, the key accepted too
    assert body["reference_frame"] == "robot_base"
    assert (body["width"], body["height"], body["fx"], body["cy"]) == (640, 480, 610.5, 239.8)
    assert body["distortion_coefficients"] == [0.1, -0.25, 0.001, 0.0005, 0.08]
    assert body["extrinsics"] == rotation_z(30)
    scene_cam = client.post(
        "/api/v1/fleet/calibrations",
        calibration(robot, camera="scene", distortion_model="none", distortion_coefficients=[]),
        format="json",
    )
    assert scene_cam.status_code == 201, scene_cam.json()
    second_robot = RobotFactory(site=site, fleet=site.fleet)
    assert (
        client.post("/api/v1/fleet/calibrations", calibration(second_robot), format="json")
    ).status_code == 201

    def ids(query):
        return {
            row["id"] for row in client.get(f"/api/v1/fleet/calibrations{query}").json()["results"]
        }

    assert ids(f"?robot={robot.pk}&camera=wrist") == {body["id"]}
    assert ids(f"?robot={robot.pk}&camera=observation.images.wrist") == {body["id"]}
    assert ids(f"?robot={robot.pk}") == {body["id"], scene_cam.json()["id"]}
    assert len(ids("")) == 3
    assert client.get("/api/v1/fleet/calibrations?robot=nope").status_code == 400
    assert client.get("/api/v1/fleet/calibrations?camera=a%20b").status_code == 400
    detail = client.get(f"/api/v1/fleet/calibrations/{body['id']}")
    assert detail.status_code == 200 and detail.json() == body
    # never edited: a recalibration is a new row
    assert client.patch(f"/api/v1/fleet/calibrations/{body['id']}", {}).status_code == 405
    assert client.delete(f"/api/v1/fleet/calibrations/{body['id']}").status_code == 405


def test_every_distortion_model_takes_exactly_its_coefficient_count(fleet_operator, robot):
    for model, count in (
        ("none", 0),
        ("plumb_bob", 5),
        ("rational_polynomial", 8),
        ("equidistant", 4),
    ):
        for given in {count, count + 1, max(count - 1, 0)}:
            body = calibration(
                robot, distortion_model=model, distortion_coefficients=[0.01] * given
            )
            response = fleet_operator.client.post("/api/v1/fleet/calibrations", body, format="json")
            assert response.status_code == (201 if given == count else 400), (model, given)
    assert CameraCalibration.objects.count() == 4


def test_a_rotation_within_the_tolerance_is_a_rotation(fleet_operator, robot):
    noisy = rotation_z(10)
    noisy[0][0] += 2e-4  # a measured rotation is never exactly orthonormal
    response = fleet_operator.client.post(
        "/api/v1/fleet/calibrations", calibration(robot, extrinsics=noisy), format="json"
    )
    assert response.status_code == 201, response.json()


def _matrix(change):
    matrix = rotation_z(30)
    change(matrix)
    return matrix


SCALED = _matrix(lambda m: [row.__setitem__(i, row[i] * 2) for row in m[:3] for i in range(3)])
MIRRORED = _matrix(lambda m: m[2].__setitem__(2, -1.0))  # orthonormal, but det = -1
SQUASHED = [[2.0, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0]]  # det 1, not R
SHEARED = _matrix(lambda m: m[0].__setitem__(1, m[0][1] + 0.1))


@pytest.mark.parametrize(
    ("overrides", "field", "code"),
    [
        ({"fx": "NaN"}, "fx", "invalid"),
        ({"fy": "Infinity"}, "fy", "invalid"),
        ({"fx": 0}, "fx", "invalid_calibration"),
        ({"fy": -500.0}, "fy", "invalid_calibration"),
        ({"cx": 640.5}, "cx", "invalid_calibration"),
        ({"cy": -0.1}, "cy", "invalid_calibration"),
        ({"width": 0}, "width", "invalid_calibration"),
        ({"height": 16385}, "height", "invalid_calibration"),
        ({"width": 640.5}, "width", "invalid"),
        ({"distortion_model": "fisheye62"}, "distortion_model", "invalid_calibration"),
        ({"distortion_model": ["plumb_bob"]}, "distortion_model", "invalid"),
        (
            {"distortion_coefficients": [0.1, 0.2, 0.0, 0.0]},
            "distortion_coefficients",
            "invalid_calibration",
        ),
        (
            {"distortion_coefficients": [0.1, "NaN", 0.0, 0.0, 0.0]},
            "distortion_coefficients",
            "invalid_calibration",
        ),
        (
            {"distortion_coefficients": "0.1 0.2"},
            "distortion_coefficients",
            "invalid_calibration",
        ),
        ({"extrinsics": rotation_z(30)[:3]}, "extrinsics", "invalid_calibration"),  # 3x4
        (
            {"extrinsics": [row[:3] for row in rotation_z(30)]},
            "extrinsics",
            "invalid_calibration",
        ),
        (
            {"extrinsics": [*rotation_z(30)[:3], [0, 0, 1, 1]]},
            "extrinsics",
            "invalid_calibration",
        ),
        ({"extrinsics": SCALED}, "extrinsics", "invalid_calibration"),
        ({"extrinsics": MIRRORED}, "extrinsics", "invalid_calibration"),
        ({"extrinsics": SHEARED}, "extrinsics", "invalid_calibration"),
        ({"extrinsics": SQUASHED}, "extrinsics", "invalid_calibration"),
        (
            {"extrinsics": [[True, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]},
            "extrinsics",
            "invalid_calibration",
        ),
        ({"extrinsics": "identity"}, "extrinsics", "invalid_calibration"),
        ({"camera": "a b"}, "camera", "invalid"),
        ({"camera": "../../etc"}, "camera", "invalid"),
        ({"camera": "observation.images."}, "camera", "invalid"),
        ({"reference_frame": "base link"}, "reference_frame", "invalid"),
        ({"calibrated_at": "tomorrow"}, "calibrated_at", "invalid"),
    ],
)
def test_a_calibration_no_real_camera_has_is_refused(fleet_operator, robot, overrides, field, code):
    response = fleet_operator.client.post(
        "/api/v1/fleet/calibrations", calibration(robot, **overrides), format="json"
    )
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == code
    assert field in response.json()["fields"]
    assert not CameraCalibration.objects.exists()


def test_calibrations_dated_in_the_future_are_refused(fleet_operator, robot):
    later = (timezone.now() + timedelta(minutes=10)).isoformat()
    response = fleet_operator.client.post(
        "/api/v1/fleet/calibrations", calibration(robot, calibrated_at=later), format="json"
    )
    assert response.status_code == 400 and "calibrated_at" in response.json()["fields"]
    assert not CameraCalibration.objects.exists()


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400])
def test_numbers_beyond_a_float_in_the_raw_body_are_refused(fleet_operator, robot, number):
    fields = calibration(robot)
    fields.pop("extrinsics")
    head = json.dumps(fields)[:-1]
    identity = "[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]"
    valid = f'{head}, "extrinsics": [{identity}]}}'
    assert valid.count('"cx": 320.1') == 1
    big_cx = valid.replace('"cx": 320.1', f'"cx": {number}')
    big_translation = valid.replace("[1, 0, 0, 0]", f"[1, 0, 0, {number}]")
    for raw in (big_cx, big_translation):
        response = fleet_operator.client.post(
            "/api/v1/fleet/calibrations", raw, content_type="application/json"
        )
        assert response.status_code == 400, response.content
    assert not CameraCalibration.objects.exists()


def test_another_operators_robot_and_calibrations_do_not_exist(fleet_operator, robot, other):
    client = fleet_operator.client
    response = client.post("/api/v1/fleet/calibrations", calibration(other.robot), format="json")
    assert response.status_code == 404 and "robot" in response.json()["fields"]
    theirs = other.client.post(
        "/api/v1/fleet/calibrations", calibration(other.robot), format="json"
    )
    assert theirs.status_code == 201
    assert client.get(f"/api/v1/fleet/calibrations/{theirs.json()['id']}").status_code == 404
    assert client.get(f"/api/v1/fleet/calibrations?robot={other.robot.pk}").json()["results"] == []
