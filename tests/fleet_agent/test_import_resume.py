"""`fleet-agent import` killed with SIGKILL and run again: every episode is uploaded exactly
once. The importer is a real subprocess; every request it makes (to the platform and to the
local S3 server) goes through a counting proxy, which also holds the request the test kills
it in: a registration the platform has committed but whose answer never arrived, or a
multipart part in flight after earlier parts were sent."""

import os
import signal
import subprocess
import sys
import urllib.parse
from collections import Counter
from pathlib import Path

import pytest

from datasets.models import Episode
from tests.fleet_agent.importing import CAMERAS, CountingProxy, held_job, write_recording
from tests.fleet_agent.test_integration import operator as operator
from tests.fleet_agent.test_integration import platform as platform

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
FLEET_AGENT = str(Path(sys.executable).with_name("fleet-agent"))


def _start(held, folder: Path, journal: Path, proxy: CountingProxy) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "http_proxy")}
    env["http_proxy"] = proxy.url  # urllib sends every request through the proxy
    command = [FLEET_AGENT, "import", "--config", str(held.config_path)]
    command += ["--mapping", str(held.mapping_path), "--journal", str(journal), str(folder)]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _kill_when_held(process: subprocess.Popen, proxy: CountingProxy) -> None:
    assert proxy.held.wait(120), process.communicate(timeout=5)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    proxy.hold = None
    proxy.release.set()


def _run_to_end(held, folder, journal, proxy) -> str:
    process = _start(held, folder, journal, proxy)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, (out, err)
    return out


def _part(query: str) -> tuple[int, str]:
    """(part number, upload id) of a multipart part's PUT; (0, "") for a single PUT."""
    fields = urllib.parse.parse_qs(query)
    return int(fields.get("partNumber", ["0"])[0]), fields.get("uploadId", [""])[0]


def _registrations(proxy, job_id):
    return [p for p, _ in proxy.forwarded("POST", f"/fleet/jobs/{job_id}/episodes")]


def test_killed_mid_batch_every_episode_is_uploaded_once(platform, operator, customer, tmp_path):
    held = held_job(platform, operator, customer, tmp_path)
    folder, journal = tmp_path / "recordings", tmp_path / "journal.sqlite3"
    shas = [write_recording(folder, f"ep{i}", seed=40 + i)["sha256"] for i in range(5)]
    posts = Counter()

    def hold(method, path, query):  # the third registration: committed, answer withheld
        if method == "POST" and path.endswith(f"/jobs/{held.job_id}/episodes"):
            posts["n"] += 1
            return "after" if posts["n"] == 3 else None
        return None

    proxy = CountingProxy(hold)
    try:
        _kill_when_held(_start(held, folder, journal, proxy), proxy)
        assert Episode.objects.filter(order=held.order).count() == 3  # ep2 registered, no bytes
        assert Episode.objects.filter(order=held.order, status="accepted").count() == 2

        out = _run_to_end(held, folder, journal, proxy)
    finally:
        proxy.close()

    lines = out.splitlines()
    assert [line.split()[:2] for line in lines[:3]] == [
        ["resumed", "ep2"],
        ["imported", "ep3"],
        ["imported", "ep4"],
    ], out
    assert "2 imported, 1 resumed, 2 skipped, 0 failed" in lines[-1]
    episodes = Episode.objects.filter(order=held.order)
    assert sorted(e.sha256 for e in episodes) == sorted(shas)  # one episode per recording
    assert {e.status for e in episodes} == {"accepted"}
    # ep2 was registered twice with the same key: the platform replayed its first answer
    assert len(_registrations(proxy, held.job_id)) == 6
    puts = Counter(path for path, _ in proxy.forwarded("PUT"))
    assert len(puts) == 5 * (1 + len(CAMERAS)) and set(puts.values()) == {1}, puts
    assert not proxy.forwarded("POST", "/upload")  # no URL was renewed


def test_killed_mid_multipart_upload_resumes_the_parts_left(
    platform, operator, customer, tmp_path, settings
):
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 6_000
    settings.EPISODE_MULTIPART_PART_BYTES = 5_000
    held = held_job(platform, operator, customer, tmp_path)
    folder, journal = tmp_path / "recordings", tmp_path / "journal.sqlite3"
    shas = [write_recording(folder, f"ep{i}", seed=60 + i)["sha256"] for i in range(2)]
    held_part = {}

    def hold(method, path, query):  # the first upload's third part: parts 1 and 2 are up
        number = urllib.parse.parse_qs(query).get("partNumber", [""])[0]
        if method == "PUT" and number == "3" and not held_part:
            held_part["path"] = path
            return "before"
        return None

    proxy = CountingProxy(hold)
    try:
        _kill_when_held(_start(held, folder, journal, proxy), proxy)
        sent_before = [_part(q) for p, q in proxy.forwarded("PUT") if p == held_part["path"]]
        assert sorted(n for n, _ in sent_before) == [1, 2]

        out = _run_to_end(held, folder, journal, proxy)
    finally:
        proxy.close()

    assert "resumed  ep0" in out and "imported ep1" in out, out
    puts = proxy.forwarded("PUT")
    assert all(_part(q)[0] for _, q in puts)  # every file went multipart
    parts = Counter((path, *_part(query)) for path, query in puts)
    assert set(parts.values()) == {1}, parts  # no part went up twice
    numbers = sorted(n for p, n, _ in parts if p == held_part["path"])
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 3
    assert len({u for p, _, u in parts if p == held_part["path"]}) == 1  # the same upload
    assert not proxy.forwarded("POST", "/upload")  # resumed, not renewed
    episodes = Episode.objects.filter(order=held.order)
    assert sorted(e.sha256 for e in episodes) == sorted(shas)
    assert {e.status for e in episodes} == {"accepted"}
