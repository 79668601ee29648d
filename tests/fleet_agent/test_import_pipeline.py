"""The import pipeline against the running platform (live_server, local S3, eager QA): a
folder of camera episodes imported, accepted, counted once; a re-run sends nothing; a lost
journal gets the same episodes back by Idempotency-Key; bad recordings are reported and
skipped while the rest go up."""

import time
from pathlib import Path

import pytest

from datasets import storage
from datasets.models import Episode, EpisodeVideo
from fleet_agent.client import ApiClient
from fleet_agent.importers import load_mapping
from fleet_agent.importers.journal import Journal, idempotency_key
from fleet_agent.importers.pipeline import import_recordings
from fleets.models import Job
from marketplace.models import IdempotencyKey
from tests.fleet_agent.importing import CAMERAS, FPS, held_job, write_recording
from tests.fleet_agent.test_integration import operator as operator
from tests.fleet_agent.test_integration import platform as platform

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _objects(prefix: str) -> set[str]:
    listed = storage.client().list_objects_v2(Bucket=storage.bucket(), Prefix=prefix)
    return {item["Key"] for item in listed.get("Contents", [])}


def _import(held, folder, journal_path):
    client = ApiClient(held.agent.config.base_url, held.agent.config.api_key)
    mapping = load_mapping(held.mapping_path)
    with Journal.open(journal_path, mapping.job) as journal:
        return import_recordings(client, mapping, folder, journal)


def test_a_folder_is_imported_accepted_and_counted_once(platform, operator, customer, tmp_path):
    held = held_job(platform, operator, customer, tmp_path)
    folder = tmp_path / "recordings"
    written = {f"pick_{i:03d}": write_recording(folder, f"pick_{i:03d}", seed=i) for i in range(3)}

    summary = _import(held, folder, tmp_path / "journal.sqlite3")

    assert summary.count("imported") == 3, summary.as_dict()
    assert summary.verdicts() == {"accepted": 3}
    episodes = Episode.objects.filter(order=held.order)
    assert sorted(e.sha256 for e in episodes) == sorted(w["sha256"] for w in written.values())
    assert {e.status for e in episodes} == {"accepted"}
    assert {e.task_instruction for e in episodes} == {"insert the peg"}
    assert {e.operator for e in episodes} == {"op-0", "op-1", "op-2"}  # the sidecars'
    for episode in episodes:
        source = next(w for w in written.values() if w["sha256"] == episode.sha256)
        videos = EpisodeVideo.objects.filter(episode=episode).order_by("camera_key")
        assert [v.camera_key for v in videos] == list(CAMERAS)
        for video in videos:
            assert video.uploaded_at is not None
            assert storage.object_sha256(video.stored_key or video.upload_key) == video.sha256
            assert video.size_bytes == len(source["videos"][video.camera_key])
        assert episode.frames == source["frames"] and episode.fps == FPS
    job = Job.objects.get(pk=held.job_id)
    assert job.accepted_seconds == sum(e.duration_seconds for e in episodes)
    prefix = f"orders/{held.order.id}/"
    stored = _objects(prefix)
    sent = summary.bytes_sent
    assert sent == sum(e.size_bytes for e in episodes) + sum(
        len(v) for w in written.values() for v in w["videos"].values()
    )

    again = _import(held, folder, tmp_path / "journal.sqlite3")

    assert again.count("skipped") == 3 and again.count("imported") == 0, again.as_dict()
    assert again.bytes_sent == 0
    assert Episode.objects.filter(order=held.order).count() == 3
    assert _objects(prefix) == stored
    job.refresh_from_db()
    assert job.accepted_seconds == sum(e.duration_seconds for e in episodes)


def test_a_lost_journal_gets_the_same_episodes_back(platform, operator, customer, tmp_path):
    held = held_job(platform, operator, customer, tmp_path)
    folder = tmp_path / "recordings"
    for i in range(2):
        write_recording(folder, f"ep{i}", seed=10 + i)
    first = _import(held, folder, tmp_path / "one.sqlite3")
    ids = sorted(o.episode_id for o in first.outcomes)

    again = _import(held, folder, tmp_path / "another.sqlite3")  # the journal is gone

    assert again.count("resumed") == 2, again.as_dict()
    assert sorted(o.episode_id for o in again.outcomes) == ids  # replayed, not registered
    assert again.bytes_sent == 0  # the platform says they are done: nothing is sent again
    assert {o.verdict for o in again.outcomes} == {"accepted"}
    assert Episode.objects.filter(order=held.order).count() == 2
    keys = set(
        IdempotencyKey.objects.filter(organization=operator.organization).values_list(
            "key", flat=True
        )
    )
    wanted = {
        idempotency_key(held.job_id, o.source_id, sha)
        for o, sha in zip(
            first.outcomes,
            [Episode.objects.get(pk=o.episode_id).sha256 for o in first.outcomes],
            strict=True,
        )
    }
    assert wanted <= keys  # the episodes were registered under the derived keys


