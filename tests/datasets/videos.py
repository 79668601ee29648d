"""Real MP4 files for the video tests, encoded with PyAV in the test (no fixtures on disk)."""

import io
from fractions import Fraction

import av
import numpy as np

CODECS = {"h264": "libx264", "av1": "libsvtav1", "hevc": "libx265", "mpeg4": "mpeg4"}


def moving_frames(count: int, width: int, height: int, seed: int = 0):
    """A lit scene with a square crossing it and sensor noise: never black, never frozen."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width]
    base = np.stack(
        [80 + 60 * xs / width, 90 + 50 * ys / height, np.full(xs.shape, 120.0)], axis=-1
    )
    for index in range(count):
        frame = base + rng.normal(0, 3, base.shape)
        x = int((index * 7) % max(1, width - 40))
        y = int(height // 3 + 20 * np.sin(index / 5))
        frame[y : y + 40, x : x + 40] = (220, 60, 40)
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
) -> bytes:
    """An MP4 of `frames` (RGB uint8 arrays; default: `count` moving frames). `pts_of(i)`
    places frame i at another time than i/fps (in 1/(fps*100) s units) for timing defects."""
    frames = moving_frames(count, width, height, seed) if frames is None else frames
    sink = io.BytesIO()
    with av.open(sink, mode="w", format="mp4") as container:
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
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return sink.getvalue()
