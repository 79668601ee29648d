"""The camera videos of a LeRobot v3.0 delivery (issue 15), as lerobot 0.6.1 writes them.

Per camera, the episodes' MP4s are concatenated into
`videos/<key>/chunk-CCC/file-FFF.mp4`, a file rolled over past `file_size_limit` (the
dataset's `video_files_size_in_mb`). An episode whose codec, pixel format and resolution
already are the delivered ones is remuxed (packets copied, timestamps moved onto the file's
frame grid); any other is decoded and re-encoded to the delivered codec (libsvtav1 for av1,
libx264 for h264). One file holds one stream, so a file is either remuxed episodes of one
encoder configuration (same codec extradata) or episodes encoded here: a change starts the
next file. Either way frame i of an episode is at exactly `from_timestamp + i / fps`, where
lerobot looks it up (tolerance 1e-4 s).

Memory stays bounded: packets and frames are streamed, only the sampled frames (for the
image stats, sampled like lerobot's `sample_indices`) become arrays, and the stats keep
running sums and a 256-bin histogram per channel (pixels are 8-bit, so the quantiles of the
sample are exact to the histogram's bin).

Pure: no models, no storage; sources are local files.
"""

import contextlib
import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import VideoReformatter

os.environ.setdefault("SVT_LOG", "1")  # libsvtav1 prints its whole configuration otherwise

VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
CHUNKS_SIZE = 1000
VIDEO_FILE_BYTES = 200 * 1024 * 1024
PIX_FMT = "yuv420p"
ENCODERS = {"av1": "libsvtav1", "h264": "libx264"}


def keep_normal_scheduling() -> None:
    """Undo what libsvtav1 does when it runs as root: it switches the calling thread to
    SCHED_FIFO 99, which every process forked afterwards inherits (workers, browsers). On this
    2-core machine such real-time threads starved the kernel's own clean-up for half an hour.
    One syscall: called after each encode call."""
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


# What lerobot's recorder uses for AV1 (g 2: a key frame every other frame, so any frame a
# training loader asks for decodes fast); the same spacing for H.264.
ENCODER_OPTIONS = {
    "av1": {"g": "2", "crf": "30", "preset": "12"},
    "h264": {"g": "2", "crf": "23", "preset": "veryfast"},
}
# Decoder names PyAV reports, as the codec they decode.
CODEC_NAMES = {"libdav1d": "av1", "libaom-av1": "av1", "av1": "av1", "h264": "h264"}
CODEC_NAMES |= {"hevc": "hevc", "libopenh264": "h264"}
TICKS_PER_FRAME = 512  # the file's time base is 1/(fps*512): 1/15360 at 30 fps, like libx264's
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


class VideoAssemblyError(ValueError):
    """A source video that cannot go into the delivery as it is (says which and why)."""


@dataclass(frozen=True)
class Probe:
    codec: str
    pix_fmt: str
    width: int
    height: int
    extradata: bytes
    rate: Fraction | None  # the stream's average frame rate
    first_dts_frames: int  # the first packet's decode time, in frames from the first frame


def probe(path) -> Probe:
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoAssemblyError(f"{Path(path).name}: no video stream.")
            stream = container.streams.video[0]
            context = stream.codec_context
            first_dts = 0
            for packet in container.demux(stream):
                if packet.dts is not None:
                    first_dts = _frames(packet.dts, stream, fps=stream.average_rate or 1)
                    break
            return Probe(
                codec=CODEC_NAMES.get(context.codec.name, context.codec.name),
                pix_fmt=context.pix_fmt or "",
                width=context.width,
                height=context.height,
                extradata=bytes(context.extradata or b""),
                rate=Fraction(stream.average_rate) if stream.average_rate else None,
                first_dts_frames=first_dts,
            )
    except av.FFmpegError as exc:
        raise VideoAssemblyError(f"{Path(path).name}: {exc}") from exc


