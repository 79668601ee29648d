"""`mcap`: ROS 2 bags in MCAP (Foxglove's `mcap` + `mcap-ros2-support`), one file = one episode.

The messages are decoded with the `ros2msg` definitions the MCAP file carries itself, so a
bag with any message types reads without a ROS installation or a type store (a bare .mcap
from Foxglove, or the .mcap inside a `ros2 bag record -s mcap` folder).

Streams, from the mapping's `[source]`:

    fps = 30                     # the episode's frame clock (required)
    max_age_frames = 2           # oldest sample a frame may take, in frame periods
    clock = "header"             # sample time: header.stamp ("header"; the log time for a
                                 # message without one or with a zero stamp) or "log"
    [source.state]               # observation.state: sensor_msgs/JointState
    topic = "/joint_states"
    names = ["joint1", ..., "gripper"]   # the elements, in this order, picked by name
    field = "position"                   # or "velocity", "effort"
    [source.action]              # action: JointState (as above) or std_msgs/Float64MultiArray
    topic = "/leader/joint_states"       # (its `data`; optional `indices` pick elements)
    names = [...]
    [source.cameras]             # sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8, mono8) or
    "/cam/scene/image_raw" = "observation.images.scene"   # CompressedImage (jpeg, png)
    [[source.vectors]]           # more frame-aligned columns, JointState or Float64MultiArray
    key = "observation.force_torque"
    topic = "/ft"

Alignment (fleet_agent/importers/alignment.py): frames at the latest first sample plus
i / fps; each stream takes its latest sample at or before the frame; a sample older than
max_age_frames periods fails the recording before anything is uploaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np

from fleet_agent.importers.alignment import NS, align, frame_clock
from fleet_agent.importers.base import Recording, RecordingError, reader
from fleet_agent.importers.convert import (
    camera_map,
    encode_camera,
    episode_from_arrays,
    fps_option,
    video_codec,
)
from fleet_agent.importers.mapping import ImportMapping
from fleet_agent.importers.mcap_records import decoded_messages
from fleet_agent.importers.sources import recordings_of_files

JOINT_STATE = "sensor_msgs/JointState"
MULTI_ARRAY = "std_msgs/Float64MultiArray"
IMAGE, COMPRESSED = "sensor_msgs/Image", "sensor_msgs/CompressedImage"
JOINT_FIELDS = ("position", "velocity", "effort")
IMAGE_CHANNELS = {"rgb8": (3, None), "bgr8": (3, (2, 1, 0)), "mono8": (1, None)}
IMAGE_CHANNELS |= {"rgba8": (4, (0, 1, 2)), "bgra8": (4, (2, 1, 0))}
COMPRESSED_CODECS = {"jpeg": "mjpeg", "jpg": "mjpeg", "png": "png"}


def _type_name(schema_name: str) -> str:
    return schema_name.replace("/msg/", "/")


@dataclass
class VectorStream:
    """One low-dim stream: its topic, which elements, and the samples read."""

    column: str
    topic: str
    names: tuple[str, ...] = ()
    joint_field: str = "position"
    indices: tuple[int, ...] | None = None
    times: list[int] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    _order: dict = field(default_factory=dict)  # a message's name tuple -> element indices

    def add(self, type_name: str, message, time_ns: int) -> None:
        if type_name == JOINT_STATE:
            row = self._joint_state(message, time_ns)
        elif type_name == MULTI_ARRAY:
            data = np.asarray(message.data, dtype=np.float64)
            row = data if self.indices is None else data[list(self.indices)]
            if self.indices is not None and max(self.indices) >= len(data):
                raise RecordingError(f"{self.topic}: {len(data)} values, index out of range")
        else:
            raise RecordingError(
                f"{self.topic}: {type_name or 'an unknown type'} is not a JointState or"
                " Float64MultiArray"
            )
        if self.values and len(row) != len(self.values[0]):
            raise RecordingError(f"{self.topic}: messages of {len(row)} and {len(self.values[0])}")
        self.times.append(time_ns)
        self.values.append(row)

    def _joint_state(self, message, time_ns: int) -> np.ndarray:
        names = tuple(message.name)
        if names not in self._order:
            missing = [name for name in self.names if name not in names]
            if missing or not self.names:
                raise RecordingError(
                    f"{self.topic}: joint(s) {', '.join(missing) or '(none named)'} not in the"
                    f" message at log time {time_ns / NS:.3f} s (it has {', '.join(names)})"
                )
            self._order[names] = [names.index(name) for name in self.names]
        values = getattr(message, self.joint_field)
        if len(values) != len(names):
            raise RecordingError(
                f"{self.topic}: {len(values)} {self.joint_field} values for {len(names)} joints"
            )
        return np.asarray(values, dtype=np.float64)[self._order[names]]

    def aligned(self, frame_times, *, max_age_ns: int, origin: int) -> np.ndarray:
        times, values = np.asarray(self.times, dtype=np.int64), np.stack(self.values)
        order = np.argsort(times, kind="stable")
        index = align(self.topic, times[order], frame_times, max_age_ns=max_age_ns, origin=origin)
        return values[order][index]


def _stream(options: dict, where: str, column: str) -> VectorStream:
    if not isinstance(options, dict) or not isinstance(options.get("topic"), str):
        raise RecordingError(f"source.{where}: a table with a topic is required")
    names = options.get("names", [])
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise RecordingError(f"source.{where}.names: a list of joint names")
    if options.get("field", "position") not in JOINT_FIELDS:
        raise RecordingError(f"source.{where}.field: one of {', '.join(JOINT_FIELDS)}")
    indices = options.get("indices")
    if indices is not None and (
        not isinstance(indices, list) or not all(isinstance(i, int) and i >= 0 for i in indices)
    ):
        raise RecordingError(f"source.{where}.indices: a list of element indices")
    return VectorStream(
        column=column,
        topic=options["topic"],
        names=tuple(names),
        joint_field=options.get("field", "position"),
        indices=tuple(indices) if indices else None,
    )


def _streams(options: dict) -> list[VectorStream]:
    streams = [
        _stream(options.get("state"), "state", "observation.state"),
        _stream(options.get("action"), "action", "action"),
    ]
    vectors = options.get("vectors", [])
    if not isinstance(vectors, list):
        raise RecordingError("source.vectors: an array of tables ([[source.vectors]])")
    for number, vector in enumerate(vectors):
        if not isinstance(vector, dict) or not isinstance(vector.get("key"), str):
            raise RecordingError(f"source.vectors[{number}]: a key (the column) is required")
        streams.append(_stream(vector, f"vectors[{number}]", vector["key"]))
    return streams


def _time(message, log_time: int, clock: str) -> int:
    stamp = getattr(getattr(message, "header", None), "stamp", None)
    if clock == "header" and stamp is not None:
        ns = int(stamp.sec) * NS + int(stamp.nanosec)
        if ns > 0:
            return ns
    return int(log_time)


def _messages(path: Path, topics: list[str]):
    """(type name, topic, message, log time) of `topics`, in file order, read within bounds
    (fleet_agent/importers/mcap_records.py)."""
    for schema_name, topic, decoded, log_time in decoded_messages(path, topics):
        yield _type_name(schema_name), topic, decoded, log_time


class _Camera:
    """One camera topic: its samples' times (pass 1), then its frames (pass 2)."""

    def __init__(self, topic: str, key: str):
        self.topic, self.key = topic, key
        self.times: list[int] = []
        self._codecs: dict[str, av.CodecContext] = {}

    def image(self, type_name: str, message) -> np.ndarray:
        if type_name == IMAGE:
            return self._raw(message)
        if type_name == COMPRESSED:
            return self._compressed(message)
        raise RecordingError(f"{self.topic}: {type_name} is not an Image or CompressedImage")

    def _raw(self, message) -> np.ndarray:
        if message.encoding not in IMAGE_CHANNELS:
            raise RecordingError(
                f"{self.topic}: image encoding {message.encoding!r} is not one of"
                f" {', '.join(IMAGE_CHANNELS)}"
            )
        channels, order = IMAGE_CHANNELS[message.encoding]
        height, width, step = int(message.height), int(message.width), int(message.step)
        data = np.frombuffer(bytes(message.data), dtype=np.uint8)
        if step < width * channels or len(data) < step * height:
            raise RecordingError(f"{self.topic}: an image's data is shorter than its size says")
        pixels = data[: step * height].reshape(height, step)[:, : width * channels]
        pixels = pixels.reshape(height, width, channels)
        if channels == 1:
            return np.repeat(pixels, 3, axis=2)
        return pixels[:, :, list(order)] if order else pixels

    def _compressed(self, message) -> np.ndarray:
        kind = next((k for k in COMPRESSED_CODECS if k in message.format.lower()), None)
        if kind is None:
            raise RecordingError(f"{self.topic}: compressed format {message.format!r}")
        codec = COMPRESSED_CODECS[kind]
        if codec not in self._codecs:  # one decoder per camera and format, reused
            self._codecs[codec] = av.CodecContext.create(codec, "r")
        context = self._codecs[codec]
        try:
            frames = context.decode(av.Packet(bytes(message.data)))
        except av.FFmpegError as exc:
            raise RecordingError(f"{self.topic}: an image does not decode ({exc})") from exc
        if not frames:
            raise RecordingError(f"{self.topic}: an image does not decode")
        return frames[0].to_ndarray(format="rgb24")


