"""Small real recordings for the import tests, each written with its own format's library: a
LeRobot v3.0 dataset by our delivery writer (datasets/lerobot.py + lerobot_videos.py, videos
concatenated per camera), ALOHA-layout HDF5 files (h5py) with two cameras, and ROS 2 MCAP
bags (mcap-ros2-support's writer) with JointState, Image and CompressedImage at their own
rates. Trajectories are the clean FR3 demonstrations of datasets.episode_format (8 elements,
within the catalog's limits), so the platform's QA accepts them."""

from __future__ import annotations

import tempfile
from fractions import Fraction
from pathlib import Path

import av
import h5py
import numpy as np
from mcap_ros2.writer import Writer as McapWriter

from datasets.episode_format import GRIPPER_MID_M, GRIPPER_SWING_M, HOME_POSE, episode_table
from datasets.episode_format import parquet_bytes as episode_parquet
from datasets.lerobot import LeRobotWriter
from datasets.lerobot_videos import DatasetVideos
from tests.datasets.videos import encode_mp4, moving_frames

FPS = 30
DIM = 8
JOINTS = [f"fr3_joint{i}" for i in range(1, 8)] + ["gripper_width"]
FORCE_NAMES = ["fx", "fy", "fz", "tx", "ty", "tz"]
WIDTH, HEIGHT = 96, 64
SCENE, WRIST = "observation.images.scene", "observation.images.wrist"


def spec(*, cameras=(SCENE, WRIST), codec: str = "h264", force: bool = False) -> dict:
    """A stream spec for the FR3 with these cameras (the test orders')."""
    return {
        "state": {"key": "observation.state", "names": JOINTS},
        "action": {"key": "action", "names": JOINTS},
        "cameras": [{"key": key, "min_width": 64, "min_height": 48} for key in cameras],
        "vectors": [{"key": "observation.force_torque", "names": FORCE_NAMES}] if force else [],
        "video_codec": codec,
    }


# --- LeRobot v3.0 ---------------------------------------------------------------------------


def write_lerobot(
    root: Path, lengths, *, cameras=(SCENE, WRIST), codec="h264", source_codec=None, seed=0
) -> list:
    """A LeRobot v3.0 dataset at `root`, one episode per length, its videos in `codec`
    (episodes recorded in `source_codec`, by default the same: the writer then copies their
    packets; another one it re-encodes, one key frame every other frame over the whole file);
    [(columns, task)]."""
    writer = LeRobotWriter(
        root=root,
        fps=FPS,
        robot_type="franka-fr3",
        state_names=JOINTS,
        action_names=JOINTS,
        vector_names={"observation.force_torque": FORCE_NAMES},
    )
    videos = DatasetVideos(root=root, fps=FPS, codec=codec, keys=list(cameras))
    episodes = []
    with tempfile.TemporaryDirectory() as folder:
        for number, length in enumerate(lengths):
            columns = episode_table(frames=length, fps=FPS, dim=DIM, seed=seed + number)
            rng = np.random.default_rng(seed + number)
            columns["observation.force_torque"] = rng.normal(0, 5, (length, 6)).astype(np.float32)
            parquet = Path(folder) / f"{number}.parquet"
            parquet.write_bytes(episode_parquet(columns))
            paths = {}
            for camera, key in enumerate(cameras):
                path = Path(folder) / f"{number}-{camera}.mp4"
                frames = moving_frames(
                    length, WIDTH, HEIGHT, seed=seed * 100 + number * 10 + camera
                )
                path.write_bytes(
                    encode_mp4(
                        frames, fps=FPS, width=WIDTH, height=HEIGHT, codec=source_codec or codec
                    )
                )
                paths[key] = path
            task = f"insert peg {number % 2}"
            writer.add_episode(parquet, task=task, extra=videos.add_episode(paths, length))
            episodes.append((columns, task))
    features, stats, _ = videos.finish()
    writer.finish(video_features=features, video_stats=stats)
    return episodes


# --- ALOHA HDF5 -----------------------------------------------------------------------------


