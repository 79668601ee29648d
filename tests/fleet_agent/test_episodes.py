"""The agent's synthetic episodes: good ones pass the platform's QA, defective ones fail it."""

import io
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datasets.qa_checks import EpisodeExpectation, check_episode_file
from datasets.qa_content import ContentThresholds
from fleet_agent.episodes import (
    DEFECTS,
    GRIPPER_MAX_M,
    JOINT_LIMIT_RAD,
    MAX_JOINT_SPEED,
    choose_defect,
    make_episode,
)

EXPECTED_REASON = {
    "nan": "non_finite",
    "timestamp_gap": "timestamp_gap",
    "vector_length": "vector_length",
    # content defects (issue 16); without declared limits a 1e6 rad reading is a jump
    "out_of_limits": "state_jump",
    "state_jump": "state_jump",
    "idle": "idle_episode",
    "frozen": "frozen_signal",
    "random_actions": "action_state_mismatch",
}


def qa(episode, action_dim=None):
    expected = EpisodeExpectation(
        size=episode.size_bytes,
        sha256_hex=episode.sha256,
        fps=episode.fps,
        action_dim=action_dim or episode.action_dim,
        content=ContentThresholds(),
    )
    return check_episode_file(io.BytesIO(episode.data), expected)


def columns(episode):
    table = pq.read_table(io.BytesIO(episode.data))
    state = np.array(table.column("observation.state").to_pylist(), dtype=np.float64)
    action = np.array(table.column("action").to_pylist(), dtype=np.float64)
    return table, state, action


@pytest.mark.parametrize(
    ("dim", "fps", "seconds"), [(8, 30, 12.0), (7, 30, 3.0), (14, 50, 20.0), (23, 10, 1.5)]
)
def test_good_episodes_pass_qa(dim, fps, seconds):
    for seed in range(3):
        episode = make_episode(action_dim=dim, fps=fps, seconds=seconds, seed=seed)
        result = qa(episode)
        assert result.passed, result.failures
        assert result.frames == round(seconds * fps) == episode.frames
        assert float(result.duration_seconds) == pytest.approx(seconds, abs=1 / fps)


def test_the_file_has_the_documented_schema():
    episode = make_episode(action_dim=8, fps=30, seconds=2, seed=1)
    table, _, _ = columns(episode)
    assert table.column_names == ["observation.state", "action", "timestamp", "frame_index"]
    for name in ("observation.state", "action"):
        vector = table.schema.field(name).type
        assert pa.types.is_fixed_size_list(vector) and vector.list_size == 8
        assert vector.value_type == pa.float32()
    assert table.schema.field("timestamp").type == pa.float32()
    assert table.schema.field("frame_index").type == pa.int64()
    assert table.column("frame_index").to_pylist() == list(range(60))
    assert table.column("timestamp").to_pylist()[:3] == pytest.approx([0, 1 / 30, 2 / 30])


def test_trajectories_are_smooth_within_limits_and_actions_match_velocity():
    fps = 30
    episode = make_episode(action_dim=8, fps=fps, seconds=60, seed=7)
    _, state, action = columns(episode)
    joints, gripper = state[:, :-1], state[:, -1]
    # within the joint limits, the gripper between closed and fully open
    assert np.all(np.abs(joints) <= JOINT_LIMIT_RAD)
    assert np.all((gripper >= 0) & (gripper <= GRIPPER_MAX_M))
    # smooth: joint speeds bounded, no jumps between frames (noise aside)
    speed = np.abs(np.diff(action[:, :-1], axis=0)) * fps
    assert speed.max() <= MAX_JOINT_SPEED * 1.05
    accel = np.abs(np.diff(action[:, :-1], n=2, axis=0)) * fps * fps
    assert accel.max() < 10  # rad/s^2: no teleporting
    # the joints actually move
    assert np.ptp(joints, axis=0).min() > 0.1
    # velocity-consistent: the command is where the joint is one frame later
    assert np.abs(action[:-1] - state[1:]).max() < 0.01
    velocity_from_state = np.diff(state[:, :-1], axis=0) * fps
    velocity_from_action = (action[:-1, :-1] - state[:-1, :-1]) * fps
    assert np.corrcoef(velocity_from_state.ravel(), velocity_from_action.ravel())[0, 1] > 0.9


def test_episodes_differ_by_seed_and_repeat_with_the_same_seed():
    a = make_episode(action_dim=6, seconds=2, seed=1)
    b = make_episode(action_dim=6, seconds=2, seed=2)
    assert a.sha256 != b.sha256
    assert make_episode(action_dim=6, seconds=2, seed=1).sha256 == a.sha256


@pytest.mark.parametrize("defect", DEFECTS)
def test_defective_episodes_fail_qa_with_a_reason(defect):
    for seed in range(5):
        episode = make_episode(action_dim=8, fps=30, seconds=5, seed=seed, defect=defect)
        result = qa(episode)
        assert not result.passed
        codes = {failure.code for failure in result.failures}
        assert EXPECTED_REASON[defect] in codes, result.failures
        assert all(failure.message for failure in result.failures)


def test_a_wrong_length_is_caught_even_for_one_dimensional_bodies():
    episode = make_episode(action_dim=1, seconds=2, seed=0, defect="vector_length")
    assert "vector_length" in {f.code for f in qa(episode).failures}


def test_defect_rate_is_the_share_of_defective_episodes():
    rng = random.Random(3)
    picks = [choose_defect(rng, 0.2) for _ in range(5000)]
    share = sum(p is not None for p in picks) / len(picks)
    assert share == pytest.approx(0.2, abs=0.03)
    assert {p for p in picks if p} == set(DEFECTS)
    assert all(choose_defect(rng, 0) is None for _ in range(100))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="defect"):
        make_episode(action_dim=8, defect="gremlins")
    with pytest.raises(ValueError, match="action_dim"):
        make_episode(action_dim=0)