def test_bad_recordings_are_reported_and_the_rest_imported(platform, operator, customer, tmp_path):
    held = held_job(platform, operator, customer, tmp_path)
    folder = tmp_path / "recordings"
    write_recording(folder, "a_good", seed=21)
    write_recording(folder, "b_corrupt", seed=22)
    (folder / "b_corrupt.parquet").write_bytes(b"PAR1 this is not a parquet file")
    write_recording(folder, "c_no_video", seed=23)
    (folder / "c_no_video.scene.mp4").unlink()
    write_recording(folder, "d_good", seed=24)
    journal_path = tmp_path / "journal.sqlite3"

    summary = _import(held, folder, journal_path)

    failures = summary.as_dict()["failures"]
    assert summary.count("imported") == 2 and set(failures) == {"b_corrupt", "c_no_video"}
    assert "not a readable parquet file" in failures["b_corrupt"]
    assert "no video for camera observation.images.scene" in failures["c_no_video"]
    assert Episode.objects.filter(order=held.order).count() == 2  # nothing sent for the bad
    with Journal.open(journal_path, held.job_id) as journal:
        assert journal.get("b_corrupt").state == "failed"
        assert "not a readable parquet" in journal.get("b_corrupt").error

    write_recording(folder, "b_corrupt", seed=22)  # the recorder writes it again, whole
    fixed = _import(held, folder, journal_path)

    assert fixed.count("imported") == 1 and fixed.count("skipped") == 2, fixed.as_dict()
    assert [o.source_id for o in fixed.outcomes if o.status == "failed"] == ["c_no_video"]
    assert Episode.objects.filter(order=held.order, status="accepted").count() == 3


def test_the_import_command_prints_a_line_per_recording(
    platform, operator, customer, tmp_path, capsys
):
    from fleet_agent import cli

    held = held_job(platform, operator, customer, tmp_path)
    folder = tmp_path / "recordings"
    write_recording(folder, "one", seed=31)
    (folder / "two.parquet").write_bytes(b"garbage")
    args = ["--config", str(held.config_path), "--mapping", str(held.mapping_path)]
    args += ["--journal", str(tmp_path / "j.sqlite3"), str(folder)]

    assert cli.main(["import", *args]) == 3  # done, one recording failed

    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("imported one -> episode ")
    assert out[0].endswith("(uploaded, awaiting QA)")
    assert out[1].startswith("failed   two: two: two.parquet is not a readable parquet")
    assert out[2].startswith("import: 1 imported, 0 resumed, 0 skipped, 1 failed;")
    assert out[2].endswith("QA: 1 accepted")  # the verdicts read back at the end
    assert "[####" not in "\n".join(out)  # no progress bar: the output is not a terminal
    assert Path(tmp_path / "j.sqlite3").exists()


def test_expired_upload_urls_are_renewed_once_and_every_file_sent(
    platform, operator, customer, tmp_path, settings
):
    settings.S3_UPLOAD_URL_EXPIRY_SECONDS = 2
    held = held_job(platform, operator, customer, tmp_path)
    folder = tmp_path / "recordings"
    written = write_recording(folder, "late", seed=91)
    calls = []

    class Counting(ApiClient):
        def send(self, method, url, **kwargs):
            calls.append((method, url.split("?", 1)[0]))
            return super().send(method, url, **kwargs)

    def stall_once(event, info):  # the machine stalls before the first PUT: the URLs expire
        if event == "begin" and not any(m == "PUT" for m, _ in calls):
            time.sleep(3.5)

    client = Counting(held.agent.config.base_url, held.agent.config.api_key)
    mapping = load_mapping(held.mapping_path)
    with Journal.open(tmp_path / "journal.sqlite3", mapping.job) as journal:
        summary = import_recordings(client, mapping, folder, journal, stall_once)
        kept = journal.get("late").upload

    assert summary.count("imported") == 1 and summary.verdicts() == {"accepted": 1}
    renewals = [url for method, url in calls if method == "POST" and url.endswith("/upload")]
    assert len(renewals) == 1
    puts = [url for method, url in calls if method == "PUT"]
    assert len(puts) == 1 + 3  # the refused one, then the parquet and both videos renewed
    episode = Episode.objects.get(sha256=written["sha256"])
    assert kept["url"].split("?")[0].endswith(episode.upload_key)  # the journal has the new URLs
    assert puts[0] != puts[1]  # a fresh key, not the expired URL again
    assert summary.bytes_sent == episode.size_bytes + sum(
        len(v) for v in written["videos"].values()
    )


