"""`POST /api/v1/deliveries/<id>/links`: signed links to many files in one audited request."""

import hashlib
import time
import urllib.request
from urllib.error import HTTPError

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from datasets.models import DownloadEvent
from datasets.services.downloads import MAX_LINKS_PER_REQUEST
from marketplace.throttling import CallerRateThrottle
from tests.datasets.synthetic_delivery import make_ready_delivery, synthetic_files

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3")]


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def links(client, delivery_id, paths, **extra):
    return client.post(
        f"/api/v1/deliveries/{delivery_id}/links", {"paths": paths}, format="json", **extra
    )


@pytest.fixture
def files():
    return synthetic_files(300, size=64)


@pytest.fixture
def delivery(customer, files):
    return make_ready_delivery(customer.organization, files)


def assert_error_shape(response, status, code):
    body = response.json()
    assert response.status_code == status, body
    assert set(body) == {"code", "message", "fields"} and body["code"] == code
    return body


def test_one_request_signs_every_file_asked_for_and_records_each(
    delivery, files, customer, settings
):
    # given
    settings.DELIVERY_LINK_EXPIRY_SECONDS = 120
    paths = [*sorted(files)[:50], "manifest.json"]

    # when
    response = links(customer.client, delivery.id, paths, HTTP_USER_AGENT="bulk-test/1")

    # then: the links come in the order asked, with the manifest's size and SHA-256, and work
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    body = response.json()
    assert [item["path"] for item in body["links"]] == paths
    assert body["expires_in"] == 120
    for item in body["links"][:-1]:
        data = fetch(item["url"])
        assert data == files[item["path"]] and item["size_bytes"] == len(data)
        assert item["sha256"] == hashlib.sha256(data).hexdigest()
    assert b'"files"' in fetch(body["links"][-1]["url"])
    # and: one audit row per file, with who asked, from where, until when
    events = DownloadEvent.objects.filter(delivery=delivery)
    assert sorted(events.values_list("path", flat=True)) == sorted(paths)
    assert set(events.values_list("api_key_id", flat=True)) == {customer.api_key.pk}
    assert set(events.values_list("user_agent", flat=True)) == {"bulk-test/1"}
    assert {e.link_expires_at.isoformat().replace("+00:00", "Z") for e in events} == {
        body["expires_at"]
    }


