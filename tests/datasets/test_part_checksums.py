"""Multipart uploads with SHA-256 part checksums and QA in one pass (issue 19 item 3).

Over HTTP with real signatures, against both local S3 servers: the default one (like s3rver,
it keeps no checksum: QA streams the object) and the checksum-keeping one
(local_s3/checksums.js, as AWS S3: it refuses a body that is not its signed checksum and
keeps the composite of a multipart upload, so QA reads only the footer and checked columns).
"""

import hashlib
import urllib.request
from urllib.error import HTTPError

import numpy as np
import pytest

from datasets import storage
from datasets.episode_format import column_chunk_bytes, episode_table, parquet_bytes
from datasets.error_codes import ErrorCode
from datasets.models import Episode
from datasets.qa_format import QA_COLUMNS, Reason
from tests.datasets.helpers import Collection, complete, put

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager_celery")]

PART = 60_000
FOOTER_ALLOWANCE = 64 * 1024


@pytest.fixture
def small_parts(settings):
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 100_000
    settings.EPISODE_MULTIPART_PART_BYTES = PART


@pytest.fixture
def collection(fleet_operator, customer):
    return Collection(fleet_operator, customer, target_hours="1")


def episode_bytes(frames: int = 3000, seed: int = 0) -> bytes:
    """An episode with a raw camera column QA does not check (as real uploads carry)."""
    camera = np.random.default_rng(seed).integers(0, 255, (frames, 256), dtype=np.uint8)
    return parquet_bytes(episode_table(frames=frames, seed=seed, extra_columns={"cam": camera}))


def part_hashes(data: bytes, part: int = PART) -> list[str]:
    return [hashlib.sha256(data[i : i + part]).hexdigest() for i in range(0, len(data), part)]


def put_part(part: dict, chunk: bytes) -> tuple[int, str]:
    request = urllib.request.Request(part["url"], data=chunk, method="PUT", headers=part["headers"])
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["ETag"]
    except HTTPError as exc:
        return exc.code, exc.read().decode()


def upload_parts(upload: dict, data: bytes) -> list[dict]:
    etags = []
    for part in upload["parts"]:
        start = (part["part_number"] - 1) * upload["part_size"]
        status, etag = put_part(part, data[start : start + upload["part_size"]])
        assert status == 200, etag
        etags.append({"part_number": part["part_number"], "etag": etag})
    return etags


def register_in_parts(collection, data: bytes, **overrides):
    response = collection.register(
        data, part_sha256s=part_hashes(data), part_bytes=PART, **overrides
    )
    assert response.status_code == 201, response.json()
    return response.json()


# --- The store ----------------------------------------------------------------------------


@pytest.mark.usefixtures("s3_keeping")
def test_the_keeping_store_refuses_a_tampered_body_and_keeps_the_checksum():
    # given: a single PUT URL and a multipart upload with part checksums signed in
    data = b"a" * 5000
    single = storage.presigned_put(
        key="t/single", content_length=len(data), sha256_hex=hashlib.sha256(data).hexdigest()
    )
    upload_id = storage.multipart_start(key="t/multi", sha256_checksums=True)
    hashes = part_hashes(data, 2000)
    parts = [
        storage.presigned_part_put(
            key="t/multi",
            upload_id=upload_id,
            part_number=number,
            content_length=len(data[(number - 1) * 2000 : number * 2000]),
            sha256_hex=digest,
        )
        for number, digest in enumerate(hashes, start=1)
    ]
    # when: the same lengths, other bytes
    tampered_single = put({"url": single.url, "headers": single.headers}, b"b" * 5000)
    tampered_part = put_part({"url": parts[1].url, "headers": parts[1].headers}, b"b" * 2000)
    # then: refused (BadDigest), nothing stored
    assert tampered_single == 400
    assert tampered_part[0] == 400 and "BadDigest" in tampered_part[1]
    assert not storage.exists("t/single")
    # when: the declared bytes
    assert put({"url": single.url, "headers": single.headers}, data) == 200
    etags = []
    for number, request in enumerate(parts, start=1):
        status, etag = put_part(
            {"url": request.url, "headers": request.headers},
            data[(number - 1) * 2000 : number * 2000],
        )
        assert status == 200
        checksum = storage.sha256_hex_to_base64(hashes[number - 1])
        etags.append({"PartNumber": number, "ETag": etag, "ChecksumSHA256": checksum})
    storage.multipart_complete(key="t/multi", upload_id=upload_id, parts=etags)
    # then: HEAD returns the file's checksum and the composite of the parts
    assert storage.head("t/single").checksum_sha256 == storage.sha256_hex_to_base64(
        hashlib.sha256(data).hexdigest()
    )
    assert storage.head("t/multi").checksum_sha256 == storage.composite_sha256(hashes)
    assert storage.head("t/multi").checksum_sha256.endswith("-3")


