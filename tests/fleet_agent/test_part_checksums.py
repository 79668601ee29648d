"""The agent declares its parquet's part checksums (issue 19 item 3): against the platform
(live_server) with the checksum-keeping local S3 server, its multipart uploads carry each
part's SHA-256 and QA streams nothing; with a platform of another part size it registers
without them and QA streams the file, as before."""

import pytest

from datasets.models import Episode
from fleet_agent import FleetAgent, uploads
from marketplace.models import Organization
from tests.fleet_agent.test_integration import assert_delivered, config_for, paid_order

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def operator(make_tenant):
    return make_tenant(Organization.Kind.FLEET_OPERATOR)


@pytest.fixture
def small_parts(settings, monkeypatch):
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 20_000
    settings.EPISODE_MULTIPART_PART_BYTES = 16_000
    monkeypatch.setattr(uploads, "MULTIPART_FROM", 20_000)
    monkeypatch.setattr(uploads, "PART_BYTES", 16_000)


@pytest.mark.usefixtures("s3_keeping", "eager_celery", "small_parts")
def test_the_agents_parts_carry_checksums_and_qa_streams_nothing(live_server, operator, customer):
    agent = FleetAgent(config_for(live_server.url, operator.raw_key, episode_seconds=[12, 12]))
    agent.register()
    order = paid_order(customer, hours="0.01")

    summary = agent.run_once(max_seconds=120)

    assert summary.uploads_by_method["multipart"] == summary.episodes_uploaded >= 1
    assert summary.errors == []
    assert_delivered(order)
    for episode in Episode.objects.filter(order=order, status="accepted"):
        assert len(episode.part_sha256s) == -(-episode.size_bytes // 16_000)
        # the agent's files carry no column QA skips, so QA's ranges cover about the whole
        # file: streamed for the checksum as well, it would read about twice that
        assert episode.parts_sha256 and episode.qa_bytes_read < 1.5 * episode.size_bytes


@pytest.mark.usefixtures("s3", "eager_celery", "small_parts")
def test_with_another_part_size_the_agent_registers_without_checksums(
    live_server, operator, customer, monkeypatch
):
    monkeypatch.setattr(uploads, "PART_BYTES", 15_000)  # not the platform's 16,000
    agent = FleetAgent(config_for(live_server.url, operator.raw_key, episode_seconds=[12, 12]))
    agent.register()
    order = paid_order(customer, hours="0.01")

    summary = agent.run_once(max_seconds=120)

    assert summary.errors == []
    assert_delivered(order)
    accepted = Episode.objects.filter(order=order, status="accepted")
    assert accepted and all(e.part_sha256s == [] for e in accepted)
    assert all(e.qa_bytes_read >= 1.5 * e.size_bytes for e in accepted)  # streamed too
    assert all(e.parts_sha256 for e in accepted)  # computed by the stream


@pytest.mark.usefixtures("s3_keeping", "eager_celery")
def test_an_import_declares_part_checksums_and_a_lost_journal_gets_the_same_episodes(
    live_server, operator, customer, tmp_path, settings, monkeypatch
):
    from fleet_agent.client import ApiClient
    from fleet_agent.importers import load_mapping
    from fleet_agent.importers.journal import Journal
    from fleet_agent.importers.pipeline import import_recordings
    from tests.fleet_agent.importing import held_job, write_recording

    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 6_000
    settings.EPISODE_MULTIPART_PART_BYTES = 5_000
    monkeypatch.setattr(uploads, "MULTIPART_FROM", 6_000)
    monkeypatch.setattr(uploads, "PART_BYTES", 5_000)
    held = held_job(live_server.url, operator, customer, tmp_path)
    folder = tmp_path / "recordings"
    for i in range(2):
        write_recording(folder, f"ep{i}", seed=80 + i)

    def run(journal_path):
        client = ApiClient(held.agent.config.base_url, held.agent.config.api_key)
        mapping = load_mapping(held.mapping_path)
        with Journal.open(journal_path, mapping.job) as journal:
            return import_recordings(client, mapping, folder, journal)

    summary = run(tmp_path / "journal.sqlite3")

    assert summary.verdicts() == {"accepted": 2}, summary.as_dict()
    episodes = list(Episode.objects.filter(order=held.order))
    for episode in episodes:
        assert len(episode.part_sha256s) == -(-episode.size_bytes // 5_000) > 1
        assert episode.part_bytes == 5_000 and episode.parts_sha256
    again = run(tmp_path / "another-journal.sqlite3")  # the same Idempotency-Keys, replayed
    assert again.count("resumed") == 2, again.as_dict()
    assert Episode.objects.filter(order=held.order).count() == 2
