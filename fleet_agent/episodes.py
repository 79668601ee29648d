"""Synthetic episodes in the platform's episode file format (README, "Episode file format").

One parquet file per episode with four columns QA reads:

    observation.state  fixed_size_list<float32>[D]  joint state, D = the embodiment's action_dim
    action             fixed_size_list<float32>[D]  commanded joint targets, same D
    timestamp          float32                      frame_index / fps, seconds from the start
    frame_index        int64                        0, 1, ..., n-1

The trajectories are physically plausible: every joint moves smoothly (minimum-jerk segments
between random waypoints inside the joint's limits), the last dimension is a gripper opening
in metres, the measured state carries a little sensor noise, and the action is the next
commanded position, i.e. state + velocity * dt, so actions and state velocities agree.

With the embodiment's `state_limits` (the catalog's), waypoints stay inside each element's
[low, high] with a margin, so the episode passes content QA's limit check; without them a
symmetric +-2.6 rad range (gripper 0..0.08 m) is used.

`defect` makes an episode fail QA in a way QA can detect. File defects: a NaN in the state
(`non_finite`), a jump in the timestamps (`timestamp_gap`) or vectors one element short
(`vector_length`). Content defects (datasets/qa_content.py): a joint driven past its limit
(`state_out_of_limits`; 1e6 rad without declared limits, then also a `state_jump`), a 50 rad
teleport (`state_jump`), a robot that stops after 10 % of the episode (`idle_episode`), a
sensor stuck at one value (`frozen_signal`) and random actions (`action_state_mismatch`);
`resubmitted` (the agent's `near_duplicate`) re-encodes an earlier episode: other bytes, the
same trajectory (`near_duplicate`).
Real fleets have their own recorders; this module is what the reference agent "collects".
"""

from __future__ import annotations

import hashlib
import io
import random
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FILE_DEFECTS = ("nan", "timestamp_gap", "vector_length")
CONTENT_DEFECTS = ("out_of_limits", "state_jump", "idle", "frozen", "random_actions")
DEFECTS = FILE_DEFECTS + CONTENT_DEFECTS
# The agent's too: the previous clean episode sent again, re-encoded (`near_duplicate`).
AGENT_DEFECTS = (*DEFECTS, "near_duplicate")
JOINT_LIMIT_RAD = 2.6  # a conservative revolute range, inside e.g. the Franka's +-2.9 rad
MAX_JOINT_SPEED = 1.5  # rad/s, well under typical arm limits
GRIPPER_MAX_M = 0.08  # a parallel gripper's opening
STATE_NOISE = 0.0005  # rad: encoder noise


@dataclass(frozen=True)
class Episode:
    """One collected episode: the file's bytes and what to declare when registering it."""

    data: bytes
    sha256: str
    fps: int
    frames: int
    action_dim: int
    defect: str | None = None
    # One MP4 per camera of the job's stream spec (camera_key -> bytes); fleet_agent/uploads.py
    # registers and uploads them next to the parquet.
    videos: dict[str, bytes] = field(default_factory=dict)
    # The joint state (frames x D) the cameras are rendered from (fleet_agent/cameras.py).
    state: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def size_bytes(self) -> int:
        return len(self.data)

    @property
    def duration_seconds(self) -> float:
        return self.frames / self.fps


def _min_jerk(start: np.ndarray, end: np.ndarray, steps: int) -> np.ndarray:
    """Positions from start to end with zero velocity and acceleration at both ends."""
    s = np.linspace(0.0, 1.0, steps, endpoint=False)[:, None]
    blend = 10 * s**3 - 15 * s**4 + 6 * s**5
    return start + (end - start) * blend


def _bounds(dim: int, state_limits) -> tuple[np.ndarray, np.ndarray]:
    if state_limits is not None and len(state_limits) == dim:
        limits = np.asarray(state_limits, dtype=np.float64).reshape(dim, 2)
        return limits[:, 0], limits[:, 1]
    high = np.full(dim, JOINT_LIMIT_RAD)
    high[-1] = GRIPPER_MAX_M
    low = np.where(np.arange(dim) == dim - 1, 0.0, -high)
    return low, high


def joint_trajectory(
    *, frames: int, fps: int, dim: int, rng: np.random.Generator, state_limits=None
) -> tuple[np.ndarray, np.ndarray]:
    """(positions, limits) of shape (frames, dim) and (dim,): smooth motion within limits."""
    low, high = _bounds(dim, state_limits)
    span = high - low
    inner_low, inner_high = low + 0.1 * span, high - 0.1 * span  # off the hard stops
    position = rng.uniform(inner_low, inner_high) if dim else np.zeros(0)
    chunks = []
    produced = 0
    while produced < frames:
        target = rng.uniform(inner_low, inner_high)
        # A segment long enough that the peak speed (1.875 * distance / T) stays bounded; an
        # element with a small range (a gripper, in m) is timed as if it spanned 2 x 2.6 rad.
        distance = np.abs(target - position)
        distance = np.maximum(
            np.where(span < 1.0, 0.0, distance), distance * 2 * JOINT_LIMIT_RAD / span
        )
        seconds = max(1.0, float(np.max(distance)) * 1.875 / MAX_JOINT_SPEED)
        steps = max(2, round(seconds * fps))
        chunks.append(_min_jerk(position, target, steps))
        produced += steps
        position = target
    positions = np.concatenate(chunks)[:frames]
    return positions, high


