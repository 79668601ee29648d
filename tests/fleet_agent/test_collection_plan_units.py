"""The collection plan on the agent's side (issue 30) without a platform: calibration checks
and the simulated calibrations, the mapping's scene / objects / calibrations with per-recording
rules (good and hostile), the rules reaching the registration payload for recordings read by
each format's reader from files written with its own library, and the simulated fleets'
choices (objects, scenes, calibrations, the plan defects) against a small fake of the API
shapes in plan-semantics. Against the real platform: test_collection_plan_agent.py."""

import dataclasses
import json
import math
import re
from datetime import UTC, datetime, timedelta

import pytest

from fleet_agent import parse_config
from fleet_agent.calibration import (
    CalibrationError,
    check_calibration,
    look_at,
    same_calibration,
    simulated_calibration,
)
from fleet_agent.client import ApiError
from fleet_agent.config import ConfigError
from fleet_agent.episodes import make_episode
from fleet_agent.importers import MappingError, load_mapping, parse_mapping, read_recordings
from fleet_agent.importers.base import Recording, RecordingError
from fleet_agent.importers.mapping import CalibrationRef
from fleet_agent.importers.pipeline import (
    Target,
    check_scenes,
    registration_body,
    resolve_calibrations,
)
from fleet_agent.plan import (
    UNREGISTERED_OBJECT,
    CollectionPlan,
    choose_scene,
    needs_calibration,
    objects_cycle,
    robot_cameras,
)
from tests.fleet_agent.import_files import (
    MCAP_SOURCE,
    SCENE,
    WRIST,
    spec,
    write_aloha,
    write_lerobot,
    write_mcap,
)
from tests.fleet_agent.test_import_units import _write

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CAL_A = "0b0e0c1a-1111-4c4c-8a8a-000000000001"
CAL_B = "0b0e0c1a-1111-4c4c-8a8a-000000000002"


def calibration(**changes) -> dict:
    body = simulated_calibration("scene", width=640, height=480, calibrated_at=NOW, seed=3)
    return {**body, **changes}


# --- calibrations ---------------------------------------------------------------------------


@pytest.mark.parametrize("camera", ["scene", "wrist", "rgbd"])
@pytest.mark.parametrize(("width", "height"), [(320, 240), (640, 480), (1280, 720)])
def test_simulated_calibrations_are_plausible_and_pass_the_checks(camera, width, height):
    body = simulated_calibration(camera, width=width, height=height, calibrated_at=NOW, seed=7)
    assert check_calibration(body, now=NOW)["reference_frame"] == (
        "end_effector" if camera == "wrist" else "robot_base"
    )
    fov = math.degrees(2 * math.atan(width / 2 / body["fx"]))
    assert 60 <= fov <= 75 and abs(body["fy"] / body["fx"] - 1) < 0.01
    assert abs(body["cx"] - width / 2) < 5 and abs(body["cy"] - height / 2) < 5
    assert len(body["distortion_coefficients"]) == 5
    if camera != "wrist":  # it looks at the workspace in front of the base, from above
        rotation = [row[:3] for row in body["extrinsics"][:3]]
        forward = [rotation[i][2] for i in range(3)]
        assert forward[2] < 0 and body["extrinsics"][2][3] > 0.4


