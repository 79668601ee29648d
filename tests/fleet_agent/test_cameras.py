"""The reference agent's rendered camera videos (fleet_agent/cameras.py), decoded with PyAV."""

import io
import itertools
import os
import time

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from fleet_agent.cameras import (
    FROZEN_SECONDS,
    VIDEO_DEFECTS,
    _Renderer,
    end_effector,
    render_camera_videos,
)
from fleet_agent.episodes import make_episode

FPS = 30
CAMERAS = ["observation.images.scene", "observation.images.wrist"]


def _arrays(seconds=4.0, seed=3):
    episode = make_episode(action_dim=8, fps=FPS, seconds=seconds, seed=seed)
    table = pq.read_table(io.BytesIO(episode.data))
    state = np.stack(table.column("observation.state").to_numpy(zero_copy_only=False))
    return {"observation.state": state}


def _decode(data: bytes):
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        rate = stream.average_rate
        frames = [(float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(stream)]
    return rate, frames


def _differences(frames):
    images = [image.astype(np.int16) for _, image in frames]
    return np.array([np.abs(a - b).mean() for a, b in itertools.pairwise(images)])


def test_each_camera_is_a_constant_rate_mp4_with_a_frame_per_row():
    arrays = _arrays()
    started = time.perf_counter()
    videos = render_camera_videos(arrays, CAMERAS, FPS)
    elapsed = time.perf_counter() - started
    assert list(videos) == CAMERAS
    rows = len(arrays["observation.state"])
    for data in videos.values():
        with av.open(io.BytesIO(data)) as container:
            context = container.streams.video[0].codec_context
            assert (context.name, context.width, context.height) == ("h264", 320, 240)
            assert context.pix_fmt == "yuv420p"
        rate, frames = _decode(data)
        assert rate == FPS and len(frames) == rows
        assert all(abs(t - i / FPS) < 1e-9 for i, (t, _) in enumerate(frames))
        assert _differences(frames).min() > 0.5  # lighting and noise: no two frames alike
    assert not np.array_equal(
        _decode(videos[CAMERAS[0]])[1][0][1], _decode(videos[CAMERAS[1]])[1][0][1]
    )
    assert elapsed < 10  # 2 x 120 frames at 320x240: quick enough for the demo


def test_the_scene_camera_shows_the_end_effector_where_the_state_puts_it():
    arrays = _arrays(seconds=3.0, seed=5)
    videos = render_camera_videos(arrays, CAMERAS[:1], FPS)
    _, frames = _decode(videos[CAMERAS[0]])
    poses = end_effector(arrays["observation.state"])
    renderer = _Renderer(320, 240, "scene", np.random.default_rng(0))
    errors = []
    for (_, image), pose in zip(frames, poses, strict=True):
        # the disc's dark centre: the darkest pixels of the frame
        gray = image.astype(np.float32).mean(axis=2)
        ys, xs = np.nonzero(gray < 40)
        assert len(xs), "the end effector is in view"
        want_x, want_y = renderer._to_pixels(pose[:2])
        errors.append(np.hypot(xs.mean() - want_x, ys.mean() - want_y))
    assert np.median(errors) < 2.0 and max(errors) < 4.0
    assert np.ptp(poses[:, 0]) > 0.01  # and it does move


def test_camera_sizes_follow_the_spec_minimums():
    videos = render_camera_videos(
        _arrays(seconds=1.0),
        [{"key": "observation.images.scene", "min_width": 640, "min_height": 480}],
        FPS,
    )
    with av.open(io.BytesIO(videos["observation.images.scene"])) as container:
        context = container.streams.video[0].codec_context
        assert (context.width, context.height) == (640, 480)


def test_av1_is_available_too():
    videos = render_camera_videos(_arrays(seconds=1.0), CAMERAS[:1], FPS, codec="av1")
    with av.open(io.BytesIO(videos[CAMERAS[0]])) as container:
        assert container.streams.video[0].codec_context.codec.name in {"libdav1d", "av1"}
        assert sum(1 for _ in container.decode(video=0)) == FPS


def test_dropped_frames_leave_gaps_in_time():
    arrays = _arrays()
    videos = render_camera_videos(arrays, CAMERAS, FPS, defect="dropped_frames")
    _, frames = _decode(videos[CAMERAS[0]])
    rows = len(arrays["observation.state"])
    assert len(frames) < rows
    steps = np.diff([t for t, _ in frames]) * FPS
    assert steps.max() >= 2 - 1e-6 and frames[-1][0] <= (rows - 1) / FPS + 1e-9
    assert len(_decode(videos[CAMERAS[1]])[1]) == rows  # only the first camera is spoiled


def test_wrong_fps_is_another_rate():
    videos = render_camera_videos(_arrays(), CAMERAS[:1], FPS, defect="wrong_fps")
    rate, frames = _decode(videos[CAMERAS[0]])
    assert rate != FPS and len(frames) == 4 * FPS


def test_a_frozen_stretch_repeats_one_frame():
    # an episode too short to hold a still stretch over QA's limit is spoiled otherwise (cut)
    short = render_camera_videos(_arrays(seconds=3), CAMERAS[:1], FPS, defect="frozen_video")
    clean = render_camera_videos(_arrays(seconds=3), CAMERAS[:1], FPS)
    assert len(short[CAMERAS[0]]) < len(clean[CAMERAS[0]]) * 0.7
    videos = render_camera_videos(_arrays(seconds=8), CAMERAS[:1], FPS, defect="frozen_video")
    _, frames = _decode(videos[CAMERAS[0]])
    still = _differences(frames) < 0.5
    longest = run = 0
    for value in still:
        run = run + 1 if value else 0
        longest = max(longest, run)
    assert longest >= 0.8 * FROZEN_SECONDS * FPS


def test_a_truncated_file_does_not_decode_whole():
    arrays = _arrays()
    videos = render_camera_videos(arrays, CAMERAS[:1], FPS, defect="truncated")
    complete = render_camera_videos(arrays, CAMERAS[:1], FPS)
    assert len(videos[CAMERAS[0]]) < len(complete[CAMERAS[0]])
    with pytest.raises(av.FFmpegError):
        _decode(videos[CAMERAS[0]])


def test_unknown_defects_and_codecs_are_refused():
    with pytest.raises(ValueError, match="video defect"):
        render_camera_videos(_arrays(seconds=1.0), CAMERAS, FPS, defect="blurry")
    with pytest.raises(ValueError, match="codec"):
        render_camera_videos(_arrays(seconds=1.0), CAMERAS, FPS, codec="vp9")
    assert set(VIDEO_DEFECTS) == {"dropped_frames", "wrong_fps", "frozen_video", "truncated"}


# --- The agent's videos against the platform's video QA (datasets/qa_video_checks.py) -------


def _video_qa(tmp_path, key, data, frames, fps=FPS):
    from datasets.qa_checks import QAResult
    from datasets.qa_video_checks import VideoExpectation, VideoLimits, check_video_file

    path = tmp_path / f"{key}.mp4"
    path.write_bytes(data)
    result = QAResult()
    expectation = VideoExpectation(
        camera_key=key, fps=fps, frames=frames, min_width=320, min_height=240
    )
    check_video_file(path, expectation, result, VideoLimits())
    return [failure.code for failure in result.failures]


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_clean_renders_of_every_view_pass_video_qa(tmp_path, codec):
    # a long, slow episode (the agent's episodes last 10 s to minutes): neither view may look
    # frozen or black to QA while the arm moves slowly or pauses
    arrays = {"observation.state": make_episode(action_dim=8, fps=FPS, seconds=12, seed=3).state}
    frames = len(arrays["observation.state"])
    videos = render_camera_videos(arrays, CAMERAS, FPS, codec=codec, seed=5)
    for key, data in videos.items():
        assert _video_qa(tmp_path, key.rsplit(".", 1)[-1], data, frames) == [], key


@pytest.mark.parametrize("defect", VIDEO_DEFECTS)
def test_each_video_defect_is_rejected_by_video_qa(tmp_path, defect):
    arrays = {"observation.state": make_episode(action_dim=8, fps=FPS, seconds=8, seed=4).state}
    frames = len(arrays["observation.state"])
    videos = render_camera_videos(arrays, CAMERAS, FPS, defect=defect, seed=6)
    first, second = list(videos)
    assert _video_qa(tmp_path, "spoiled", videos[first], frames) != [], defect
    assert _video_qa(tmp_path, "clean", videos[second], frames) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="libsvtav1 raises the priority only as root")
def test_rendering_av1_leaves_the_thread_at_normal_priority():
    # otherwise every process the agent forks afterwards runs SCHED_FIFO 99 (libsvtav1 as root)
    render_camera_videos(_arrays(), CAMERAS[:1], FPS, codec="av1")
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