def _pass_one(path: Path, streams, cameras, clock: str) -> None:
    by_topic = {stream.topic: stream for stream in streams}
    by_camera = {camera.topic: camera for camera in cameras}
    for type_name, topic, message, log_time in _messages(path, [*by_topic, *by_camera]):
        time_ns = _time(message, log_time, clock)
        if topic in by_camera:
            by_camera[topic].times.append(time_ns)
        else:
            by_topic[topic].add(type_name, message, time_ns)


def _camera_frames(path: Path, camera: _Camera, wanted: np.ndarray):
    """The camera's images in frame order: message number wanted[i] for frame i (messages
    numbered in the order _messages yields them, which pass one counted too)."""
    last_use = {int(number): frame for frame, number in enumerate(wanted)}
    pending: dict[int, np.ndarray] = {}
    frame = 0
    for number, (type_name, _, message, _) in enumerate(_messages(path, [camera.topic])):
        if number in last_use:
            pending[number] = camera.image(type_name, message)
        while frame < len(wanted) and int(wanted[frame]) in pending:
            yield pending[int(wanted[frame])]
            if last_use[int(wanted[frame])] == frame:
                del pending[int(wanted[frame])]
            frame += 1
    if frame < len(wanted):
        raise RecordingError(f"{camera.topic}: the bag changed while it was read")


