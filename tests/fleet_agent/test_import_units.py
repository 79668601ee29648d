"""The import pieces on their own (no platform): the journal, the episode-folder reader, the
registry's skip, the watch's settle rule, the progress output, the local-checks hook."""

import io
import json
import os
import sys
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleet_agent.episodes import make_episode
from fleet_agent.importers import base, parse_mapping, read_recordings
from fleet_agent.importers.base import Recording, RecordingError
from fleet_agent.importers.journal import (
    Journal,
    JournalBusy,
    JournalMismatch,
    default_path,
    idempotency_key,
)
from fleet_agent.importers.mapping import MappingError
from fleet_agent.importers.pipeline import Outcome, Target, _import_one, local_problems
from fleet_agent.importers.progress import TerminalProgress
from fleet_agent.importers.watch import FolderState

FOLDER = parse_mapping({"job": "j1", "format": "episode-folder", "operator": "op-1"})


def _write(folder, name, *, seconds=1.0, cameras=("wrist",), sidecar=None):
    episode = make_episode(action_dim=3, fps=20, seconds=seconds, seed=len(name))
    (folder / f"{name}.parquet").write_bytes(episode.data)
    for camera in cameras:
        (folder / f"{name}.{camera}.mp4").write_bytes(f"mp4 of {name} {camera}".encode())
    if sidecar is not None:
        (folder / f"{name}.json").write_text(sidecar)
    return episode


def test_the_journal_keeps_each_step_and_refuses_another_job_or_importer(tmp_path):
    path = tmp_path / "j.sqlite3"
    with Journal.open(path, "job-1") as journal:
        with pytest.raises(JournalBusy, match="in use by another import"):
            Journal.open(path, "job-1")
        journal.registered(
            "ep1", sha256="a" * 64, key="k1", episode_id="e1", declared={"d": 1}, upload={"u": 1}
        )
        journal.mark_sent("ep1", "parquet", 1, '"etag1"')
        journal.mark_sent("ep1", "observation.images.wrist", 0, "")
        assert journal.sent("ep1") == {
            ("parquet", 1): '"etag1"',
            ("observation.images.wrist", 0): "",
        }
        journal.failed("ep1", "storage down")
        journal.failed("ep2", "not parquet")
    with pytest.raises(JournalMismatch, match="journal of job job-1"):
        Journal.open(path, "job-2")
    with Journal.open(path, "job-1") as journal:  # after a restart: all of it is there
        entry = journal.get("ep1")
        assert (entry.state, entry.episode_id, entry.error) == ("registered", "e1", "storage down")
        assert entry.upload == {"u": 1} and entry.declared == {"d": 1}
        assert journal.sent("ep1")[("parquet", 1)] == '"etag1"'
        journal.renewed("ep1", {"u": 2})
        assert journal.sent("ep1") == {} and journal.get("ep1").upload == {"u": 2}
        journal.completed("ep1", verdict="accepted", reasons=[])
        assert journal.is_completed("ep1") and not journal.is_completed("ep2")
        assert journal.get("ep2").state == "failed" and journal.get("ep2").episode_id is None
        assert [e.source_id for e in journal.entries()] == ["ep1", "ep2"]


def test_the_idempotency_key_is_derived_from_job_source_and_bytes(monkeypatch, tmp_path):
    key = idempotency_key("job", "ep1", "a" * 64)
    assert key == idempotency_key("job", "ep1", "a" * 64) and len(key) <= 255
    others = {idempotency_key("job2", "ep1", "a" * 64), idempotency_key("job", "ep2", "a" * 64)}
    assert key not in others | {idempotency_key("job", "ep1", "b" * 64)}
    monkeypatch.setenv("FLEET_AGENT_STATE_DIR", str(tmp_path))
    assert default_path("j9") == tmp_path / "imports" / "j9.sqlite3"


def test_the_episode_folder_reader(tmp_path):
    written = _write(tmp_path, "b", cameras=("wrist", "scene"), sidecar='{"operator": "op-9"}')
    _write(tmp_path, "a")
    (tmp_path / "b.x.y.mp4").write_bytes(b"not a camera: a dotted name")
    (tmp_path / "c.parquet").write_bytes(b"garbage")
    _write(tmp_path, "d", sidecar="{not json")

    items = list(read_recordings(tmp_path, FOLDER))

    assert [getattr(i, "source_id", None) for i in items] == ["a", "b", "c", "d"]
    b = items[1]
    assert b.episode.data == written.data and b.episode.sha256 == written.sha256
    assert (b.episode.fps, b.episode.frames, b.episode.action_dim) == (20, 20, 3)
    assert sorted(b.episode.videos) == ["observation.images.scene", "observation.images.wrist"]
    assert b.operator == "op-9" and b.task_instruction is None
    assert {f.name for f in b.files} == {"b.parquet", "b.scene.mp4", "b.wrist.mp4", "b.json"}
    assert isinstance(items[2], RecordingError) and "not a readable parquet" in str(items[2])
    assert isinstance(items[3], RecordingError) and "d.json is not JSON" in str(items[3])
    # the journal's finished ones are not even read
    assert [i.source_id for i in read_recordings(tmp_path, FOLDER, skip=lambda s: s != "c")] == [
        "c"
    ]


