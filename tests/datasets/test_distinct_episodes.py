"""An accepted hour is a distinct demonstration, counted once and never past the job's target
(issue 14): duplicates, surplus and abandoned uploads, through the fleet API and real QA on the
local S3 server."""

from datetime import timedelta
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode
from datasets.services.sweep import qa_sweep
from fleets.models import Job
from tests.datasets.helpers import Collection, complete, put, upload_episode
from tests.faults.s3_proxy import FaultyS3Proxy

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]


def register_and_put(collection, data: bytes) -> str:
    response = collection.register(data)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert put(body["upload"], data) == 200
    return body["id"]


def test_the_same_file_uploaded_again_is_refused_and_never_counts_twice(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    # given: a job of 0.1 h (360 s) and one accepted 10 s episode
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    data = parquet_bytes(episode_table(frames=300, seed=1))
    first = upload_episode(collection, data, django_capture_on_commit_callbacks)
    assert first.status == Episode.Status.ACCEPTED
    # when: the fleet registers the very same file again
    again = collection.register(data)
    # then: refused before any byte is sent, pointing at the first episode
    assert again.status_code == 409
    assert again.json()["code"] == "duplicate_episode"
    assert str(first.id) in again.json()["message"]
    collection.job.refresh_from_db()
    assert collection.job.accepted_seconds == Decimal("10.000")


def test_two_uploads_of_one_file_racing_through_qa_count_once(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    # given: the same file registered twice while neither was uploaded (a retrying fleet)
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    data = parquet_bytes(episode_table(frames=300, seed=2))
    ids = [register_and_put(collection, data) for _ in range(2)]
    # when: both complete and go through QA
    decided = [
        complete(collection.operator.client, episode_id, django_capture_on_commit_callbacks)
        for episode_id in ids
    ]
    # then: the second is rejected as a duplicate; 10 s accrue, not 20
    assert [e.status for e in decided] == [Episode.Status.ACCEPTED, Episode.Status.REJECTED]
    assert [f["code"] for f in decided[1].qa_failures] == ["duplicate"]
    collection.job.refresh_from_db()
    collection.order.refresh_from_db()
    assert collection.job.accepted_seconds == Decimal("10.000")
    assert collection.order.accepted_seconds == Decimal("10.000")


def test_the_database_refuses_a_second_acceptance_of_one_file(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    data = parquet_bytes(episode_table(frames=300, seed=3))
    first = upload_episode(collection, data, django_capture_on_commit_callbacks)
    twin = Episode.objects.get(pk=first.pk)
    twin.pk = None
    twin.id = None
    with pytest.raises(IntegrityError), transaction.atomic():
        Episode.objects.create(
            **{
                f.name: getattr(twin, f.name)
                for f in Episode._meta.concrete_fields
                if f.name not in ("id", "created_at")
            }
        )


def test_a_job_takes_no_more_episodes_in_flight_than_its_remaining_time(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    # given: a job of 0.01 h (36 s); two 20 s episodes registered (40 s on the way)
    collection = Collection(fleet_operator, customer, target_hours="0.01")
    files = [parquet_bytes(episode_table(frames=600, seed=seed)) for seed in range(4)]
    ids = [register_and_put(collection, data) for data in files[:2]]
    # when: a third one is registered
    third = collection.register(files[2])
    # then: refused, saying why; nothing was stored for it
    assert third.status_code == 409 and third.json()["code"] == "job_fully_booked"
    assert Episode.objects.filter(job=collection.job).count() == 2
    # when: QA accepts both
    for episode_id in ids:
        complete(collection.operator.client, episode_id, django_capture_on_commit_callbacks)
    # then: the job is complete at its target, never past it, and takes nothing more
    job = Job.objects.get(pk=collection.job.pk)
    assert job.status == Job.Status.COMPLETED
    assert job.accepted_seconds == Decimal("36.000")
    assert collection.register(files[3]).json()["code"] == "job_not_active"


def test_an_episode_decided_after_the_target_was_met_is_surplus(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    # given: a 36 s job with one 20 s episode in flight, and room for one more registration
    collection = Collection(fleet_operator, customer, target_hours="0.01")
    first = register_and_put(collection, parquet_bytes(episode_table(frames=600, seed=10)))
    second = register_and_put(collection, parquet_bytes(episode_table(frames=600, seed=11)))
    # when: the target is met by accrual elsewhere (a third fleet's episodes, an admin fix)
    # before the second is decided
    complete(collection.operator.client, first, django_capture_on_commit_callbacks)
    Job.objects.filter(pk=collection.job.pk).update(accepted_seconds=Decimal("36"))
    decided = complete(collection.operator.client, second, django_capture_on_commit_callbacks)
    # then: rejected as surplus: not counted, not paid, not delivered
    assert decided.status == Episode.Status.REJECTED
    assert [f["code"] for f in decided.qa_failures] == ["surplus"]


def test_a_file_whose_frames_differ_from_the_declared_ones_is_rejected(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    data = parquet_bytes(episode_table(frames=300, seed=4))
    episode = upload_episode(collection, data, django_capture_on_commit_callbacks, frames=200)
    assert episode.status == Episode.Status.REJECTED
    assert [f["code"] for f in episode.qa_failures] == ["frame_count"]


def test_frames_outside_the_duration_bounds_are_refused_at_registration(fleet_operator, customer):
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    data = parquet_bytes(episode_table(frames=300, seed=5))
    response = collection.register(data, frames=30 * 3600 * 2)  # two hours at 30 fps
    assert response.status_code == 400 and "frames" in response.json()["fields"]


@pytest.fixture
def aborts(s3_server, settings):
    """Storage through a recording proxy: the multipart upload ids the platform aborts.
    (s3rver 4 answers AbortMultipartUpload with 405, so the proxy shows the request was
    made; AWS S3 and MinIO drop the parts.)"""
    proxy = FaultyS3Proxy(s3_server.endpoint_url)
    seen: list[str] = []

    def record(request) -> bool:
        if request.command == "DELETE" and "uploadId=" in request.path:
            seen.append(parse_qs(urlsplit(request.path).query)["uploadId"][0])
        return False  # never a fault

    proxy.fail_only = record
    settings.S3_ENDPOINT_URL = proxy.url
    yield seen
    proxy.close()


def test_abandoned_uploads_are_rejected_and_their_multipart_uploads_aborted(
    fleet_operator, customer, settings, aborts, django_capture_on_commit_callbacks
):
    # given: a multipart episode whose upload URLs expired long ago, never completed
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 100_000
    settings.EPISODE_MULTIPART_PART_BYTES = 60_000
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    data = parquet_bytes(episode_table(frames=6000, seed=6))
    body = collection.register(data).json()
    upload_id = Episode.objects.get(pk=body["id"]).multipart_upload_id
    Episode.objects.filter(pk=body["id"]).update(
        created_at=timezone.now() - timedelta(days=2),
        upload_expires_at=timezone.now() - timedelta(days=1),
    )
    # when: beat's QA sweep runs (the abort runs after its commit)
    with django_capture_on_commit_callbacks(execute=True):
        qa_sweep()
    # then: rejected in words, its time freed for the job, its multipart upload aborted
    episode = Episode.objects.get(pk=body["id"])
    assert episode.status == Episode.Status.REJECTED
    assert [f["code"] for f in episode.qa_failures] == ["upload_abandoned"]
    assert aborts == [upload_id]
    assert collection.register(parquet_bytes(episode_table(frames=300))).status_code == 201
    # and an upload still within its URLs' life is left alone
    with django_capture_on_commit_callbacks(execute=True):
        qa_sweep()
    assert aborts == [upload_id]


def test_renewing_a_multipart_upload_aborts_the_old_one(
    fleet_operator, customer, settings, aborts, django_capture_on_commit_callbacks
):
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 100_000
    settings.EPISODE_MULTIPART_PART_BYTES = 60_000
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    data = parquet_bytes(episode_table(frames=6000, seed=7))
    body = collection.register(data).json()
    old_upload = Episode.objects.get(pk=body["id"]).multipart_upload_id
    with django_capture_on_commit_callbacks(execute=True):
        renewed = collection.operator.client.post(f"/api/v1/fleet/episodes/{body['id']}/upload")
    assert renewed.status_code == 200
    assert aborts == [old_upload]
    assert Episode.objects.get(pk=body["id"]).multipart_upload_id not in ("", old_upload)
