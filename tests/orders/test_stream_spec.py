"""Issue 15, item 1: the catalog's stream spec and the spec each order freezes when placed."""

from decimal import Decimal

import pytest

from fleets.models import Job, Offer
from fleets.services.dispatch import job_dispatch
from fleets.services.planning import order_plan
from orders.models import Embodiment, Order, SensorAddon
from orders.streams import build_stream_spec, camera_keys, names_of, vectors_of
from tests.factories import FleetFactory, OrderFactory, RobotFactory, SiteFactory

pytestmark = pytest.mark.django_db

ORDER = {"task_type": "peg-insertion", "embodiment": "franka-fr3", "hours": "10"}


def test_every_seeded_embodiment_names_its_vectors_and_has_a_scene_camera():
    expected_dims = {
        "franka-fr3": 8,
        "ur5e": 7,
        "so100": 6,
        "aloha-bimanual": 14,
        "mobile-manipulator": 11,
        "dexterous-hand": 23,
    }
    for embodiment in Embodiment.objects.all():
        assert embodiment.action_dim == expected_dims[embodiment.slug]
        assert len(embodiment.state_names) == embodiment.action_dim
        assert len(embodiment.action_names) == embodiment.action_dim
        assert len(set(embodiment.action_names)) == embodiment.action_dim
        assert embodiment.cameras == [{"name": "scene", "min_width": 320, "min_height": 240}]
    franka = Embodiment.objects.get(slug="franka-fr3")
    assert franka.state_names[-1] == "gripper_width"
    mobile = Embodiment.objects.get(slug="mobile-manipulator")
    assert mobile.state_names[:3] == ["base_x", "base_y", "base_yaw"]
    aloha = Embodiment.objects.get(slug="aloha-bimanual")
    assert aloha.state_names[6] == "left_gripper" and aloha.state_names[13] == "right_gripper"


def test_sensor_addons_declare_their_streams():
    streams = {s.slug: s.stream for s in SensorAddon.objects.all()}
    assert streams["wrist-camera"] == {
        "kind": "camera",
        "name": "wrist",
        "min_width": 320,
        "min_height": 240,
    }
    assert streams["rgbd-camera"]["kind"] == "camera" and streams["rgbd-camera"]["name"] == "rgbd"
    assert streams["force-torque"] == {
        "kind": "vector",
        "key": "observation.force_torque",
        "names": ["fx", "fy", "fz", "tx", "ty", "tz"],
    }
    assert streams["tactile"]["key"] == "observation.tactile"
    assert len(streams["tactile"]["names"]) == 16


def test_catalog_api_shows_names_cameras_and_streams(anon_client):
    embodiments = {e["slug"]: e for e in anon_client.get("/api/v1/catalog/embodiments").json()}
    assert embodiments["ur5e"]["action_names"][-1] == "gripper"
    assert len(embodiments["ur5e"]["state_names"]) == 7
    assert embodiments["ur5e"]["cameras"][0]["name"] == "scene"
    sensors = {s["slug"]: s for s in anon_client.get("/api/v1/catalog/sensors").json()}
    assert sensors["force-torque"]["stream"]["key"] == "observation.force_torque"


def test_an_order_freezes_its_stream_spec_when_placed(customer):
    response = customer.client.post(
        "/api/v1/orders",
        {**ORDER, "sensors": ["wrist-camera", "force-torque", "tactile"], "video_codec": "h264"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    spec = response.json()["stream_spec"]
    assert camera_keys(spec) == ["observation.images.scene", "observation.images.wrist"]
    assert spec["cameras"][1] == {
        "key": "observation.images.wrist",
        "name": "wrist",
        "min_width": 320,
        "min_height": 240,
        "source": "wrist-camera",
    }
    assert [v["key"] for v in vectors_of(spec)] == [
        "observation.force_torque",
        "observation.tactile",
    ]
    assert spec["video_codec"] == "h264"
    assert names_of(spec, "state") == Embodiment.objects.get(slug="franka-fr3").state_names
    assert spec["action"]["key"] == "action"
    # Frozen: a later catalog edit does not change what the order asks for.
    SensorAddon.objects.filter(slug="wrist-camera").update(
        stream={"kind": "camera", "name": "wrist", "min_width": 1920, "min_height": 1080}
    )
    order = Order.objects.get(pk=response.json()["id"])
    assert order.stream_spec == spec


def test_video_codec_defaults_to_av1_and_an_unknown_one_is_a_400(customer):
    default = customer.client.post("/api/v1/orders", ORDER, format="json")
    assert default.status_code == 201, default.json()
    assert default.json()["stream_spec"]["video_codec"] == "av1"
    assert camera_keys(default.json()["stream_spec"]) == ["observation.images.scene"]
    assert vectors_of(default.json()["stream_spec"]) == []
    refused = customer.client.post("/api/v1/orders", {**ORDER, "video_codec": "vp9"}, format="json")
    assert refused.status_code == 400
    assert "video_codec" in refused.json()["fields"]


def test_an_order_from_a_quote_freezes_the_quoted_sensors(customer):
    quote = customer.client.post(
        "/api/v1/quotes", {**ORDER, "sensors": ["rgbd-camera"]}, format="json"
    ).json()
    response = customer.client.post("/api/v1/orders", {"quote": quote["id"]}, format="json")
    assert response.status_code == 201, response.json()
    assert camera_keys(response.json()["stream_spec"]) == [
        "observation.images.scene",
        "observation.images.rgbd",
    ]


def test_a_spec_never_has_names_of_the_wrong_length():
    embodiment = Embodiment.objects.create(slug="odd", name="Odd", action_dim=3)
    spec = build_stream_spec(embodiment=embodiment, sensor_slugs=[])
    assert names_of(spec, "state") == ["state_0", "state_1", "state_2"]
    assert spec["cameras"] == []


def test_the_fleet_api_shows_the_spec_on_offers_and_jobs(fleet_operator, customer):
    order = OrderFactory(organization=customer.organization, status=Order.Status.PAID)
    order.stream_spec = build_stream_spec(
        embodiment=order.embodiment, sensor_slugs=["wrist-camera"]
    )
    order.save(update_fields=["stream_spec"])
    fleet = FleetFactory(organization=fleet_operator.organization)
    site = SiteFactory(fleet=fleet)
    RobotFactory(site=site, fleet=fleet)
    order_plan(order_id=order.id)
    job = Job.objects.filter(order=order).order_by("sequence").first()
    job_dispatch(job_id=job.pk)
    offer = Offer.objects.get(job=job)
    offers = fleet_operator.client.get("/api/v1/fleet/offers").json()["results"]
    assert offers[0]["job"]["stream_spec"] == order.stream_spec
    fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
    jobs = fleet_operator.client.get("/api/v1/fleet/jobs").json()["results"]
    assert camera_keys(jobs[0]["stream_spec"]) == [
        "observation.images.scene",
        "observation.images.wrist",
    ]


def test_orders_placed_before_stream_specs_keep_an_empty_one():
    order = OrderFactory(hours=Decimal("10"))
    assert order.stream_spec == {}
    assert camera_keys(order.stream_spec) == [] and names_of(order.stream_spec, "state") is None
