"""Episode ingest through the fleet API, against the local S3 server (checks signatures)."""

import hashlib
import urllib.request
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from datasets import storage
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode
from datasets.services.qa import episode_run_qa
from fleets.models import Job
from orders.models import Order
from tests.datasets.helpers import Collection, complete, frames_in, put
from tests.factories import JobFactory, RobotFactory, SiteFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]


@pytest.fixture
def collection(fleet_operator, customer):
    return Collection(fleet_operator, customer)


def test_an_episode_is_registered_uploaded_checked_and_accrued(
    collection, django_capture_on_commit_callbacks
):
    # given: 10 s of valid data (300 frames at 30 fps)
    data = parquet_bytes(episode_table(frames=300))
    # when
    registered = collection.register(data)
    assert registered.status_code == 201, registered.json()
    body = registered.json()
    assert body["status"] == "registered" and body["upload"]["method"] == "single"
    assert (
        f"orders/{collection.order.id}/jobs/{collection.job.id}/episodes/{body['id']}/"
        in (body["upload"]["url"])
    )
    assert put(body["upload"], data) == 200
    episode = complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    # then
    assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    assert episode.duration_seconds == Decimal("10.000") and episode.frames == 300
    assert episode.qa_bytes_read > 0
    collection.job.refresh_from_db()
    collection.order.refresh_from_db()
    assert collection.job.accepted_seconds == Decimal("10.000")
    assert collection.order.accepted_seconds == Decimal("10.000")
    assert collection.order.accepted_hours == Decimal("0.00")  # 10 s rounds down to 0.00 h
    assert storage.object_sha256(episode.stored_key) == hashlib.sha256(data).hexdigest()
    shown = collection.operator.client.get(f"/api/v1/fleet/episodes/{body['id']}").json()
    assert shown["status"] == "accepted" and shown["qa_failures"] == []