def test_look_at_is_a_rotation():
    matrix = look_at([1.0, 0.5, 0.7], [0.4, 0.0, 0.0])
    check_calibration(calibration(extrinsics=matrix), now=NOW)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"fxx": 1.0}, r"unknown key 'fxx' \(did you mean fx\?\); known keys: calibrated_at"),
        ({"fx": None}, "fx: a finite number"),
        ({"fx": float("nan")}, "fx: a finite number"),
        ({"fx": -1.0}, "fx, fy: focal lengths"),
        ({"cx": 9000.0}, "principal point"),
        ({"width": 0}, "width: a whole number"),
        ({"width": True}, "width: a whole number"),
        ({"calibrated_at": "2026-12-01T09:00:00"}, "calibrated_at: an ISO 8601 time with its zone"),
        ({"calibrated_at": "yesterday"}, "calibrated_at: an ISO 8601"),
        ({"calibrated_at": "2027-12-01T09:00:00Z"}, "is in the future"),
        ({"distortion_model": "fisheye"}, "distortion_model: 'fisheye' is not one of"),
        ({"distortion_coefficients": [0.1, 0.2]}, "5 finite numbers for plumb_bob"),
        (
            {"distortion_model": "equidistant", "distortion_coefficients": [0.0] * 5},
            "4 finite numbers for equidistant",
        ),
        ({"distortion_model": "none", "distortion_coefficients": []}, None),
        ({"extrinsics": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}, "extrinsics: a 4x4"),
        (
            {"extrinsics": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]},
            "last row must be 0 0 0 1",
        ),
        (
            {"extrinsics": [[2, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]},
            "not orthonormal",
        ),
        (  # unit columns, not at right angles (a sheared frame)
            {"extrinsics": [[1, 0.6, 0, 0], [0, 0.8, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]},
            "not orthonormal",
        ),
        (
            {"extrinsics": [[-1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]},
            "reflection",
        ),
        ({"reference_frame": ""}, "reference_frame"),
    ],
)
def test_a_calibration_the_platform_would_refuse_is_refused_naming_the_key(changes, message):
    body = calibration(**changes)
    if message is None:
        assert check_calibration(body, now=NOW)["distortion_coefficients"] == []
        return
    with pytest.raises(CalibrationError, match=message):
        check_calibration(body, now=NOW)


def test_a_missing_key_and_a_non_object_are_named():
    body = calibration()
    del body["extrinsics"]
    with pytest.raises(CalibrationError, match="extrinsics: required"):
        check_calibration(body, now=NOW)
    with pytest.raises(CalibrationError, match="a JSON object"):
        check_calibration([1, 2], now=NOW)


def test_the_same_calibration_is_recognised_in_the_platforms_listing():
    body = calibration()
    listed = {**body, "id": "x", "calibrated_at": NOW.isoformat().replace("+00:00", "Z")}
    assert same_calibration(listed, body)
    assert not same_calibration({**listed, "fx": body["fx"] + 0.5}, body)
    moved = [row[:] for row in body["extrinsics"]]
    moved[0][3] += 0.01
    assert not same_calibration({**listed, "extrinsics": moved}, body)


# --- mapping files --------------------------------------------------------------------------


def _calibration_file(folder, name="wrist.json", **changes):
    path = folder / name
    path.write_text(json.dumps(calibration(**changes)))
    return path


def test_the_mapping_carries_scene_objects_and_calibrations_with_per_recording_rules(tmp_path):
    (tmp_path / "cal").mkdir()
    _calibration_file(tmp_path / "cal", camera="wrist")
    mapping_path = tmp_path / "map.toml"
    mapping_path.write_text(
        f"""
job = "j"
format = "lerobot"
scene = "window"
objects = ["peg", "block", "peg"]
[calibrations]
scene = "{CAL_A}"
"observation.images.wrist" = {{ file = "cal/wrist.json" }}

[[recordings]]
episodes = [1, 2]
scene = "evening"
objects = ["socket"]

[[recordings]]
match = "episode_00000[2-3]"
operator = "op-9"
success = false
objects = ["gear"]
[recordings.calibrations]
scene = "{CAL_B}"
"""
    )
    mapping = load_mapping(mapping_path)
    assert mapping.scene == "window" and mapping.objects == ("peg", "block")
    wrist = mapping.calibrations["wrist"]
    assert wrist.file == str(tmp_path / "cal" / "wrist.json") and wrist.body["camera"] == "wrist"
    assert mapping.calibrations["scene"] == CalibrationRef(id=CAL_A)
    assert mapping.overrides("episode_000000") == {}
    assert mapping.overrides("episode_000001") == {"scene": "evening", "objects": ("socket",)}
    assert mapping.overrides("episode_000002") == {
        "scene": "evening",
        "objects": ("gear",),  # the later rule's
        "operator": "op-9",
        "success": False,
        "calibrations": {"scene": CalibrationRef(id=CAL_B)},
    }
    assert [camera for camera, _ in mapping.calibration_refs()] == ["scene", "wrist", "scene"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scnee": "x"}, r"unknown key 'scnee' \(did you mean scene\?\); known keys: .*objects"),
        ({"calibration": {}}, r"did you mean calibrations\?"),
        (
            {"recordings": [{"match": "*", "objcts": ["a"]}]},
            r"recordings\[0\]: unknown key 'objcts'",
        ),
        ({"recordings": [{"scene": "a"}]}, r"recordings\[0\]: match .* is required"),
        ({"recordings": [{"match": "*"}]}, r"recordings\[0\]: sets nothing"),
        ({"recordings": [{"match": 3, "scene": "a"}]}, r"recordings\[0\].match: a glob"),
        (
            {"format": "mcap", "recordings": [{"episodes": [1], "scene": "a"}]},
            "episode indices are LeRobot's; for mcap use match",
        ),
        ({"recordings": [{"episodes": [-1], "scene": "a"}]}, "episodes: a list of episode"),
        ({"recordings": {"match": "*"}}, r"recordings: \[\[recordings\]\] tables"),
        ({"scene": ""}, "scene: a name of 1-100"),
        ({"scene": "x" * 101}, "scene: a name of 1-100"),
        ({"objects": "peg"}, "objects: a list of object names"),
        ({"objects": ["peg", 3]}, r"objects\[1\]: a name"),
        ({"calibrations": {"wrist": "calib/wrist.json"}}, r"not a calibration id .*file = "),
        ({"calibrations": {"wrist": {"id": CAL_A, "file": "x"}}}, "either id or file"),
        ({"calibrations": {"wrist": {"path": "x"}}}, r"unknown key 'path'.*known keys: file, id"),
        ({"calibrations": {"wrist": 3}}, "a calibration id, or"),
        ({"calibrations": {"a.b": CAL_A}}, "is not a camera name"),
        (
            {"calibrations": {"wrist": {"file": "missing.json"}}},
            r"calibrations.wrist.file: .*missing",
        ),
        ({"success": "yes"}, "success: must be true or false"),
        (
            {"source": {"vidoe_codec": "av1"}},
            r"source: unknown key 'vidoe_codec' \(did you mean video_codec\?\); known keys: cam",
        ),
        (
            {"format": "aloha-hdf5", "source": {"fps": 50, "qvel": "x"}},
            r"did you mean qvel_key\?",
        ),
        (
            {"format": "mcap", "source": {"fps": 30, "state": {"topic": "/j", "name": ["a"]}}},
            r"source.state: unknown key 'name' \(did you mean names\?\)",
        ),
        (
            {"format": "mcap", "source": {"vectors": [{"key": "k", "topik": "/ft"}]}},
            r"source.vectors\[0\]: unknown key 'topik' \(did you mean topic\?\)",
        ),
    ],
)
def test_mapping_mistakes_name_the_key(tmp_path, data, message):
    with pytest.raises(MappingError, match=message):
        parse_mapping({"job": "j", "format": "lerobot", **data}, base=tmp_path)


