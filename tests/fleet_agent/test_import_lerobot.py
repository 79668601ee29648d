"""The `lerobot` reader on LeRobot v3.0 datasets written by our own delivery writer: every
episode's values as they are, each camera's clip cut out of the concatenated file (copied
packets: bit-exact frames; re-encoded when the cut falls between key frames)."""

import io
import json
import shutil

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from fleet_agent.importers import RecordingError, parse_mapping, read_recordings
from fleet_agent.importers.local_checks import check_recording
from tests.datasets import lerobot_loader
from tests.datasets.videos import decode, encode
from tests.fleet_agent.import_files import SCENE, WRIST, read_all, spec, write_lerobot

# the module-scoped recordings are made once: its tests share one xdist worker
pytestmark = pytest.mark.xdist_group("import-lerobot")

LENGTHS = [45, 46, 40]


def mapping(**source):
    return parse_mapping({"job": "j", "format": "lerobot", "source": source})


def decoded(data: bytes) -> list[np.ndarray]:
    with av.open(io.BytesIO(data)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def stamps(data: bytes) -> list[float]:
    with av.open(io.BytesIO(data)) as container:
        return [float(frame.time) for frame in container.decode(video=0)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot") / "dataset"
    return root, write_lerobot(root, LENGTHS)


def test_every_episode_comes_back_with_its_values_task_and_bit_exact_camera_frames(dataset):
    root, written = dataset
    recordings = read_all(root, mapping(video_codec="h264"))
    assert [r.source_id for r in recordings] == [
        "episode_000000",
        "episode_000001",
        "episode_000002",
    ]
    source = lerobot_loader.load(root)
    # the dataset's own frames, as lerobot's loader decodes them from the concatenated files
    source_frames = {key: lerobot_loader.camera_frames(root, source, key) for key in (SCENE, WRIST)}
    for number, (recording, (columns, task)) in enumerate(zip(recordings, written, strict=True)):
        table = pq.read_table(io.BytesIO(recording.episode.data))
        assert recording.episode.frames == LENGTHS[number] == table.num_rows
        assert recording.task_instruction == task
        for name in ("observation.state", "action", "observation.force_torque"):
            values = np.stack(table[name].to_numpy(zero_copy_only=False))
            assert np.array_equal(values, columns[name]), name
        assert table["frame_index"].to_pylist() == list(range(LENGTHS[number]))
        assert np.allclose(table["timestamp"].to_numpy(), np.arange(LENGTHS[number]) / 30)
        assert recording.video_modes == {SCENE: "remux", WRIST: "remux"}
        for key in (SCENE, WRIST):
            clip = decoded(recording.episode.videos[key])
            assert len(clip) == LENGTHS[number]
            assert all(
                np.array_equal(a, b) for a, b in zip(clip, source_frames[key][number], strict=True)
            )
            assert np.allclose(
                stamps(recording.episode.videos[key]), np.arange(LENGTHS[number]) / 30, atol=1e-4
            )
        assert check_recording(recording, {"stream_spec": spec(force=True)}) == []


def test_an_av1_dataset_as_lerobot_records_it_is_copied_for_an_av1_order(tmp_path):
    root = tmp_path / "dataset"
    write_lerobot(root, [31, 30], cameras=(SCENE,), codec="av1")
    expected = lerobot_loader.camera_frames(root, lerobot_loader.load(root), SCENE)
    recordings = read_all(root, mapping(video_codec="av1"))
    kept = read_all(root, mapping())  # no codec named: the dataset's is kept
    assert [r.episode.videos for r in kept] == [r.episode.videos for r in recordings]
    assert [r.video_modes for r in kept] == [{SCENE: "remux"}] * 2
    for recording, frames in zip(recordings, expected, strict=True):
        assert recording.video_modes == {SCENE: "remux"}
        clip = decoded(recording.episode.videos[SCENE])
        assert len(clip) == len(frames)
        assert all(np.array_equal(a, b) for a, b in zip(clip, frames, strict=True))
        job = {"stream_spec": spec(cameras=(SCENE,), codec="av1")}
        assert check_recording(recording, job) == []


def test_episodes_and_cameras_can_be_chosen_and_renamed(dataset):
    root, _ = dataset
    [recording] = read_recordings(
        root, mapping(episodes=[1], cameras={WRIST: "observation.images.gripper"})
    )
    assert recording.source_id == "episode_000001"
    assert set(recording.episode.videos) == {SCENE, "observation.images.gripper"}


def test_a_clip_cut_between_key_frames_or_in_another_codec_is_re_encoded(tmp_path):
    # the camera file re-encoded with a key frame every 10 frames (as a recorder that does not
    # start each episode on one may write it): episode 1 starts at frame 45, between two
    root = tmp_path / "dataset"
    write_lerobot(root, [45, 31], cameras=(SCENE,), codec="h264")
    video = root / "videos" / SCENE / "chunk-000/file-000.mp4"
    frames = [image for _, image in decode(video)]
    encode(video, frames, fps=30, codec="libx264", options={"g": "10", "bf": "0"})
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        keys = [
            round(p.pts * stream.time_base * 30) for p in container.demux(stream) if p.is_keyframe
        ]
    assert 0 in keys and 45 not in keys
    source = lerobot_loader.load(root)
    expected = lerobot_loader.camera_frames(root, source, SCENE)
    first, second = read_recordings(root, mapping(video_codec="h264"))
    assert first.video_modes == {SCENE: "remux"}  # frame 0 is a key frame: a clean cut
    assert second.video_modes == {SCENE: "encode"}
    assert all(
        np.array_equal(a, b)
        for a, b in zip(decoded(first.episode.videos[SCENE]), expected[0], strict=True)
    )
    [av1] = read_recordings(root, mapping(video_codec="av1", episodes=[0]))
    assert av1.video_modes == {SCENE: "encode"}  # the order wants AV1
    with av.open(io.BytesIO(av1.episode.videos[SCENE])) as container:
        assert container.streams.video[0].codec_context.codec.name in {"libdav1d", "av1"}
    for recording, frames in ((second, expected[1]), (av1, expected[0])):
        clip = decoded(recording.episode.videos[SCENE])
        assert len(clip) == len(frames)
        error = [
            np.abs(a.astype(int) - b.astype(int)).mean() for a, b in zip(clip, frames, strict=True)
        ]
        assert max(error) < 12, error  # within codec loss, and the same frames (not shifted)
        shifted = np.abs(clip[1].astype(int) - frames[0].astype(int)).mean()
        assert shifted > 2 * max(error[:2])
        assert check_recording(recording, {"stream_spec": spec(cameras=(SCENE,))}) == []


def test_a_clip_with_b_frames_that_starts_on_a_key_frame_is_copied_exactly(tmp_path):
    # B-frames: packets out of display order, negative decode times; key frames every 15
    root = tmp_path / "dataset"
    write_lerobot(root, [45, 30], cameras=(SCENE,))
    video = root / "videos" / SCENE / "chunk-000/file-000.mp4"
    frames = [image for _, image in decode(video)]
    options = {"g": "15", "keyint_min": "15", "sc_threshold": "0", "bf": "2", "preset": "medium"}
    encode(video, frames, fps=30, codec="libx264", options=options)
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        packets = [p for p in container.demux(stream) if p.pts is not None]
        assert any(p.dts < p.pts for p in packets)  # reordered
    expected = lerobot_loader.camera_frames(root, lerobot_loader.load(root), SCENE)
    recordings = read_all(root, mapping())
    for recording, frames in zip(recordings, expected, strict=True):
        assert recording.video_modes == {SCENE: "remux"}
        clip = decoded(recording.episode.videos[SCENE])
        assert len(clip) == len(frames)
        assert all(np.array_equal(a, b) for a, b in zip(clip, frames, strict=True))
        assert np.allclose(stamps(recording.episode.videos[SCENE]), np.arange(len(frames)) / 30)
        assert check_recording(recording, {"stream_spec": spec(cameras=(SCENE,))}) == []


def test_a_dataset_that_is_not_v3_or_misses_files_fails_with_a_clear_message(dataset, tmp_path):
    root, _ = dataset
    with pytest.raises(RecordingError, match=r"no readable meta/info.json"):
        read_all(tmp_path, mapping())
    copy = tmp_path / "copy"

    shutil.copytree(root, copy)
    info = json.loads((copy / "meta/info.json").read_text())
    (copy / "meta/info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(RecordingError, match=r"v3.0 dataset is needed.*'v2.1'"):
        read_all(copy, mapping())
    (copy / "meta/info.json").write_text(json.dumps(info))
    (copy / "videos" / WRIST / "chunk-000/file-000.mp4").unlink()
    first = next(read_recordings(copy, mapping()))  # one episode's error, in its place
    assert isinstance(first, RecordingError) and first.source_id == "episode_000000"
    with pytest.raises(
        RecordingError, match=f"episode_000000 {WRIST}: videos/.*file-000.mp4 is missing"
    ):
        raise first
    meta = copy / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(meta)
    pq.write_table(table.drop_columns(["data/file_index"]), meta)
    with pytest.raises(RecordingError, match=r"meta/episodes lacks data/file_index"):
        read_all(copy, mapping())
    with pytest.raises(RecordingError, match=r"source.episodes: the dataset has no episode 7"):
        read_all(root, mapping(episodes=[7]))
    with pytest.raises(RecordingError, match=r"source.video_codec"):
        next(read_recordings(root, mapping(video_codec="vp9")))


def test_a_truncated_camera_file_fails_the_episodes_it_holds(dataset, tmp_path):
    root, _ = dataset
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    video = copy / "videos" / SCENE / "chunk-000/file-000.mp4"
    video.write_bytes(video.read_bytes()[: video.stat().st_size // 3])
    with pytest.raises(RecordingError, match=SCENE):
        read_all(copy, mapping())