@pytest.mark.usefixtures("s3_keeping")
def test_the_keeping_store_refuses_a_completion_naming_other_part_checksums():
    data = b"c" * 3000
    upload_id = storage.multipart_start(key="t/complete", sha256_checksums=True)
    request = storage.presigned_part_put(
        key="t/complete",
        upload_id=upload_id,
        part_number=1,
        content_length=len(data),
        sha256_hex=hashlib.sha256(data).hexdigest(),
    )
    status, etag = put_part({"url": request.url, "headers": request.headers}, data)
    assert status == 200
    other = storage.sha256_hex_to_base64(hashlib.sha256(b"other").hexdigest())
    with pytest.raises(storage.StorageError, match="InvalidPart"):
        storage.multipart_complete(
            key="t/complete",
            upload_id=upload_id,
            parts=[{"PartNumber": 1, "ETag": etag, "ChecksumSHA256": other}],
        )
    unsigned = storage.presigned_part_put(
        key="t/complete", upload_id=upload_id, part_number=2, content_length=10
    )
    assert put_part({"url": unsigned.url, "headers": unsigned.headers}, b"d" * 10)[0] == 400


@pytest.mark.usefixtures("s3")
def test_the_default_store_neither_verifies_nor_keeps_checksums():
    data = b"a" * 5000
    single = storage.presigned_put(
        key="t/plain", content_length=len(data), sha256_hex=hashlib.sha256(data).hexdigest()
    )
    assert put({"url": single.url, "headers": single.headers}, b"b" * 5000) == 200
    assert storage.head("t/plain").checksum_sha256 is None


# --- Episodes -----------------------------------------------------------------------------


@pytest.mark.usefixtures("s3_keeping", "small_parts")
def test_on_a_keeping_store_qa_reads_only_the_footer_and_checked_columns(
    collection, django_capture_on_commit_callbacks
):
    # given: a multipart episode registered with its parts' SHA-256
    data = episode_bytes()
    body = register_in_parts(collection, data)
    upload = body["upload"]
    assert upload["method"] == "multipart" and len(upload["parts"]) == len(part_hashes(data))
    assert all("x-amz-checksum-sha256" in part["headers"] for part in upload["parts"])
    # when
    etags = upload_parts(upload, data)
    episode = complete(
        collection.operator.client, body["id"], django_capture_on_commit_callbacks, parts=etags
    )
    # then: accepted without streaming the file
    assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    checked = column_chunk_bytes(data, QA_COLUMNS)
    assert checked < len(data) / 2
    assert episode.qa_bytes_read <= checked + FOOTER_ALLOWANCE
    assert episode.parts_sha256 == storage.parts_digest(part_hashes(data))
    assert episode.part_bytes == PART


@pytest.mark.usefixtures("s3", "small_parts")
def test_on_the_default_store_qa_streams_and_catches_a_wrong_sha256(
    collection, django_capture_on_commit_callbacks
):
    # given: the parts are right, the whole-file SHA-256 is not
    data = episode_bytes()
    body = register_in_parts(collection, data, sha256=hashlib.sha256(b"other").hexdigest())
    etags = upload_parts(body["upload"], data)
    # when
    episode = complete(
        collection.operator.client, body["id"], django_capture_on_commit_callbacks, parts=etags
    )
    # then: the stream read the whole file and refused it
    assert episode.status == Episode.Status.REJECTED
    assert [f["code"] for f in episode.qa_failures] == [Reason.CHECKSUM_MISMATCH]
    assert episode.qa_bytes_read >= len(data)


