"""Synthetic camera videos of an episode, consistent with its trajectory (issue 15).

Each camera sees the same little world: a table, an object on it, and the robot's end
effector, whose position comes from the episode's joint state by planar forward kinematics
(the first three joints as a three-link arm, so the end effector moves exactly as the state
does). The scene camera looks down on the table: the end effector is a disc moving over it,
its size following the gripper opening (the state's last element). The wrist camera rides
on the end effector: the object drifts through its view opposite to the arm's motion and the
gripper's jaws close in from the sides. Lighting flickers slowly (a random walk on the
brightness) over a little sensor noise, so no two frames are identical.

Frames are encoded with PyAV (its wheels carry FFmpeg with libx264 and libsvtav1) into MP4
bytes at the episode's frame rate: frame i at exactly i/fps, constant frame rate, yuv420p.

`defect` (for the agent's defect mode) spoils the first camera's video the way QA must
notice: `dropped_frames` (frames missing, their time left as a gap), `wrong_fps` (encoded
at another rate), `frozen_video` (one frame repeated over a stretch of seconds), `truncated` (the
file cut short).
"""

from __future__ import annotations

import io
import os
from fractions import Fraction

import av
import numpy as np

VIDEO_DEFECTS = ("dropped_frames", "wrong_fps", "frozen_video", "truncated")
DEFAULT_SIZE = (320, 240)
ENCODERS = {"h264": ("libx264", {"preset": "ultrafast", "crf": "23"})}
ENCODERS["av1"] = ("libsvtav1", {"preset": "12", "crf": "35"})
LINKS_M = (0.35, 0.3, 0.2)  # the planar arm's link lengths
REACH_M = sum(LINKS_M)
GRIPPER_MAX_M = 0.08
NOISE_FRAMES = 8  # a bank of sensor noise, drawn from per frame (cheap and never repeating)
FROZEN_SECONDS = 4.0  # over QA's EPISODE_QA_VIDEO_MAX_STILL_SECONDS (3 s by default)


def _keep_normal_scheduling() -> None:
    # libsvtav1 run as root switches the calling thread to SCHED_FIFO 99 (inherited by every
    # process forked later); put it back after each encode call
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def end_effector(state: np.ndarray) -> np.ndarray:
    """(frames, 3): planar x, y in metres and the gripper opening in [0, 1]."""
    state = np.asarray(state, dtype=np.float64)
    joints = np.zeros((len(state), 3))
    arm = state[:, :-1] if state.shape[1] > 1 else state
    joints[:, : min(3, arm.shape[1])] = arm[:, :3]
    angles = np.cumsum(joints, axis=1)
    x = (np.cos(angles) * LINKS_M).sum(axis=1)
    y = (np.sin(angles) * LINKS_M).sum(axis=1)
    opening = np.clip(state[:, -1] / GRIPPER_MAX_M, 0.0, 1.0) if state.shape[1] > 1 else 0.5
    return np.column_stack([x, y, np.broadcast_to(opening, len(state))])