def test_urls_renewed_by_a_run_that_died_are_renewed_again(platform, operator, customer, tmp_path):
    held = held_job(platform, operator, customer, tmp_path)
    folder = tmp_path / "recordings"
    written = write_recording(folder, "ep", seed=95)
    client = ApiClient(held.agent.config.base_url, held.agent.config.api_key)

    def renew_behind_its_back(event, info):  # as a run that renewed, then died unrecorded
        if event == "begin":
            client.renew_upload(str(Episode.objects.get(sha256=written["sha256"]).id))

    mapping = load_mapping(held.mapping_path)
    with Journal.open(tmp_path / "journal.sqlite3", mapping.job) as journal:
        summary = import_recordings(client, mapping, folder, journal, renew_behind_its_back)

    # the journal's URLs pointed at the old keys: `complete` said the files were missing,
    # the importer renewed and sent them all to the new keys
    assert summary.count("imported") == 1 and summary.verdicts() == {"accepted": 1}, (
        summary.as_dict()
    )
    assert Episode.objects.filter(order=held.order).count() == 1


def _foreign_recordings(fmt: str, folder: Path) -> dict:
    """Small real files of a foreign format and the mapping's [source] for them."""
    from tests.fleet_agent import import_files

    folder.mkdir(parents=True)
    if fmt == "lerobot":
        import_files.write_lerobot(folder, [40, 47])
        return {}
    if fmt == "aloha-hdf5":
        for n in range(2):
            import_files.write_aloha(folder / f"ep_{n}.hdf5", 40 + 7 * n, seed=n)
        return {"fps": FPS, "cameras": {"cam_high": CAMERAS[0], "cam_wrist": CAMERAS[1]}}
    for n in range(2):
        import_files.write_mcap(folder / f"run_{n}.mcap", seconds=1.5 + n / 2, seed=n)
    return dict(import_files.MCAP_SOURCE)


@pytest.mark.parametrize("fmt", ["lerobot", "aloha-hdf5", "mcap"])
def test_each_foreign_format_goes_through_the_pipeline_and_is_accepted(
    platform, operator, customer, tmp_path, fmt
):
    import tomllib

    held = held_job(platform, operator, customer, tmp_path)
    for camera in held.order.stream_spec["cameras"]:  # the test files' small frames
        camera.update(min_width=64, min_height=48)
    held.order.save(update_fields=["stream_spec"])
    folder = tmp_path / "recorded"
    source = _foreign_recordings(fmt, folder)
    lines = [f'job = "{held.job_id}"', f'format = "{fmt}"', 'operator = "op-3"', "[source]"]
    for key, value in source.items():
        if isinstance(value, dict):
            continue
        lines.append(f"{key} = {value!r}".replace("'", '"'))
    for key, value in source.items():
        if isinstance(value, dict):
            lines.append(f"[source.{key}]")
            for inner, item in value.items():
                rendered = f'"{item}"' if isinstance(item, str) else str(item).replace("'", '"')
                lines.append(f'"{inner}" = {rendered}')
    held.mapping_path.write_text("\n".join(lines) + "\n")
    assert tomllib.loads(held.mapping_path.read_text())["source"] == source  # as written

    summary = _import(held, folder, tmp_path / "journal.sqlite3")

    assert summary.count("imported") == 2, summary.as_dict()
    assert summary.verdicts() == {"accepted": 2}, summary.as_dict()
    episodes = Episode.objects.filter(order=held.order)
    assert {e.status for e in episodes} == {"accepted"} and episodes.count() == 2
    assert {v.camera_key for v in EpisodeVideo.objects.filter(episode__in=episodes)} == set(CAMERAS)
    again = _import(held, folder, tmp_path / "journal.sqlite3")
    assert again.count("skipped") == 2 and again.bytes_sent == 0, again.as_dict()
