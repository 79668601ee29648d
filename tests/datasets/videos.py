"""Real MP4s for the video tests, encoded with PyAV (no mocks): synthetic moving frames."""

from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def moving_frames(count: int, *, width: int = 64, height: int = 48, seed: int = 0):
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
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def decode(path) -> list[tuple[float, np.ndarray]]:
    """Every frame of a (small) file: (time in seconds, RGB array)."""
    with av.open(str(path)) as container:
        return [(float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