def make_episode(
    *,
    action_dim: int,
    fps: int = 30,
    seconds: float = 20.0,
    seed: int | None = None,
    defect: str | None = None,
    state_limits=None,
    vectors: list[dict] | None = None,
) -> Episode:
    """Generate one episode's parquet bytes. `defect` is None or one of DEFECTS. `vectors`:
    the job's other frame-aligned sensor streams (the stream spec's, {"key", "names"}), each
    written as a column of smooth readings."""
    if action_dim < 1:
        raise ValueError("action_dim must be at least 1")
    if fps < 1:
        raise ValueError("fps must be at least 1")
    if defect is not None and defect not in DEFECTS:
        raise ValueError(f"Unknown defect {defect!r}; one of {', '.join(DEFECTS)}.")
    rng = np.random.default_rng(seed)
    frames = max(2, round(seconds * fps))
    commanded, _ = joint_trajectory(
        frames=frames + 1, fps=fps, dim=action_dim, rng=rng, state_limits=state_limits
    )
    low, high = _bounds(action_dim, state_limits)
    if defect == "idle":  # the operator stops after a tenth of the episode
        commanded[max(1, frames // 10) :] = commanded[max(1, frames // 10)]
    state = commanded[:-1] + rng.normal(0.0, STATE_NOISE, (frames, action_dim))
    state = np.clip(state, low, high)
    # The command sent at frame t is where the joint should be at t+1: the position now plus
    # the planned velocity times one frame period.
    action = commanded[1:]
    timestamp = np.arange(frames, dtype=np.float64) / fps
    frame_index = np.arange(frames, dtype=np.int64)
    width = action_dim

    if defect == "nan":
        row = int(rng.integers(0, frames))
        state[row, int(rng.integers(0, action_dim))] = np.nan
    elif defect == "timestamp_gap":
        start = int(rng.integers(1, frames))
        timestamp[start:] += 5.0 / fps  # a dropped stretch of recording: a 6-period jump
    elif defect == "vector_length":
        width = action_dim - 1 if action_dim > 1 else action_dim + 1
        state = _resize(state, width)
        action = _resize(action, width)
    else:
        _content_defect(defect, state, action, low=low, high=high, rng=rng, declared=state_limits)

    columns = {
        "observation.state": _vectors(state.astype(np.float32), width),
        "action": _vectors(action.astype(np.float32), width),
        "timestamp": pa.array(timestamp.astype(np.float32)),
        "frame_index": pa.array(frame_index),
    }
    for vector in vectors or []:
        readings = _sensor_readings(frames, len(vector["names"]), fps, rng)
        columns[vector["key"]] = _vectors(readings, len(vector["names"]))
    table = pa.table(columns)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    data = sink.getvalue()
    return Episode(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        fps=fps,
        frames=frames,
        action_dim=action_dim,
        defect=defect,
        state=state,
    )


def _sensor_readings(frames: int, width: int, fps: int, rng: np.random.Generator) -> np.ndarray:
    """Slowly varying readings with a little noise (forces in N, torques in N m, taxels)."""
    t = np.arange(frames)[:, None] / fps
    phase = rng.uniform(0, 2 * np.pi, width)
    readings = 2.0 * np.sin(0.7 * t + phase) + rng.normal(0.0, 0.05, (frames, width))
    return readings.astype(np.float32)


def _content_defect(defect, state, action, *, low, high, rng, declared) -> None:
    """Spoil a clean trajectory in place the way content QA must catch."""
    frames, dim = state.shape
    if defect == "out_of_limits":
        joint = int(rng.integers(0, dim))
        start = frames // 2
        if declared is not None:  # drift smoothly past the limit
            push = high[joint] + 0.5 - state[start:, joint].min()
            state[start:, joint] += push * _min_jerk(0.0, 1.0, frames - start)[:, 0]
            action[start:, joint] = np.concatenate([state[start + 1 :, joint], [state[-1, joint]]])
        else:  # nothing declared: the 1e6 rad a broken encoder reports
            state[start:, joint] = 1e6
    elif defect == "state_jump":
        joint = int(rng.integers(0, dim))
        state[frames // 2 :, joint] += 50.0  # a teleport between two frames
    elif defect == "frozen":
        joint = int(rng.integers(0, dim))
        state[:, joint] = state[0, joint]
    elif defect == "random_actions":
        action[:] = rng.uniform(low, high, action.shape)


def _resize(matrix: np.ndarray, width: int) -> np.ndarray:
    if width <= matrix.shape[1]:
        return matrix[:, :width]
    return np.concatenate([matrix, np.zeros((matrix.shape[0], width - matrix.shape[1]))], axis=1)


def _vectors(matrix: np.ndarray, width: int) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), width)


def choose_defect(rng: random.Random, defect_rate: float, kinds=DEFECTS) -> str | None:
    """A defect kind (one of `kinds`: the agent adds near_duplicate and, with cameras, the
    video defects of fleet_agent/cameras.py) with probability defect_rate, else None."""
    if defect_rate > 0 and rng.random() < defect_rate:
        return rng.choice(tuple(kinds))
    return None


def resubmitted(episode: Episode) -> Episode:
    """The same demonstration sent again as another file: vectors re-encoded as float64."""
    table = pq.read_table(io.BytesIO(episode.data))
    width = episode.action_dim
    columns = {name: table.column(name).combine_chunks() for name in table.column_names}
    for name in ("observation.state", "action"):
        values = columns[name].flatten().to_numpy(zero_copy_only=False).astype(np.float64)
        columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(values), width)
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    data = sink.getvalue()
    return Episode(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        fps=episode.fps,
        frames=episode.frames,
        action_dim=width,
        defect="near_duplicate",
        state=episode.state,
    )
