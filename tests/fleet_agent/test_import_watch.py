"""`fleet-agent watch`: a recording written slowly is imported once it has stopped changing,
not before (and its half-written parquet is never reported as a corrupt recording); the
command's `--once` imports what is there and exits. Against the running platform."""

import threading
import time

import pytest

from datasets.models import Episode
from fleet_agent.client import ApiClient
from fleet_agent.importers import load_mapping
from fleet_agent.importers.journal import Journal
from fleet_agent.importers.watch import watch_folder
from tests.fleet_agent.importing import held_job, write_recording
from tests.fleet_agent.test_integration import operator as operator
from tests.fleet_agent.test_integration import platform as platform

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
SETTLE = 1.5


def _wait_for(predicate, seconds=60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_a_slowly_written_recording_is_imported_once_stable(platform, operator, customer, tmp_path):
    held = held_job(platform, operator, customer, tmp_path)
    folder, staging = tmp_path / "watched", tmp_path / "staging"
    folder.mkdir()
    first = write_recording(folder, "a_first", seed=71)
    slow = write_recording(staging, "b_slow", seed=72)  # written elsewhere, copied slowly
    client = ApiClient(held.agent.config.base_url, held.agent.config.api_key)
    mapping = load_mapping(held.mapping_path)
    passes, stop = [], threading.Event()

    with Journal.open(tmp_path / "journal.sqlite3", mapping.job) as journal:
        watcher = threading.Thread(
            target=lambda: passes.append(
                watch_folder(
                    client,
                    mapping,
                    folder,
                    journal,
                    settle_seconds=SETTLE,
                    poll_seconds=0.2,
                    stop=stop,
                    on_pass=passes.append,
                )
            )
        )
        watcher.start()
        try:
            assert _wait_for(lambda: Episode.objects.filter(sha256=first["sha256"]).exists())
            last_write = _copy_slowly(staging, folder, "b_slow", pause=SETTLE / 2)
            assert not Episode.objects.filter(sha256=slow["sha256"]).exists()
            assert _wait_for(lambda: Episode.objects.filter(sha256=slow["sha256"]).exists())
        finally:
            stop.set()
            watcher.join(30)

    episode = Episode.objects.get(sha256=slow["sha256"])
    assert episode.created_at.timestamp() >= last_write + SETTLE - 0.05  # not before stable
    total = passes[-1]
    assert total.count("imported") == 2 and total.count("failed") == 0, total.as_dict()
    waited = {o.source_id for p in passes[:-1] for o in p.outcomes if o.status == "waiting"}
    assert "b_slow" in waited  # seen while being written, and left alone
    assert Episode.objects.filter(order=held.order, status="accepted").count() == 2


def _copy_slowly(staging, folder, name, *, pause: float) -> float:
    """Copy each file of the recording in four chunks, `pause` apart; the last write's time."""
    last = 0.0
    for source in sorted(staging.glob(f"{name}.*")):
        data = source.read_bytes()
        quarter = len(data) // 4 + 1
        with open(folder / source.name, "wb") as target:
            for start in range(0, len(data), quarter):
                time.sleep(pause)
                target.write(data[start : start + quarter])
                target.flush()
                last = time.time()
    return last


def test_watch_once_imports_what_is_there_and_exits(platform, operator, customer, tmp_path, capsys):
    from fleet_agent import cli

    held = held_job(platform, operator, customer, tmp_path)
    folder = tmp_path / "watched"
    written = write_recording(folder, "only", seed=81)
    args = ["--config", str(held.config_path), "--mapping", str(held.mapping_path)]
    args += ["--journal", str(tmp_path / "j.sqlite3"), "--once", "--settle-seconds", "0.5"]

    assert cli.main(["watch", *args, str(folder)]) == 0

    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("imported only -> episode ")
    assert out[-1].startswith("watch: 1 imported, 0 resumed, 0 skipped, 0 failed;")
    assert Episode.objects.get(sha256=written["sha256"]).status == "accepted"
    assert cli.main(["watch", *args, str(folder)]) == 0  # again: nothing new to do
    assert capsys.readouterr().out.startswith("watch: 0 imported")
    assert Episode.objects.filter(order=held.order).count() == 1


def test_links_leading_out_of_the_watched_folder_are_not_imported(
    platform, operator, customer, tmp_path, capsys
):
    from fleet_agent import cli

    held = held_job(platform, operator, customer, tmp_path)
    folder, elsewhere = tmp_path / "watched", tmp_path / "elsewhere"
    written = write_recording(folder, "inside", seed=83)
    secret = write_recording(elsewhere, "secret", seed=84)  # a clean episode QA would accept
    for file in elsewhere.iterdir():  # linked.parquet, linked.scene.mp4, ... -> elsewhere
        (folder / file.name.replace("secret", "linked")).symlink_to(file)
    args = ["--config", str(held.config_path), "--mapping", str(held.mapping_path)]
    args += ["--journal", str(tmp_path / "j.sqlite3"), "--once", "--settle-seconds", "0.5"]

    assert cli.main(["watch", *args, str(folder)]) == 3  # done, a recording failed

    out = capsys.readouterr().out
    assert f"failed   linked: linked: linked.parquet is a symbolic link to {elsewhere}" in out
    assert "outside the source (not followed)" in out
    assert "watch: 1 imported, 0 resumed, 0 skipped, 1 failed;" in out
    episodes = Episode.objects.filter(order=held.order)
    assert [e.sha256 for e in episodes] == [written["sha256"]]
    assert not Episode.objects.filter(sha256=secret["sha256"]).exists()