def test_the_episode_folder_frame_rate_and_options(tmp_path):
    table = pa.table({"timestamp": pa.array([0.0, 0.0], pa.float32())})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    (tmp_path / "still.parquet").write_bytes(sink.getvalue())
    (item,) = read_recordings(tmp_path, FOLDER)
    assert "frame rate cannot be told" in str(item)
    with_fps = parse_mapping({"job": "j", "format": "episode-folder", "source": {"fps": 15}})
    (item,) = read_recordings(tmp_path, with_fps)
    assert item.episode.fps == 15
    bad = parse_mapping({"job": "j", "format": "episode-folder", "source": {"rate": 15}})
    with pytest.raises(RecordingError, match="rate: unknown option"):
        list(read_recordings(tmp_path, bad))
    with pytest.raises(RecordingError, match="not a folder"):
        list(read_recordings(tmp_path / "missing", FOLDER))
    (tmp_path / "day2").mkdir()
    _write(tmp_path / "day2", "ep")
    recursive = parse_mapping(
        {"job": "j", "format": "episode-folder", "source": {"recursive": True}}
    )
    assert [i.source_id for i in read_recordings(tmp_path, recursive)] == ["day2/ep", "still"]


def test_a_reader_without_skip_is_filtered_and_its_yielded_errors_pass(monkeypatch):
    def plain(source, mapping):
        yield RecordingError("broken", source_id="x")
        yield Recording("y", make_episode(action_dim=2, seconds=1, seed=1))
        yield Recording("z", make_episode(action_dim=2, seconds=1, seed=2))

    monkeypatch.setitem(base.READERS, "plain", plain)
    mapping = parse_mapping({"job": "j", "format": "plain"})
    items = list(read_recordings(".", mapping, skip=lambda s: s == "y"))
    assert [(type(i).__name__, i.source_id) for i in items] == [
        ("RecordingError", "x"),
        ("Recording", "z"),
    ]
    with pytest.raises(RecordingError, match=r"unknown format 'nope'.*episode-folder"):
        read_recordings(".", parse_mapping({"job": "j", "format": "nope"}))


def test_the_mapping_names_a_robot():
    assert parse_mapping({"job": "j", "format": "f", "robot": "fr3-01"}).robot == "fr3-01"
    with pytest.raises(MappingError, match="robot: must be a string"):
        parse_mapping({"job": "j", "format": "f", "robot": 3})


def test_a_file_is_settled_once_unchanged_for_the_settle_time(tmp_path):
    now = [1000.0]
    state = FolderState(tmp_path, 5.0, clock=lambda: now[0])
    old, new = tmp_path / "old.parquet", tmp_path / "new.parquet"
    old.write_bytes(b"1")
    os.utime(old, (0, 0))  # written long ago: settled from the start
    new.write_bytes(b"1")
    state.scan()
    assert state.settled(old) and not state.settled(new) and not state.all_settled()
    now[0] += 6
    state.scan()
    assert state.settled(new) and state.all_settled()
    new.write_bytes(b"12")  # written again: 5 s more
    state.scan()
    assert not state.settled(new)
    recording = Recording("new", make_episode(action_dim=2, seconds=1, seed=1), files=(old,))
    assert state.ready(recording)  # its own files are settled, whatever else changes
    assert not state.ready(RecordingError("x"))  # unknown files: the whole folder must settle
    fingerprint = state.fingerprint()
    now[0] += 6
    state.scan()
    assert state.fingerprint() != fingerprint  # settling is a change: it triggers a pass


def test_progress_draws_a_bar_only_on_a_terminal():
    outcome = Outcome("ep1", "imported", episode_id="e1", verdict="uploaded")
    for tty, bar in ((True, True), (False, False)):
        stream = io.StringIO()
        progress = TerminalProgress(stream, tty=tty)
        progress("begin", {"source_id": "ep1", "bytes": 2 * 2**20})
        progress("sent", {"bytes": 2**20})
        progress("sent", {"bytes": 2**20})
        progress("done", {"outcome": outcome})
        text = stream.getvalue()
        assert ("\r[##############################] 100% ep1 2.0/2.0 MiB" in text) is bar
        assert text.endswith("imported ep1 -> episode e1 (uploaded, awaiting QA)\n")


class _NoUploads:
    def __getattr__(self, name):
        raise AssertionError(f"the platform was called ({name}) for a locally rejected episode")


