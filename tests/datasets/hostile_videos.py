"""Hostile camera files for the video QA bounds (issue 28), made with PyAV itself (and raw
bytes where a muxer will not write the defect): what a dishonest fleet can upload as a
camera's MP4 for little upload and much decoding.

The cheap trick behind most of them: encode a lit picture twice with libx264 (an I frame and a
P frame of ~20 bytes that changes nothing), then mux the P frame again and again with rising
timestamps. A million frames is a 27 MB file; each decodes to a full picture."""

import io
import struct
from fractions import Fraction

import av
import numpy as np

from datasets.lerobot_videos import keep_normal_scheduling
from tests.datasets.videos import moving_frames


def _two_frames(width: int, height: int, fps: int) -> bytes:
    """An MP4 of an I frame and a P frame repeating it (x264, no B frames, no delay)."""
    sink = io.BytesIO()
    with av.open(sink, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast", "bf": "0", "tune": "zerolatency", "threads": "1"}
        picture = av.VideoFrame(width, height, "yuv420p")
        for plane, value in zip(picture.planes, (120, 110, 140), strict=True):
            plane.update(np.full(plane.buffer_size, value, np.uint8))
        for index in (0, 1, None):  # None: flush
            if index is not None:
                picture.pts, picture.time_base = index, Fraction(1, fps)
            packets = stream.encode(picture if index is not None else None)
            keep_normal_scheduling()
            for packet in packets:
                container.mux(packet)
    return sink.getvalue()


def repeated_frames(
    frames: int,
    *,
    width: int = 320,
    height: int = 240,
    fps: int = 30,
    format: str = "mp4",
    streams: int = 1,
    options: dict | None = None,
    sink=None,
) -> bytes | None:
    """`frames` frames (each stream), of which every one after the first is the same tiny P
    frame, in `format` (mp4, matroska, mpegts...) with `streams` copies of the video stream;
    `options` for the muxer (movflags). Written to `sink` when given (then None)."""
    with av.open(io.BytesIO(_two_frames(width, height, fps))) as source:
        template = source.streams.video[0]
        first, repeat = (bytes(p) for p in source.demux(template) if p.size)
        target = sink if sink is not None else io.BytesIO()
        with av.open(target, "w", format=format, options=options or {}) as container:
            outputs = [container.add_stream_from_template(template) for _ in range(streams)]
            for index in range(frames):
                for stream in outputs:
                    packet = av.Packet(first if index == 0 else repeat)
                    packet.stream, packet.time_base = stream, Fraction(1, fps)
                    packet.pts = packet.dts = index
                    packet.duration, packet.is_keyframe = 1, index == 0
                    container.mux(packet)
    return None if sink is not None else target.getvalue()


def _moving_video(container, fps: int):
    """An H.264 stream in `container` for moving frames (tests.datasets.videos)."""
    stream = container.add_stream("libx264", rate=fps)
    stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
    stream.options = {"preset": "ultrafast", "bf": "0"}
    return stream


def _encode_into(container, stream, frames: int, fps: int) -> None:
    for index, pixels in enumerate([*moving_frames(frames, 320, 240), None]):
        picture = None
        if pixels is not None:
            picture = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            picture.pts, picture.time_base = index, Fraction(1, fps)
        packets = stream.encode(picture)  # None: flush
        keep_normal_scheduling()
        for packet in packets:
            container.mux(packet)


def with_audio(frames: int, *, fps: int = 30) -> bytes:
    """A sound camera MP4 (moving picture) with an AAC audio stream beside the video."""
    sink = io.BytesIO()
    with av.open(sink, "w", format="mp4") as container:
        video = _moving_video(container, fps)
        audio = container.add_stream("aac", rate=48000)
        _encode_into(container, video, frames, fps)
        silence = av.AudioFrame.from_ndarray(
            np.zeros((1, 1024), np.float32), format="fltp", layout="mono"
        )
        silence.sample_rate = 48000
        for index in range(frames * 48000 // fps // 1024):
            silence.pts = index * 1024
            container.mux(audio.encode(silence))
        container.mux(audio.encode(None))
    return sink.getvalue()


def with_timecode(frames: int, *, fps: int = 30, format: str = "mov") -> bytes:
    """A sound camera video (moving picture) carrying a timecode: FFmpeg's muxer adds a `tmcd`
    data track."""
    sink = io.BytesIO()
    with av.open(sink, "w", format=format) as container:
        video = _moving_video(container, fps)
        video.metadata["timecode"] = "00:00:00:00"
        _encode_into(container, video, frames, fps)
    return sink.getvalue()


def in_container(frames: int, *, format: str, fps: int = 30) -> bytes:
    """A sound camera video (moving picture) in another container (matroska, mpegts)."""
    sink = io.BytesIO()
    with av.open(sink, "w", format=format) as container:
        _encode_into(container, _moving_video(container, fps), frames, fps)
    return sink.getvalue()


def _annexb(width: int, height: int, frames: int, fps: int) -> bytes:
    """Raw H.264 (start codes, its parameter sets in-band) of a lit picture."""
    sink = io.BytesIO()
    with av.open(sink, "w", format="h264") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast", "bf": "0", "tune": "zerolatency"}
        picture = av.VideoFrame.from_ndarray(np.full((height, width, 3), 120, np.uint8), "rgb24")
        for index in [*range(frames), None]:  # None: flush
            if index is not None:
                picture.pts, picture.time_base = index, Fraction(1, fps)
            packets = stream.encode(picture if index is not None else None)
            keep_normal_scheduling()
            for packet in packets:
                container.mux(packet)
    return sink.getvalue()


def size_switch(first: tuple[int, int], then: tuple[int, int], frames: int, fps: int = 30):
    """An MP4 whose header (and first `frames` frames) say `first`, then `frames` frames of
    size `then`: new parameter sets in the stream, which H.264 decoders follow."""
    raw = _annexb(*first, frames, fps) + _annexb(*then, frames, fps)
    sink = io.BytesIO()
    with av.open(io.BytesIO(raw), format="h264", options={"framerate": str(fps)}) as source:
        template = source.streams.video[0]
        with av.open(sink, "w", format="mp4") as container:
            stream = container.add_stream_from_template(template)
            for index, packet in enumerate(p for p in source.demux(template) if p.size):
                packet.stream, packet.time_base = stream, Fraction(1, fps)
                packet.pts = packet.dts = index
                packet.duration = 1
                container.mux(packet)
    return sink.getvalue()


def box(kind: bytes, body: bytes = b"", *, large: int | None = None) -> bytes:
    """One ISO base media box; `large`: declare this 64-bit length instead of the real one."""
    if large is not None:
        return struct.pack(">I4sQ", 1, kind, large) + body
    return struct.pack(">I4s", 8 + len(body), kind) + body


FTYP = box(b"ftyp", b"isom" + struct.pack(">I", 512) + b"isomiso2avc1mp41")