def _frames(ticks: int, stream, *, fps) -> int:
    """A timestamp of `stream` as a whole number of frames from its first frame."""
    start = stream.start_time or 0
    return round((ticks - start) * stream.time_base * Fraction(fps))


def sample_indices(length: int) -> np.ndarray:
    """The frames lerobot's stats sample from an episode (compute_stats.sample_indices)."""
    low = min(100, length)
    count = max(low, min(int(length**0.75), 10_000))
    return np.round(np.linspace(0, length - 1, count)).astype(int)


def _downsample(image: np.ndarray) -> np.ndarray:
    """lerobot's auto_downsample_height_width: images over 300 px to about 150 px."""
    height, width = image.shape[:2]
    if max(height, width) < 300:
        return image
    factor = max(1, int(max(height, width) / 150))
    return image[::factor, ::factor]


class ImageStats:
    """Per-channel min/max/mean/std/quantiles of sampled RGB frames, in [0, 1], [3, 1, 1]:
    all from one 256-bin histogram per channel (8-bit pixels: sums and quantiles exact)."""

    OFFSETS = np.array([0, 256, 512], dtype=np.int32)

    def __init__(self):
        self.count = 0
        self.histogram = np.zeros((3, 256), dtype=np.int64)

    def add(self, rgb: np.ndarray) -> None:
        codes = _downsample(rgb).reshape(-1, 3).astype(np.int32) + self.OFFSETS
        self.histogram += np.bincount(codes.ravel(), minlength=768).reshape(3, 256)
        self.count += 1

    def as_json(self) -> dict:
        if not self.count:
            raise VideoAssemblyError("No frame was sampled for the image stats.")
        levels = np.arange(256, dtype=np.float64)
        pixels = self.histogram.sum(axis=1)
        mean = (self.histogram * levels).sum(axis=1) / pixels
        mean_sq = (self.histogram * np.square(levels)).sum(axis=1) / pixels
        std = np.sqrt(np.maximum(mean_sq - np.square(mean), 0.0))
        present = self.histogram > 0
        cdf = np.cumsum(self.histogram, axis=1) / pixels[:, None]
        stats = {
            "min": [levels[row].min() for row in present],
            "max": [levels[row].max() for row in present],
            "mean": mean,
            "std": std,
        }
        for name, q in QUANTILES.items():
            stats[name] = [int(np.searchsorted(row, q)) for row in cdf]
        shaped = {
            name: [[[float(v) / 255.0]] for v in np.asarray(values, dtype=np.float64)]
            for name, values in stats.items()
        }
        return {**shaped, "count": [int(self.count)]}