def test_the_query_count_does_not_grow_with_the_number_of_files(delivery, files, customer):
    # given: a warm-up (the key's last-used stamp and any first-request work)
    ordered = sorted(files)
    assert links(customer.client, delivery.id, ordered[:1]).status_code == 200
    counts = {}
    for size in (2, MAX_LINKS_PER_REQUEST // 2 + 50):
        paths = [*ordered, "manifest.json"][:size]
        before = DownloadEvent.objects.count()
        with CaptureQueriesContext(connection) as queries:
            response = links(customer.client, delivery.id, paths)
        # what was counted is a real answer: every link there and every event stored
        assert response.status_code == 200
        assert [item["path"] for item in response.json()["links"]] == paths
        assert DownloadEvent.objects.count() - before == size
        counts[size] = len(queries)
    assert len(set(counts.values())) == 1, counts
    assert counts[2] <= 6, counts


def test_hostile_batches_are_refused_whole_in_the_error_shape(delivery, files, customer):
    ordered = sorted(files)
    # a path outside the delivery (one of them): 404, naming its index; nothing recorded
    body = assert_error_shape(
        links(customer.client, delivery.id, [ordered[0], "../../orders/x", ordered[1]]),
        404,
        "not_found",
    )
    assert set(body["fields"]["paths"]) == {"1"}
    for outside in ("data/chunk-999/file-000.bin", "/etc/passwd", "manifest.json\x00x"):
        response = links(customer.client, delivery.id, [outside])
        assert 400 <= response.status_code < 500 and set(response.json()) == {
            "code",
            "message",
            "fields",
        }
    # the same file twice
    body = assert_error_shape(
        links(customer.client, delivery.id, [ordered[0], ordered[1], ordered[0]]),
        400,
        "duplicate_path",
    )
    assert body["fields"]["paths"] == {"2": ["Same as paths[0]."]}
    # too many, none, not a list, not strings, no body
    too_many = [f"data/x-{i}.bin" for i in range(MAX_LINKS_PER_REQUEST + 1)]
    assert (
        "paths"
        in assert_error_shape(links(customer.client, delivery.id, too_many), 400, "invalid")[
            "fields"
        ]
    )
    assert_error_shape(links(customer.client, delivery.id, []), 400, "invalid")
    assert_error_shape(links(customer.client, delivery.id, "manifest.json"), 400, "invalid")
    assert_error_shape(links(customer.client, delivery.id, [{"path": "x"}]), 400, "invalid")
    no_body = customer.client.post(f"/api/v1/deliveries/{delivery.id}/links")
    assert_error_shape(no_body, 400, "invalid")
    assert not DownloadEvent.objects.filter(delivery=delivery).exists()


def test_other_tenants_get_404_fleets_403_and_a_revoked_delivery_409(
    delivery, files, customer, other_customer, fleet_operator
):
    paths = sorted(files)[:3]
    assert_error_shape(links(other_customer.client, delivery.id, paths), 404, "not_found")
    assert links(fleet_operator.client, delivery.id, paths).status_code == 403
    from rest_framework.test import APIClient

    assert links(APIClient(), delivery.id, paths).status_code == 401
    assert not DownloadEvent.objects.exists()
    # revoked: the same answer the one-file link gives
    customer.client.post(f"/api/v1/deliveries/{delivery.id}/revoke")
    batch = assert_error_shape(links(customer.client, delivery.id, paths), 409, "delivery_revoked")
    single = customer.client.get(f"/api/v1/deliveries/{delivery.id}/download", {"path": paths[0]})
    assert single.json() == batch
    assert not DownloadEvent.objects.exists()


def test_links_expire_like_the_one_file_links(delivery, files, customer, settings):
    settings.DELIVERY_LINK_EXPIRY_SECONDS = 1
    item = links(customer.client, delivery.id, sorted(files)[:1]).json()["links"][0]
    assert fetch(item["url"]) == files[item["path"]]
    time.sleep(2.1)
    with pytest.raises(HTTPError) as expired:
        fetch(item["url"])
    assert expired.value.code == 403


def test_batch_and_one_file_links_share_the_callers_rate(delivery, files, customer, monkeypatch):
    # given: a rate of 3 requests a minute per key
    monkeypatch.setattr(CallerRateThrottle, "rate", "3/minute", raising=False)
    paths = sorted(files)[:2]
    # when: one one-file link and two batches, then a fourth request
    assert (
        customer.client.get(
            f"/api/v1/deliveries/{delivery.id}/download", {"path": paths[0]}
        ).status_code
        == 302
    )
    assert links(customer.client, delivery.id, paths).status_code == 200
    assert links(customer.client, delivery.id, paths).status_code == 200
    throttled = links(customer.client, delivery.id, paths)
    # then
    assert_error_shape(throttled, 429, "throttled")
    assert DownloadEvent.objects.filter(delivery=delivery).count() == 5


@pytest.mark.parametrize(
    "endpoint, region",
    [(None, None), ("", "us-east-1"), ("", "eu-west-3")],
    ids=["local-s3", "aws-us-east-1", "aws-eu-west-3"],
)
def test_batch_signing_gives_exactly_the_urls_boto3_gives(endpoint, region, settings, monkeypatch):
    import datetime

    import botocore.auth

    from datasets import storage

    # given: storage on the local server, or on AWS (signing needs no network)
    if endpoint is not None:
        settings.S3_ENDPOINT_URL = endpoint
        settings.S3_REGION = region
    frozen = datetime.datetime(2026, 12, 1, 15, 30, 5, tzinfo=datetime.UTC)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: frozen)
    items = [
        ("deliveries/o/d/manifest.json", "manifest.json"),
        ("deliveries/o/d/data/chunk-000/file 0001+x~y.parquet", 'file 0001+x~y".parquet'),
        ("deliveries/o/d/meta/épisodes/ß.json", None),
        ("deliveries/o/d/a%2Fb?c=d#e", "a%2Fb?c=d#e"),
    ]
    # when
    batch = storage.presigned_gets(items, expires_in=300)
    # then: the same bytes as one boto3 presign per key, at the same instant
    one_by_one = [
        storage.presigned_get(key=key, expires_in=300, download_name=name) for key, name in items
    ]
    assert batch == one_by_one
    assert all("X-Amz-Signature=" in url for url in batch)
    assert storage.presigned_gets([], expires_in=300) == []
