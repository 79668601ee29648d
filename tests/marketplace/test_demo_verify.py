"""The demo's once-mode check (demo_scenario._verify): every file fetched through its own
link and compared with manifest.json, every video decoded and its frames counted against
meta/info.json; with calibrated cameras, every episode's calibrations in the delivery."""

import hashlib
import io
import json
import urllib.request

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marketplace.management import demo_scenario
from tests.datasets.videos import encode_mp4

VIDEO = "videos/observation.images.scene/chunk-000/file-{:03d}.mp4"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def delivery(frames_per_file: list[int], total_frames: int) -> dict[str, bytes]:
    info = {
        "total_frames": total_frames,
        "features": {"observation.images.scene": {"dtype": "video"}},
    }
    files = {"meta/info.json": json.dumps(info).encode(), "data/file-000.parquet": b"rows"}
    for index, count in enumerate(frames_per_file):
        files[VIDEO.format(index)] = encode_mp4(count=count, width=64, height=48)
    return files


class FakeApi:
    """The download endpoint: a 302 to `memory://<path>` per request, each request kept."""

    def __init__(self, files: dict[str, bytes], served: dict[str, bytes]):
        self.files, self.served, self.asked = files, served, []

    def request(self, method, path, body=None, follow=True):
        asked = path.split("path=", 1)[1]
        self.asked.append(asked)
        return 302, {"Location": f"memory://{asked}"}, b""


def verify(
    monkeypatch,
    files: dict[str, bytes],
    served: dict[str, bytes] | None = None,
    *,
    calibrated: bool = False,
    listed: dict | None = None,
):
    served = {**files, **(served or {})}
    manifest = {
        "files": [
            {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
            for p, d in files.items()
        ],
        **(listed or {}),
    }
    served["manifest.json"] = json.dumps(manifest).encode()
    monkeypatch.setattr(
        urllib.request,
        "urlopen",
        lambda url, timeout: io.BytesIO(served[url.removeprefix("memory://")]),
    )
    api, result = FakeApi(files, served), demo_scenario.DemoResult()
    verified = demo_scenario._verify(api, "d1", result, calibrated=calibrated)
    return verified, result, api


def test_every_file_is_fetched_once_through_its_link_and_every_frame_counted(monkeypatch):
    files = delivery([12, 9, 7], total_frames=28)
    verified, result, api = verify(monkeypatch, files)
    assert result.problems == []
    assert verified == len(files)
    assert sorted(api.asked) == sorted(["manifest.json", *files])
    assert result.videos_verified == 1


def test_a_changed_file_and_a_missing_frame_are_reported(monkeypatch):
    files = delivery([12, 9, 7], total_frames=29)  # info.json counts one frame more
    served = {"data/file-000.parquet": b"ROWS"}  # storage hands back other bytes
    verified, result, _ = verify(monkeypatch, files, served)
    assert verified == len(files) - 1
    assert result.problems == [
        "data/file-000.parquet: bytes do not match the manifest",
        "observation.images.scene: 28 frames decoded, 29 in the dataset",
    ]
    assert result.videos_verified == 0


def test_a_changed_video_is_not_counted(monkeypatch):
    files = delivery([12, 9], total_frames=21)
    served = {VIDEO.format(1): encode_mp4(count=9, width=64, height=48, seed=5)}
    verified, result, _ = verify(monkeypatch, files, served)
    assert verified == len(files) - 1
    assert f"{VIDEO.format(1)}: bytes do not match the manifest" in result.problems
    assert "observation.images.scene: 12 frames decoded, 21 in the dataset" in result.problems


def episodes_naming(*calibration_ids: dict) -> bytes:
    sink = io.BytesIO()
    table = pa.table({"calibration_id": [json.dumps(ids) for ids in calibration_ids]})
    pq.write_table(table, sink)
    return sink.getvalue()


@pytest.mark.parametrize(
    ("shipped", "problem"),
    [
        ({"c1": {}, "c2": {}}, None),
        ({"c1": {}}, "episodes name calibrations ['c2']"),
        (None, "the order asks for calibrated cameras; none is delivered"),
    ],
)
def test_every_episodes_calibrations_are_delivered(monkeypatch, shipped, problem):
    files = delivery([12], total_frames=12)
    files[EPISODES] = episodes_naming({"wrist": "c1", "scene": "c2"}, {"wrist": "c1"})
    listed = {}
    if shipped is not None:
        files["meta/calibrations.json"] = json.dumps(shipped).encode()
        listed = {"calibrations": {"path": "meta/calibrations.json", "count": len(shipped)}}
    # when
    _, result, _ = verify(monkeypatch, files, calibrated=True, listed=listed)
    # then
    assert result.problems == ([problem] if problem else [])
    assert result.calibrations_verified == (len(shipped) if shipped is not None else 0)
