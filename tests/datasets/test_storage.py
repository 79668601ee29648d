"""Presigned uploads against the local S3 server, which checks signatures, expiry and length."""

import time
import urllib.request
from urllib.error import HTTPError
from urllib.parse import urlsplit, urlunsplit

import pytest

from datasets import storage
from datasets.episode_format import episode_table, parquet_bytes, sha256
from datasets.qa_checks import EpisodeExpectation, Reason, check_stored_episode

pytestmark = pytest.mark.usefixtures("s3")


def send(
    request: storage.PresignedRequest, body: bytes, headers: dict | None = None, url=None
) -> int:
    http = urllib.request.Request(
        url or request.url, data=body, method=request.method, headers=headers or request.headers
    )
    try:
        with urllib.request.urlopen(http, timeout=10) as response:
            return response.status
    except HTTPError as exc:
        return exc.code


def upload(key: str, data: bytes, **kwargs) -> tuple[storage.PresignedRequest, int]:
    request = storage.presigned_put(
        key=key, content_length=len(data), sha256_hex=sha256(data), **kwargs
    )
    return request, send(request, data)


def test_a_presigned_upload_stores_the_bytes():
    data = parquet_bytes(episode_table())
    _, status = upload("orders/o/jobs/j/episodes/e1/a.parquet", data)
    assert status == 200
    info = storage.head("orders/o/jobs/j/episodes/e1/a.parquet")
    assert info.size == len(data)
    assert storage.object_sha256(info.key) == sha256(data)


def test_an_upload_of_another_size_is_refused_by_the_storage():
    data = parquet_bytes(episode_table())
    request = storage.presigned_put(key="k/size", content_length=len(data), sha256_hex=sha256(data))
    longer = data + b"x"
    assert send(request, longer, {**request.headers, "Content-Length": str(len(longer))}) == 403
    with pytest.raises(storage.ObjectMissing):
        storage.head("k/size")


def test_a_url_used_for_another_key_is_refused():
    data = b"x" * 100
    request = storage.presigned_put(key="k/right", content_length=100, sha256_hex=sha256(data))
    parts = urlsplit(request.url)
    other = urlunsplit(parts._replace(path=parts.path.replace("k/right", "k/other")))
    assert send(request, data, url=other) == 403
    with pytest.raises(storage.ObjectMissing):
        storage.head("k/other")


def test_an_altered_signature_is_refused():
    data = b"y" * 10
    request = storage.presigned_put(key="k/alter", content_length=10, sha256_hex=sha256(data))
    tampered = request.url.replace("X-Amz-Expires=3600", "X-Amz-Expires=7200")
    assert tampered != request.url
    assert send(request, data, url=tampered) == 403


def test_an_expired_url_is_refused():
    data = b"z" * 10
    request = storage.presigned_put(
        key="k/expired", content_length=10, sha256_hex=sha256(data), expires_in=1
    )
    time.sleep(2.1)
    assert send(request, data) == 403
    with pytest.raises(storage.ObjectMissing):
        storage.head("k/expired")


def test_the_checksum_header_is_required_as_signed():
    data = b"w" * 10
    request = storage.presigned_put(key="k/nohdr", content_length=10, sha256_hex=sha256(data))
    assert send(request, data, {"Content-Length": "10"}) == 403


def test_a_different_body_of_the_same_size_is_caught_by_qa():
    # given: the local store does not verify the body against the signed checksum
    good = parquet_bytes(episode_table(seed=1))
    evil = parquet_bytes(episode_table(seed=2))
    assert len(good) == len(evil) and good != evil
    request = storage.presigned_put(key="k/swap", content_length=len(good), sha256_hex=sha256(good))
    assert send(request, evil) == 200
    # when
    result = check_stored_episode(
        "k/swap", EpisodeExpectation(size=len(good), sha256_hex=sha256(good), fps=30, action_dim=8)
    )
    # then
    assert [f.code for f in result.failures] == [Reason.CHECKSUM_MISMATCH]


def test_qa_over_s3_reads_a_small_fraction_when_other_columns_are_skipped():
    # given: an episode with a large extra sensor column QA does not check
    import numpy as np

    frames = 3000
    camera = np.random.default_rng(0).integers(0, 255, (frames, 512), dtype=np.uint8)
    columns = episode_table(frames=frames, extra_columns={"observation.camera_raw": camera})
    data = parquet_bytes(columns)
    _, status = upload("k/big.parquet", data)
    assert status == 200
    # when
    result = check_stored_episode(
        "k/big.parquet",
        EpisodeExpectation(size=len(data), sha256_hex=sha256(data), fps=30, action_dim=8),
    )
    # then
    assert result.passed, result.failures
    assert 0 < result.bytes_read < len(data) * 0.25


def test_qa_of_a_missing_object_says_so():
    result = check_stored_episode(
        "k/never", EpisodeExpectation(size=1, sha256_hex="00" * 32, fps=30, action_dim=8)
    )
    assert [f.code for f in result.failures] == [Reason.OBJECT_MISSING]


def test_qa_refuses_a_size_mismatch():
    data = parquet_bytes(episode_table())
    upload("k/sz", data)
    result = check_stored_episode(
        "k/sz",
        EpisodeExpectation(size=len(data) + 1, sha256_hex=sha256(data), fps=30, action_dim=8),
    )
    assert [f.code for f in result.failures] == [Reason.SIZE_MISMATCH]


def test_multipart_upload_through_presigned_part_urls():
    data = parquet_bytes(episode_table(frames=20000))
    part_size = len(data) // 3 + 1
    chunks = [data[i : i + part_size] for i in range(0, len(data), part_size)]
    upload_id = storage.multipart_start(key="k/multi.parquet")
    parts = []
    for number, chunk in enumerate(chunks, start=1):
        request = storage.presigned_part_put(
            key="k/multi.parquet",
            upload_id=upload_id,
            part_number=number,
            content_length=len(chunk),
        )
        http = urllib.request.Request(
            request.url, data=chunk, method="PUT", headers=request.headers
        )
        with urllib.request.urlopen(http, timeout=10) as response:
            parts.append({"PartNumber": number, "ETag": response.headers["ETag"]})
    storage.multipart_complete(key="k/multi.parquet", upload_id=upload_id, parts=parts)
    assert storage.object_sha256("k/multi.parquet") == sha256(data)


def test_a_presigned_get_works_then_expires():
    storage.put_bytes(key="k/get.txt", data=b"hello")
    # 3 s, not 1: the signature's date is whole seconds, and a busy machine can take a second
    # between signing and the first request
    url = storage.presigned_get(key="k/get.txt", expires_in=3)
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == b"hello"
    time.sleep(4.1)
    with pytest.raises(HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 403


def test_a_server_side_copy_keeps_the_bytes_and_the_source_can_change_later():
    storage.put_bytes(key="k/src", data=b"original")
    storage.copy(source_key="k/src", dest_key="k/dst")
    storage.put_bytes(key="k/src", data=b"changed!")
    assert storage.object_sha256("k/dst") == sha256(b"original")
    with pytest.raises(storage.ObjectMissing):
        storage.copy(source_key="k/none", dest_key="k/x")