@pytest.mark.usefixtures("s3", "small_parts")
def test_on_the_default_store_declared_parts_not_of_the_bytes_are_rejected(
    collection, django_capture_on_commit_callbacks
):
    # given: the fleet declares parts of other bytes (the default store does not check them)
    data = episode_bytes()
    wrong = part_hashes(data)
    wrong[0] = hashlib.sha256(b"not the first part").hexdigest()
    response = collection.register(data, part_sha256s=wrong, part_bytes=PART)
    assert response.status_code == 201, response.json()
    body = response.json()
    etags = upload_parts(body["upload"], data)
    # when
    episode = complete(
        collection.operator.client, body["id"], django_capture_on_commit_callbacks, parts=etags
    )
    # then
    assert episode.status == Episode.Status.REJECTED
    assert [f["code"] for f in episode.qa_failures] == [Reason.CHECKSUM_MISMATCH]


@pytest.mark.usefixtures("s3_keeping", "small_parts")
def test_on_a_keeping_store_a_part_not_of_its_declared_hash_is_refused(
    collection, django_capture_on_commit_callbacks
):
    # given
    data = episode_bytes()
    wrong = part_hashes(data)
    wrong[1] = hashlib.sha256(b"not the second part").hexdigest()
    body = collection.register(data, part_sha256s=wrong, part_bytes=PART).json()
    upload = body["upload"]
    # when: the fleet sends its real bytes
    statuses = [
        put_part(part, data[(part["part_number"] - 1) * PART : part["part_number"] * PART])
        for part in upload["parts"]
    ]
    # then: the store refuses that part, and the upload cannot complete without it
    assert [status for status, _ in statuses][:3] == [200, 400, 200]
    etags = [
        {"part_number": n, "etag": etag if status == 200 else '"0"'}
        for n, (status, etag) in enumerate(statuses, start=1)
    ]
    response = collection.operator.client.post(
        f"/api/v1/fleet/episodes/{body['id']}/complete", {"parts": etags}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert "parts" in response.json()["fields"]
    assert Episode.objects.get(pk=body["id"]).status == Episode.Status.REGISTERED


@pytest.mark.usefixtures("s3_keeping", "small_parts")
def test_the_same_bytes_under_another_declared_sha256_are_a_duplicate(
    collection, django_capture_on_commit_callbacks
):
    # given: an accepted multipart episode (its whole-file SHA-256 is not verified on this store)
    data = episode_bytes()
    first = register_in_parts(collection, data)
    complete(
        collection.operator.client,
        first["id"],
        django_capture_on_commit_callbacks,
        parts=upload_parts(first["upload"], data),
    )
    assert Episode.objects.get(pk=first["id"]).status == Episode.Status.ACCEPTED
    # when: the same bytes again, declaring another whole-file SHA-256
    response = collection.register(
        data,
        part_sha256s=part_hashes(data),
        part_bytes=PART,
        sha256=hashlib.sha256(b"pretend").hexdigest(),
    )
    # then: refused by its parts
    assert response.status_code == 409, response.json()
    assert response.json()["code"] == ErrorCode.DUPLICATE_EPISODE


@pytest.mark.usefixtures("s3_keeping", "small_parts")
def test_a_duplicate_found_by_qa_through_its_parts(collection, django_capture_on_commit_callbacks):
    # given: two registrations of the same bytes, one declaring no parts (QA streams it and
    # computes its parts), one declaring its parts and another whole-file SHA-256
    data = episode_bytes()
    plain = collection.register(data).json()
    parted = register_in_parts(collection, data, sha256=hashlib.sha256(b"pretend").hexdigest())
    # when
    first = complete(
        collection.operator.client,
        plain["id"],
        django_capture_on_commit_callbacks,
        parts=upload_parts(plain["upload"], data),
    )
    second = complete(
        collection.operator.client,
        parted["id"],
        django_capture_on_commit_callbacks,
        parts=upload_parts(parted["upload"], data),
    )
    # then: the first was streamed (no part checksums: the store keeps none), the second not
    assert first.status == Episode.Status.ACCEPTED and first.qa_bytes_read >= len(data)
    assert first.parts_sha256 == storage.parts_digest(part_hashes(data))
    assert second.status == Episode.Status.REJECTED
    assert [f["code"] for f in second.qa_failures] == [Reason.DUPLICATE]
    assert second.qa_bytes_read < len(data)


BAD_PARTS = [
    ({"part_sha256s": ["ab"] * 4, "part_bytes": PART}, 200_000),
    ({"part_sha256s": ["0" * 64], "part_bytes": PART}, 200_000),  # 4 parts of 60,000 bytes
    ({"part_sha256s": ["0" * 64], "part_bytes": PART}, 5_000),  # a single PUT has no parts
    ({"part_sha256s": ["0" * 64] * 4, "part_bytes": 55_000}, 200_000),  # not the platform's
    ({"part_sha256s": ["0" * 64] * 4}, 200_000),  # the part size not declared
]


@pytest.mark.usefixtures("s3", "small_parts")
@pytest.mark.parametrize(("change", "size"), BAD_PARTS)
def test_bad_part_declarations_are_400(collection, change, size):
    response = collection.register(b"x" * size, **change)
    assert response.status_code == 400, response.json()
    assert "part_sha256s" in response.json()["fields"]
    assert Episode.objects.count() == 0


@pytest.mark.usefixtures("s3_keeping")
def test_qa_takes_the_uploads_checksum_and_does_without_it_once_gone():
    from datasets.qa_checks import EpisodeExpectation, check_stored_episode

    # given: an upload with its checksum kept, and the platform's copy of it
    data = episode_bytes(frames=300)
    digest = hashlib.sha256(data).hexdigest()
    single = storage.presigned_put(key="t/upload", content_length=len(data), sha256_hex=digest)
    assert put({"url": single.url, "headers": single.headers}, data) == 200
    storage.put_bytes(key="t/copy", data=data)
    expected = EpisodeExpectation(size=len(data), sha256_hex=digest, fps=30, action_dim=8)
    # when / then: the upload's checksum is used
    result = check_stored_episode("t/copy", expected, uploaded_key="t/upload")
    assert result.passed and result.checksum_source == "store"
    # when the upload is gone: the copy's own checksum, not "object_missing"
    storage.client().delete_object(Bucket=storage.bucket(), Key="t/upload")
    result = check_stored_episode("t/copy", expected, uploaded_key="t/upload")
    assert result.passed, result.failures


@pytest.mark.usefixtures("s3_keeping", "small_parts")
def test_renewed_part_urls_keep_the_registered_part_size_and_checksums(
    collection, settings, django_capture_on_commit_callbacks
):
    # given: registered in parts, then the platform's part size changes
    data = episode_bytes()
    body = register_in_parts(collection, data)
    settings.EPISODE_MULTIPART_PART_BYTES = 50_000
    # when
    renewed = collection.operator.client.post(f"/api/v1/fleet/episodes/{body['id']}/upload")
    assert renewed.status_code == 200, renewed.json()
    upload = renewed.json()
    # then: the same parts, each still bound to its checksum, and QA streams nothing
    assert upload["part_size"] == PART and len(upload["parts"]) == len(part_hashes(data))
    assert [p["headers"]["x-amz-checksum-sha256"] for p in upload["parts"]] == [
        storage.sha256_hex_to_base64(digest) for digest in part_hashes(data)
    ]
    episode = complete(
        collection.operator.client,
        body["id"],
        django_capture_on_commit_callbacks,
        parts=upload_parts(upload, data),
    )
    assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    assert episode.qa_bytes_read < len(data) / 2
