"""The collection plan in the delivery (issue 30): meta/episodes' scene_id, site, objects and
calibration_id columns, meta/calibrations.json, the card's grid and coverage, the delivered
counts billing hears, and the same in a filtered version and for an older order."""

import json
from datetime import timedelta
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.utils import timezone

from datasets.delivery_plan import (
    DeliveredPlan,
    GridCell,
    PlanEpisode,
    PlanGrid,
    clean_calibrations,
    clean_objects,
    pseudonyms,
)
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery, Episode
from fleets.models import CameraCalibration, OrderCell, Scene, SiteObject
from orders import signals
from orders.models import Order
from tests.datasets import lerobot_loader
from tests.datasets.helpers import Collection, complete, put
from tests.datasets.test_deliveries import fetch, link
from tests.factories import OrderFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]

EXTRINSICS = [[0, -1, 0, 0.1], [1, 0, 0, 0.0], [0, 0, 1, 0.5], [0, 0, 0, 1]]


def calibration(collection, camera, **fields) -> CameraCalibration:
    return CameraCalibration.objects.create(
        fleet=collection.robot.fleet,
        robot=collection.robot,
        camera=camera,
        calibrated_at=fields.pop("calibrated_at", timezone.now() - timedelta(days=1)),
        width=640,
        height=480,
        fx=600.5,
        fy=601.25,
        cx=320.0,
        cy=240.0,
        distortion_model=fields.pop("distortion_model", "plumb_bob"),
        distortion_coefficients=fields.pop("distortion_coefficients", [0.1, -0.2, 0, 0, 0.01]),
        extrinsics=EXTRINSICS,
        **fields,
    )


def upload_planned(collection, capture, *, seed, operator, scene=None, objects, calibrations):
    """Register an episode, record its scene, objects (in this order) and calibrations as the
    fleet sent them, then upload it (QA and what it triggers run at once)."""
    data = parquet_bytes(episode_table(frames=600, seed=seed))
    body = collection.register(data, operator=operator).json()
    Episode.objects.filter(pk=body["id"]).update(
        scene=scene,
        objects_handled=objects,
        camera_calibrations={k: str(v.id) for k, v in calibrations.items()},
    )
    assert put(body["upload"], data) == 200
    return complete(collection.operator.client, body["id"], capture)


def download(client, delivery, tmp_path):
    files = client.get(f"/api/v1/deliveries/{delivery.id}/files").json()
    for entry in files:
        response = link(client, delivery.id, entry["path"])
        assert response.status_code == 302, response.json()
        target = tmp_path / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(fetch(response["Location"]))
    return json.loads((tmp_path / "manifest.json").read_text())


@pytest.fixture
def heard():
    """What billing hears with order_delivered (the receiver's kwargs)."""
    calls = []

    def receiver(sender, order_id, **kwargs):
        calls.append({"order_id": order_id, **kwargs})

    signals.order_delivered.connect(receiver, dispatch_uid="test.plan.order_delivered")
    yield calls
    signals.order_delivered.disconnect(dispatch_uid="test.plan.order_delivered")


