import hashlib
import io
import json
import urllib.request
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from datasets import storage
from datasets.episode_format import episode_table, parquet_bytes
from datasets.lerobot import LeRobotWriter
from datasets.packaging import DatasetCardFacts, Provenance, upload_tree, write_delivery_files

NAMES = [f"joint_{i}" for i in range(8)]
FACTS = DatasetCardFacts(
    title="Peg insertion, Franka FR3",
    task="Peg-in-hole insertion",
    embodiment="Franka FR3",
    robot_type="franka-fr3",
    fps=30,
    episodes=2,
    frames=240,
    hours=Decimal("0.002"),
    environments=2,
    objects=5,
    operators=3,
    success_rate=0.5,
    qa_accepted=2,
    qa_rejected=1,
    qa_rejections_by_reason={"timestamp_gap": 1},
    provenance=(Provenance("Bay 1", "Kitchen A", "kitchen", 2, Decimal("0.002")),),
    collected_from=datetime(2026, 11, 1, tzinfo=UTC),
    collected_to=datetime(2026, 11, 20, tzinfo=UTC),
    order_id="abc",
)


def written(tmp_path):
    writer = LeRobotWriter(
        root=tmp_path, fps=30, robot_type="franka-fr3", state_names=NAMES, action_names=NAMES
    )
    for seed in range(2):
        writer.add_episode(
            io.BytesIO(parquet_bytes(episode_table(frames=120, seed=seed))), task="insert"
        )
    writer.finish()
    return write_delivery_files(tmp_path, FACTS, extra={"order": "abc"})


def test_the_manifest_lists_every_file_but_itself_with_size_and_sha256(tmp_path):
    manifest = written(tmp_path)
    listed = {f["path"]: f for f in manifest["files"]}
    on_disk = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    assert set(listed) == on_disk - {"manifest.json"}
    for path, entry in listed.items():
        data = (tmp_path / path).read_bytes()
        assert entry["size"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest


def test_the_card_states_the_facts(tmp_path):
    written(tmp_path)
    card = (tmp_path / "README.md").read_text()
    for fact in (
        "Peg-in-hole insertion",
        "| Episodes | 2 |",
        "50.0%",
        "timestamp_gap: 1",
        "Kitchen A",
        "LeRobot v3.0",
        "License",
    ):
        assert fact in card


@pytest.mark.usefixtures("s3")
def test_uploaded_bytes_match_the_manifest(tmp_path):
    manifest = written(tmp_path)
    keys = upload_tree(tmp_path, "deliveries/o1/d1")
    assert keys[-1] == "deliveries/o1/d1/manifest.json"
    for entry in manifest["files"]:
        url = storage.presigned_get(key=f"deliveries/o1/d1/{entry['path']}", expires_in=60)
        with urllib.request.urlopen(url, timeout=10) as response:
            assert hashlib.sha256(response.read()).hexdigest() == entry["sha256"]
