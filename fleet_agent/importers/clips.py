"""One episode's clip out of a camera file that holds several (LeRobot v3.0 concatenates a
camera's episodes into one MP4 per file; meta/episodes says where each starts).

Frame f of a file is the frame shown at f / fps (lerobot's lookup: pts x time_base). The
episode's frames are `start .. start + length - 1`, renumbered 0 .. length - 1 in the clip,
frame i at exactly i / fps.

`cut_clip` remuxes (copies the packets, so every frame is bit-exact) when the file's codec is
the order's (`codec`; without one, any codec QA accepts) and the episode's packets can be
taken on their own: in decode order they form one unbroken run that starts with a key frame
showing the episode's first frame (nothing decoded after a key frame refers to a frame
before it, and any frame shown before it would break the run, so such a run references
nothing outside it). Otherwise (another codec, an episode starting between key frames,
B-frames reaching across the cut) it decodes the episode's frames and encodes them again in
`codec`. The copy is then decoded once to check it holds exactly the episode's frames at
their times; if not, it is encoded instead.
"""

from __future__ import annotations

import io
from fractions import Fraction

import av

from fleet_agent.cameras import ENCODERS
from fleet_agent.importers.base import RecordingError
from fleet_agent.importers.convert import encode_camera

TICKS_PER_FRAME = 512
CODEC_NAMES = {"libdav1d": "av1", "libaom-av1": "av1", "av1": "av1", "h264": "h264"}
CODEC_NAMES |= {"libopenh264": "h264", "hevc": "hevc"}
QA_CODECS = ("h264", "hevc", "av1")  # what the platform's video QA accepts


def _frame_of(ticks: int, time_base, fps: int) -> int:
    return round(ticks * time_base * fps)


def _seek(container, stream, start: int, fps: int) -> None:
    """To the key frame at or before frame `start`."""
    if start > 0:
        container.seek(int(Fraction(start, fps) / stream.time_base), stream=stream, backward=True)


def cut_clip(path, *, start: int, length: int, fps: int, codec: str | None, name: str):
    """(MP4 bytes, "remux" | "encode") of frames start..start+length-1 of the file at `path`.
    `codec` None: keep the file's codec if QA accepts it (else encode in h264)."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise RecordingError(f"{name}: {path} has no video stream")
            stream = container.streams.video[0]
            source_codec = CODEC_NAMES.get(stream.codec_context.codec.name, "")
            if codec is None:
                keep = source_codec in QA_CODECS
                codec = source_codec if source_codec in ENCODERS else "h264"
            else:
                keep = source_codec == codec
            copied = _remux(container, stream, start, length, fps) if keep else None
    except av.FFmpegError as exc:
        raise RecordingError(f"{name}: {path} is not a readable video ({exc})") from exc
    if copied is not None and _holds_frames(copied, length, fps):
        return copied, "remux"
    return _encode(path, start=start, length=length, fps=fps, codec=codec, name=name), "encode"


def _remux(container, stream, start: int, length: int, fps: int) -> bytes | None:
    _seek(container, stream, start, fps)
    end = start + length
    run = []
    for packet in container.demux(stream):
        if packet.pts is None or packet.size == 0:
            continue
        frame = _frame_of(packet.pts, stream.time_base, fps)
        if not run and frame < start:
            continue
        if not run and (frame != start or not packet.is_keyframe):
            return None  # the episode's first frame is not a key frame
        if not start <= frame < end:
            return None  # not one unbroken run
        run.append(packet)
        if len(run) == length:
            break
    if len(run) != length or len({_frame_of(p.pts, stream.time_base, fps) for p in run}) != length:
        return None
    sink = io.BytesIO()
    time_base = Fraction(1, fps * TICKS_PER_FRAME)
    with av.open(sink, "w", format="mp4") as out:
        # opaque: the codec parameters copied as they are (as datasets/lerobot_videos.py does)
        copy = out.add_stream_from_template(stream, opaque=True)
        copy.time_base = time_base
        for packet in run:
            pts = _frame_of(packet.pts, stream.time_base, fps) - start
            dts = (
                pts if packet.dts is None else _frame_of(packet.dts, stream.time_base, fps) - start
            )
            packet.stream = copy
            packet.time_base = time_base
            packet.pts, packet.dts = pts * TICKS_PER_FRAME, dts * TICKS_PER_FRAME
            packet.duration = TICKS_PER_FRAME
            out.mux(packet)
    return sink.getvalue()


def _holds_frames(data: bytes, length: int, fps: int) -> bool:
    """Every frame decodes, frame i at i / fps, exactly `length` of them."""
    try:
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.video[0]
            count = 0
            for frame in container.decode(stream):
                if abs(float(frame.pts * stream.time_base) - count / fps) > 1e-4:
                    return False
                count += 1
            return count == length
    except av.FFmpegError:
        return False


def _encode(path, *, start: int, length: int, fps: int, codec: str, name: str) -> bytes:
    taken = 0

    def frames():
        nonlocal taken
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            _seek(container, stream, start, fps)
            for frame in container.decode(stream):
                number = _frame_of(frame.pts, stream.time_base, fps)
                if number < start:
                    continue
                if number >= start + length:
                    break
                if number != start + taken:
                    raise RecordingError(
                        f"{name}: frame {number - start} of the episode where {taken} was expected"
                        " (a frame is missing or repeated in the video)"
                    )
                taken += 1
                yield frame.to_ndarray(format="rgb24")

    try:
        data = encode_camera(frames(), fps=fps, codec=codec, name=name)
    except av.FFmpegError as exc:
        raise RecordingError(f"{name}: the video does not decode ({exc})") from exc
    if taken != length:
        raise RecordingError(f"{name}: the video has {taken} frames of the episode's {length}")
    return data
