"""Multi-rate streams on one episode frame clock (the MCAP reader's rule, documented in
fleet_agent/README.md, "Formats"):

- The episode's frames are at `start + i / fps`, integer nanoseconds, where `start` is the
  latest first sample over all streams (every stream has a sample at frame 0) and the last
  frame is the last one at or before the earliest last sample over all streams.
- Each stream's value at a frame is its latest sample at or before the frame's time (never
  a sample from the future, never an interpolation).
- That sample's age (frame time - sample time) must not exceed `max_age_ns`; a gap over it
  raises RecordingError naming the stream, the frame time (seconds from the recording's
  first sample) and the age.
"""

from __future__ import annotations

import numpy as np

from fleet_agent.importers.base import RecordingError

NS = 1_000_000_000


def frame_clock(streams: dict[str, np.ndarray], fps: int) -> np.ndarray:
    """The frame times (int64 ns) over the span every stream covers."""
    if not streams:
        raise RecordingError("no stream to align")
    for name, times in streams.items():
        if len(times) == 0:
            raise RecordingError(f"{name}: no message in the recording")
    start = max(int(times.min()) for times in streams.values())
    end = min(int(times.max()) for times in streams.values())
    if end < start:
        first = min(int(times.min()) for times in streams.values())
        raise RecordingError(
            f"the streams do not overlap in time (one ends {(end - first) / NS:.3f} s in,"
            f" another starts {(start - first) / NS:.3f} s in)"
        )
    count = (end - start) * fps // NS + 1
    return start + (np.arange(count, dtype=np.int64) * NS) // fps


def align(
    name: str, times: np.ndarray, frame_times: np.ndarray, *, max_age_ns: int, origin: int = 0
) -> np.ndarray:
    """For each frame, the index in `times` (sorted, int ns) of the stream's latest sample at
    or before it; RecordingError when a frame has none or only one older than `max_age_ns`.
    `origin`: the time the message's seconds count from."""
    times = np.asarray(times, dtype=np.int64)
    if len(times) > 1 and (np.diff(times) < 0).any():
        raise RecordingError(f"{name}: sample times must be sorted")
    index = np.searchsorted(times, frame_times, side="right") - 1
    if (index < 0).any():
        frame = int(frame_times[np.argmax(index < 0)])
        raise RecordingError(
            f"{name}: no sample at or before the frame at {(frame - origin) / NS:.3f} s"
        )
    age = frame_times - times[index]
    if (age > max_age_ns).any():
        worst = int(np.argmax(age > max_age_ns))
        raise RecordingError(
            f"{name}: at {(int(frame_times[worst]) - origin) / NS:.3f} s the latest sample is"
            f" {age[worst] / 1e6:.1f} ms old, over the {max_age_ns / 1e6:.1f} ms allowed"
            " (source.max_age_frames)"
        )
    return index