@dataclass
class CameraWriter:
    """The files of one camera: episodes appended in order, remuxed or re-encoded."""

    root: Path
    key: str
    fps: int
    codec: str
    file_size_limit: int = VIDEO_FILE_BYTES
    width: int | None = None
    height: int | None = None
    files: list[str] = field(default_factory=list)
    remuxed: int = 0
    encoded: int = 0

    def __post_init__(self) -> None:
        if self.codec not in ENCODERS:
            raise VideoAssemblyError(f"Unknown delivery codec {self.codec!r}.")
        self.root = Path(self.root)
        self.chunk_index = 0
        self.file_index = 0
        self.stats = ImageStats()
        # one conversion context, reused: a frame's own to_ndarray()/reformat() builds a new
        # one each call (4x slower on small frames)
        self._rgb = VideoReformatter()
        self._yuv = VideoReformatter()
        self.time_base = Fraction(1, self.fps * TICKS_PER_FRAME)
        self._out = None
        self._stream = None
        self._path: Path | None = None
        self._mode = ""
        self._extradata = b""
        self._frames = 0  # frames in the open file
        self._last_dts: int | None = None

    def add_episode(self, path, length: int) -> dict:
        """Append one episode's video of `length` frames; its meta/episodes columns."""
        source = probe(path)
        if self.width is None:  # the camera's size: its first episode's (even, for 4:2:0)
            self.width, self.height = source.width // 2 * 2, source.height // 2 * 2
        # another frame rate (QA refuses it) would not land on the file's frame grid: the
        # frames are then re-timed by re-encoding, frame i at i/fps
        remux = (source.codec, source.pix_fmt, source.width, source.height, source.rate) == (
            self.codec,
            PIX_FMT,
            self.width,
            self.height,
            self.fps,
        )
        mode = "remux" if remux else "encode"
        if self._out is not None and (
            mode != self._mode
            or (remux and source.extradata != self._extradata)
            or (remux and not self._dts_follows(source))
        ):
            self._close_file()
        if self._out is None:
            self._open_file(mode, path, source)
        start = self._frames
        if remux:
            self._remux(path, length)
            self.remuxed += 1
        else:
            self._encode(path, length)
            self.encoded += 1
        self._frames += length
        columns = {
            f"videos/{self.key}/chunk_index": self.chunk_index,
            f"videos/{self.key}/file_index": self.file_index,
            f"videos/{self.key}/from_timestamp": start / self.fps,
            f"videos/{self.key}/to_timestamp": self._frames / self.fps,
        }
        if self._path.stat().st_size >= self.file_size_limit:
            self._close_file()
        return columns

    def _dts_follows(self, source: Probe) -> bool:
        first = (self._frames + source.first_dts_frames) * TICKS_PER_FRAME
        return self._last_dts is None or first > self._last_dts

    def _open_file(self, mode: str, path, source: Probe) -> None:
        relative = VIDEO_PATH.format(
            video_key=self.key, chunk_index=self.chunk_index, file_index=self.file_index
        )
        self._path = self.root / relative
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._out = av.open(str(self._path), "w", format="mp4")
        if mode == "remux":
            with av.open(str(path)) as template:
                # opaque: the codec parameters copied as they are (no codec looked up: PyAV
                # would look for an encoder named like the decoder, e.g. libdav1d)
                self._stream = self._out.add_stream_from_template(
                    template.streams.video[0], opaque=True
                )
            self._stream.time_base = self.time_base
        else:
            self._stream = self._out.add_stream(ENCODERS[self.codec], rate=self.fps)
            self._stream.width, self._stream.height = self.width, self.height
            self._stream.pix_fmt = PIX_FMT
            self._stream.options = dict(ENCODER_OPTIONS[self.codec])
        self._mode = mode
        self._extradata = source.extradata
        self._frames = 0
        self._last_dts = None
        self.files.append(relative)

    def _close_file(self) -> None:
        if self._out is None:
            return
        if self._mode == "encode":
            packets = self._stream.encode(None)
            keep_normal_scheduling()
            for packet in packets:
                self._out.mux(packet)
        self._out.close()
        self._out = self._stream = None
        self.file_index += 1
        if self.file_index >= CHUNKS_SIZE:
            self.chunk_index += 1
            self.file_index = 0

    def _remux(self, path, length: int) -> None:
        copied = 0
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            for packet in container.demux(stream):
                if packet.pts is None or packet.size == 0:
                    continue
                pts = self._frames + _frames(packet.pts, stream, fps=self.fps)
                decode_ts = packet.pts if packet.dts is None else packet.dts
                dts = self._frames + _frames(decode_ts, stream, fps=self.fps)
                packet.stream = self._stream
                packet.time_base = self.time_base
                packet.pts, packet.dts = pts * TICKS_PER_FRAME, dts * TICKS_PER_FRAME
                packet.duration = TICKS_PER_FRAME
                self._out.mux(packet)
                self._last_dts = packet.dts
                copied += 1
        decoded = self._sample(path, length)  # the frames themselves: decoded for the stats
        if copied != length or decoded != length:
            raise VideoAssemblyError(
                f"{self.key}: the video has {decoded} frames, the episode {length}."
            )

    def _sample(self, path, length: int) -> int:
        """Add the sampled frames to the stats; returns the number of frames decoded."""
        samples = set(sample_indices(length).tolist())
        decoded = 0
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in container.decode(stream):
                if decoded in samples:
                    self.stats.add(self._rgb.reformat(frame, format="rgb24").to_ndarray())
                decoded += 1
        return decoded

    def _encode(self, path, length: int) -> None:
        samples = set(sample_indices(length).tolist())
        frame_rate = Fraction(1, self.fps)
        decoded = 0
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in container.decode(stream):
                if decoded >= length:
                    decoded += 1
                    break
                if decoded in samples:
                    self.stats.add(self._rgb.reformat(frame, format="rgb24").to_ndarray())
                out = self._yuv.reformat(
                    frame, width=self.width, height=self.height, format=PIX_FMT
                )
                out.pts = self._frames + decoded
                out.time_base = frame_rate
                packets = self._stream.encode(out)
                keep_normal_scheduling()
                for packet in packets:
                    self._out.mux(packet)
                decoded += 1
        if decoded != length:
            raise VideoAssemblyError(
                f"{self.key}: the video has {'more than ' * (decoded > length)}{decoded} frames,"
                f" the episode {length}."
            )

    def finish(self) -> None:
        self._close_file()

    def abort(self) -> None:
        """Drop the open file (after an error: the delivery fails, its directory goes)."""
        if self._out is not None:
            out, self._out, self._stream = self._out, None, None
            with contextlib.suppress(av.FFmpegError):
                out.close()

    def feature(self) -> dict:
        info = {
            "video.height": self.height,
            "video.width": self.width,
            "video.codec": self.codec,
            "video.pix_fmt": PIX_FMT,
            "video.fps": self.fps,
            "video.channels": 3,
            "has_audio": False,
        }
        if self.encoded and not self.remuxed:  # the encoder settings hold for every frame
            options = ENCODER_OPTIONS[self.codec]
            info |= {"video.g": int(options["g"]), "video.crf": int(options["crf"])}
            if options["preset"].isdigit():
                info["video.preset"] = int(options["preset"])
        return {
            "dtype": "video",
            "shape": [self.height, self.width, 3],
            "names": ["height", "width", "channels"],
            "info": info,
        }

    def summary(self) -> dict:
        return {
            "key": self.key,
            "codec": self.codec,
            "pix_fmt": PIX_FMT,
            "width": self.width,
            "height": self.height,
            "fps": self.fps,
            "files": list(self.files),
            "episodes_remuxed": self.remuxed,
            "episodes_reencoded": self.encoded,
        }


