"""The delivery's camera videos (datasets/lerobot_videos.py) on real PyAV-encoded MP4s."""

import os

import av
import numpy as np
import pytest

from datasets.lerobot_videos import CameraWriter, DatasetVideos, VideoAssemblyError
from tests.datasets import lerobot_loader
from tests.datasets.videos import decode, encode, square_frames

FPS = 30


def _sources(tmp_path, lengths, **kwargs):
    return [
        encode(
            tmp_path / "src" / f"ep{i}.mp4",
            square_frames(n, seed=i, **kwargs.get("frame_args", {})),
            fps=FPS,
            codec=kwargs.get("codec", "libx264"),
            options=kwargs.get("options"),
        )
        for i, n in enumerate(lengths)
    ]


def test_matching_episodes_are_remuxed_into_one_file_frame_exact(tmp_path):
    lengths = [45, 30, 60]
    sources = _sources(tmp_path, lengths)
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.scene", fps=FPS, codec="h264"
    )
    columns = [camera.add_episode(path, n) for path, n in zip(sources, lengths, strict=True)]
    camera.finish()
    assert camera.remuxed == 3 and camera.encoded == 0
    assert camera.files == ["videos/observation.images.scene/chunk-000/file-000.mp4"]
    key = "videos/observation.images.scene"
    assert [(c[f"{key}/from_timestamp"], c[f"{key}/to_timestamp"]) for c in columns] == [
        (0.0, 1.5),
        (1.5, 2.5),
        (2.5, 4.5),
    ]
    assert {(c[f"{key}/chunk_index"], c[f"{key}/file_index"]) for c in columns} == {(0, 0)}
    delivered = decode(tmp_path / "out" / camera.files[0])
    assert len(delivered) == sum(lengths)
    # frame i of the file at exactly i/fps, and the very pixels of the uploads (no re-encode)
    for i, (time, _) in enumerate(delivered):
        assert abs(time - i / FPS) < 1e-9
    expected = [image for path in sources for _, image in decode(path)]
    for (_, got), want in zip(delivered, expected, strict=True):
        assert np.array_equal(got, want)
    with av.open(str(tmp_path / "out" / camera.files[0])) as container:
        assert container.streams.video[0].codec_context.name == "h264"


def test_b_frames_keep_their_order_when_remuxed(tmp_path):
    # libx264's "medium" preset reorders frames (dts before pts): offsets must keep dts rising
    lengths = [20, 25]
    sources = _sources(tmp_path, lengths, options={"preset": "medium"})
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.wrist", fps=FPS, codec="h264"
    )
    for path, n in zip(sources, lengths, strict=True):
        camera.add_episode(path, n)
    camera.finish()
    assert camera.remuxed == 2 and len(camera.files) == 1
    delivered = decode(tmp_path / "out" / camera.files[0])
    expected = [image for path in sources for _, image in decode(path)]
    assert [round(t * FPS, 6) for t, _ in delivered] == list(range(45))
    assert all(np.array_equal(g, w) for (_, g), w in zip(delivered, expected, strict=True))
    # and lerobot's seek-then-decode lookup finds the second episode's frames at its offset
    second = lerobot_loader.decode_at(
        tmp_path / "out" / camera.files[0], [(20 + i) / FPS for i in range(25)]
    )
    assert np.array_equal(second, np.stack(expected[20:]))


def test_another_codec_is_reencoded_to_the_ordered_one_within_codec_loss(tmp_path):
    lengths = [30, 20]
    sources = _sources(tmp_path, lengths)  # h264 uploads, AV1 ordered
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.scene", fps=FPS, codec="av1"
    )
    for path, n in zip(sources, lengths, strict=True):
        camera.add_episode(path, n)
    camera.finish()
    assert camera.encoded == 2 and camera.remuxed == 0 and len(camera.files) == 1
    path = tmp_path / "out" / camera.files[0]
    with av.open(str(path)) as container:
        assert container.streams.video[0].codec_context.codec.name in {"libdav1d", "av1"}
    delivered = decode(path)
    expected = [image for source in sources for _, image in decode(source)]
    assert [round(t * FPS, 6) for t, _ in delivered] == list(range(50))
    errors = [
        np.abs(g.astype(int) - w.astype(int)).mean()
        for (_, g), w in zip(delivered, expected, strict=True)
    ]
    assert max(errors) < 8.0  # mean absolute error per pixel, of 255
    feature = camera.feature()
    assert feature["info"]["video.codec"] == "av1" and feature["info"]["video.g"] == 2