def write_aloha(path: Path, frames: int, *, seed: int = 0, cameras=("cam_high", "cam_wrist")):
    """One ALOHA-layout episode file; (columns, {camera: frames (N, H, W, 3)})."""
    columns = episode_table(frames=frames, fps=FPS, dim=DIM, seed=seed)
    images = {
        camera: np.stack(list(moving_frames(frames, WIDTH, HEIGHT, seed=seed * 10 + n)))
        for n, camera in enumerate(cameras)
    }
    with h5py.File(path, "w") as handle:
        handle.attrs["sim"] = False
        observations = handle.create_group("observations")
        observations.create_dataset("qpos", data=columns["observation.state"].astype(np.float64))
        velocity = np.gradient(columns["observation.state"].astype(np.float64), axis=0) * FPS
        observations.create_dataset("qvel", data=velocity)
        group = observations.create_group("images")
        for camera, pixels in images.items():
            group.create_dataset(camera, data=pixels, chunks=(1, HEIGHT, WIDTH, 3))
        handle.create_dataset("action", data=columns["action"].astype(np.float64))
    return columns, images


# --- ROS 2 MCAP -----------------------------------------------------------------------------

SEPARATOR = "=" * 80 + "\n"
TIME = "MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n"
HEADER = "MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n"
WITH_HEADER = SEPARATOR + HEADER + SEPARATOR + TIME
MSGDEFS = {
    "sensor_msgs/msg/JointState": "std_msgs/Header header\nstring[] name\nfloat64[] position\n"
    "float64[] velocity\nfloat64[] effort\n" + WITH_HEADER,
    "sensor_msgs/msg/Image": "std_msgs/Header header\nuint32 height\nuint32 width\n"
    "string encoding\nuint8 is_bigendian\nuint32 step\nuint8[] data\n" + WITH_HEADER,
    "sensor_msgs/msg/CompressedImage": "std_msgs/Header header\nstring format\nuint8[] data\n"
    + WITH_HEADER,
    "std_msgs/msg/Float64MultiArray": "MultiArrayLayout layout\nfloat64[] data\n"
    + SEPARATOR
    + "MSG: std_msgs/MultiArrayLayout\nMultiArrayDimension[] dim\nuint32 data_offset\n"
    + SEPARATOR
    + "MSG: std_msgs/MultiArrayDimension\nstring label\nuint32 size\nuint32 stride\n",
}
START_NS = 1_700_000_000 * 1_000_000_000  # the bag's first stamp (a wall clock time)
# the bag's joints: in another order than the job's, with one the job does not want
BAG_JOINTS = ["fr3_joint3", "gripper_width", "fr3_joint1", "base_yaw", *JOINTS[1:2], *JOINTS[3:7]]


def pose(t: np.ndarray, seed: int) -> np.ndarray:
    """datasets.episode_format's sway, at any time t (s): (len(t), 8)."""
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 2 * np.pi, DIM)
    amplitude = rng.uniform(0.3, 0.6, DIM)
    speed = rng.uniform(0.5, 1.2, DIM)
    centre = np.array([HOME_POSE[i % len(HOME_POSE)] for i in range(DIM)])
    amplitude[-1], centre[-1] = GRIPPER_SWING_M, GRIPPER_MID_M
    return centre + amplitude * np.sin(np.asarray(t)[:, None] * speed + phase)