def test_local_checks_when_present_stop_a_bad_episode_before_upload(monkeypatch, tmp_path):
    recording = Recording("ep1", make_episode(action_dim=2, seconds=1, seed=1))
    job = {"id": "j1", "site": "s1", "stream_spec": {}}
    embodiment = {"slug": "arm", "action_dim": 2, "content_qa": {}}
    assert local_problems(recording, job, embodiment) == []  # a clean episode: no problem
    module = types.ModuleType("fleet_agent.importers.local_checks")
    seen = []

    def check_recording(rec, j, e):
        seen.append(e)
        return [
            {"code": "state_jump", "message": "joint 2 jumps 50 rad at frame 10"},
            "frozen_signal",
        ]

    module.check_recording = check_recording
    monkeypatch.setitem(sys.modules, "fleet_agent.importers.local_checks", module)
    with Journal.open(tmp_path / "j.sqlite3", "j1") as journal:
        target = Target(job=job, robot_id="r1", embodiment=embodiment)
        outcome = _import_one(_NoUploads(), FOLDER, target, journal, recording, lambda e, i: None)
        assert outcome.status == "failed"
        assert outcome.message == (
            "local QA: state_jump: joint 2 jumps 50 rad at frame 10; frozen_signal"
        )
        assert journal.get("ep1").state == "failed"
    assert seen == [embodiment]  # the job's embodiment reached the checks


def test_a_parquet_sidecar_must_be_an_object_of_known_keys(tmp_path):
    _write(tmp_path, "e", sidecar=json.dumps({"operator": "op-1", "weather": "sunny"}))
    (item,) = read_recordings(tmp_path, FOLDER)
    assert "unknown key 'weather'" in str(item) and item.source_id == "e"


class _DownPlatform:
    """Answers the job and robot listings, then is unreachable for every registration."""

    def __init__(self, stop, after: int):
        self.stop, self.after, self.registrations = stop, after, 0

    def jobs(self):
        return [{"id": "j1", "status": "assigned", "site": "s1", "embodiment": "franka-fr3"}]

    def robots(self):
        return [{"id": "r1", "name": "fr3", "site": "s1", "embodiment": "franka-fr3"}]

    def embodiments(self):
        return {}  # no catalog entry for the job's embodiment: checked without one

    def register_episode_replayed(self, job_id, body, key):
        from fleet_agent.client import TransientError

        self.registrations += 1
        if self.registrations >= self.after:
            self.stop.set()
        raise TransientError("POST .../episodes failed after 6 tries: ConnectionRefusedError")


def test_the_watcher_rides_out_a_platform_outage(monkeypatch, tmp_path):
    import threading

    from fleet_agent.importers import watch

    monkeypatch.setattr(watch, "OUTAGE_PAUSE_SECONDS", 0.01)
    folder = tmp_path / "watched"
    folder.mkdir()
    _write(folder, "ep", cameras=())
    os.utime(folder / "ep.parquet", (0, 0))  # long finished
    stop, events = threading.Event(), []
    platform = _DownPlatform(stop, after=2)
    with Journal.open(tmp_path / "j.sqlite3", "j1") as journal:
        total = watch.watch_folder(
            platform,
            FOLDER,
            folder,
            journal,
            settle_seconds=0,
            poll_seconds=0.01,
            stop=stop,
            progress=lambda event, info: events.append((event, info)),
        )
        assert journal.get("ep") is None  # nothing registered: nothing noted
    assert platform.registrations == 2  # the pass was tried again after the outage
    errors = [info["message"] for event, info in events if event == "error"]
    assert len(errors) == 2 and "platform cannot be reached" in errors[0]
    assert total.outcomes == []


def test_a_recording_changed_since_its_registration_is_refused_before_any_upload(tmp_path):
    recording = Recording("ep1", make_episode(action_dim=2, seconds=1, seed=1))
    job = {"id": "j1", "site": "s1", "stream_spec": {}}
    with Journal.open(tmp_path / "j.sqlite3", "j1") as journal:
        journal.registered(
            "ep1",
            sha256="0" * 64,
            key="k",
            episode_id="e1",
            declared={"sha256": "0" * 64, "videos": []},  # what was declared then
            upload={"method": "single"},
        )
        target = Target(job=job, robot_id="r1")
        outcome = _import_one(_NoUploads(), FOLDER, target, journal, recording, lambda e, i: None)
        assert outcome.status == "failed"
        assert "changed since it was registered as episode e1" in outcome.message
        assert journal.get("ep1").episode_id == "e1"  # still that episode's, for a fix


def test_encoding_readers_default_to_the_codec_the_order_is_delivered_in():
    from fleet_agent.importers.pipeline import in_delivered_codec

    job = {"stream_spec": {"video_codec": "av1"}}
    lerobot = parse_mapping({"job": "j", "format": "lerobot"})
    assert in_delivered_codec(lerobot, job).source == {"video_codec": "av1"}
    chosen = parse_mapping({"job": "j", "format": "mcap", "source": {"video_codec": "h264"}})
    assert in_delivered_codec(chosen, job).source == {"video_codec": "h264"}  # the mapping wins
    folder = parse_mapping({"job": "j", "format": "episode-folder"})
    assert in_delivered_codec(folder, job).source == {}  # it encodes nothing
    assert in_delivered_codec(lerobot, {"stream_spec": {"video_codec": "hevc"}}).source == {}
