"""Issue 15's acceptance for delivered videos: a delivery of 3 episodes x 2 cameras, decoded
at the timestamps lerobot 0.6.1 asks for with its tolerance, has the uploaded frames, exactly
when the uploads were remuxed, within codec loss when they were re-encoded."""

import numpy as np
import pytest

from datasets.models import Delivery
from tests.datasets import lerobot_loader
from tests.datasets.video_delivery import (
    CAMERAS,
    accepted_episode,
    assemble,
    camera_collection,
    camera_spec,
    decoded,
    download,
    episode_columns,
    video_bytes,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]

LENGTHS = (45, 30, 60)
# Re-encoding H.264 uploads to AV1 (crf 30): the mean absolute pixel error of each frame
# stays under 8 of 255 and no frame's PSNR falls under 28 dB.
MAX_MEAN_ABS_ERROR = 8.0
MIN_PSNR_DB = 28.0


def _delivered(fleet_operator, customer, capture, tmp_path, codec):
    collection = camera_collection(fleet_operator, customer, camera_spec(codec=codec))
    uploads = []
    for seed, length in enumerate(LENGTHS):
        videos = {
            key: video_bytes(length, seed * 10 + number) for number, key in enumerate(CAMERAS)
        }
        accepted_episode(collection, episode_columns(length, seed), videos, task="insert")
        uploads.append(videos)
    delivery = assemble(collection, capture)
    assert delivery.status == Delivery.Status.READY, delivery.failure_reason
    root = download(delivery, tmp_path)
    dataset = lerobot_loader.load(root)
    lerobot_loader.check_invariants(dataset)
    return root, dataset, uploads


def test_remuxed_videos_decode_to_the_uploaded_pixels_exactly(
    fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path
):
    root, dataset, uploads = _delivered(
        fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path, "h264"
    )
    for key in CAMERAS:
        delivered = lerobot_loader.camera_frames(root, dataset, key)
        assert [len(frames) for frames in delivered] == list(LENGTHS)
        for frames, videos in zip(delivered, uploads, strict=True):
            assert np.array_equal(frames, np.stack(decoded(videos[key])))
        assert dataset["info"]["features"][key]["info"]["video.codec"] == "h264"


def test_reencoded_videos_decode_to_the_uploaded_pixels_within_codec_loss(
    fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path
):
    root, dataset, uploads = _delivered(
        fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path, "av1"
    )
    for key in CAMERAS:
        assert dataset["info"]["features"][key]["info"]["video.codec"] == "av1"
        delivered = lerobot_loader.camera_frames(root, dataset, key)
        for frames, videos in zip(delivered, uploads, strict=True):
            expected = np.stack(decoded(videos[key])).astype(np.float64)
            error = np.abs(frames.astype(np.float64) - expected)
            assert error.mean(axis=(1, 2, 3)).max() < MAX_MEAN_ABS_ERROR
            mse = np.square(error).mean(axis=(1, 2, 3))
            assert (10 * np.log10(255.0**2 / np.maximum(mse, 1e-9))).min() > MIN_PSNR_DB


def test_a_frame_off_the_grid_violates_lerobots_tolerance(
    fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path
):
    root, dataset, _ = _delivered(
        fleet_operator, customer, django_capture_on_commit_callbacks, tmp_path, "h264"
    )
    episode = dataset["episodes"][1]
    key = CAMERAS[0]
    path = root / dataset["info"]["video_path"].format(
        video_key=key, chunk_index=0, file_index=episode[f"videos/{key}/file_index"]
    )
    start = episode[f"videos/{key}/from_timestamp"]
    assert len(lerobot_loader.decode_at(path, [start, start + 1 / 30])) == 2
    with pytest.raises(lerobot_loader.ToleranceViolation):
        lerobot_loader.decode_at(path, [start + 0.5 / 30])