def _camera(camera) -> tuple[str, int, int]:
    if isinstance(camera, str):
        return camera, *DEFAULT_SIZE
    width = camera.get("width") or max(camera.get("min_width") or 0, DEFAULT_SIZE[0])
    height = camera.get("height") or max(camera.get("min_height") or 0, DEFAULT_SIZE[1])
    # yuv420p wants even sizes: round up, so the spec's minimum still holds
    return camera["key"], -(-int(width) // 2) * 2, -(-int(height) // 2) * 2


class _Renderer:
    """Draws one camera's frames; `view` is "scene" (top-down) or "wrist" (on the gripper)."""

    def __init__(self, width: int, height: int, view: str, rng: np.random.Generator):
        self.width, self.height, self.view = width, height, view
        self.rng = rng
        yy, xx = np.mgrid[0:height, 0:width]
        self.xx, self.yy = xx.astype(np.float32), yy.astype(np.float32)
        table = np.empty((height, width, 3), dtype=np.float32)
        table[:] = (110, 85, 60) if view == "scene" else (125, 100, 75)
        grain = rng.normal(0, 6, (height // 8 + 1, width // 8 + 1, 1)).astype(np.float32)
        table += np.kron(grain, np.ones((8, 8, 1), dtype=np.float32))[:height, :width]

        blocks = rng.normal(0, 3, (NOISE_FRAMES, height // 4 + 1, width // 4 + 1, 1))
        # sensor noise in 4x4 blocks (fine enough to look like noise, coarse enough that the
        # encoder keeps it: pixel-level noise is smoothed away), upsampled once
        noise = np.repeat(np.repeat(blocks.astype(np.float32), 4, axis=1), 4, axis=2)[
            :, :height, :width
        ]
        # the table under each bank of noise, as bytes: a frame is then one small copy, the
        # objects drawn on it and a brightness lookup (a float pipeline per frame cost 5x more)
        self.noisy_tables = np.clip(table[None] + noise, 0, 255).astype(np.uint8)
        self._noise = 0
        self.object_xy = np.array([0.45, 0.25])  # metres, on the table
        self.scale = min(width, height) / (2.4 * REACH_M)  # pixels per metre (scene)

    def _to_pixels(self, xy: np.ndarray) -> tuple[float, float]:
        return self.width / 2 + xy[0] * self.scale, self.height / 2 - xy[1] * self.scale

    def _disc(self, image, cx, cy, radius, colour) -> None:
        # only the disc's bounding box is tested (a full-frame mask per disc cost most)
        x0, x1 = int(max(0, cx - radius)), int(min(self.width, cx + radius + 1))
        y0, y1 = int(max(0, cy - radius)), int(min(self.height, cy + radius + 1))
        if x0 >= x1 or y0 >= y1:
            return
        xx, yy = self.xx[y0:y1, x0:x1], self.yy[y0:y1, x0:x1]
        image[y0:y1, x0:x1][(xx - cx) ** 2 + (yy - cy) ** 2 <= radius**2] = colour

    def frame(self, pose: np.ndarray, brightness: float) -> np.ndarray:
        self._noise = (self._noise + 1 + self.rng.integers(NOISE_FRAMES - 1)) % NOISE_FRAMES
        image = self.noisy_tables[self._noise].copy()  # never the previous frame's noise
        side = max(4.0, 0.06 * self.scale)
        if self.view == "scene":
            ox, oy = self._to_pixels(self.object_xy)
            self._box(image, ox, oy, side, (40, 150, 60))
            ex, ey = self._to_pixels(pose[:2])
            self._disc(image, ex, ey, side * (0.5 + 0.6 * pose[2]), (220, 220, 235))
            self._disc(image, ex, ey, max(2.5, side * 0.4), (15, 15, 25))
        else:
            wrist_scale = 4 * self.scale
            offset = (self.object_xy - pose[:2]) * wrist_scale
            ox, oy = self.width / 2 + offset[0], self.height / 2 - offset[1]
            self._box(image, ox, oy, side * 4, (40, 150, 60))
            gap = (0.15 + 0.3 * pose[2]) * self.width
            jaw = max(2, int(self.width * 0.08))
            left = int(max(0, self.width / 2 - gap / 2 - jaw))
            right = int(min(self.width, self.width / 2 + gap / 2 + jaw))
            image[self.height // 2 :, left : left + jaw] = (70, 70, 80)
            image[self.height // 2 :, right - jaw : right] = (70, 70, 80)
        levels = np.clip(np.arange(256, dtype=np.float32) * brightness, 0, 255)
        return np.take(levels.astype(np.uint8), image)

    def _box(self, image, cx, cy, side, colour) -> None:
        x0, x1 = int(max(0, cx - side / 2)), int(min(self.width, cx + side / 2))
        y0, y1 = int(max(0, cy - side / 2)), int(min(self.height, cy + side / 2))
        if x0 < x1 and y0 < y1:
            image[y0:y1, x0:x1] = colour


def _lighting(frames: int, rng: np.random.Generator) -> np.ndarray:
    """Brightness per frame: a slow drift plus mains flicker (a few percent, every frame)."""
    drift = np.clip(1.0 + np.cumsum(rng.normal(0, 0.004, frames)), 0.8, 1.2)
    return drift * (1.0 + rng.normal(0, 0.02, frames))


def encode_frames(frames, *, fps: int, width: int, height: int, codec: str = "h264", pts=None):
    """MP4 bytes of RGB frames at a constant `fps` (frame i at i/fps, unless `pts` says)."""
    encoder, options = ENCODERS[codec]
    sink = io.BytesIO()
    with av.open(sink, "w", format="mp4") as container:
        stream = container.add_stream(encoder, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = dict(options)
        for number, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = number if pts is None else int(pts[number])
            frame.time_base = Fraction(1, fps)
            packets = stream.encode(frame)
            _keep_normal_scheduling()
            for packet in packets:
                container.mux(packet)
        packets = stream.encode(None)
        _keep_normal_scheduling()
        for packet in packets:
            container.mux(packet)
    return sink.getvalue()


def render_camera_videos(
    episode_arrays: dict,
    cameras,
    fps: int,
    defect: str | None = None,
    *,
    codec: str = "h264",
    seed: int = 0,
) -> dict[str, bytes]:
    """{camera key: MP4 bytes} for one episode. `episode_arrays` holds at least
    "observation.state" (frames x D, the gripper opening last); `cameras` are keys
    ("observation.images.wrist") or dicts with "key" and "width"/"height" (or the spec's
    "min_width"/"min_height"; 320x240 at least). A key ending in "wrist" gets the wrist view,
    any other the scene view. `defect` (one of VIDEO_DEFECTS) spoils the first camera."""
    if defect is not None and defect not in VIDEO_DEFECTS:
        raise ValueError(f"Unknown video defect {defect!r}; one of {', '.join(VIDEO_DEFECTS)}.")
    if codec not in ENCODERS:
        raise ValueError(f"Unknown codec {codec!r}; one of {', '.join(ENCODERS)}.")
    poses = end_effector(episode_arrays["observation.state"])
    frames = len(poses)
    if defect == "frozen_video" and frames < (FROZEN_SECONDS + 1) * fps:
        defect = "truncated"  # too short for a still stretch longer than QA's limit
    videos = {}
    for number, camera in enumerate(cameras):
        key, width, height = _camera(camera)
        rng = np.random.default_rng([seed, number])
        view = "wrist" if key.endswith("wrist") else "scene"
        renderer = _Renderer(width, height, view, rng)
        light = _lighting(frames, rng)
        spoil = defect if number == 0 else None
        videos[key] = _render_one(renderer, poses, light, fps, spoil, codec, width, height, rng)
    return videos


def _render_one(renderer, poses, light, fps, defect, codec, width, height, rng) -> bytes:
    frames = len(poses)
    indices = np.arange(frames)
    if defect == "dropped_frames":
        dropped = rng.choice(np.arange(1, frames), size=max(3, frames // 20), replace=False)
        indices = np.setdiff1d(indices, dropped)
    rate = fps
    if defect == "wrong_fps":
        rate = fps * 2 if fps <= 30 else max(1, fps // 2)
    frozen = range(0)
    if defect == "frozen_video":
        length = min(frames - 1, max(2, round(FROZEN_SECONDS * fps)))
        start = int(rng.integers(0, frames - length + 1))
        frozen = range(start + 1, start + length)

    def images():
        last = None
        for i in indices:
            if i in frozen:
                yield last
                continue
            last = renderer.frame(poses[i], float(light[i]))
            yield last

    data = encode_frames(
        images(),
        fps=rate,
        width=width,
        height=height,
        codec=codec,
        pts=indices if defect == "dropped_frames" else None,
    )
    if defect == "truncated":
        data = data[: len(data) * 6 // 10]
    return data