def test_a_job_completes_at_its_target_and_the_order_moves_to_review(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    # given: a job of 0.01 h (36 s) and 20 s episodes
    collection = Collection(fleet_operator, customer, target_hours="0.01")
    for _ in range(2):
        data = parquet_bytes(episode_table(frames=600, seed=_))
        body = collection.register(data).json()
        assert put(body["upload"], data) == 200
        complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    # then
    collection.job.refresh_from_db()
    collection.order.refresh_from_db()
    assert collection.job.status == Job.Status.COMPLETED
    # 40 s accepted, but a job never counts (nor pays) past its target
    assert collection.job.accepted_seconds == Decimal("36.000")
    moves = list(collection.order.events.values_list("to_status", "reason"))
    assert (Order.Status.IN_REVIEW, "All jobs collected.") in moves
    # (the dataset is then assembled and delivered: tests/datasets/test_deliveries.py)
    assert collection.order.status == Order.Status.DELIVERED
    # and no more episodes are taken for it
    again = collection.register(parquet_bytes(episode_table()))
    assert again.status_code == 409 and again.json()["code"] == "job_not_active"


def test_a_pilot_collected_sends_the_order_to_review_with_the_rest_held(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    collection = Collection(fleet_operator, customer, target_hours="0.01", is_pilot=True)
    JobFactory(order=collection.order, site=None, status=Job.Status.HELD, sequence=99)
    data = parquet_bytes(episode_table(frames=1200))
    body = collection.register(data).json()
    put(body["upload"], data)
    complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    collection.order.refresh_from_db()
    assert collection.order.status == Order.Status.IN_REVIEW
    assert "Pilot collected" in collection.order.events.last().reason


def test_running_qa_again_changes_nothing(collection, django_capture_on_commit_callbacks):
    data = parquet_bytes(episode_table())
    body = collection.register(data).json()
    put(body["upload"], data)
    complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    # when
    episode_run_qa(episode_id=body["id"])
    episode_run_qa(episode_id=body["id"])
    complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    # then
    collection.job.refresh_from_db()
    assert collection.job.accepted_seconds == Decimal("10.000")
    assert Episode.objects.get(pk=body["id"]).qa_runs == 1


def test_an_upload_of_another_size_is_refused_and_the_episode_not_accepted(
    collection, django_capture_on_commit_callbacks
):
    data = parquet_bytes(episode_table())
    body = collection.register(data).json()
    longer = data + b"\0"
    assert (
        put(
            body["upload"],
            longer,
            {**body["upload"]["headers"], "Content-Length": str(len(longer))},
        )
        == 403
    )
    episode = complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    assert episode.status == Episode.Status.REJECTED
    assert [f["code"] for f in episode.qa_failures] == ["object_missing"]
    collection.job.refresh_from_db()
    assert collection.job.accepted_seconds == 0


def test_a_different_body_of_the_same_size_is_rejected_by_the_checksum(
    collection, django_capture_on_commit_callbacks
):
    good = parquet_bytes(episode_table(seed=1))
    evil = parquet_bytes(episode_table(seed=2))
    assert len(good) == len(evil)
    body = collection.register(good).json()
    assert put(body["upload"], evil) == 200  # the local store does not check the body
    episode = complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    assert [f["code"] for f in episode.qa_failures] == ["checksum_mismatch"]
    assert episode.status == Episode.Status.REJECTED


def test_a_bad_file_is_rejected_with_its_reason_and_shown_to_the_fleet(
    collection, django_capture_on_commit_callbacks
):
    columns = episode_table()
    columns["action"][3, 2] = float("nan")
    data = parquet_bytes(columns)
    body = collection.register(data).json()
    put(body["upload"], data)
    complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    listed = collection.operator.client.get(
        f"/api/v1/fleet/jobs/{collection.job.id}/episodes"
    ).json()
    [shown] = listed["results"]
    assert shown["status"] == "rejected"
    assert shown["qa_failures"][0]["code"] == "non_finite" and shown["qa_failures"][0]["message"]


def test_a_corrupt_file_is_rejected_not_a_crash(collection, django_capture_on_commit_callbacks):
    data = b"this is not parquet" * 50
    body = collection.register(data).json()
    put(body["upload"], data)
    episode = complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    assert [f["code"] for f in episode.qa_failures] == ["not_parquet"]


def test_a_retried_upload_never_overwrites_an_accepted_object(
    collection, django_capture_on_commit_callbacks
):
    # given: an accepted episode
    good = parquet_bytes(episode_table(seed=1))
    body = collection.register(good).json()
    put(body["upload"], good)
    episode = complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    assert episode.status == Episode.Status.ACCEPTED
    # when: the fleet replays its (still valid) upload URL with other bytes, and asks for a new one
    other = parquet_bytes(episode_table(seed=2))
    put(body["upload"], other)
    renewed = collection.operator.client.post(f"/api/v1/fleet/episodes/{body['id']}/upload")
    # then: what was checked and accepted is unchanged; no new URL is given
    assert storage.object_sha256(episode.stored_key) == hashlib.sha256(good).hexdigest()
    assert renewed.status_code == 409


def test_an_expired_upload_url_is_refused_and_a_renewed_one_goes_to_a_fresh_key(
    collection, settings, django_capture_on_commit_callbacks
):
    import time

    settings.S3_UPLOAD_URL_EXPIRY_SECONDS = 1
    data = parquet_bytes(episode_table())
    body = collection.register(data).json()
    time.sleep(2.1)
    assert put(body["upload"], data) == 403
    settings.S3_UPLOAD_URL_EXPIRY_SECONDS = 600
    renewed = collection.operator.client.post(f"/api/v1/fleet/episodes/{body['id']}/upload").json()
    assert renewed["url"].split("?")[0] != body["upload"]["url"].split("?")[0]
    assert put(renewed, data) == 200
    episode = complete(collection.operator.client, body["id"], django_capture_on_commit_callbacks)
    assert episode.status == Episode.Status.ACCEPTED


def test_large_files_upload_in_parts(collection, settings, django_capture_on_commit_callbacks):
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 100_000
    settings.EPISODE_MULTIPART_PART_BYTES = 60_000
    data = parquet_bytes(episode_table(frames=6000))
    body = collection.register(data).json()
    upload = body["upload"]
    assert upload["method"] == "multipart" and len(upload["parts"]) == -(-len(data) // 60_000)
    etags = []
    for part in upload["parts"]:
        start = (part["part_number"] - 1) * upload["part_size"]
        chunk = data[start : start + upload["part_size"]]
        request = urllib.request.Request(
            part["url"], data=chunk, method="PUT", headers=part["headers"]
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            etags.append({"part_number": part["part_number"], "etag": response.headers["ETag"]})
    episode = complete(
        collection.operator.client, body["id"], django_capture_on_commit_callbacks, parts=etags
    )
    assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    assert episode.duration_seconds == Decimal("200.000")


BAD_REGISTRATIONS = [
    ({"sha256": "abc"}, "sha256"),
    ({"sha256": "G" * 64}, "sha256"),
    ({"fps": 0}, "fps"),
    ({"fps": "thirty"}, "fps"),
    ({"size_bytes": 0}, "size_bytes"),
    ({"size_bytes": 10**13}, "size_bytes"),
    ({"operator": "Jane Doe <jane@x>"}, "operator"),
    ({"operator": ""}, "operator"),
    ({"task_instruction": ""}, "task_instruction"),
    ({"success": "perhaps"}, "success"),
    ({"objects_handled": "peg"}, "objects_handled"),
    ({"site": "not-a-uuid"}, "site"),
]


@pytest.mark.parametrize(("change", "field"), BAD_REGISTRATIONS)
def test_bad_registrations_are_400_and_register_nothing(collection, change, field):
    response = collection.register(b"x" * 10, **change)
    assert response.status_code == 400, response.json()
    assert field in response.json()["fields"]
    assert Episode.objects.count() == 0


def test_the_site_and_robot_must_be_the_jobs(collection):
    from orders.models import Embodiment

    other_site = SiteFactory(fleet=collection.site.fleet)
    other_robot = RobotFactory(site=other_site, fleet=collection.site.fleet)
    wrong_body = RobotFactory(
        site=collection.site,
        fleet=collection.site.fleet,
        embodiment=Embodiment.objects.get(slug="ur5e"),
    )
    assert collection.register(b"x", site=str(other_site.id)).json()["fields"].keys() == {"site"}
    assert "robot" in collection.register(b"x", robot=str(other_robot.id)).json()["fields"]
    assert "robot" in collection.register(b"x", robot=str(wrong_body.id)).json()["fields"]
    assert Episode.objects.count() == 0


def test_another_fleets_job_and_episodes_are_invisible(
    collection, make_tenant, django_capture_on_commit_callbacks
):
    from marketplace.models import Organization

    data = parquet_bytes(episode_table())
    body = collection.register(data).json()
    intruder = make_tenant(Organization.Kind.FLEET_OPERATOR)
    assert collection.register(data, client=intruder.client).status_code == 404
    for path in (f"episodes/{body['id']}", f"jobs/{collection.job.id}/episodes"):
        response = intruder.client.get(f"/api/v1/fleet/{path}")
        assert response.status_code == 404 or response.json()["results"] == []
    assert intruder.client.post(f"/api/v1/fleet/episodes/{body['id']}/upload").status_code == 404
    assert (
        intruder.client.post(
            f"/api/v1/fleet/episodes/{body['id']}/complete", {}, format="json"
        ).status_code
        == 404
    )
    assert Episode.objects.get(pk=body["id"]).status == Episode.Status.REGISTERED


def test_customers_cannot_use_the_episode_api(collection, customer):
    assert collection.register(b"x", client=customer.client).status_code == 403


def test_registration_honours_idempotency_keys(collection):
    data = parquet_bytes(episode_table())
    headers = {"HTTP_IDEMPOTENCY_KEY": "ep-1"}
    body = {
        "site": str(collection.site.id),
        "robot": str(collection.robot.id),
        "operator": "op-1",
        "task_instruction": "t",
        "success": True,
        "fps": 30,
        "size_bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "frames": frames_in(data),
    }
    url = f"/api/v1/fleet/jobs/{collection.job.id}/episodes"
    first = collection.operator.client.post(url, body, format="json", **headers)
    second = collection.operator.client.post(url, body, format="json", **headers)
    assert first.json()["id"] == second.json()["id"] and Episode.objects.count() == 1


@pytest.mark.parametrize("count", [1, 30])
def test_listing_a_jobs_episodes_costs_the_same_queries(fleet_operator, customer, count):
    collection = Collection(fleet_operator, customer, target_hours="1")  # room for 30 in flight
    for index in range(count):
        collection.register(parquet_bytes(episode_table(frames=60, seed=index)))
    with CaptureQueriesContext(connection) as queries:
        response = collection.operator.client.get(
            f"/api/v1/fleet/jobs/{collection.job.id}/episodes?page_size=100"
        )
    assert len(response.json()["results"]) == count
    # key lookup (used just now: no touch), the job is the caller's, the page
    assert len(queries) == 3
