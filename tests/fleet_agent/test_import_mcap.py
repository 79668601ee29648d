"""The `mcap` reader on ROS 2 bags written with mcap-ros2-support: JointState at 100 Hz,
commands at 50 Hz, an Image (bgr8) at 30 Hz and a CompressedImage (jpeg) at 20 Hz, aligned to
a 30 fps frame clock by the documented rule; joints picked and ordered by name; a gap over
the maximum age fails before upload, naming the topic, the time and the age."""

import io
import itertools

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from fleet_agent.importers import RecordingError, parse_mapping, read_recordings
from fleet_agent.importers.local_checks import check_recording
from tests.fleet_agent.import_files import (
    MCAP_SOURCE,
    SCENE,
    START_NS,
    read_all,
    spec,
    write_mcap,
)

# the module-scoped recordings are made once: its tests share one xdist worker
pytestmark = pytest.mark.xdist_group("import-mcap")


def mapping(**source):
    return parse_mapping({"job": "j", "format": "mcap", "source": {**MCAP_SOURCE, **source}})


def decoded(data: bytes) -> list[np.ndarray]:
    with av.open(io.BytesIO(data)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def column(table, name) -> np.ndarray:
    return np.stack(table[name].to_numpy(zero_copy_only=False))


def expected_at(samples, frame_times) -> list:
    """The documented rule, written out: the latest sample at or before each frame time."""
    times = [t for t, _ in samples]
    return [samples[int(np.searchsorted(times, t, side="right")) - 1][1] for t in frame_times]


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    path = tmp_path_factory.mktemp("mcap") / "episode_1.mcap"
    return path, write_mcap(path, seconds=2.0, seed=3)


def test_streams_at_four_rates_are_aligned_to_the_frame_clock(bag):
    path, written = bag
    [recording] = read_recordings(path, mapping())
    episode = recording.episode
    table = pq.read_table(io.BytesIO(episode.data))
    # frames from the latest first sample (the state's, 3 ms in) to the earliest last one
    start = START_NS + 3_000_000
    frame_times = start + (np.arange(episode.frames) * 1_000_000_000) // 30
    assert episode.frames == 60 and episode.fps == 30
    assert np.allclose(table["timestamp"].to_numpy(), np.arange(60) / 30, atol=1e-6)
    state = column(table, "observation.state")
    want = np.stack(expected_at(written["/joint_states"], frame_times)).astype(np.float32)
    assert np.array_equal(state, want)  # the bag's joints picked by name, in the job's order
    action = column(table, "action")
    assert np.array_equal(
        action, np.stack(expected_at(written["/leader/command"], frame_times)).astype(np.float32)
    )
    for topic, key in MCAP_SOURCE["cameras"].items():
        frames = decoded(episode.videos[key])
        images = expected_at(written[topic], frame_times)
        assert len(frames) == 60
        errors = [
            np.abs(a.astype(int) - b.astype(int)).mean()
            for a, b in zip(frames, images, strict=True)
        ]
        assert max(errors) < 10, (topic, errors)
    # 20 Hz on a 30 fps clock: a compressed image serves the frames until the next one
    wrist = expected_at(written["/cam/wrist/compressed"], frame_times)
    assert sum(a is b for a, b in itertools.pairwise(wrist)) == 20
    assert check_recording(recording, {"stream_spec": spec()}) == []


def test_commands_as_float64_multi_array_and_chosen_elements(tmp_path):
    path = tmp_path / "bag.mcap"
    written = write_mcap(path, seconds=1.5, action_type="Float64MultiArray")
    [recording] = read_recordings(path, mapping(action={"topic": "/leader/command"}))
    table = pq.read_table(io.BytesIO(recording.episode.data))
    # no header: the command's log time (4 ms after it was made) is its time
    shifted = [(t + 4_000_000, v) for t, v in written["/leader/command"]]
    start = START_NS + 4_000_000 + 1_000_000  # the commands' first log time is the latest start
    frame_times = start + (np.arange(recording.episode.frames) * 1_000_000_000) // 30
    assert np.array_equal(
        column(table, "action"), np.stack(expected_at(shifted, frame_times)).astype(np.float32)
    )
    [picked] = read_recordings(
        path,
        mapping(
            action={"topic": "/leader/command", "indices": [7, 0]},
            state={"topic": "/joint_states", "names": ["gripper_width", "fr3_joint1"]},
        ),
    )
    full = pq.read_table(io.BytesIO(recording.episode.data))
    table = pq.read_table(io.BytesIO(picked.episode.data))
    assert np.array_equal(column(table, "action"), column(full, "action")[:, [7, 0]])
    assert np.array_equal(
        column(table, "observation.state"), column(full, "observation.state")[:, [7, 0]]
    )


def test_a_sensor_vector_stream_and_the_log_clock(tmp_path):
    path = tmp_path / "ft.mcap"
    written = write_mcap(path, seconds=1.5, rates={"force": 200})
    vector = {"key": "observation.force_torque", "topic": "/ft"}
    [recording] = read_recordings(path, mapping(vectors=[vector]))
    table = pq.read_table(io.BytesIO(recording.episode.data))
    # the /ft messages have no header: their log time (4 ms after they were made) counts
    start = START_NS + 6_000_000  # the first /ft log time (made at 2 ms) is the latest start
    frame_times = start + (np.arange(recording.episode.frames) * 1_000_000_000) // 30
    logged = [(t + 4_000_000, v) for t, v in written["/ft"]]
    force = np.stack(expected_at(logged, frame_times)).astype(np.float32)
    assert np.array_equal(column(table, "observation.force_torque"), force)
    assert check_recording(recording, {"stream_spec": spec(force=True)}) == []
    # clock = "log": every stream by its log time; the commands logged 25 ms late
    late = tmp_path / "late.mcap"
    written = write_mcap(late, seconds=1.5, log_delays={"/leader/command": 25_000_000})
    [by_stamp] = read_recordings(late, mapping())
    [by_log] = read_recordings(late, mapping(clock="log"))
    shifted = [(t + 4_000_000, v) for t, v in written["/joint_states"]]
    # the commands' first log time (stamped at 1 ms, logged at 26 ms) is the latest start
    log_times = START_NS + 26_000_000 + (np.arange(by_log.episode.frames) * 10**9) // 30
    state = column(pq.read_table(io.BytesIO(by_log.episode.data)), "observation.state")
    assert np.array_equal(state, np.stack(expected_at(shifted, log_times)).astype(np.float32))
    stamped = column(pq.read_table(io.BytesIO(by_stamp.episode.data)), "observation.state")
    assert not np.array_equal(stamped[: len(state)], state)


def test_raw_image_encodings_are_turned_into_rgb_and_bad_images_refused():
    from types import SimpleNamespace

    from fleet_agent.importers.ros2_mcap import COMPRESSED, IMAGE, _Camera

    rgb = np.random.default_rng(0).integers(0, 255, (4, 6, 3), dtype=np.uint8)
    camera = _Camera("/cam", SCENE)

    def raw(encoding, pixels, pad=0):
        rows = pixels.reshape(pixels.shape[0], -1)
        padded = np.concatenate([rows, np.zeros((rows.shape[0], pad), np.uint8)], axis=1)
        return SimpleNamespace(
            encoding=encoding, height=4, width=6, step=padded.shape[1], data=padded.tobytes()
        )

    assert np.array_equal(camera.image(IMAGE, raw("rgb8", rgb)), rgb)
    assert np.array_equal(camera.image(IMAGE, raw("bgr8", rgb[:, :, ::-1], pad=2)), rgb)
    alpha = np.concatenate([rgb[:, :, ::-1], np.full((4, 6, 1), 255, np.uint8)], axis=2)
    assert np.array_equal(camera.image(IMAGE, raw("bgra8", alpha)), rgb)
    grey = camera.image(IMAGE, raw("mono8", rgb[:, :, 0]))
    assert grey.shape == (4, 6, 3) and np.array_equal(grey[:, :, 2], rgb[:, :, 0])
    with pytest.raises(RecordingError, match="image encoding '16UC1' is not one of"):
        camera.image(IMAGE, raw("16UC1", rgb))
    short = raw("rgb8", rgb)
    short.data = short.data[:-5]
    with pytest.raises(RecordingError, match="shorter than its size says"):
        camera.image(IMAGE, short)
    with pytest.raises(RecordingError, match="compressed format 'tiff'"):
        camera.image(COMPRESSED, SimpleNamespace(format="tiff", data=b"II*"))
    with pytest.raises(RecordingError, match="does not decode"):
        camera.image(COMPRESSED, SimpleNamespace(format="png", data=b"\x89PNG broken"))


@pytest.mark.parametrize(
    ("topic", "gap"),
    [("/joint_states", (0.5, 0.8)), ("/cam/wrist/compressed", (1.0, 1.3))],
)
def test_a_gap_over_the_maximum_age_fails_with_the_topic_time_and_age(tmp_path, topic, gap):
    path = tmp_path / "gap.mcap"
    write_mcap(path, seconds=2.0, drop={topic: [gap]})
    with pytest.raises(RecordingError) as error:
        read_all(path, mapping())
    message = str(error.value)
    assert message.startswith(f"gap.mcap: {topic}: at ")
    assert "ms old, over the 66.7 ms allowed (source.max_age_frames)" in message
    seconds = float(message.split(" at ")[1].split(" s ")[0])
    assert gap[0] < seconds < gap[1] + 0.1
    [recording] = read_recordings(path, mapping(max_age_frames=12))  # a looser limit: accepted
    assert recording.episode.frames == 60


def test_bad_bags_and_mappings_fail_clearly(bag, tmp_path):
    path, _ = bag
    with pytest.raises(RecordingError, match="joint\\(s\\) elbow not in the message"):
        read_all(path, mapping(state={"topic": "/joint_states", "names": ["elbow"]}))
    with pytest.raises(RecordingError, match="CompressedImage is not a JointState"):
        read_all(path, mapping(state={"topic": "/cam/wrist/compressed"}, cameras={}))
    with pytest.raises(RecordingError, match="topic /cam/wrist/compressed is mapped to two"):
        read_all(path, mapping(state={"topic": "/cam/wrist/compressed"}))
    with pytest.raises(RecordingError, match="/nowhere: no message in the recording"):
        read_all(path, mapping(cameras={"/nowhere": SCENE}))
    with pytest.raises(RecordingError, match=r"source.state: a table with a topic"):
        read_all(path, mapping(state="joint_states"))
    with pytest.raises(RecordingError, match=r"source.clock"):
        read_all(path, mapping(clock="wall"))
    cut = tmp_path / "cut.mcap"  # a recording stopped mid-write
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    with pytest.raises(RecordingError, match=r"^cut.mcap: not a readable MCAP file"):
        read_all(cut, mapping())
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"\x89MCAP0\r\n" + b"\x00" * 64)
    with pytest.raises(RecordingError, match=r"junk.mcap: not a readable MCAP file"):
        read_all(junk, mapping())
