"""QA before upload: the platform's own checks on a converted recording, on this machine.

The rules are not copied: this runs the very functions the platform's QA runs on an uploaded
episode (datasets/qa_format.py: the parquet's format and content checks; qa_content.py;
qa_video_checks.py: each camera's MP4), which are pure (numpy, pyarrow, PyAV: no Django, no
storage; tests/fleet_agent/test_import_local_checks.py proves the import pulls in neither),
with what the platform would expect of the episode:

- the job's stream spec (`job["stream_spec"]`: sensor vectors, cameras with their minimum
  resolution), the frame count and checksum the agent will declare;
- the embodiment's catalog entry when given (`GET /api/v1/catalog/embodiments`:
  `action_dim`, `state_names` and `content_qa`, the exact content thresholds QA applies to
  it); without it, the vector length of the stream spec's state and default thresholds;
- QA's default limits (episodes of 1 to 3600 s, 3 s of black or frozen video at most).

A platform that changes a setting from its default (EPISODE_MIN_SECONDS, ...) can reject
what passed here; a rejection the other way round does not happen with default settings.
Not checked locally: what needs the platform's records (duplicates, near-duplicates of other
accepted episodes, the job's remaining hours).
"""

from __future__ import annotations

import hashlib
import io
import tempfile

from datasets.qa_content import ContentThresholds
from datasets.qa_format import EpisodeExpectation, QAFailure, QAResult, Reason, check_episode_file
from datasets.qa_video_checks import (
    VideoExpectation,
    VideoLimits,
    check_camera_lengths,
    check_video_file,
    with_decode_budget,
)
from fleet_agent.importers.base import Recording


def _thresholds(embodiment: dict | None) -> ContentThresholds:
    values = dict((embodiment or {}).get("content_qa") or {})
    limits = tuple(tuple(float(b) for b in pair) for pair in values.pop("state_limits", []))
    names = tuple((embodiment or {}).get("state_names") or ())
    known = ContentThresholds.__dataclass_fields__
    return ContentThresholds(
        state_limits=limits,
        state_names=names,
        **{key: value for key, value in values.items() if key in known},
    )


def expectation(recording: Recording, job: dict, embodiment: dict | None = None):
    episode = recording.episode
    spec = job.get("stream_spec") or {}
    if embodiment and embodiment.get("action_dim"):
        action_dim = int(embodiment["action_dim"])
    elif (spec.get("state") or {}).get("names"):
        action_dim = len(spec["state"]["names"])
    else:
        action_dim = episode.action_dim
    return EpisodeExpectation(
        size=len(episode.data),
        sha256_hex=hashlib.sha256(episode.data).hexdigest(),
        fps=episode.fps,
        action_dim=action_dim,
        declared_frames=episode.frames,
        vectors=tuple((v["key"], len(v["names"])) for v in spec.get("vectors") or []),
        content=_thresholds(embodiment),
    )


def check_recording(
    recording: Recording, job: dict, embodiment: dict | None = None
) -> list[QAFailure]:
    """The reasons QA would reject this recording for (empty: it would pass), each with the
    platform's reason code (`failure.code`) and sentence (`failure.message`)."""
    result = check_episode_file(
        io.BytesIO(recording.episode.data), expectation(recording, job, embodiment)
    )
    if result.passed:
        _check_videos(recording, job, result)
    return list(result.failures)


def _check_videos(recording: Recording, job: dict, result: QAResult) -> None:
    episode = recording.episode
    measures = {}
    # the platform's default bounds, the decode budget for the episode's cameras included
    limits = with_decode_budget(VideoLimits(), frames=episode.frames, fps=episode.fps)
    for camera in (job.get("stream_spec") or {}).get("cameras") or []:
        key = camera["key"]
        if key not in episode.videos:
            result.fail(Reason.VIDEO_MISSING, f"{key}: no video was uploaded for this camera.")
            continue
        with tempfile.NamedTemporaryFile(suffix=".mp4") as handle:
            handle.write(episode.videos[key])
            handle.flush()
            expected = VideoExpectation(
                camera_key=key,
                fps=episode.fps,
                frames=episode.frames,
                min_width=int(camera.get("min_width") or 0),
                min_height=int(camera.get("min_height") or 0),
            )
            measures[key] = check_video_file(handle.name, expected, result, limits)
    check_camera_lengths(measures, result)
