"""The LeRobot v3.0 writer's output loads the way lerobot does and round-trips the values."""

import io
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from datasets.episode_format import episode_table, parquet_bytes
from datasets.lerobot import LeRobotWriter
from tests.datasets import lerobot_loader

FPS, DIM = 30, 8
NAMES = [f"joint_{i}" for i in range(DIM)]


def write(tmp_path, episodes, **kwargs):
    writer = LeRobotWriter(
        root=tmp_path,
        fps=FPS,
        robot_type="franka-fr3",
        state_names=NAMES,
        action_names=NAMES,
        **kwargs,
    )
    for columns, task in episodes:
        writer.add_episode(io.BytesIO(parquet_bytes(columns)), task=task)
    return writer.finish()


def test_a_written_dataset_loads_and_round_trips(tmp_path):
    # given: three uploaded episodes, two tasks, one with timestamp jitter within QA tolerance
    uploads = [
        (episode_table(frames=120, seed=1), "insert the peg"),
        (episode_table(frames=75, seed=2), "wipe the table"),
        (episode_table(frames=200, seed=3), "insert the peg"),
    ]
    uploads[1][0]["timestamp"] = uploads[1][0]["timestamp"] + np.float32(0.003)
    # when
    files = write(tmp_path, uploads)
    dataset = lerobot_loader.load(tmp_path)
    # then
    lerobot_loader.check_invariants(dataset)
    assert "meta/info.json" in files and "data/chunk-000/file-000.parquet" in files
    assert dataset["info"]["total_frames"] == 395 and dataset["info"]["total_episodes"] == 3
    assert list(dataset["tasks"].index) == ["insert the peg", "wipe the table"]
    assert list(dataset["tasks"]["task_index"]) == [0, 1]
    assert dataset["tasks"].index.name == "task"
    state = np.stack(dataset["data"].column("observation.state").to_numpy(zero_copy_only=False))
    action = np.stack(dataset["data"].column("action").to_numpy(zero_copy_only=False))
    for episode, (columns, _) in zip(dataset["episodes"], uploads, strict=True):
        rows = slice(episode["dataset_from_index"], episode["dataset_to_index"])
        assert np.array_equal(state[rows], columns["observation.state"])
        assert np.array_equal(action[rows], columns["action"])
    assert dataset["episodes"][2]["tasks"] == ["insert the peg"]
    info = dataset["info"]
    assert info["features"]["action"] == {"dtype": "float32", "shape": [DIM], "names": NAMES}
    assert info["video_path"] is None and info["codebase_version"] == "v3.0"


def test_stats_match_the_data(tmp_path):
    write(tmp_path, [(episode_table(frames=500, seed=s), "t") for s in range(3)])
    dataset = lerobot_loader.load(tmp_path)
    stats = dataset["stats"]
    state = np.stack(dataset["data"].column("observation.state").to_numpy(zero_copy_only=False))
    assert np.allclose(stats["observation.state"]["min"], state.min(axis=0))
    assert np.allclose(stats["observation.state"]["max"], state.max(axis=0))
    assert np.allclose(stats["observation.state"]["mean"], state.mean(axis=0), atol=1e-6)
    assert np.allclose(stats["observation.state"]["std"], state.std(axis=0), atol=1e-5)
    assert np.allclose(
        stats["observation.state"]["q50"], np.quantile(state, 0.5, axis=0), atol=1e-6
    )
    assert stats["index"]["count"] == [1500] and stats["index"]["max"] == [1499]


def test_quantiles_from_the_bounded_reservoir_stay_close(tmp_path):
    write(
        tmp_path, [(episode_table(frames=3000, seed=s), "t") for s in range(4)], reservoir_size=2000
    )
    dataset = lerobot_loader.load(tmp_path)
    action = np.stack(dataset["data"].column("action").to_numpy(zero_copy_only=False))
    for key, q in (("q01", 0.01), ("q50", 0.5), ("q99", 0.99)):
        assert np.allclose(
            dataset["stats"]["action"][key], np.quantile(action, q, axis=0), atol=0.08
        )


def test_data_files_roll_over_at_the_size_limit(tmp_path):
    files = write(
        tmp_path,
        [(episode_table(frames=400, seed=s), "t") for s in range(6)],
        data_file_size_limit=1,
    )
    data_files = [f for f in files if f.startswith("data/")]
    assert len(data_files) == 6
    dataset = lerobot_loader.load(tmp_path)
    lerobot_loader.check_invariants(dataset)
    assert [e["data/file_index"] for e in dataset["episodes"]] == [0, 1, 2, 3, 4, 5]
    for relative in data_files:  # lerobot writes one row group per episode
        assert pq.ParquetFile(tmp_path / relative).num_row_groups == 1


def test_no_column_beyond_the_declared_features(tmp_path):
    extra = episode_table(
        frames=60, extra_columns={"observation.force": np.zeros(60, dtype=np.float32)}
    )
    write(tmp_path, [(extra, "t")])
    info = json.loads((tmp_path / "meta/info.json").read_text())
    columns = pq.read_schema(tmp_path / "data/chunk-000/file-000.parquet").names
    assert set(columns) == set(info["features"])


def test_an_older_version_is_refused_like_lerobot_does(tmp_path):
    write(tmp_path, [(episode_table(frames=30), "t")])
    info = json.loads((tmp_path / "meta/info.json").read_text())
    (tmp_path / "meta/info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(lerobot_loader.BackwardCompatibilityError):
        lerobot_loader.load(tmp_path)


def test_an_empty_dataset_is_refused(tmp_path):
    writer = LeRobotWriter(
        root=tmp_path, fps=FPS, robot_type="x", state_names=NAMES, action_names=NAMES
    )
    with pytest.raises(ValueError, match="at least one episode"):
        writer.finish()