def _stamp(ns: int) -> dict:
    return {"sec": ns // 1_000_000_000, "nanosec": ns % 1_000_000_000}


def _jpeg(image: np.ndarray) -> bytes:
    context = av.CodecContext.create("mjpeg", "w")
    context.width, context.height = image.shape[1], image.shape[0]
    context.pix_fmt, context.time_base = "yuvj420p", Fraction(1, FPS)
    frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuvj420p")
    return bytes(context.encode(frame)[0])


def sample_times(seconds: float, hz: float, *, offset_ns: int = 0, drop=()) -> list[int]:
    """Sample times (ns) at `hz` from START_NS + offset_ns, without those in `drop` ranges (s)."""
    times = []
    for i in range(int(seconds * hz) + 1):
        t = i / hz
        if not any(low <= t < high for low, high in drop):
            times.append(START_NS + offset_ns + round(t * 1e9))
    return times


def write_mcap(
    path: Path,
    *,
    seconds: float = 2.0,
    seed: int = 0,
    rates=None,
    drop=None,
    action_type: str = "JointState",
    log_delays=None,
):
    """A bag: /joint_states (JointState, 100 Hz), /leader/command (JointState or
        Float64MultiArray, 50 Hz), /ft (Float64MultiArray, when rates["force"] is set),
        /cam/scene/image_raw (Image bgr8, 30 Hz), /cam/wrist/compressed
        (CompressedImage jpeg, 20 Hz), each with header stamps (not the log time); `drop`: topic ->
        time ranges (s) without messages; `log_delays`: topic -> ns from stamp to log time (4 ms by
    default). Returns {topic: [(time_ns, value)]}: what was written."""
    rates = {"state": 100, "action": 50, "scene": 30, "wrist": 20} | (rates or {})
    drop = drop or {}
    written = {}
    with path.open("wb") as handle:
        writer = McapWriter(handle)
        schemas = {name: writer.register_msgdef(name, text) for name, text in MSGDEFS.items()}
        messages = []
        for topic, rate, offset in (
            ("/joint_states", rates["state"], 3_000_000),
            ("/leader/command", rates["action"], 1_000_000),
        ):
            times = sample_times(seconds, rate, offset_ns=offset, drop=drop.get(topic, ()))
            lead = 1 / FPS if topic == "/leader/command" else 0.0
            values = pose((np.array(times) - START_NS) / 1e9 + lead, seed)
            written[topic] = list(zip(times, values, strict=True))
            for time_ns, value in written[topic]:
                by_name = dict(zip(JOINTS, value, strict=True)) | {"base_yaw": 9.0}
                if topic == "/leader/command" and action_type == "Float64MultiArray":
                    body = {"layout": {"dim": [], "data_offset": 0}, "data": list(value)}
                    messages.append((time_ns, topic, "std_msgs/msg/Float64MultiArray", body))
                    continue
                body = {
                    "header": {"stamp": _stamp(time_ns), "frame_id": ""},
                    "name": BAG_JOINTS,
                    "position": [float(by_name[name]) for name in BAG_JOINTS],
                    "velocity": [],
                    "effort": [],
                }
                body["velocity"] = [0.0] * len(BAG_JOINTS)
                body["effort"] = [0.0] * len(BAG_JOINTS)
                messages.append((time_ns, topic, "sensor_msgs/msg/JointState", body))
        if rates.get("force"):  # a force/torque sensor, Float64MultiArray without a header
            times = sample_times(seconds, rates["force"], offset_ns=2_000_000)
            rng = np.random.default_rng(seed + 50)
            written["/ft"] = [(t, rng.normal(0, 5, 6)) for t in times]
            for time_ns, value in written["/ft"]:
                body = {"layout": {"dim": [], "data_offset": 0}, "data": [float(v) for v in value]}
                messages.append((time_ns, "/ft", "std_msgs/msg/Float64MultiArray", body))
        for topic, rate, camera in (
            ("/cam/scene/image_raw", rates["scene"], 0),
            ("/cam/wrist/compressed", rates["wrist"], 1),
        ):
            times = sample_times(seconds, rate, drop=drop.get(topic, ()))
            images = moving_frames(len(times), WIDTH, HEIGHT, seed=seed * 10 + camera)
            written[topic] = []
            for time_ns, image in zip(times, images, strict=True):
                header = {"stamp": _stamp(time_ns), "frame_id": topic}
                if camera == 0:
                    body = {
                        "header": header,
                        "height": HEIGHT,
                        "width": WIDTH,
                        "encoding": "bgr8",
                        "is_bigendian": 0,
                        "step": WIDTH * 3,
                        "data": image[:, :, ::-1].tobytes(),
                    }
                    messages.append((time_ns, topic, "sensor_msgs/msg/Image", body))
                else:
                    body = {"header": header, "format": "jpeg", "data": _jpeg(image)}
                    messages.append((time_ns, topic, "sensor_msgs/msg/CompressedImage", body))
                written[topic].append((time_ns, image))
        # logged a few ms after capture, in log time order (as a recorder writes them)
        for time_ns, topic, schema, body in sorted(
            messages, key=lambda m: (m[0] + (log_delays or {}).get(m[1], 4_000_000), m[1])
        ):
            delay = (log_delays or {}).get(topic, 4_000_000)
            writer.write_message(topic, schemas[schema], body, log_time=time_ns + delay)
        writer.finish()
    return written


MCAP_SOURCE = {
    "fps": FPS,
    "state": {"topic": "/joint_states", "names": JOINTS},
    "action": {"topic": "/leader/command", "names": JOINTS},
    "cameras": {"/cam/scene/image_raw": SCENE, "/cam/wrist/compressed": WRIST},
}


def read_all(source, mapping) -> list:
    """Every recording a reader yields; the first one it could not convert is raised (the
    readers yield a RecordingError in a bad recording's place and go on)."""
    from fleet_agent.importers import RecordingError, read_recordings

    items = list(read_recordings(source, mapping))
    for item in items:
        if isinstance(item, RecordingError):
            raise item
    return items