@pytest.fixture
def planned(fleet_operator, customer, django_capture_on_commit_callbacks, heard):
    """A planned order (2 environments x 2 objects, 4 distinct objects asked) collected at two
    sites: site A in scene "bench-left" with a calibrated wrist and top camera, objects mug
    then block; site B without scene, mug twice (3 distinct objects delivered)."""
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("1"),
        environments=2,
        objects_per_environment=2,
        distinct_objects=4,
        cells_planned=True,
        # no cell is ever short here (no shortfall job holds the delivery back): what the
        # delivery carries of a plan delivered short is what these tests read
        cell_min_share_percent=Decimal("0"),
    )
    a = Collection(fleet_operator, customer, order=order, environment_index=0)
    b = Collection(fleet_operator, customer, order=order, environment_index=1)
    for env in (0, 1):
        for slot in (0, 1):
            OrderCell.objects.create(
                order=order, environment_index=env, object_slot=slot, target_seconds=900
            )
    for collection, names in ((a, ["mug", "block", "coaster"]), (b, ["mug", "apple"])):
        for name in names:
            SiteObject.objects.create(
                fleet=collection.site.fleet, site=collection.site, name=name, category="kitchen"
            )
    scene = Scene.objects.create(
        fleet=a.site.fleet,
        site=a.site,
        name="bench-left",
        arranged_at=timezone.now() - timedelta(days=2),
    )
    wrist_a = calibration(a, "wrist")
    top_a = calibration(
        a, "top", distortion_model="none", distortion_coefficients=[], reference_frame="table"
    )
    wrist_b = calibration(
        b, "wrist", distortion_model="equidistant", distortion_coefficients=[0.1, 0.2, 0.3, 0.4]
    )
    capture = django_capture_on_commit_callbacks
    episodes = [
        upload_planned(
            a,
            capture,
            seed=1,
            operator="op-a",
            scene=scene,
            objects=["mug", "coaster"],
            calibrations={"wrist": wrist_a, "top": top_a},
        ),
        upload_planned(
            a,
            capture,
            seed=2,
            operator="op-a",
            scene=scene,
            objects=["block"],
            calibrations={"wrist": wrist_a, "top": top_a},
        ),
        upload_planned(
            b, capture, seed=3, operator="op-b", objects=["mug"], calibrations={"wrist": wrist_b}
        ),
        # Names robot A's calibration (not its robot's): not shipped, not in its column.
        upload_planned(
            b,
            capture,
            seed=4,
            operator="op-b",
            objects=["mug", "apple"],
            calibrations={"wrist": wrist_a},
        ),
    ]
    assert all(e.status == Episode.Status.ACCEPTED for e in episodes), [
        e.qa_failures for e in episodes
    ]
    delivery = Delivery.objects.get(order=order)
    assert delivery.status == Delivery.Status.READY, delivery.failure_reason
    return {
        "order": order,
        "a": a,
        "b": b,
        "scene": scene,
        "calibrations": {"wrist_a": wrist_a, "top_a": top_a, "wrist_b": wrist_b},
        "episodes": episodes,
        "delivery": delivery,
    }


def test_meta_episodes_carry_the_plan_columns_read_by_pyarrow_and_the_loader(
    planned, customer, tmp_path
):
    manifest = download(customer.client, planned["delivery"], tmp_path)
    # pyarrow: the columns and their types (strings, and a list of strings like `tasks`)
    table = pq.read_table(tmp_path / "meta/episodes/chunk-000/file-000.parquet")
    assert table.schema.field("scene_id").type == pa.string()
    assert table.schema.field("site").type == pa.string()
    assert table.schema.field("calibration_id").type == pa.string()
    assert table.schema.field("objects").type == pa.list_(pa.string())
    # the project's lerobot loader: the dataset loads and its invariants hold
    dataset = lerobot_loader.load(tmp_path)
    lerobot_loader.check_invariants(dataset)
    rows = dataset["episodes"]
    assert table.to_pylist() == rows
    c = planned["calibrations"]
    scene = str(planned["scene"].id)
    assert [(r["scene_id"], r["site"], r["objects"]) for r in rows] == [
        (scene, "site-01", ["mug", "coaster"]),
        (scene, "site-01", ["block"]),
        ("", "site-02", ["mug"]),
        ("", "site-02", ["mug", "apple"]),
    ]
    assert [json.loads(r["calibration_id"]) for r in rows] == [
        {"top": str(c["top_a"].id), "wrist": str(c["wrist_a"].id)},
        {"top": str(c["top_a"].id), "wrist": str(c["wrist_a"].id)},
        {"wrist": str(c["wrist_b"].id)},
        {},
    ]
    # the site's name and id appear in no column
    for site in (planned["a"].site, planned["b"].site):
        assert not any(site.name in json.dumps(r) or str(site.id) in json.dumps(r) for r in rows)
    assert "meta/calibrations.json" in {f["path"] for f in manifest["files"]}
    assert manifest["calibrations"] == {"path": "meta/calibrations.json", "count": 3}
    assert manifest["plan"] == {
        "environment_unit": "site",
        "environments": {"planned": 2, "delivered": 2},
        "distinct_objects": {"planned": 4, "delivered": 3},
    }


