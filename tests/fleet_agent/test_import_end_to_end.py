"""From a fleet's own recordings to a delivered dataset, per format: real files (a LeRobot v3.0
dataset by our writer, ALOHA HDF5 files, ROS 2 MCAP bags), read by the importers, checked
locally, registered and uploaded to the platform (local S3 server), accepted by its QA, and
compared after delivery: values equal, frames bit-exact where the clips were copied, within
codec loss of the raw camera frames where they had to be encoded."""

import numpy as np
import pytest

from datasets.models import Episode
from fleet_agent.importers import parse_mapping
from fleet_agent.importers.local_checks import check_recording
from tests.datasets import lerobot_loader
from tests.fleet_agent.import_files import (
    MCAP_SOURCE,
    SCENE,
    START_NS,
    WRIST,
    read_all,
    spec,
    write_aloha,
    write_lerobot,
    write_mcap,
)
from tests.fleet_agent.import_platform import (
    codec_loss,
    decoded,
    deliver,
    delivered_episodes,
    import_collection,
    same_frames,
    upload,
    vectors,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]
CAMERAS = (SCENE, WRIST)


def _import(collection, recordings, capture):
    job = {"stream_spec": collection.order.stream_spec}
    for recording in recordings:
        assert check_recording(recording, job) == [], recording.source_id
        episode = upload(collection, recording, capture)
        assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
        assert episode.frames == recording.episode.frames


def test_a_lerobot_av1_dataset_is_delivered_with_its_values_and_bit_exact_frames(
    fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path
):
    source_root = tmp_path / "recorded"
    written = write_lerobot(source_root, [45, 52], codec="av1")  # lerobot-record's default
    source = lerobot_loader.load(source_root)
    source_frames = {key: lerobot_loader.camera_frames(source_root, source, key) for key in CAMERAS}
    collection = import_collection(fleet_operator, customer, spec(force=True, codec="av1"))
    mapping = parse_mapping(
        {"job": str(collection.job.id), "format": "lerobot", "source": {"video_codec": "av1"}}
    )
    recordings = read_all(source_root, mapping)
    assert all(r.video_modes == {SCENE: "remux", WRIST: "remux"} for r in recordings)
    _import(collection, recordings, django_capture_on_commit_callbacks)

    root, dataset = deliver(collection, django_capture_on_commit_callbacks, tmp_path / "delivered")
    delivered = delivered_episodes(root, dataset, CAMERAS)
    assert {row["tasks"][0] for row in dataset["episodes"]} == {task for _, task in written}
    for number, (columns, _) in enumerate(written):
        episode = delivered[len(columns["frame_index"])]
        assert np.array_equal(episode["observation.state"], columns["observation.state"])
        assert np.array_equal(episode["action"], columns["action"])
        for key in CAMERAS:  # copied packets all the way: the recorded pixels themselves
            assert same_frames(episode["frames"][key], source_frames[key][number]), key


def test_aloha_hdf5_files_are_delivered_with_their_values_and_frames(
    fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path
):
    written = [write_aloha(tmp_path / f"ep_{n}.hdf5", 40 + 7 * n, seed=n) for n in range(2)]
    collection = import_collection(fleet_operator, customer, spec())
    mapping = parse_mapping(
        {
            "job": str(collection.job.id),
            "format": "aloha-hdf5",
            "task_instruction": "insert the peg",
            "source": {"fps": 30, "cameras": {"cam_high": SCENE, "cam_wrist": WRIST}},
        }
    )
    recordings = read_all(tmp_path, mapping)
    _import(collection, recordings, django_capture_on_commit_callbacks)

    root, dataset = deliver(collection, django_capture_on_commit_callbacks, tmp_path / "delivered")
    delivered = delivered_episodes(root, dataset, CAMERAS)
    for recording, (columns, images) in zip(recordings, written, strict=True):
        episode = delivered[recording.episode.frames]
        assert np.array_equal(episode["observation.state"], columns["observation.state"])
        assert np.array_equal(episode["action"], columns["action"])
        for camera, key in (("cam_high", SCENE), ("cam_wrist", WRIST)):
            # the delivery copied the importer's H.264 packets: its frames are the upload's
            assert same_frames(episode["frames"][key], decoded(recording.episode.videos[key]))
            assert codec_loss(episode["frames"][key], list(images[camera])) < 10


def test_a_ros2_mcap_bag_is_delivered_aligned_with_its_frames(
    fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path
):
    bags = [write_mcap(tmp_path / f"run_{n}.mcap", seconds=1.5 + n / 2, seed=n) for n in range(2)]
    collection = import_collection(fleet_operator, customer, spec())
    mapping = parse_mapping(
        {"job": str(collection.job.id), "format": "mcap", "source": MCAP_SOURCE}
    )
    recordings = read_all(tmp_path, mapping)
    assert [r.source_id for r in recordings] == ["run_0.mcap", "run_1.mcap"]
    _import(collection, recordings, django_capture_on_commit_callbacks)

    root, dataset = deliver(collection, django_capture_on_commit_callbacks, tmp_path / "delivered")
    delivered = delivered_episodes(root, dataset, CAMERAS)
    for recording, written in zip(recordings, bags, strict=True):
        episode = delivered[recording.episode.frames]
        assert np.array_equal(episode["observation.state"], vectors(recording, "observation.state"))
        assert np.array_equal(episode["action"], vectors(recording, "action"))
        frame_times = START_NS + 3_000_000 + np.arange(recording.episode.frames) * 10**9 // 30
        state_times = np.array([t for t, _ in written["/joint_states"]])
        latest = np.searchsorted(state_times, frame_times, side="right") - 1
        recorded = np.stack([written["/joint_states"][i][1] for i in latest]).astype(np.float32)
        assert np.array_equal(episode["observation.state"], recorded)
        for topic, key in MCAP_SOURCE["cameras"].items():
            assert same_frames(episode["frames"][key], decoded(recording.episode.videos[key]))
            times = np.array([t for t, _ in written[topic]])
            shown = np.searchsorted(times, frame_times, side="right") - 1
            images = [written[topic][i][1] for i in shown]
            assert codec_loss(episode["frames"][key], images) < 10
