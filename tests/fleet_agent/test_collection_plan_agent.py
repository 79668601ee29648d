"""The collection plan (issue 30) from the fleet agent's side, end to end on the real platform
(live_server, the local S3 server, eager Celery): the simulated fleets register their sites'
objects and scenes and their robots' camera calibrations through the fleet API; episodes name
their scene, object and calibrations; a planned order's grid fills; a defective fleet's
episodes are rejected with their codes; `fleet-agent import` mapping files set scene, objects
and calibrations (a file registered first) per recording.

These need the merged platform: the registry's endpoints (`/api/v1/fleet/objects`, `scenes`,
`calibrations`, the episode registration's `scene` and `camera_calibrations`) for every test;
`test_a_planned_order_fills_its_grid_and_the_defective_episodes_are_rejected` needs the cells
part too (planning's OrderCells, QA's plan checks). The same behaviour without a platform:
test_collection_plan_units.py."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from datasets.models import Delivery, Episode
from fleet_agent import FleetAgent, parse_config
from fleet_agent.calibration import check_calibration, simulated_calibration
from fleet_agent.client import ApiClient
from fleet_agent.importers import load_mapping
from fleet_agent.importers.journal import Journal
from fleet_agent.importers.pipeline import import_recordings
from fleet_agent.plan import UNREGISTERED_OBJECT
from fleets.collection_models import CameraCalibration, OrderCell, Scene, SiteObject
from fleets.models import Job, Robot, Site
from fleets.services.planning import order_plan
from orders.models import Order
from orders.streams import build_stream_spec
from tests.datasets import lerobot_loader
from tests.datasets.test_delivery_plan_columns import download
from tests.factories import OrderFactory
from tests.fleet_agent.importing import held_job, write_recording
from tests.fleet_agent.test_integration import assert_delivered
from tests.fleet_agent.test_integration import operator as operator
from tests.fleet_agent.test_integration import platform as platform

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SITES = {"Bench North": ["peg-8mm", "block"], "Bench South": ["socket", "gear"]}


def plan_config(base_url, api_key, **collection):
    return parse_config(
        {
            "base_url": base_url,
            "api_key": api_key,
            "fleet": {
                "name": "Plan Fleet",
                "weekly_capacity_hours": 40,
                "payout_rate_per_hour": 55,
            },
            "sites": [
                {
                    "name": name,
                    "kind": "lab_bench",
                    "objects": [objects[0], {"name": objects[1], "category": "part"}],
                    "robots": [
                        {
                            "name": f"fr3-{name.split()[1].lower()}",
                            "embodiment": "franka-fr3",
                            "sensors": ["wrist-camera"],
                        }
                    ],
                }
                for name, objects in SITES.items()
            ],
            "collection": {
                "episode_seconds": [6, 8],
                "poll_seconds": 0.1,
                "seed": 5,
                **collection,
            },
        }
    )


def planned_order(customer, *, environments=2, objects=2, hours="0.02") -> Order:
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.PAID,
        hours=Decimal(hours),
        environments=environments,
        objects_per_environment=objects,
        sensor_slugs=["wrist-camera"],
        calibrated_cameras=True,
        cells_planned=True,
    )
    order.stream_spec = build_stream_spec(
        embodiment=order.embodiment, sensor_slugs=["wrist-camera"]
    )
    order.save(update_fields=["stream_spec"])
    order_plan(order_id=order.id)
    return order


def test_the_simulated_fleet_registers_objects_scenes_and_calibrations(platform, operator):
    agent = FleetAgent(plan_config(platform, operator.raw_key))
    agent.register()

    for name, objects in SITES.items():
        site = Site.objects.get(name=name)
        registered = SiteObject.objects.filter(site=site)
        assert sorted(o.name for o in registered) == sorted(objects)
        assert registered.get(name=objects[1]).category == "part"
        scenes = Scene.objects.filter(site=site, active=True).order_by("name")
        assert [s.name for s in scenes] == ["arrangement-1", "arrangement-2"]
        robot = Robot.objects.get(site=site)
        calibrations = CameraCalibration.objects.filter(robot=robot)
        assert sorted(c.camera for c in calibrations) == ["scene", "wrist"]
        for calibration in calibrations:
            assert calibration.calibrated_at > max(s.arranged_at for s in scenes)
            assert (calibration.width, calibration.height) == (320, 240)  # the catalog's
            check_calibration(  # what the platform kept is still a valid calibration
                {
                    "calibrated_at": calibration.calibrated_at.isoformat(),
                    **{
                        k: getattr(calibration, k)
                        for k in ("width", "height", "fx", "fy", "cx", "cy", "extrinsics")
                    },
                    "distortion_model": calibration.distortion_model,
                    "distortion_coefficients": calibration.distortion_coefficients,
                }
            )
    # the objects: created by the site registration's objects_available sync, or by the agent
    assert agent.summary.plan_registered["scenes"] == 4
    assert agent.summary.plan_registered["calibrations"] == 4
    # the API lists them to their fleet
    assert {o["name"] for o in agent.client.site_objects()} == {
        "peg-8mm",
        "block",
        "socket",
        "gear",
    }

    again = FleetAgent(plan_config(platform, operator.raw_key))
    again.register()  # found by name: nothing new
    assert again.summary.plan_registered == {}
    assert SiteObject.objects.count() == 4 and Scene.objects.count() == 4
    assert CameraCalibration.objects.count() == 4


def test_an_old_calibration_is_replaced_on_start(platform, operator):
    FleetAgent(plan_config(platform, operator.raw_key)).register()
    old = datetime.now(UTC) - timedelta(days=10)
    Scene.objects.update(arranged_at=old - timedelta(days=10))  # only the age counts here
    CameraCalibration.objects.update(calibrated_at=old)

    agent = FleetAgent(plan_config(platform, operator.raw_key, recalibrate_days=7))
    agent.register()

    assert agent.summary.plan_registered == {"calibrations": 4}
    for robot in Robot.objects.all():
        latest = CameraCalibration.objects.filter(robot=robot, camera="wrist").first()
        assert latest.calibrated_at > old + timedelta(days=9)


def test_episodes_name_their_scene_object_and_calibrations(platform, operator, customer):
    agent = FleetAgent(plan_config(platform, operator.raw_key))
    agent.register()
    order = planned_order(customer, environments=2, objects=2)

    summary = agent.run_once(max_seconds=180)

    assert summary.errors == [], summary.as_dict()
    episodes = Episode.objects.filter(order=order).select_related("scene", "robot", "site")
    assert episodes.count() >= 4
    for episode in episodes:
        assert episode.scene is not None and episode.scene.site_id == episode.site_id
        site_objects = set(
            SiteObject.objects.filter(site=episode.site).values_list("name", flat=True)
        )
        assert len(episode.objects_handled) == 1 and episode.objects_handled[0] in site_objects
        in_force = {
            camera: str(
                CameraCalibration.objects.filter(robot=episode.robot, camera=camera).first().id
            )
            for camera in ("scene", "wrist")
        }
        assert {k: str(v) for k, v in episode.camera_calibrations.items()} == in_force
    jobs = Job.objects.filter(order=order)
    assert jobs.values("site").distinct().count() == 2
    for job in jobs:  # each job keeps its scene and uses both of its site's objects
        mine = episodes.filter(job=job)
        assert mine.values("scene").distinct().count() == 1
        assert {e.objects_handled[0] for e in mine} == set(SITES[job.site.name])


def test_a_planned_order_fills_its_grid_and_the_defective_episodes_are_rejected(
    platform, operator, customer, tmp_path
):
    """Needs the registry and the cells parts merged (OrderCells, QA's plan checks)."""
    agent = FleetAgent(
        plan_config(platform, operator.raw_key),
        plan_defects=["object_not_in_plan", "uncalibrated_camera", "stale_calibration"],
    )
    agent.register()
    held_back = CameraCalibration.objects.filter(camera="scene").count()
    assert held_back == 0  # uncalibrated_camera: the robots' first camera waits
    order = planned_order(customer, environments=2, objects=2)

    summary = agent.run_once(max_seconds=240)

    assert summary.errors == [], summary.as_dict()
    assert summary.defective_uploaded == 3
    assert summary.rejection_reasons == {
        "object_not_in_plan": 1,
        "calibration_missing": 1,
        "calibration_stale": 1,
    }, summary.as_dict()
    rejected = Episode.objects.filter(order=order, status="rejected")
    codes = {tuple(sorted(f["code"] for f in e.qa_failures)): e for e in rejected}
    assert set(codes) == {("object_not_in_plan",), ("calibration_missing",), ("calibration_stale",)}
    assert codes[("object_not_in_plan",)].objects_handled == [UNREGISTERED_OBJECT]
    assert "scene" not in codes[("calibration_missing",)].camera_calibrations
    stale = CameraCalibration.objects.get(
        pk=codes[("calibration_stale",)].camera_calibrations["scene"]
    )
    assert stale.calibrated_at < datetime.now(UTC) - timedelta(days=365)

    order.refresh_from_db()
    cells = list(OrderCell.objects.filter(order=order))
    assert len(cells) == 4
    for cell in cells:
        assert cell.site_id is not None and cell.site_object is not None
        assert cell.accepted_seconds >= cell.target_seconds * cell_min_share(order) / 100
        assert cell.site_object.name in SITES[cell.site.name]
    assert len({(c.environment_index, c.site_object_id) for c in cells}) == 4
    assert {c.site_id for c in cells if c.environment_index == 0} != {
        c.site_id for c in cells if c.environment_index == 1
    }
    accepted = Episode.objects.filter(order=order, status="accepted")
    assert all(e.cell_id is not None for e in accepted)

    # delivered: meta/episodes names each episode's scene, site, objects and calibrations,
    # meta/calibrations.json holds them, and the project's lerobot loader reads it all
    assert_delivered(order)
    delivery = Delivery.objects.get(order=order, kind=Delivery.Kind.FULL)
    manifest = download(customer.client, delivery, tmp_path)
    dataset = lerobot_loader.load(tmp_path)
    lerobot_loader.check_invariants(dataset)
    shipped = json.loads((tmp_path / manifest["calibrations"]["path"]).read_text())
    rows = dataset["episodes"]
    assert len(rows) == accepted.count()
    assert {row["site"] for row in rows} == {"site-01", "site-02"}
    assert sorted(row["objects"] for row in rows) == sorted(e.objects_handled for e in accepted)
    cells_of = {(c.site_id, c.site_object.name) for c in cells}
    for row in rows:
        assert row["scene_id"] and Scene.objects.filter(pk=row["scene_id"]).exists()
        named = json.loads(row["calibration_id"])
        assert set(named) == {"scene", "wrist"} and set(named.values()) <= set(shipped)
    assert {(e.site_id, e.objects_handled[0]) for e in accepted} == cells_of
    for calibration in shipped.values():
        assert calibration["camera"] in {"scene", "wrist"} and len(calibration["extrinsics"]) == 4


def cell_min_share(order) -> Decimal:
    return Decimal(order.cell_min_share_percent)


def test_an_import_mapping_sets_scene_objects_and_calibrations_per_recording(
    platform, operator, customer, tmp_path
):
    held = held_job(platform, operator, customer, tmp_path)  # the agent registered its plan
    robot = Robot.objects.get(name="fr3-01")
    in_force = CameraCalibration.objects.filter(robot=robot, camera="wrist").first()
    client = ApiClient(held.agent.config.base_url, held.agent.config.api_key)
    earlier = simulated_calibration(
        "wrist", width=320, height=240, calibrated_at=datetime.now(UTC) - timedelta(days=2)
    )
    wrist = client.create_calibration({"robot": str(robot.id), "camera": "wrist", **earlier})
    calibration = simulated_calibration(
        "scene", width=320, height=240, calibrated_at=datetime.now(UTC) - timedelta(minutes=1)
    )
    (tmp_path / "calib").mkdir()
    (tmp_path / "calib" / "scene.json").write_text(json.dumps({"camera": "scene", **calibration}))
    held.mapping_path.write_text(
        held.mapping_path.read_text()
        + 'scene = "arrangement-1"\nobjects = ["block"]\n'
        + '[calibrations]\nscene = { file = "calib/scene.json" }\n'
        + '[[recordings]]\nmatch = "pick_001"\nscene = "arrangement-2"\n'
        + 'objects = ["socket", "block"]\n'
        + f'[recordings.calibrations]\nwrist = "{wrist["id"]}"\n'
    )
    folder = tmp_path / "recordings"
    for i in range(2):
        write_recording(folder, f"pick_{i:03d}", seed=40 + i)
    mapping = load_mapping(held.mapping_path)

    with Journal.open(tmp_path / "j.sqlite3", mapping.job) as journal:
        summary = import_recordings(client, mapping, folder, journal)
    with Journal.open(tmp_path / "j.sqlite3", mapping.job) as journal:  # a re-run
        import_recordings(client, mapping, folder, journal)

    assert summary.count("imported") == 2, summary.as_dict()
    from_file = CameraCalibration.objects.filter(robot=robot, camera="scene").order_by(
        "-created_at"
    )
    registered = from_file.get(fx=calibration["fx"])  # registered once, for the job's robot
    episodes = {e.objects_handled[0]: e for e in Episode.objects.filter(order=held.order)}
    first, second = episodes["block"], episodes["socket"]
    assert first.scene.name == "arrangement-1" and second.scene.name == "arrangement-2"
    assert second.objects_handled == ["socket", "block"]
    assert str(first.camera_calibrations["scene"]) == str(registered.id)
    assert str(second.camera_calibrations["scene"]) == str(registered.id)
    # the wrist: the rule's (an earlier one) for pick_001; for pick_000 the one in force,
    # filled in by the platform
    assert str(second.camera_calibrations["wrist"]) == wrist["id"]
    assert str(first.camera_calibrations["wrist"]) == str(in_force.id)