def test_a_calibration_file_is_checked_when_the_mapping_is_read(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "nan.json").write_text(
        json.dumps(calibration()).replace('"fx": ', '"fx": NaN, "x": ')
    )
    _calibration_file(
        tmp_path, "skew.json", extrinsics=[[1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    )
    _calibration_file(tmp_path, "scene.json", camera="scene")
    (tmp_path / "huge.json").write_bytes(b" " * ((1 << 20) + 1))
    cases = {
        "bad.json": "is not JSON",
        "nan.json": "unknown key 'x'",
        "skew.json": r"wrist.file: skew.json: extrinsics: the rotation .* not orthonormal",
        "scene.json": "is camera 'scene'",
        "huge.json": "is over 1048576 bytes",
    }
    for name, message in cases.items():
        with pytest.raises(MappingError, match=message):
            parse_mapping(
                {"job": "j", "format": "mcap", "calibrations": {"wrist": {"file": name}}},
                base=tmp_path,
            )
    mapping_path = tmp_path / "m.toml"
    mapping_path.write_text(
        'job = "j"\nformat = "mcap"\n[calibrations]\nwrist = { file = "skew.json" }\n'
    )
    with pytest.raises(MappingError, match=rf"^{mapping_path}: calibrations.wrist.file"):
        load_mapping(mapping_path)


# --- the registration payload, per format -----------------------------------------------------


def _target(mapping) -> Target:
    job = {"id": "j", "site": "s1", "task_type": "peg-insertion", "stream_spec": spec()}
    ids = {
        ref: f"id-of-{ref.id or ref.file.rsplit('/', 1)[-1]}"
        for _, ref in mapping.calibration_refs()
    }
    return Target(job=job, robot_id="r1", calibration_ids=ids)


def _bodies(source, mapping) -> dict:
    target = _target(mapping)
    bodies = {}
    for item in read_recordings(source, mapping):
        assert not isinstance(item, RecordingError), item
        bodies[item.source_id] = registration_body(mapping, target, item)
    return bodies


def _plan_of(body) -> tuple:
    return (
        body.get("scene"),
        body["objects_handled"],
        body.get("camera_calibrations"),
        body["operator"],
    )


def _mapping(tmp_path, fmt, rules, source=None):
    _calibration_file(tmp_path, "wrist.json")
    return parse_mapping(
        {
            "job": "j",
            "format": fmt,
            "operator": "op-1",
            "scene": "window",
            "objects": ["peg"],
            "calibrations": {"scene": CAL_A, "wrist": {"file": "wrist.json"}},
            "recordings": rules,
            "source": source or {},
        },
        base=tmp_path,
    )


def test_lerobot_episodes_get_their_rules_values_in_the_registration(tmp_path):
    write_lerobot(tmp_path / "ds", [30, 31, 32], cameras=(SCENE, WRIST))
    mapping = _mapping(
        tmp_path,
        "lerobot",
        [
            {"episodes": [1], "scene": "evening", "objects": ["socket", "peg"]},
            {"episodes": [2], "calibrations": {"scene": CAL_B}, "operator": "op-2"},
        ],
        {"video_codec": "h264"},
    )
    bodies = _bodies(tmp_path / "ds", mapping)
    wrist = {"wrist": "id-of-wrist.json"}
    assert {k: _plan_of(b) for k, b in bodies.items()} == {
        "episode_000000": ("window", ["peg"], {"scene": f"id-of-{CAL_A}", **wrist}, "op-1"),
        "episode_000001": (
            "evening",
            ["socket", "peg"],
            {"scene": f"id-of-{CAL_A}", **wrist},
            "op-1",
        ),
        "episode_000002": ("window", ["peg"], {"scene": f"id-of-{CAL_B}", **wrist}, "op-2"),
    }


def test_aloha_files_are_matched_by_file_name(tmp_path):
    (tmp_path / "rec").mkdir()
    for name in ("day1_ep0.hdf5", "day2_ep0.hdf5"):
        write_aloha(tmp_path / "rec" / name, 35)
    mapping = _mapping(
        tmp_path,
        "aloha-hdf5",
        [{"match": "day2_*", "scene": "evening", "objects": ["block"]}],
        {"fps": 30, "video_codec": "h264", "cameras": {"cam_high": SCENE, "cam_wrist": WRIST}},
    )
    bodies = _bodies(tmp_path / "rec", mapping)
    assert bodies["day1_ep0.hdf5"]["scene"] == "window"
    assert bodies["day1_ep0.hdf5"]["objects_handled"] == ["peg"]
    assert bodies["day2_ep0.hdf5"]["scene"] == "evening"
    assert bodies["day2_ep0.hdf5"]["objects_handled"] == ["block"]


def test_mcap_bags_are_matched_by_path_globs(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / "bags" / folder).mkdir(parents=True)
    write_mcap(tmp_path / "bags" / "a" / "run_1.mcap", seconds=1.0)
    write_mcap(tmp_path / "bags" / "b" / "run_1.mcap", seconds=1.0, seed=1)
    mapping = _mapping(
        tmp_path,
        "mcap",
        [{"match": ["b/*"], "objects": [], "calibrations": {"wrist": CAL_B}}],
        {**MCAP_SOURCE, "video_codec": "h264"},
    )
    bodies = _bodies(tmp_path / "bags", mapping)
    assert bodies["a/run_1.mcap"]["objects_handled"] == ["peg"]
    assert bodies["a/run_1.mcap"]["camera_calibrations"]["wrist"] == "id-of-wrist.json"
    assert bodies["b/run_1.mcap"]["objects_handled"] == []
    assert bodies["b/run_1.mcap"]["camera_calibrations"]["wrist"] == f"id-of-{CAL_B}"


def test_an_episode_folders_sidecar_is_between_the_rules_and_the_defaults(tmp_path):
    folder = tmp_path / "rec"
    folder.mkdir()
    sidecar = {"scene": "shelf", "objects": ["mug"], "calibrations": {"scene": CAL_B}}
    for name in ("a", "b", "c"):
        _write(
            folder,
            name,
            cameras=("scene", "wrist"),
            sidecar=json.dumps(sidecar) if name != "a" else None,
        )
    mapping = _mapping(tmp_path, "episode-folder", [{"match": "c", "scene": "evening"}])
    bodies = _bodies(folder, mapping)
    assert _plan_of(bodies["a"])[:2] == ("window", ["peg"])  # the defaults
    assert _plan_of(bodies["b"])[:3] == (
        "shelf",
        ["mug"],
        {"scene": CAL_B, "wrist": "id-of-wrist.json"},
    )
    assert _plan_of(bodies["c"])[:2] == ("evening", ["mug"])  # the rule over the sidecar


def test_a_sidecar_never_names_a_file_to_read(tmp_path):
    for calibrations, message in [
        ({"wrist": {"file": "/etc/passwd"}}, "calibrations: {camera name: calibration id}"),
        ({"wrist": "nope"}, "is not a calibration id"),
        ([1], "calibrations: {camera name"),
    ]:
        folder = tmp_path / f"rec{len(message)}"
        folder.mkdir()
        _write(folder, "e", sidecar=json.dumps({"calibrations": calibrations}))
        (item,) = read_recordings(folder, parse_mapping({"job": "j", "format": "episode-folder"}))
        assert isinstance(item, RecordingError) and message in str(item)
    folder = tmp_path / "typo"
    folder.mkdir()
    _write(folder, "e", sidecar=json.dumps({"scnee": "x"}))
    (item,) = read_recordings(folder, parse_mapping({"job": "j", "format": "episode-folder"}))
    assert "unknown key 'scnee' (did you mean scene?)" in str(item)


def test_no_plan_fields_without_a_plan_in_the_mapping():
    mapping = parse_mapping({"job": "j", "format": "episode-folder", "operator": "op-1"})
    recording = Recording(source_id="x", episode=_episode_with_videos())
    body = registration_body(mapping, _target(mapping), recording)
    assert (
        body["objects_handled"] == [] and "scene" not in body and "camera_calibrations" not in body
    )


def _episode_with_videos():
    episode = make_episode(action_dim=8, seconds=1, seed=0)
    return dataclasses.replace(episode, videos={SCENE: b"s", WRIST: b"w"})


# --- resolving what the mapping names against the platform (a fake of the API shapes) -----


class FakePlatform:
    def __init__(self, calibrations=(), scenes=()):
        self.listed = list(calibrations)
        self.created = []
        self.scene_rows = None if scenes is None else list(scenes)

    def calibration(self, calibration_id):
        for row in self.listed:
            if row["id"] == calibration_id:
                return row
        raise ApiError(404, "not_found", "Not found.")

    def calibrations(self, robot=None, camera=None):
        return [c for c in self.listed if c["robot"] == robot and c["camera"] == camera]

    def create_calibration(self, body):
        row = {**body, "id": f"new-{len(self.created)}"}
        self.created.append(row)
        self.listed.append(row)
        return row

    def scenes(self, site=None):
        if self.scene_rows is None:
            raise ApiError(404, "not_found", "Not found.")
        return [s for s in self.scene_rows if s["site"] == site]


def test_a_calibration_file_is_registered_once_for_the_recording_robot(tmp_path):
    mapping = _mapping(tmp_path, "mcap", [])
    job = {"id": "j", "site": "s1", "stream_spec": spec()}
    platform = FakePlatform([{"id": CAL_A, "robot": "r1", "camera": "scene"}])
    first = resolve_calibrations(platform, mapping, job, "r1")
    again = resolve_calibrations(platform, mapping, job, "r1")
    assert len(platform.created) == 1 and first == again
    created = platform.created[0]
    assert created["robot"] == "r1" and created["camera"] == "wrist"
    assert created["fx"] == mapping.calibrations["wrist"].body["fx"]
    assert first[mapping.calibrations["wrist"]] == created["id"]
    assert first[mapping.calibrations["scene"]] == CAL_A


def test_a_calibration_of_another_robot_or_camera_or_an_unknown_camera_is_refused(tmp_path):
    job = {"id": "j", "site": "s1", "stream_spec": spec()}
    mapping = parse_mapping({"job": "j", "format": "mcap", "calibrations": {"scene": CAL_A}})
    for row, message in [
        ({"id": CAL_A, "robot": "r2", "camera": "scene"}, "of robot r2, not of camera 'scene' of"),
        ({"id": CAL_A, "robot": "r1", "camera": "wrist"}, "is of camera 'wrist'"),
    ]:
        with pytest.raises(MappingError, match=message):
            resolve_calibrations(FakePlatform([row]), mapping, job, "r1")
    with pytest.raises(MappingError, match=f"no calibration {re.escape(CAL_A)}"):
        resolve_calibrations(FakePlatform(), mapping, job, "r1")
    mapping = parse_mapping({"job": "j", "format": "mcap", "calibrations": {"rgbd": CAL_A}})
    with pytest.raises(MappingError, match=r"records no camera 'rgbd' .*its cameras: scene, wrist"):
        resolve_calibrations(FakePlatform(), mapping, job, "r1")


def test_a_scene_the_site_does_not_have_is_refused_naming_its_scenes():
    job = {"site": "s1"}
    scenes = [
        {"site": "s1", "name": "window", "active": True},
        {"site": "s1", "name": "old", "active": False},
        {"site": "s2", "name": "evening", "active": True},
    ]
    mapping = parse_mapping(
        {
            "job": "j",
            "format": "mcap",
            "scene": "window",
            "recordings": [{"match": "*", "scene": "evening"}],
        }
    )
    with pytest.raises(MappingError, match=r"scene 'evening' is not .* \(its scenes: window\)"):
        check_scenes(FakePlatform(scenes=scenes), mapping, job)
    check_scenes(
        FakePlatform(scenes=scenes),
        parse_mapping({"job": "j", "format": "mcap", "scene": "window"}),
        job,
    )
    with pytest.raises(MappingError, match="this platform has no scenes"):
        check_scenes(FakePlatform(scenes=None), mapping, job)


# --- the simulated fleets' choices ------------------------------------------------------------


def test_a_job_cycles_through_k_objects_offset_by_its_environment():
    objects = ["a", "b", "c"]
    assert objects_cycle(objects, 0, 2) == ["a", "b"]
    assert objects_cycle(objects, 1, 2) == ["c", "a"]  # not the first environment's pair
    assert objects_cycle(objects, 2, 1) == ["c"]
    assert objects_cycle(objects, 0, None) == ["a", "b", "c"]  # K unknown: all of them
    assert objects_cycle(objects, 1, None) == ["b", "c", "a"]
    assert objects_cycle(objects, 1, 5) == ["c", "a", "b"]
    assert objects_cycle([], 0, 2) == []


def test_a_job_takes_its_environments_scene_unless_another_job_of_the_order_has_it():
    scenes = ["s1", "s2", "s3"]
    assert choose_scene(scenes, 1, set()) == "s2"
    assert choose_scene(scenes, 1, {"s2"}) == "s3"
    assert choose_scene(scenes, 2, {"s3"}) == "s1"
    assert choose_scene(scenes, 0, {"s1", "s2", "s3"}) == "s1"
    assert choose_scene([], 0, set()) is None


def test_a_camera_is_calibrated_again_when_old_or_older_than_a_scene():
    week = timedelta(days=7)
    fresh = {"calibrated_at": (NOW - timedelta(days=1)).isoformat()}
    assert not needs_calibration(fresh, now=NOW, max_age=week, arranged=[NOW - timedelta(days=2)])
    assert needs_calibration(fresh, now=NOW, max_age=week, arranged=[NOW - timedelta(hours=1)])
    old = {"calibrated_at": (NOW - timedelta(days=8)).isoformat()}
    assert needs_calibration(old, now=NOW, max_age=week, arranged=[])
    assert needs_calibration(None, now=NOW, max_age=week, arranged=[])


def test_a_robots_cameras_are_its_embodiments_views_and_its_camera_add_ons():
    embodiments = {"fr3": {"cameras": [{"name": "scene", "min_width": 320, "min_height": 240}]}}
    sensors = {
        "wrist-camera": {"stream": {"kind": "camera", "name": "wrist"}},
        "force-torque": {"stream": {"kind": "vector", "key": "observation.force_torque"}},
    }
    robot = {"embodiment": "fr3", "sensors": ["force-torque", "wrist-camera"]}
    assert robot_cameras(robot, embodiments, sensors) == [("scene", 320, 240), ("wrist", 640, 480)]


PLAN_CONFIG = {
    "base_url": "http://127.0.0.1:1",
    "api_key": "k",
    "fleet": {"name": "F", "weekly_capacity_hours": 10, "payout_rate_per_hour": 1},
    "sites": [{"name": "S", "kind": "kitchen", "robots": [{"name": "r", "embodiment": "fr3"}]}],
}
SITES = {"s1": {"id": "s1"}}
ROBOT = {"id": "r1", "site": "s1", "embodiment": "fr3", "sensors": ["wrist-camera"]}
JOB = {
    "id": "j1",
    "order": "o1",
    "site": "s1",
    "environment_index": 1,
    "stream_spec": {"cameras": [{"key": SCENE, "name": "scene"}, {"key": WRIST, "name": "wrist"}]},
}


class FakeFleetApi:
    """The API shapes of plan-semantics, in memory."""

    def __init__(self, *, has_plan_api=True):
        self.has_plan_api = has_plan_api
        self.rows = {"objects": [], "scenes": [], "calibrations": []}
        self.patches = []

    def _add(self, kind, body):
        row = {"id": f"{kind}-{len(self.rows[kind])}", "active": True, **body}
        self.rows[kind].append(row)
        return row

    def site_objects(self, site=None):
        if not self.has_plan_api:
            raise ApiError(404, "not_found", "Not found.")
        return list(self.rows["objects"])

    def create_site_object(self, body):
        return self._add("objects", body)

    def update_site_object(self, object_id, body):
        self.patches.append((object_id, body))

    def scenes(self, site=None):
        return list(self.rows["scenes"])

    def create_scene(self, body):
        return self._add("scenes", body)

    def embodiments(self):
        return {"fr3": {"cameras": [{"name": "scene", "min_width": 320, "min_height": 240}]}}

    def sensors(self):
        return {"wrist-camera": {"stream": {"kind": "camera", "name": "wrist"}}}

    def calibrations(self, robot=None, camera=None):
        return [
            c for c in self.rows["calibrations"] if (c["robot"], c["camera"]) == (robot, camera)
        ]

    def create_calibration(self, body):
        check_calibration({k: v for k, v in body.items() if k not in ("robot", "camera")})
        return self._add("calibrations", body)


def _plan(defects=(), api=None, **site):
    config = dict(PLAN_CONFIG)
    config["sites"] = [{**PLAN_CONFIG["sites"][0], **site}]
    parsed = parse_config(config)
    api = api or FakeFleetApi()
    plan = CollectionPlan(parsed, api, list(defects))
    plan.register(SITES, {"s1": parsed.sites[0]}, [ROBOT])
    return plan, api


def test_registration_finds_or_creates_the_sites_objects_scenes_and_calibrations():
    plan, api = _plan()
    assert [(o["name"], o["category"], o["size_class"]) for o in api.rows["objects"]] == [
        ("mug", "mug", "small"),
        ("plate", "dish", "medium"),
        ("sponge", "sponge", "small"),
    ]
    assert [s["name"] for s in api.rows["scenes"]] == ["arrangement-1", "arrangement-2"]
    arranged = datetime.fromisoformat(api.rows["scenes"][0]["arranged_at"])
    calibrated = [datetime.fromisoformat(c["calibrated_at"]) for c in api.rows["calibrations"]]
    assert [(c["camera"], c["width"]) for c in api.rows["calibrations"]] == [
        ("scene", 320),
        ("wrist", 640),
    ]
    assert all(arranged < moment <= datetime.now(UTC) for moment in calibrated)
    assert plan.registered == {"objects": 3, "scenes": 2, "calibrations": 2}
    again, _ = _plan(api=api)  # a second start: found by name, nothing created again
    assert again.registered == {} and len(api.rows["calibrations"]) == 2
    assert again.calibrations[("r1", "wrist")]["id"] == api.rows["calibrations"][1]["id"]


def test_configured_objects_are_registered_with_their_details_and_changes_patched():
    api = FakeFleetApi()
    _plan(api=api, objects=["cup", {"name": "pan", "category": "Cookware", "size_class": "large"}])
    assert [(o["name"], o["category"]) for o in api.rows["objects"]] == [
        ("cup", ""),
        ("pan", "cookware"),
    ]
    _plan(api=api, objects=["cup", {"name": "pan", "category": "cookware", "notes": "cast iron"}])
    assert api.patches == [("objects-1", {"size_class": "", "notes": "cast iron"})]


def test_each_episode_names_its_scene_object_and_the_calibrations_in_force():
    plan, api = _plan()
    fields = [plan.episode_fields(JOB, ROBOT, None)[0] for _ in range(4)]
    assert {f["scene"] for f in fields} == {"arrangement-2"}  # environment 1's
    assert [f["objects_handled"] for f in fields] == [["plate"], ["sponge"], ["mug"], ["plate"]]
    ids = {c["camera"]: c["id"] for c in api.rows["calibrations"]}
    assert all(f["camera_calibrations"] == ids for f in fields)
    other = {**JOB, "id": "j2", "environment_index": 0, "plan": {"objects_per_environment": 2}}
    second = plan.episode_fields(other, ROBOT, None)[0]
    assert second["scene"] == "arrangement-1" and second["objects_handled"] == ["mug"]
    shortfall = {**JOB, "id": "j3"}  # environment 1 again: its scene again
    assert plan.episode_fields(shortfall, ROBOT, None)[0]["scene"] == "arrangement-2"
    another = {**JOB, "id": "j4", "order": "o2", "environment_index": 0}
    assert plan.episode_fields(another, ROBOT, None)[0]["scene"] == "arrangement-1"
    third = {**JOB, "id": "j5", "environment_index": 2}  # every scene has an environment
    assert plan.episode_fields(third, ROBOT, None)[0]["scene"] == "arrangement-1"
    # order o3: environment 2 would take arrangement-1, which environment 0 has
    first = {**JOB, "id": "j6", "order": "o3", "environment_index": 0}
    later = {**JOB, "id": "j7", "order": "o3", "environment_index": 2}
    assert plan.episode_fields(first, ROBOT, None)[0]["scene"] == "arrangement-1"
    assert plan.episode_fields(later, ROBOT, None)[0]["scene"] == "arrangement-2"
    again = {**JOB, "id": "j8", "order": "o3", "environment_index": 2}  # its shortfall's job
    assert plan.episode_fields(again, ROBOT, None)[0]["scene"] == "arrangement-2"


def test_an_object_qa_refuses_for_a_job_leaves_its_cycle():
    plan, _ = _plan()
    job = {**JOB, "environment_index": 0}
    assert plan.episode_fields(job, ROBOT, None)[1] == "mug"
    plan.refused("j1", "plate", ["object_not_in_plan"])
    plan.refused("j1", "mug", ["video_frozen"])  # not about the object
    assert [plan.episode_fields(job, ROBOT, None)[1] for _ in range(3)] == [
        "sponge",
        "mug",
        "sponge",
    ]


def test_the_plan_defects_are_each_sent_once_in_their_own_episode():
    plan, api = _plan(["object_not_in_plan", "stale_calibration", "uncalibrated_camera"])
    assert [c["camera"] for c in api.rows["calibrations"]] == ["wrist"]  # scene held back
    assert plan.next_defect(JOB, ROBOT) == "uncalibrated_camera"  # first: nothing else goes
    fields, _ = plan.episode_fields(JOB, ROBOT, "uncalibrated_camera")
    assert set(fields["camera_calibrations"]) == {"wrist"}
    plan.sent("uncalibrated_camera")
    assert [c["camera"] for c in api.rows["calibrations"]] == ["wrist", "scene"]

    assert plan.next_defect(JOB, ROBOT) == "object_not_in_plan"
    fields, handled = plan.episode_fields(JOB, ROBOT, "object_not_in_plan")
    assert fields["objects_handled"] == [UNREGISTERED_OBJECT] == [handled]
    assert UNREGISTERED_OBJECT not in {o["name"] for o in api.rows["objects"]}
    plan.sent("object_not_in_plan")

    assert plan.next_defect(JOB, ROBOT) == "stale_calibration"
    fields, _ = plan.episode_fields(JOB, ROBOT, "stale_calibration")
    stale = api.rows["calibrations"][-1]
    assert fields["camera_calibrations"]["scene"] == stale["id"] and stale["camera"] == "scene"
    when = datetime.fromisoformat(stale["calibrated_at"])
    arranged = datetime.fromisoformat(api.rows["scenes"][1]["arranged_at"])
    assert when < arranged and datetime.now(UTC) - when > timedelta(days=365)
    plan.sent("stale_calibration")
    assert plan.next_defect(JOB, ROBOT) is None
    clean = plan.episode_fields(JOB, ROBOT, None)[0]["camera_calibrations"]
    assert clean["scene"] != stale["id"]


def test_a_held_camera_is_calibrated_before_a_clean_episode_of_its_robot():
    plan, api = _plan(["uncalibrated_camera"])
    no_cameras = {**JOB, "stream_spec": {}}  # this job cannot carry the defect
    assert plan.next_defect(no_cameras, ROBOT) is None
    plan.episode_fields(no_cameras, ROBOT, None)
    assert {c["camera"] for c in api.rows["calibrations"]} == {"scene", "wrist"}
    assert plan.next_defect(JOB, ROBOT) is None  # nothing held any more: it cannot be made


def test_a_platform_without_the_plan_api_gets_objects_only():
    plan, _ = _plan(api=FakeFleetApi(has_plan_api=False))
    assert not plan.available
    fields, handled = plan.episode_fields(JOB, ROBOT, None)
    assert fields == {"objects_handled": ["plate"]} and handled == "plate"


def test_unknown_plan_defects_are_refused():
    with pytest.raises(ValueError, match="Unknown plan defect 'wrong_object'"):
        CollectionPlan(parse_config(PLAN_CONFIG), FakeFleetApi(), ["wrong_object"])


@pytest.mark.parametrize(
    ("site", "collection", "message"),
    [
        ({"objects": [{"nme": "x"}]}, {}, r"objects\[0\]: unknown key"),
        ({"objects": [{"name": "x", "size_class": "huge"}]}, {}, "size_class: 'huge'"),
        ({"objects": ["x", "x"]}, {}, "object names must be unique"),
        ({"scenes": []}, {}, "scenes: one or more"),
        ({"scenes": [{"name": "a", "lightning": "x"}]}, {}, r"scenes\[0\]: unknown key"),
        ({"scenes": [{"name": "a", "arranged_at": "monday"}]}, {}, "arranged_at: a date-time"),
        ({"scenes": [{"name": "a"}, {"name": "a"}]}, {}, "scene names must be unique"),
        ({}, {"plan_defects": ["wrong"]}, "plan_defects: 'wrong' is not one of"),
        ({}, {"recalibrate_days": 0}, "recalibrate_days"),
    ],
)
def test_plan_config_mistakes_name_the_key(site, collection, message):
    config = {
        **PLAN_CONFIG,
        "sites": [{**PLAN_CONFIG["sites"][0], **site}],
        "collection": collection,
    }
    with pytest.raises(ConfigError, match=message):
        parse_config(config)


def test_configured_scenes_keep_their_arrangement_time():
    moment = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
    config = {
        **PLAN_CONFIG,
        "sites": [
            {
                **PLAN_CONFIG["sites"][0],
                "scenes": [{"name": "a", "arranged_at": moment, "lighting": "lamp"}],
            }
        ],
    }
    site = parse_config(config).sites[0]
    assert [(s.name, s.arranged_at, s.lighting) for s in site.scenes] == [("a", moment, "lamp")]
    api = FakeFleetApi()
    CollectionPlan(parse_config(config), api, []).register(SITES, {"s1": site}, [ROBOT])
    assert api.rows["scenes"][0]["arranged_at"] == moment.isoformat()


def test_the_readmes_calibration_file_and_the_example_fleet_are_valid():
    from pathlib import Path

    from fleet_agent import load_config

    readme = (Path(__file__).parents[2] / "fleet_agent" / "README.md").read_text()
    example = readme.split("```json\n", 1)[1].split("```", 1)[0]
    assert check_calibration(json.loads(example), now=NOW)["reference_frame"] == "end_effector"
    config = load_config(
        Path(__file__).parents[2] / "fleet_agent" / "example-fleet.toml",
        environ={"FLEET_API_KEY": "k"},
    )
    bench = config.sites[0]
    assert [s.name for s in bench.scenes] == ["window-bench", "board-bench"]
    assert bench.object_specs[2].category == "connector" and bench.objects[0] == "peg-8mm"
    assert [s.name for s in config.sites[1].scenes] == ["arrangement-1", "arrangement-2"]


class FakePlatformForEpisodes(FakeFleetApi):
    """Enough of the fleet API for `collect_and_upload`: registrations are kept."""

    def __init__(self):
        super().__init__()
        self.registered = []

    def embodiments(self):
        return {
            "fr3": {
                "action_dim": 8,
                "state_limits": [],
                "cameras": [{"name": "scene", "min_width": 64, "min_height": 48}],
            }
        }

    def register_episode(self, job_id, body, key):
        self.registered.append(body)
        videos = [
            {"camera_key": v["camera_key"], "method": "single", "url": "v", "headers": {}}
            for v in body["videos"]
        ]
        upload = {"method": "single", "url": "p", "headers": {}, "videos": videos}
        return {"id": f"e{len(self.registered)}", "upload": upload}

    def put_bytes(self, url, data, headers):
        from fleet_agent.client import Response

        return Response(200, {"etag": '"x"'}, b"")

    def complete_episode(self, episode_id, parts=None, videos=None):
        return {"id": episode_id, "status": "uploaded"}


def test_the_agents_registrations_carry_the_plan_and_its_defects():
    from fleet_agent import FleetAgent

    config = {
        **PLAN_CONFIG,
        "collection": {"episode_seconds": [1, 1], "seed": 3, "fps": 10},
    }
    api = FakePlatformForEpisodes()
    agent = FleetAgent(
        parse_config(config), client=api, plan_defects=["object_not_in_plan", "uncalibrated_camera"]
    )
    site = parse_config(config).sites[0]
    robot = {**ROBOT, "end_effector": "parallel_gripper", "active": True}
    agent.sites, agent.site_configs, agent.robots = SITES, {"s1": site}, [robot]
    agent.plan.register(SITES, {"s1": site}, [ROBOT])
    job = {
        **JOB,
        "embodiment": "fr3",
        "end_effector": "parallel_gripper",
        "task_type": "peg-insertion",
        "stream_spec": {
            "cameras": [
                {"key": SCENE, "name": "scene", "min_width": 64, "min_height": 48},
                {"key": WRIST, "name": "wrist", "min_width": 64, "min_height": 48},
            ]
        },
    }
    for _ in range(3):
        agent.collect_and_upload(job, missing_seconds=100)

    first, second, third = api.registered
    assert set(first["camera_calibrations"]) == {"wrist"}  # uncalibrated_camera: no scene one
    assert second["objects_handled"] == [UNREGISTERED_OBJECT]
    ids = {c["camera"]: c["id"] for c in api.rows["calibrations"]}
    assert second["camera_calibrations"] == third["camera_calibrations"] == ids
    assert {b["scene"] for b in api.registered} == {"arrangement-2"}
    assert first["objects_handled"] == ["plate"] and third["objects_handled"] == ["sponge"]
    assert agent.summary.defective_uploaded == 2
    assert [u.defect for u in agent._uploads.values()] == [
        "uncalibrated_camera",
        "object_not_in_plan",
        None,
    ]
    assert agent.summary.plan_registered == {"objects": 3, "scenes": 2, "calibrations": 2}

    # QA refuses the clean episode's object: the job leaves it out from then on
    agent._record_verdict(
        "e3",
        agent._uploads["e3"],
        {"status": "rejected", "qa_failures": [{"code": "cell_full"}]},
    )
    for _ in range(4):
        agent.collect_and_upload(job, missing_seconds=100)
    later = [b["objects_handled"][0] for b in api.registered[3:]]
    assert sorted(later) == ["mug", "mug", "plate", "plate"]  # no sponge any more


def test_on_start_an_old_calibration_is_replaced_and_a_retired_object_reactivated():
    _, api = _plan()
    for row in api.rows["calibrations"]:
        row["calibrated_at"] = (datetime.now(UTC) - timedelta(days=8)).isoformat()
    for row in api.rows["scenes"]:  # arranged before: only the age counts
        row["arranged_at"] = (datetime.now(UTC) - timedelta(days=30)).isoformat()
    api.rows["objects"][1]["active"] = False

    again, _ = _plan(api=api)

    assert again.registered == {"calibrations": 2}
    assert again.calibrations[("r1", "scene")]["id"] == api.rows["calibrations"][2]["id"]
    assert api.patches == [("objects-1", {"active": True})]