def test_the_calibrations_file_holds_each_referenced_calibration_by_id(planned, customer, tmp_path):
    download(customer.client, planned["delivery"], tmp_path)
    shipped = json.loads((tmp_path / "meta/calibrations.json").read_text())
    c = planned["calibrations"]
    assert set(shipped) == {str(c["wrist_a"].id), str(c["top_a"].id), str(c["wrist_b"].id)}
    wrist = shipped[str(c["wrist_a"].id)]
    assert wrist == {
        "camera": "wrist",
        "robot": "robot-01",
        "calibrated_at": c["wrist_a"].calibrated_at.isoformat(),
        "width": 640,
        "height": 480,
        "fx": 600.5,
        "fy": 601.25,
        "cx": 320.0,
        "cy": 240.0,
        "distortion_model": "plumb_bob",
        "distortion_coefficients": [0.1, -0.2, 0, 0, 0.01],
        "extrinsics": EXTRINSICS,
        "reference_frame": "robot_base",
    }
    assert shipped[str(c["top_a"].id)]["reference_frame"] == "table"
    assert shipped[str(c["top_a"].id)]["distortion_coefficients"] == []
    assert shipped[str(c["wrist_b"].id)]["robot"] == "robot-02"
    assert shipped[str(c["wrist_b"].id)]["distortion_model"] == "equidistant"
    robot_names = {planned["a"].robot.name, planned["b"].robot.name}
    text = json.dumps(shipped)
    assert not any(name in text for name in robot_names)
    assert str(planned["a"].robot.id) not in text


def test_the_card_shows_the_grid_the_coverage_and_the_calibrations(planned, customer, tmp_path):
    download(customer.client, planned["delivery"], tmp_path)
    card = (tmp_path / "README.md").read_text()
    assert "## Collection plan" in card
    assert "| Environments | 2 | 2 |" in card
    assert "| Distinct objects | 4 | 3 |" in card
    assert "| Environment | mug | block |" in card
    assert "| site-01 | 1 ep, 0.3 min | 1 ep, 0.3 min |" in card
    assert "| site-02 | 2 ep, 0.7 min | - |" in card
    assert "## Camera calibrations" in card and "`meta/calibrations.json`" in card
    c = planned["calibrations"]
    assert f"| {c['wrist_b'].id} | wrist | robot-02 |" in card
    assert "equidistant" in card


def test_billing_hears_the_distinct_environments_and_objects_delivered(planned, heard):
    assert heard == [
        {
            "order_id": planned["order"].id,
            "plan_delivered": {"environments": 2, "objects": 3},
            "signal": signals.order_delivered,
        }
    ]


def test_a_filtered_version_keeps_the_columns_and_the_order_s_site_labels(
    planned, customer, tmp_path, django_capture_on_commit_callbacks
):
    # when: the customer asks for a version without op-a (site A's episodes)
    with django_capture_on_commit_callbacks(execute=True):
        response = customer.client.post(
            f"/api/v1/orders/{planned['order'].id}/deliveries",
            {"filters": {"exclude_operators": ["op-a"]}, "reason": "site B only"},
            format="json",
        )
    assert response.status_code == 201, response.json()
    v2 = Delivery.objects.get(pk=response.json()["id"])
    assert v2.status == Delivery.Status.READY and v2.episodes == 2
    # then: site B is still site-02, only its calibration ships, the grid is v2's
    manifest = download(customer.client, v2, tmp_path)
    dataset = lerobot_loader.load(tmp_path)
    lerobot_loader.check_invariants(dataset)
    assert [(r["site"], r["objects"]) for r in dataset["episodes"]] == [
        ("site-02", ["mug"]),
        ("site-02", ["mug", "apple"]),
    ]
    shipped = json.loads((tmp_path / "meta/calibrations.json").read_text())
    assert list(shipped) == [str(planned["calibrations"]["wrist_b"].id)]
    assert manifest["plan"]["environments"] == {"planned": 2, "delivered": 1}
    card = (tmp_path / "README.md").read_text()
    assert "| site-02 | 2 ep, 0.7 min |" in card and "site-01" not in card


