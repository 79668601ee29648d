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
