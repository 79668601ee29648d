"""The `aloha-hdf5` reader on ALOHA-layout files written with h5py: qpos, qvel and action as
they are, each mapped camera's uint8 frames encoded to one MP4 (frames within codec loss),
broken files refused with the file and the reason named."""

import io

import av
import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

from fleet_agent.importers import RecordingError, parse_mapping, read_recordings
from fleet_agent.importers.local_checks import check_recording
from tests.fleet_agent.import_files import SCENE, WRIST, read_all, spec, write_aloha

CAMERAS = {"cam_high": SCENE, "cam_wrist": WRIST}


def mapping(**source):
    return parse_mapping(
        {"job": "j", "format": "aloha-hdf5", "operator": "op-3", "source": {"fps": 30, **source}}
    )


def decoded(data: bytes) -> list[np.ndarray]:
    with av.open(io.BytesIO(data)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def test_each_file_is_one_episode_with_its_values_and_both_cameras(tmp_path):
    written = [write_aloha(tmp_path / f"episode_{n}.hdf5", 40 + n, seed=n) for n in range(2)]
    (tmp_path / "notes.txt").write_text("not an episode")
    recordings = list(
        read_recordings(tmp_path, mapping(cameras=CAMERAS, qvel_key="observation.velocity"))
    )
    assert [r.source_id for r in recordings] == ["episode_0.hdf5", "episode_1.hdf5"]
    for recording, (columns, images) in zip(recordings, written, strict=True):
        assert recording.operator == "op-3"
        table = pq.read_table(io.BytesIO(recording.episode.data))
        state = np.stack(table["observation.state"].to_numpy(zero_copy_only=False))
        action = np.stack(table["action"].to_numpy(zero_copy_only=False))
        assert np.array_equal(state, columns["observation.state"])
        assert np.array_equal(action, columns["action"])
        velocity = np.stack(table["observation.velocity"].to_numpy(zero_copy_only=False))
        assert velocity.shape == state.shape and np.abs(velocity).max() > 0.01
        assert recording.video_modes == {SCENE: "encode", WRIST: "encode"}
        for camera, key in CAMERAS.items():
            frames = decoded(recording.episode.videos[key])
            assert len(frames) == len(images[camera])
            errors = [
                np.abs(a.astype(int) - b.astype(int)).mean()
                for a, b in zip(frames, images[camera], strict=True)
            ]
            assert max(errors) < 10, errors  # H.264's loss, frame for frame
        assert check_recording(recording, {"stream_spec": spec()}) == []


def test_a_single_file_can_be_named_and_an_unmapped_camera_is_left_out(tmp_path):
    write_aloha(tmp_path / "one.hdf5", 35)
    [recording] = read_recordings(tmp_path / "one.hdf5", mapping(cameras={"cam_wrist": WRIST}))
    assert set(recording.episode.videos) == {WRIST}
    assert check_recording(recording, {"stream_spec": spec(cameras=(WRIST,))}) == []
    # the job wanted the scene camera too: QA's own reason, before upload
    assert [f.code for f in check_recording(recording, {"stream_spec": spec()})] == [
        "video_missing"
    ]


def test_a_broken_file_in_a_folder_stands_alone_and_the_others_are_read(tmp_path):
    write_aloha(tmp_path / "a.hdf5", 30, seed=1)
    (tmp_path / "b.hdf5").write_bytes(b"not hdf5 at all")
    write_aloha(tmp_path / "c.hdf5", 31, seed=2)
    items = list(read_recordings(tmp_path, mapping(cameras=CAMERAS)))
    assert [type(item).__name__ for item in items] == ["Recording", "RecordingError", "Recording"]
    assert items[1].source_id == "b.hdf5" and str(items[1]).startswith("b.hdf5: not a readable")
    assert [item.files for item in (items[0], items[2])] == [
        (tmp_path / "a.hdf5",),
        (tmp_path / "c.hdf5",),
    ]  # what watch mode waits on
    # a reader that skips: the journal's completed recordings are not even converted
    skipped = list(
        read_recordings(tmp_path, mapping(cameras=CAMERAS), skip={"a.hdf5"}.__contains__)
    )
    assert [item.source_id for item in skipped] == ["b.hdf5", "c.hdf5"]


def test_broken_files_fail_with_the_file_and_the_reason(tmp_path):
    path = tmp_path / "ep.hdf5"
    write_aloha(path, 30)
    with pytest.raises(RecordingError, match=r"source\.fps: required"):
        read_all(path, parse_mapping({"job": "j", "format": "aloha-hdf5"}))
    with pytest.raises(RecordingError, match=r"ep.hdf5: no dataset /observations/images/cam_left"):
        read_all(path, mapping(cameras={"cam_left": SCENE}))
    with h5py.File(path, "a") as handle:
        del handle["action"]
        handle.create_dataset("action", data=np.zeros((29, 8)))
    with pytest.raises(RecordingError, match=r"ep.hdf5: 30 qpos rows but 29 action rows"):
        read_all(path, mapping())
    with h5py.File(path, "a") as handle:
        del handle["action"]
    with pytest.raises(RecordingError, match="no dataset /action"):
        read_all(path, mapping())
    write_aloha(path, 30)
    (tmp_path / "cut.hdf5").write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(RecordingError, match=r"cut.hdf5: not a readable HDF5 file"):
        read_all(tmp_path / "cut.hdf5", mapping())
    (tmp_path / "bad.hdf5").write_bytes(b"not hdf5 at all")
    with pytest.raises(RecordingError, match=r"bad.hdf5: not a readable HDF5 file"):
        read_all(tmp_path / "bad.hdf5", mapping())


def test_camera_frames_of_the_wrong_shape_or_count_are_refused(tmp_path):
    path = tmp_path / "ep.hdf5"
    write_aloha(path, 30, cameras=("cam_high",))
    with h5py.File(path, "a") as handle:
        del handle["observations/images/cam_high"]
        handle.create_dataset(
            "observations/images/cam_high", data=np.zeros((29, 8, 8, 3), np.uint8)
        )
    with pytest.raises(
        RecordingError, match=r"camera cam_high has frames of shape \(29, 8, 8, 3\)"
    ):
        read_all(path, mapping(cameras={"cam_high": SCENE}))
    with h5py.File(path, "a") as handle:
        del handle["observations/images/cam_high"]
        handle.create_dataset(
            "observations/images/cam_high", data=np.zeros((30, 8, 8, 3), np.float32)
        )
    with pytest.raises(RecordingError, match="must be \\(height, width, 3\\) uint8 RGB"):
        read_all(path, mapping(cameras={"cam_high": SCENE}))
    with pytest.raises(RecordingError, match="not a camera key"):
        read_all(path, mapping(cameras={"cam_high": "scene"}))