@dataclass
class DatasetVideos:
    """Every camera of a delivery: one `CameraWriter` per video key, episodes in order."""

    root: Path
    fps: int
    codec: str
    keys: list[str]
    file_size_limit: int = VIDEO_FILE_BYTES

    def __post_init__(self) -> None:
        self.cameras = {
            key: CameraWriter(
                root=self.root,
                key=key,
                fps=self.fps,
                codec=self.codec,
                file_size_limit=self.file_size_limit,
            )
            for key in self.keys
        }

    def add_episode(self, paths: dict, length: int) -> dict:
        """`paths`: video key -> local MP4 of this episode. Returns the meta/episodes columns."""
        missing = sorted(set(self.cameras) - set(paths))
        if missing:
            raise VideoAssemblyError(f"No video for {', '.join(missing)}.")
        columns = {}
        for key, camera in self.cameras.items():
            columns |= camera.add_episode(paths[key], length)
        return columns

    def abort(self) -> None:
        for camera in self.cameras.values():
            camera.abort()

    def finish(self) -> tuple[dict, dict, list[dict]]:
        """Close the files; (features, stats, summaries), each by video key."""
        for camera in self.cameras.values():
            camera.finish()
        features = {key: camera.feature() for key, camera in self.cameras.items()}
        stats = {key: camera.stats.as_json() for key, camera in self.cameras.items()}
        return features, stats, [camera.summary() for camera in self.cameras.values()]
