"""The demo's once-mode check (demo_scenario._verify): every file fetched through its own
link and compared with manifest.json, every video decoded and its frames counted against
meta/info.json."""

import hashlib
import io
import json
import urllib.request

from marketplace.management import demo_scenario
from tests.datasets.videos import encode_mp4

VIDEO = "videos/observation.images.scene/chunk-000/file-{:03d}.mp4"


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


def verify(monkeypatch, files: dict[str, bytes], served: dict[str, bytes] | None = None):
    served = {**files, **(served or {})}
    manifest = {
        "files": [
            {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
            for p, d in files.items()
        ]
    }
    served["manifest.json"] = json.dumps(manifest).encode()
    monkeypatch.setattr(
        urllib.request,
        "urlopen",
        lambda url, timeout: io.BytesIO(served[url.removeprefix("memory://")]),
    )
    api, result = FakeApi(files, served), demo_scenario.DemoResult()
    verified = demo_scenario._verify(api, "d1", result)
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
