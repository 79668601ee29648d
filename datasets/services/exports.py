"""Delivering into the customer's own bucket: they name a bucket (and an endpoint, for S3
compatible stores the platform allows) with keys that may write there; a task copies every
file of the delivery, reads each back and checks its SHA-256 against the manifest."""

import re

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from datasets import storage
from datasets.error_codes import ErrorCode
from datasets.models import BucketExport, Delivery
from datasets.services.downloads import issuing_delivery
from marketplace.audit import actor_label
from marketplace.errors import ServiceError
from marketplace.queueing import enqueue_on_commit
from marketplace.tenancy import Caller

BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")


def _refuse(fields: dict) -> ServiceError:
    return ServiceError(
        "The export cannot start: check the highlighted fields.",
        code=ErrorCode.EXPORT_REFUSED,
        fields=fields,
    )


def bucket_export_start(
    *,
    caller: Caller,
    delivery_id,
    bucket: str,
    prefix: str = "",
    region: str = "us-east-1",
    endpoint_url: str = "",
    access_key_id: str,
    secret_access_key: str,
) -> BucketExport:
    delivery = issuing_delivery(caller, delivery_id, whole=True)
    bucket, prefix, region = bucket.strip(), prefix.strip().strip("/"), region.strip()
    endpoint_url = endpoint_url.strip().rstrip("/")
    fields: dict[str, list[str]] = {}
    if not BUCKET_NAME.match(bucket):
        fields["bucket"] = ["An S3 bucket name: 3-63 lower-case letters, digits, dots, hyphens."]
    if ".." in prefix or prefix.startswith("/"):
        fields["prefix"] = ["A folder inside the bucket, without '..'."]
    if not REGION.match(region):
        fields["region"] = ["An AWS region such as eu-central-1."]
    if endpoint_url and endpoint_url not in settings.DELIVERY_EXPORT_ENDPOINTS:
        fields["endpoint_url"] = [
            "This platform copies only to AWS S3"
            + (
                " or to: " + ", ".join(settings.DELIVERY_EXPORT_ENDPOINTS)
                if settings.DELIVERY_EXPORT_ENDPOINTS
                else ""
            )
            + ". Leave it empty for AWS."
        ]
    if not access_key_id.strip():
        fields["access_key_id"] = ["The access key id of a key that may write to the bucket."]
    if not secret_access_key.strip():
        fields["secret_access_key"] = ["The key's secret (kept only while the copy runs)."]
    if fields:
        raise _refuse(fields)
    with transaction.atomic():
        export = BucketExport.objects.create(
            delivery=delivery,
            requested_by=actor_label(caller),
            bucket=bucket,
            prefix=prefix,
            region=region,
            endpoint_url=endpoint_url,
            access_key_id=access_key_id.strip(),
            secret_access_key=secret_access_key.strip(),
            files_total=delivery.files.count(),
        )
        enqueue_on_commit("datasets.tasks.delivery_export", export.id)
    return export


def _finish(export: BucketExport, status: str, error: str = "") -> BucketExport:
    export.status = status
    export.error = error[:2000]
    export.secret_access_key = ""  # never kept past the copy
    export.finished_at = timezone.now()
    export.save(update_fields=["status", "error", "secret_access_key", "finished_at"])
    return export


def bucket_export_run(*, export_id) -> BucketExport:
    """Copy, read back, compare with the manifest; safe to run twice (a finished export is
    left as it is; a rerun of a cut-off one copies the same keys again)."""
    with transaction.atomic():
        export = BucketExport.objects.select_for_update().get(pk=export_id)
        if export.status in (BucketExport.Status.VERIFIED, BucketExport.Status.FAILED):
            return export
        export.status = BucketExport.Status.COPYING
        export.files_done = export.bytes_done = 0
        export.save(update_fields=["status", "files_done", "bytes_done"])
    delivery: Delivery = export.delivery
    target = storage.foreign_client(
        endpoint_url=export.endpoint_url or None,
        region=export.region,
        access_key=export.access_key_id,
        secret_key=export.secret_access_key,
    )
    try:
        for file in delivery.files.all():
            key = f"{export.prefix}/{file.path}" if export.prefix else file.path
            digest = storage.copy_out(
                key=f"{delivery.prefix}/{file.path}",
                target=target,
                target_bucket=export.bucket,
                target_key=key,
            )
            if file.sha256 and digest != file.sha256:
                return _finish(
                    export,
                    BucketExport.Status.FAILED,
                    f"{file.path}: what your bucket holds differs from the manifest.",
                )
            export.files_done += 1
            export.bytes_done += file.size_bytes
            export.save(update_fields=["files_done", "bytes_done"])
    except storage.StorageUnavailable:
        raise  # transient: the task retries with backoff
    except Exception as exc:  # their bucket refused: say why, keep nothing
        message = str(exc)
        if "AccessDenied" in message or "403" in message or "InvalidAccessKeyId" in message:
            message = "Your bucket refused the keys (access denied): " + message
        elif "NoSuchBucket" in message:
            message = f"There is no bucket named {export.bucket} there."
        return _finish(export, BucketExport.Status.FAILED, message)
    return _finish(export, BucketExport.Status.VERIFIED)
