"""Local checks before upload are the platform's own QA rules (one shared module, pure): a
defective recording imported with `import_recordings` (as `fleet-agent import` does, the
embodiment fetched from the catalog by the importer itself) is stopped on the fleet's machine
with the same reason codes and sentences the platform's QA gives the same file after upload,
and importing them pulls in neither Django nor boto3."""

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from datasets.models import Episode
from fleet_agent.client import ApiClient
from fleet_agent.importers import parse_mapping, read_recordings
from fleet_agent.importers.journal import Journal
from fleet_agent.importers.pipeline import import_recordings
from tests.fleet_agent.import_files import SCENE, WRIST, spec, write_aloha
from tests.fleet_agent.import_platform import import_collection, upload
from tests.fleet_agent.test_integration import platform as platform

ROOT = Path(__file__).resolve().parents[2]


def test_the_local_checks_and_every_reader_import_without_django_or_boto3():
    code = (
        "import sys\n"
        "import fleet_agent.importers.local_checks, fleet_agent.importers.lerobot\n"
        "import fleet_agent.importers.aloha_hdf5, fleet_agent.importers.ros2_mcap\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('django', 'boto3', 'botocore',"
        " 'rest_framework', 'marketplace', 'orders', 'fleets')]\n"
        "print(sorted(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _spoil(path: Path, defect: str) -> None:
    with h5py.File(path, "a") as handle:
        qpos = handle["observations/qpos"]
        if defect == "nan":
            qpos[10, 2] = np.nan
        elif defect == "frozen":
            values = qpos[()]
            values[:, 4] = values[0, 4]
            qpos[...] = values
        elif defect == "out_of_limits":  # the FR3's joint 4 is within [-3.04, -0.15] rad
            values = qpos[()]
            values[:, 3] = np.linspace(-2.0, 0.3, len(values))
            qpos[...] = values
        elif defect == "teleport":
            values = qpos[()]
            values[20:, 0] += 2.0  # 2 rad between two frames
            qpos[...] = values


DEFECTS = [
    ("nan", {}, "non_finite"),
    ("frozen", {}, "frozen_signal"),
    ("teleport", {}, "state_jump"),
    ("out_of_limits", {}, "state_out_of_limits"),
    (None, {"min_width": 128}, "video_resolution"),
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("defect", "camera", "reason"), DEFECTS)
def test_a_defective_recording_gets_the_same_reason_locally_and_from_the_platform(
    platform,
    fleet_operator,
    customer,
    django_capture_on_commit_callbacks,
    tmp_path,
    defect,
    camera,
    reason,
):
    path = tmp_path / "episode.hdf5"
    write_aloha(path, 60, seed=4)
    if defect:
        _spoil(path, defect)
    stream_spec = spec()
    for entry in stream_spec["cameras"]:
        entry["min_width"] = camera.get("min_width", entry["min_width"])
    collection = import_collection(fleet_operator, customer, stream_spec)
    mapping = parse_mapping(
        {
            "job": str(collection.job.id),
            "format": "aloha-hdf5",
            "operator": "op-7",
            "task_instruction": "insert the peg",
            "source": {"fps": 30, "cameras": {"cam_high": SCENE, "cam_wrist": WRIST}},
        }
    )
    client = ApiClient(platform, fleet_operator.raw_key)

    with Journal.open(tmp_path / "journal.sqlite3", mapping.job) as journal:
        summary = import_recordings(client, mapping, path, journal)  # stopped locally
    [recording] = read_recordings(path, mapping)
    episode = upload(collection, recording, django_capture_on_commit_callbacks)  # the platform's

    [outcome] = summary.outcomes
    assert outcome.status == "failed" and outcome.episode_id is None  # nothing was sent
    assert episode.status == Episode.Status.REJECTED
    assert reason in [failure["code"] for failure in episode.qa_failures]
    assert outcome.message == "local QA: " + "; ".join(
        f"{failure['code']}: {failure['message']}" for failure in episode.qa_failures
    )