def test_another_resolution_is_scaled_to_the_cameras(tmp_path):
    big = encode(tmp_path / "a.mp4", square_frames(10, width=64, height=48), fps=FPS)
    small = encode(tmp_path / "b.mp4", square_frames(10, width=32, height=24), fps=FPS)
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.scene", fps=FPS, codec="h264"
    )
    camera.add_episode(big, 10)
    camera.add_episode(small, 10)
    camera.finish()
    # the second one cannot share the remuxed stream: its own (encoded) file, at 64x48
    assert (camera.remuxed, camera.encoded) == (1, 1) and len(camera.files) == 2
    frames = decode(tmp_path / "out" / camera.files[1])
    assert len(frames) == 10 and frames[0][1].shape == (48, 64, 3) and frames[0][0] == 0.0
    assert camera.feature()["shape"] == [48, 64, 3]


def test_another_encoder_configuration_starts_the_next_file(tmp_path):
    first = encode(tmp_path / "a.mp4", square_frames(10), fps=FPS)
    other = encode(tmp_path / "b.mp4", square_frames(10), fps=FPS, options={"preset": "slow"})
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.scene", fps=FPS, codec="h264"
    )
    a = camera.add_episode(first, 10)
    b = camera.add_episode(other, 10)
    camera.finish()
    key = "videos/observation.images.scene"
    assert camera.remuxed == 2 and len(camera.files) == 2
    assert (a[f"{key}/file_index"], b[f"{key}/file_index"]) == (0, 1)
    assert b[f"{key}/from_timestamp"] == 0.0
    assert len(decode(tmp_path / "out" / camera.files[1])) == 10


def test_files_roll_over_at_the_size_limit(tmp_path):
    sources = _sources(tmp_path, [20, 20, 20])
    camera = CameraWriter(
        root=tmp_path / "out",
        key="observation.images.scene",
        fps=FPS,
        codec="h264",
        file_size_limit=1,
    )
    columns = [camera.add_episode(path, 20) for path in sources]
    camera.finish()
    key = "videos/observation.images.scene"
    assert [c[f"{key}/file_index"] for c in columns] == [0, 1, 2]
    assert [c[f"{key}/from_timestamp"] for c in columns] == [0.0, 0.0, 0.0]
    assert len(camera.files) == 3


def test_a_video_shorter_or_longer_than_the_episode_is_refused(tmp_path):
    (source,) = _sources(tmp_path, [20])
    for codec in ("h264", "av1"):
        for length in (19, 21):
            camera = CameraWriter(
                root=tmp_path / f"out-{codec}-{length}",
                key="observation.images.scene",
                fps=FPS,
                codec=codec,
            )
            with pytest.raises(VideoAssemblyError, match="frames"):
                camera.add_episode(source, length)
            camera.abort()


def test_image_stats_are_channel_first_in_unit_range_and_match_the_frames(tmp_path):
    sources = _sources(tmp_path, [40, 40])
    videos = DatasetVideos(
        root=tmp_path / "out",
        fps=FPS,
        codec="h264",
        keys=["observation.images.scene", "observation.images.wrist"],
    )
    for path in sources:
        videos.add_episode({"observation.images.scene": path, "observation.images.wrist": path}, 40)
    features, stats, summaries = videos.finish()
    assert set(features) == set(stats) == {"observation.images.scene", "observation.images.wrist"}
    scene = stats["observation.images.scene"]
    assert set(scene) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    assert scene["count"] == [80]  # every frame of a 40-frame episode is sampled (min 100)
    for name in set(scene) - {"count"}:
        values = np.array(scene[name])
        assert values.shape == (3, 1, 1) and (values >= 0).all() and (values <= 1).all(), name
    pixels = np.stack([image for path in sources for _, image in decode(path)]) / 255.0
    mean = pixels.reshape(-1, 3).mean(axis=0)
    std = pixels.reshape(-1, 3).std(axis=0)
    assert np.allclose(np.array(scene["mean"]).reshape(3), mean, atol=1e-6)
    assert np.allclose(np.array(scene["std"]).reshape(3), std, atol=1e-6)
    median = np.quantile(pixels.reshape(-1, 3), 0.5, axis=0)
    assert np.allclose(np.array(scene["q50"]).reshape(3), median, atol=1.5 / 255)
    assert features["observation.images.scene"] == {
        "dtype": "video",
        "shape": [48, 64, 3],
        "names": ["height", "width", "channels"],
        "info": {
            "video.height": 48,
            "video.width": 64,
            "video.codec": "h264",
            "video.pix_fmt": "yuv420p",
            "video.fps": FPS,
            "video.channels": 3,
            "has_audio": False,
        },
    }
    assert summaries[0]["episodes_remuxed"] == 2 and summaries[0]["width"] == 64


