"""Real MP4 files for the video tests, encoded with PyAV in the test (no fixtures on disk, no
mocks): a lit scene for QA (never black, never frozen), a textured one with a moving square for
the delivery tests (a shifted or dropped frame is visible), and a decoder."""

import io
import tempfile
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from datasets.lerobot_videos import keep_normal_scheduling

CODECS = {"h264": "libx264", "av1": "libsvtav1", "hevc": "libx265", "mpeg4": "mpeg4"}


def moving_frames(count: int, width: int, height: int, seed: int = 0):
    """A lit scene with a square crossing it and sensor noise: never black, never frozen. The
    square's speed, path and start depend on the seed, so distinct seeds are distinct videos
    (QA refuses a camera video already accepted: datasets/qa_video_checks.py)."""
    rng = np.random.default_rng(seed)
    speed, period = rng.uniform(3, 11), rng.uniform(3, 9)
    start, phase = rng.uniform(0, width), rng.uniform(0, 2 * np.pi)
    ys, xs = np.mgrid[0:height, 0:width]
    base = np.stack(
        [80 + 60 * xs / width, 90 + 50 * ys / height, np.full(xs.shape, 120.0)], axis=-1
    )
    for index in range(count):
        frame = base + rng.normal(0, 3, base.shape)
        x = int((start + index * speed) % max(1, width - 40))
        y = int(height // 3 + 20 * np.sin(index / period + phase))
        frame[y : y + 40, x : x + 40] = (240, 230, 90)  # bright: it shows in luma
        yield np.clip(frame, 0, 255).astype(np.uint8)


def encode_mp4(
    frames=None,
    *,
    count: int = 30,
    fps: int = 30,
    width: int = 320,
    height: int = 240,
    codec: str = "h264",
    pts_of=None,
    seed: int = 0,
    faststart: bool = False,
) -> bytes:
    """An MP4 of `frames` (RGB uint8 arrays; default: `count` moving frames). `pts_of(i)`
    places frame i at another time than i/fps (in 1/(fps*100) s units) for timing defects."""
    frames = moving_frames(count, width, height, seed) if frames is None else frames
    if faststart:  # the index first: the muxer rewrites the file, so it needs a real one
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "video.mp4"
            _encode(path, frames, fps, width, height, codec, pts_of, {"movflags": "faststart"})
            return path.read_bytes()
    sink = io.BytesIO()
    _encode(sink, frames, fps, width, height, codec, pts_of, {})
    return sink.getvalue()


def _encode(sink, frames, fps, width, height, codec, pts_of, options) -> None:
    with av.open(sink, mode="w", format="mp4", options=options) as container:
        stream = container.add_stream(CODECS[codec], rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if codec == "h264":
            stream.options = {"preset": "ultrafast", "bf": "0"}
        elif codec == "av1":
            stream.options = {"preset": "12"}
        if pts_of is not None:
            stream.codec_context.time_base = Fraction(1, fps * 100)
        for index, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            if pts_of is not None:
                frame.pts = pts_of(index)
                frame.time_base = Fraction(1, fps * 100)
            packets = stream.encode(frame)
            keep_normal_scheduling()
            for packet in packets:
                container.mux(packet)
        packets = stream.encode()
        keep_normal_scheduling()
        for packet in packets:
            container.mux(packet)


# --- For the delivery tests: files on disk, frame-exact comparisons -------------------------


def square_frames(count: int, *, width: int = 64, height: int = 48, seed: int = 0):
    """`count` RGB frames: a textured background and a bright square moving with the index
    (so neighbouring frames differ and a shifted or dropped frame is visible)."""
    rng = np.random.default_rng(seed)
    background = rng.integers(0, 160, size=(height, width, 3), dtype=np.uint8)
    for i in range(count):
        frame = background.copy()
        x = (i * 3) % max(1, width - 8)
        y = (i * 2) % max(1, height - 8)
        frame[y : y + 8, x : x + 8] = (255, 200 - (i % 100), 40)
        yield frame


def encode(
    path, frames, *, fps: int = 30, codec: str = "libx264", options=None, pix_fmt="yuv420p"
) -> Path:
    """Write `frames` (RGB arrays) as an MP4 at a constant `fps`; frame i at i/fps."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = iter(frames)
    first = next(frames)
    height, width = first.shape[:2]
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        stream.options = {"preset": "ultrafast" if codec == "libx264" else "12", **(options or {})}
        for i, image in enumerate([first, *frames]):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            packets = stream.encode(frame)
            keep_normal_scheduling()
            for packet in packets:
                container.mux(packet)
        packets = stream.encode(None)
        keep_normal_scheduling()
        for packet in packets:
            container.mux(packet)
    return path


def decode(path) -> list[tuple[float, np.ndarray]]:
    """Every frame of a (small) file: (time in seconds, RGB array)."""
    with av.open(str(path)) as container:
        return [(float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]


def transcode(data: bytes, *, codec: str = "av1", half: bool = False) -> bytes:
    """The same pictures re-encoded with `codec` (a copy as a re-encode makes it), each frame
    halved in both sides first when `half` (2x2 pixels averaged: 640x480 -> 320x240)."""
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    if half:
        height, width = frames[0].shape[0] // 2 * 2, frames[0].shape[1] // 2 * 2
        frames = [
            f[:height, :width].reshape(height // 2, 2, width // 2, 2, 3).mean(axis=(1, 3))
            for f in frames
        ]
        frames = [np.rint(f).astype(np.uint8) for f in frames]
    height, width = frames[0].shape[:2]
    return encode_mp4(frames, codec=codec, width=width, height=height)