def test_an_older_order_delivers_as_before_with_empty_plan_columns(
    fleet_operator, customer, django_capture_on_commit_callbacks, heard, tmp_path
):
    # given: an order placed before the plan (cells_planned False), two episodes
    collection = Collection(fleet_operator, customer, target_hours="0.01")
    for seed in (1, 2):
        data = parquet_bytes(episode_table(frames=600, seed=seed))
        body = collection.register(data).json()
        assert put(body["upload"], data) == 200
        complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    delivery = Delivery.objects.get(order=collection.order)
    # when
    manifest = download(customer.client, delivery, tmp_path)
    # then: the columns are there, empty but for the site and the objects the fleet sent (in
    # the order it sent them: registration keeps it, the first is the episode's cell object)
    dataset = lerobot_loader.load(tmp_path)
    lerobot_loader.check_invariants(dataset)
    assert [
        (r["scene_id"], r["site"], r["objects"], r["calibration_id"]) for r in dataset["episodes"]
    ] == [("", "site-01", ["peg-8mm", "block"], "{}")] * 2
    assert not (tmp_path / "meta/calibrations.json").exists()
    assert "calibrations" not in manifest and "plan" not in manifest
    card = (tmp_path / "README.md").read_text()
    assert "## Collection plan" not in card and "## Camera calibrations" not in card
    assert heard == [{"order_id": collection.order.id, "signal": signals.order_delivered}]


# --- The pure rules (datasets/delivery_plan.py) -----------------------------------------------


def plan(site, scene="", objects=(), seconds="20"):
    return PlanEpisode(
        site_id=site,
        scene_id=scene,
        objects=tuple(objects),
        calibrations={},
        seconds=Decimal(seconds),
    )


def test_delivered_counts_by_site_or_scene_and_by_first_object_at_its_site():
    episodes = [
        plan("A", "s1", ["mug", "block"]),
        plan("A", "s2", ["mug"]),
        plan("B", "", ["mug"]),  # the same name at another site: another object
        plan("B", "", []),  # no object: counts in no object
    ]
    assert DeliveredPlan.of(episodes, "site") == DeliveredPlan(environments=2, objects=2)
    # by scene: an episode without a scene counts in no environment
    assert DeliveredPlan.of(episodes, "scene") == DeliveredPlan(environments=2, objects=2)
    assert DeliveredPlan.of(episodes[:1], "site").objects == 1  # "block" is not its cell


def test_pseudonyms_follow_first_appearance_and_never_change_with_more_keys():
    assert pseudonyms(["b", "a", "b", "c"], "site") == {
        "b": "site-01",
        "a": "site-02",
        "c": "site-03",
    }
    assert pseudonyms(range(120), "site")[119] == "site-120"
    assert pseudonyms(range(120), "site")[0] == "site-01"


def test_hostile_recorded_values_are_cleaned():
    assert clean_objects(["mug", 3, "", "mug", None, "cup"]) == ("mug", "cup")
    assert clean_objects("mug") == ()
    assert clean_calibrations({"wrist": "id", "top": 7, "": "x"}) == {"wrist": "id"}
    assert clean_calibrations(["wrist"]) == {}


def test_the_grid_of_a_scene_order_has_a_row_per_site_and_scene():
    episodes = [
        plan("A", "s1", ["mug"], "30"),
        plan("A", "s2", ["mug"], "90"),
        plan("A", "s2", ["cup"]),
        plan("B", "", ["mug"]),
    ]
    grid = PlanGrid.of(
        episodes,
        unit="scene",
        environments_planned=3,
        objects_planned=2,
        site_labels={"A": "site-01", "B": "site-02"},
        scene_labels={"s1": "scene s1", "s2": "scene s2"},
    )
    assert grid.environments == ("site-01, scene s1", "site-01, scene s2", "site-02, no scene")
    assert grid.objects == ("mug", "cup")
    assert grid.cell("site-01, scene s2", "mug") == GridCell(
        environment="site-01, scene s2", object="mug", episodes=1, minutes=Decimal("1.5")
    )
    assert grid.cell("site-02, no scene", "cup") is None
    assert grid.delivered == DeliveredPlan(environments=2, objects=3)