def read_file(path: Path, mapping: ImportMapping, source_id: str) -> Recording:
    """One MCAP file as one episode; RecordingError (prefixed with `source_id`) if it cannot be."""
    try:
        return _read(path, mapping, source_id)
    except RecordingError as exc:
        raise RecordingError(f"{source_id}: {exc}") from exc


def _read(path: Path, mapping: ImportMapping, source_id: str) -> Recording:
    options = mapping.source
    fps, codec = fps_option(options), video_codec(options)
    clock = options.get("clock", "header")
    if clock not in ("header", "log"):
        raise RecordingError('source.clock: "header" or "log"')
    max_age = options.get("max_age_frames", 2)
    if isinstance(max_age, bool) or not isinstance(max_age, int | float) or max_age <= 0:
        raise RecordingError("source.max_age_frames: a positive number of frame periods")
    max_age_ns = round(max_age * NS / fps)
    streams = _streams(options)
    cameras = [_Camera(topic, key) for topic, key in camera_map(options).items()]
    topics = [stream.topic for stream in streams] + [camera.topic for camera in cameras]
    twice = sorted({topic for topic in topics if topics.count(topic) > 1})
    if twice:
        raise RecordingError(f"source: topic {twice[0]} is mapped to two streams")
    _pass_one(path, streams, cameras, clock)
    times = {s.topic: np.asarray(s.times, dtype=np.int64) for s in streams}
    times |= {c.topic: np.asarray(c.times, dtype=np.int64) for c in cameras}
    frame_times = frame_clock(times, fps)
    origin = min(int(t.min()) for t in times.values())
    columns = {
        s.column: s.aligned(frame_times, max_age_ns=max_age_ns, origin=origin) for s in streams
    }
    videos = {}
    for camera in cameras:
        camera_times = np.asarray(camera.times, dtype=np.int64)
        order = np.argsort(camera_times, kind="stable")
        index = align(
            camera.topic, camera_times[order], frame_times, max_age_ns=max_age_ns, origin=origin
        )
        frames = _camera_frames(path, camera, order[index])
        videos[camera.key] = encode_camera(frames, fps=fps, codec=codec, name=camera.topic)
    state, action = columns.pop("observation.state"), columns.pop("action")
    episode = episode_from_arrays(
        fps=fps,
        state=state,
        action=action,
        vectors=columns,
        videos=videos,
        timestamps=(frame_times - frame_times[0]) / NS,
    )
    return Recording(
        source_id=source_id,
        episode=episode,
        task_instruction=mapping.task_instruction,
        operator=mapping.operator,
        success=mapping.success,
        video_modes=dict.fromkeys(videos, "encode"),
    )


@reader("mcap", skips=True)
def read_mcap(
    source: Path, mapping: ImportMapping, skip: Callable[[str], bool] | None = None
) -> Iterator[Recording | RecordingError]:
    """Every .mcap file under `source` (a file or a folder), in path order: one episode each."""
    fps_option(mapping.source)
    return recordings_of_files(source, "*.mcap", read_file, mapping, skip)
