"""The one boto3 integration: object storage for episodes and deliveries.

Bytes never pass through Django: fleets PUT to presigned URLs, customers GET from presigned
URLs. Length and SHA-256 are signed into upload URLs (a single PUT's, or each part's of a
multipart upload begun with ChecksumAlgorithm=SHA256), so AWS S3 refuses any other body and
keeps the checksum (`head` returns it: the file's, or for a multipart upload the composite
"<base64 sha256 of the part digests>-<N>"). The local S3 server by default enforces only the
signed length and signature and keeps no checksum, which is why QA then verifies the bytes
itself (`object_sha256`); `local_s3/checksums.js` emulates a store that keeps them.
"""

import base64
import contextlib
import hashlib
import io
import urllib.parse
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import boto3
from boto3.exceptions import S3UploadFailedError
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import BotoCoreError, ClientError
from botocore.utils import percent_encode as botocore_percent_encode
from django.conf import settings

STREAM_CHUNK = 1024 * 1024
# What S3 answers a CopyObject of a source over 5 GiB ("InvalidRequest": "The specified copy
# source is larger than the maximum allowable size for a copy source").
TOO_LARGE_TO_COPY_AT_ONCE = {"InvalidRequest", "EntityTooLarge"}


class StorageError(Exception):
    """Object storage refused or failed a request."""


class ObjectMissing(StorageError):
    pass


class StorageUnavailable(StorageError):
    """Storage could not be reached or answered 5xx / SlowDown after boto3's own retries:
    transient. Callers retry later (tasks) or answer 503 (API); never a verdict on the data."""


MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
UNAVAILABLE_CODES = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"}