def test_an_episode_missing_a_camera_is_refused(tmp_path):
    (source,) = _sources(tmp_path, [10])
    videos = DatasetVideos(
        root=tmp_path / "out",
        fps=FPS,
        codec="h264",
        keys=["observation.images.scene", "observation.images.wrist"],
    )
    with pytest.raises(VideoAssemblyError, match=r"observation\.images\.wrist"):
        videos.add_episode({"observation.images.scene": source}, 10)


def test_a_file_that_is_no_video_is_refused(tmp_path):
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00" * 1000)
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.scene", fps=FPS, codec="h264"
    )
    with pytest.raises(VideoAssemblyError):
        camera.add_episode(junk, 10)


def test_another_frame_rate_is_retimed_onto_the_files_grid(tmp_path):
    # QA refuses it; should one get here, its frames still land at i/fps (re-encoded)
    fast = encode(tmp_path / "fast.mp4", square_frames(20), fps=60)
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.scene", fps=FPS, codec="h264"
    )
    camera.add_episode(fast, 20)
    camera.finish()
    assert camera.encoded == 1
    delivered = decode(tmp_path / "out" / camera.files[0])
    assert [round(t * FPS, 6) for t, _ in delivered] == list(range(20))


def test_av1_uploads_for_an_av1_order_are_remuxed_frame_exact(tmp_path):
    lengths = [20, 30]
    sources = _sources(tmp_path, lengths, codec="libsvtav1")
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.scene", fps=FPS, codec="av1"
    )
    for path, n in zip(sources, lengths, strict=True):
        camera.add_episode(path, n)
    camera.finish()
    assert (camera.remuxed, camera.encoded, len(camera.files)) == (2, 0, 1)
    delivered = decode(tmp_path / "out" / camera.files[0])
    expected = [image for path in sources for _, image in decode(path)]
    assert [round(t * FPS, 6) for t, _ in delivered] == list(range(50))
    assert all(np.array_equal(g, w) for (_, g), w in zip(delivered, expected, strict=True))


def test_an_odd_sized_camera_is_delivered_at_the_even_size_below(tmp_path):
    odd = encode(
        tmp_path / "odd.mp4",
        square_frames(10, width=65, height=49),
        fps=FPS,
        codec="libx264",
        options={"preset": "ultrafast"},
        pix_fmt="yuv444p",
    )
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.scene", fps=FPS, codec="h264"
    )
    camera.add_episode(odd, 10)
    camera.finish()
    assert camera.encoded == 1 and camera.feature()["shape"] == [48, 64, 3]
    frames = decode(tmp_path / "out" / camera.files[0])
    assert len(frames) == 10 and frames[0][1].shape == (48, 64, 3)


@pytest.mark.skipif(os.geteuid() != 0, reason="libsvtav1 raises the priority only as root")
def test_an_av1_encode_leaves_the_thread_at_normal_priority(tmp_path):
    # libsvtav1 run as root turns the calling thread into SCHED_FIFO 99, which every process
    # forked later inherits; the writer must put it back
    sources = _sources(tmp_path, [20])
    camera = CameraWriter(
        root=tmp_path / "out", key="observation.images.scene", fps=FPS, codec="av1"
    )
    camera.add_episode(sources[0], 20)
    camera.finish()
    assert camera.encoded == 1
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