@contextlib.contextmanager
def _translated(key: str = ""):
    """botocore's errors -> ours. Connection refused, dropped connections, timeouts and
    broken response streams are BotoCoreError (not ClientError): they are transient too."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if error.get("Code") in MISSING_CODES:
            raise ObjectMissing(key) from exc
        if status >= 500 or error.get("Code") in UNAVAILABLE_CODES:
            raise StorageUnavailable(str(exc)) from exc
        raise StorageError(str(exc)) from exc
    except BotoCoreError as exc:
        raise StorageUnavailable(str(exc)) from exc


@dataclass(frozen=True)
class PresignedRequest:
    method: str
    url: str
    headers: dict[str, str]  # headers the caller must send exactly as given


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str
    checksum_sha256: str | None  # base64, when the store keeps one (AWS S3 does)


@lru_cache(maxsize=4)
def _client(endpoint_url: str | None, region: str, access_key: str, secret_key: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key or None,
        aws_secret_access_key=secret_key or None,
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            # Only the checksums we ask for: no extra CRC headers the uploader cannot know.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=30,
        ),
    )


def reset_connections() -> None:
    """Forget the cached client (a forked child must not share its parent's sockets)."""
    _client.cache_clear()


def client():
    return _client(
        settings.S3_ENDPOINT_URL or None,
        settings.S3_REGION,
        settings.AWS_ACCESS_KEY_ID,
        settings.AWS_SECRET_ACCESS_KEY,
    )


def bucket() -> str:
    return settings.S3_BUCKET


def sha256_hex_to_base64(sha256_hex: str) -> str:
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode()


def presigned_put(
    *, key: str, content_length: int, sha256_hex: str, expires_in: int | None = None
) -> PresignedRequest:
    """A single-request upload URL bound to this key, this length and this SHA-256."""
    checksum = sha256_hex_to_base64(sha256_hex)
    url = client().generate_presigned_url(
        "put_object",
        Params={
            "Bucket": bucket(),
            "Key": key,
            "ContentLength": content_length,
            "ChecksumSHA256": checksum,
        },
        ExpiresIn=expires_in or settings.S3_UPLOAD_URL_EXPIRY_SECONDS,
        HttpMethod="PUT",
    )
    return PresignedRequest(
        method="PUT",
        url=url,
        headers={"Content-Length": str(content_length), "x-amz-checksum-sha256": checksum},
    )


def parts_digest(part_sha256_hexes) -> str:
    """sha256(part digest 1 + ... + part digest N), hex: what a composite checksum encodes."""
    joined = b"".join(bytes.fromhex(part) for part in part_sha256_hexes)
    return hashlib.sha256(joined).hexdigest()


def composite_sha256(part_sha256_hexes) -> str:
    """The checksum S3 keeps for a multipart upload with SHA-256 part checksums:
    base64(sha256(part digest 1 + ... + part digest N)) + "-N"."""
    digest = sha256_hex_to_base64(parts_digest(part_sha256_hexes))
    return f"{digest}-{len(part_sha256_hexes)}"


def multipart_start(*, key: str, sha256_checksums: bool = False) -> str:
    """Begin a multipart upload; with `sha256_checksums` every part must carry its SHA-256
    (signed into its URL) and the stored object keeps the composite."""
    extra = {"ChecksumAlgorithm": "SHA256"} if sha256_checksums else {}
    with _translated(key):
        response = client().create_multipart_upload(Bucket=bucket(), Key=key, **extra)
    return response["UploadId"]


def presigned_part_put(
    *,
    key: str,
    upload_id: str,
    part_number: int,
    content_length: int,
    sha256_hex: str = "",
    expires_in: int | None = None,
) -> PresignedRequest:
    """One part's URL bound to its length and, when given, its SHA-256."""
    params = {
        "Bucket": bucket(),
        "Key": key,
        "UploadId": upload_id,
        "PartNumber": part_number,
        "ContentLength": content_length,
    }
    headers = {"Content-Length": str(content_length)}
    if sha256_hex:
        params["ChecksumSHA256"] = headers["x-amz-checksum-sha256"] = sha256_hex_to_base64(
            sha256_hex
        )
    url = client().generate_presigned_url(
        "upload_part",
        Params=params,
        ExpiresIn=expires_in or settings.S3_UPLOAD_URL_EXPIRY_SECONDS,
        HttpMethod="PUT",
    )
    return PresignedRequest(method="PUT", url=url, headers=headers)


def multipart_complete(*, key: str, upload_id: str, parts: list[dict]) -> None:
    """parts: [{"PartNumber": 1, "ETag": "..."}, ...] as the uploader saw them, each with its
    "ChecksumSHA256" (base64) when the upload was begun with SHA-256 checksums."""
    with _translated(key):
        client().complete_multipart_upload(
            Bucket=bucket(),
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": sorted(parts, key=lambda p: p["PartNumber"])},
        )


def multipart_abort(*, key: str, upload_id: str) -> None:
    with _translated(key):
        client().abort_multipart_upload(Bucket=bucket(), Key=key, UploadId=upload_id)


def head(key: str) -> ObjectInfo:
    with _translated(key):
        response = client().head_object(Bucket=bucket(), Key=key, ChecksumMode="ENABLED")
    return ObjectInfo(
        key=key,
        size=response["ContentLength"],
        etag=response.get("ETag", "").strip('"'),
        checksum_sha256=response.get("ChecksumSHA256"),
    )


def read_range(key: str, start: int, end_inclusive: int) -> bytes:
    """Bytes start..end_inclusive. Explicit ranges only: suffix ranges are broken locally."""
    with _translated(key):
        response = client().get_object(
            Bucket=bucket(), Key=key, Range=f"bytes={start}-{end_inclusive}"
        )
        return response["Body"].read()


def copy(*, source_key: str, dest_key: str) -> None:
    """Server-side copy within the bucket (the bytes do not come through us): one CopyObject
    request (it keeps the source's checksum); an object over CopyObject's 5 GiB goes through
    boto3's managed copy in parts. (The managed copy for every object cost a HEAD and a
    thread pool: ~17 ms of CPU per call against ~2.5, three times per episode QA checks.)"""
    source = {"Bucket": bucket(), "Key": source_key}
    with _translated(source_key):
        try:
            client().copy_object(CopySource=source, Bucket=bucket(), Key=dest_key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in TOO_LARGE_TO_COPY_AT_ONCE:
                raise
            client().copy(source, bucket(), dest_key)


def exists(key: str) -> bool:
    try:
        head(key)
    except ObjectMissing:
        return False
    return True


def object_sha256(key: str) -> str:
    """SHA-256 (hex) of the stored bytes, streamed once."""
    return object_sha256_parts(key)[0]


def object_sha256_parts(key: str, part_bytes: int = 0) -> tuple[str, list[str]]:
    """SHA-256 (hex) of the stored bytes, streamed once, and (when `part_bytes`) the SHA-256
    (hex) of each `part_bytes` part of them, from the same pass."""
    digest = hashlib.sha256()
    parts: list[str] = []
    part, in_part = hashlib.sha256(), 0
    with _translated(key):
        body = client().get_object(Bucket=bucket(), Key=key)["Body"]
        for chunk in iter(lambda: body.read(STREAM_CHUNK), b""):
            digest.update(chunk)
            view = memoryview(chunk)
            while part_bytes and view:
                take = view[: part_bytes - in_part]
                part.update(take)
                in_part += len(take)
                view = view[len(take) :]
                if in_part == part_bytes:
                    parts.append(part.hexdigest())
                    part, in_part = hashlib.sha256(), 0
    if in_part:
        parts.append(part.hexdigest())
    return digest.hexdigest(), parts


def put_bytes(*, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
    """Server-side writes (deliveries). Never used for fleet uploads."""
    with _translated(key):
        client().put_object(
            Bucket=bucket(),
            Key=key,
            Body=data,
            ContentType=content_type,
            ChecksumSHA256=base64.b64encode(hashlib.sha256(data).digest()).decode(),
        )


def upload_file(*, key: str, path) -> None:
    """Server-side upload of a local file (multipart above boto3's threshold)."""
    content_type = {
        ".json": "application/json",
        ".md": "text/markdown; charset=utf-8",
        ".parquet": "application/vnd.apache.parquet",
        ".mp4": "video/mp4",
    }.get(Path(path).suffix, "application/octet-stream")
    try:
        with _translated(key):
            client().upload_file(str(path), bucket(), key, ExtraArgs={"ContentType": content_type})
    except S3UploadFailedError as exc:
        # boto3's transfer manager flattens the cause into this; an upload that failed
        # after boto3's retries is worth retrying later, so it counts as unavailable.
        raise StorageUnavailable(str(exc)) from exc


def presigned_get(*, key: str, expires_in: int, download_name: str | None = None) -> str:
    params = {"Bucket": bucket(), "Key": key}
    if download_name:
        params["ResponseContentDisposition"] = f'attachment; filename="{download_name}"'
    return client().generate_presigned_url("get_object", Params=params, ExpiresIn=expires_in)


def _signing_credentials():
    """The credentials `client()` signs with: the configured keys, or boto3's default chain
    (environment, profile, instance role) when none are configured, as boto3.client does."""
    if settings.AWS_ACCESS_KEY_ID and settings.AWS_SECRET_ACCESS_KEY:
        return Credentials(settings.AWS_ACCESS_KEY_ID, settings.AWS_SECRET_ACCESS_KEY)
    return boto3.Session().get_credentials().get_frozen_credentials()


def presigned_gets(items: list[tuple[str, str | None]], *, expires_in: int) -> list[str]:
    """`presigned_get` for many `(key, download_name)` at once, the same URLs: boto3 signs the
    first (its endpoint, addressing and credentials), the rest are signed by the same botocore
    signer (`S3SigV4QueryAuth`) on that URL with the key swapped, skipping boto3's per-call
    endpoint resolution and request serialization (most of a presign's cost)."""
    if not items:
        return []
    first_key, first_name = items[0]
    first = presigned_get(key=first_key, expires_in=expires_in, download_name=first_name)
    parts = urllib.parse.urlsplit(first)
    encoded_first = botocore_percent_encode(first_key, safe="/~")
    if not parts.path.endswith("/" + encoded_first):
        # an addressing boto3 chose that this shortcut does not know: sign each the long way
        return [first] + [
            presigned_get(key=key, expires_in=expires_in, download_name=name)
            for key, name in items[1:]
        ]
    prefix = parts.path[: -len(encoded_first)]
    signer = S3SigV4QueryAuth(
        _signing_credentials(), "s3", client().meta.region_name, expires=expires_in
    )
    urls = [first]
    for key, name in items[1:]:
        path = prefix + botocore_percent_encode(key, safe="/~")
        request = AWSRequest(
            method="GET", url=urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        )
        if name:
            request.params = {"response-content-disposition": f'attachment; filename="{name}"'}
        signer.add_auth(request)
        urls.append(request.url)
    return urls


class RangeReader(io.RawIOBase):
    """A seekable, read-only file over one S3 object, fetching only the ranges asked for.

    pyarrow reads a parquet footer and then only the column chunks it needs through this;
    `bytes_read` tells how much actually crossed the network.
    """

    def __init__(self, key: str, size: int | None = None):
        super().__init__()
        self.key = key
        self.size = head(key).size if size is None else size
        self.position = 0
        self.bytes_read = 0
        self.requests = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self.position = offset
        elif whence == io.SEEK_CUR:
            self.position += offset
        elif whence == io.SEEK_END:
            self.position = self.size + offset
        else:
            raise ValueError(f"bad whence {whence}")
        self.position = max(0, self.position)
        return self.position

    def read(self, size: int = -1) -> bytes:
        if self.position >= self.size:
            return b""
        end = self.size if size is None or size < 0 else min(self.size, self.position + size)
        if end <= self.position:
            return b""
        data = read_range(self.key, self.position, end - 1)
        self.requests += 1
        self.bytes_read += len(data)
        self.position += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def stream(key: str, chunk_bytes: int = STREAM_CHUNK):
    """The stored bytes of one object, chunk by chunk (never the whole object in memory)."""
    with _translated(key):
        body = client().get_object(Bucket=bucket(), Key=key)["Body"]
    try:
        while True:
            with _translated(key):
                block = body.read(chunk_bytes)
            if not block:
                return
            yield block
    finally:
        body.close()


def foreign_client(*, endpoint_url: str | None, region: str, access_key: str, secret_key: str):
    """A client of someone else's bucket (a customer's, for delivery exports), with the same
    signing rules as ours; never cached (the keys are theirs and short-lived here)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url or None,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
        ),
    )


def copy_out(*, key: str, target, target_bucket: str, target_key: str) -> str:
    """Copy one of our objects into another account's bucket, streamed through this process
    (another account's credentials cannot copy server-side), then read it back from there and
    return the SHA-256 (hex) of what the target holds."""
    with _translated(key):
        body = client().get_object(Bucket=bucket(), Key=key)["Body"]
        try:
            target.upload_fileobj(body, target_bucket, target_key)
        finally:
            body.close()
    digest = hashlib.sha256()
    with _translated(target_key):
        stored = target.get_object(Bucket=target_bucket, Key=target_key)["Body"]
        for block in iter(lambda: stored.read(STREAM_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()
