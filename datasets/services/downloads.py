"""Getting a delivery out: freshly signed, audited links to its files; revoking them."""

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from datasets import storage
from datasets.error_codes import ErrorCode
from datasets.models import Delivery, DeliveryFile, DownloadEvent
from marketplace.audit import actor_label
from marketplace.errors import Conflict, NotFound, ServiceError, invalid
from marketplace.models import Organization
from marketplace.tenancy import Caller


def customer_delivery(*, organization: Organization, delivery_id, lock: bool = False) -> Delivery:
    deliveries = Delivery.objects.filter(pk=delivery_id, order__organization=organization)
    if lock:
        deliveries = deliveries.select_for_update()
    delivery = deliveries.first()
    if delivery is None:
        raise NotFound("Delivery not found.")
    return delivery


@dataclass(frozen=True)
class DownloadLink:
    url: str
    expires_at: datetime
    event: DownloadEvent


def delivery_download_link(
    *, caller: Caller, delivery_id, path: str, ip_address: str | None, user_agent: str
) -> DownloadLink:
    """A freshly signed GET for one file of a ready, unrevoked delivery, recorded first."""
    delivery = customer_delivery(organization=caller.organization, delivery_id=delivery_id)
    if delivery.is_revoked:
        raise Conflict(
            "This delivery was revoked: no new links are issued.", code=ErrorCode.DELIVERY_REVOKED
        )
    if delivery.status != Delivery.Status.READY:
        raise Conflict("This delivery is not ready yet.", code=ErrorCode.DELIVERY_NOT_READY)
    # No stored path holds a NUL byte, and PostgreSQL refuses one in a query (it was a 500).
    if "\x00" in path or not DeliveryFile.objects.filter(delivery=delivery, path=path).exists():
        raise NotFound("No such file in this delivery.", fields={"path": ["Not in the manifest."]})
    expires_in = settings.DELIVERY_LINK_EXPIRY_SECONDS
    event = DownloadEvent.objects.create(
        delivery=delivery,
        path=path,
        **DownloadEvent.requester(caller, ip_address=ip_address, user_agent=user_agent),
        link_expires_at=timezone.now() + timezone.timedelta(seconds=expires_in),
    )
    url = storage.presigned_get(
        key=f"{delivery.prefix}/{path}",
        expires_in=expires_in,
        download_name=path.rsplit("/", 1)[-1],
    )
    return DownloadLink(url=url, expires_at=event.link_expires_at, event=event)


MAX_LINKS_PER_REQUEST = 500


@dataclass(frozen=True)
class BatchLink:
    file: DeliveryFile
    url: str


@dataclass(frozen=True)
class DownloadLinks:
    links: list[BatchLink]  # in the order asked for
    expires_at: datetime
    expires_in: int


def delivery_download_links(
    *, caller: Caller, delivery_id, paths: list[str], ip_address: str | None, user_agent: str
) -> DownloadLinks:
    """Freshly signed GETs for many files of a ready, unrevoked delivery in one go, each
    recorded (one DownloadEvent per file, inserted together before any link is signed).
    All or nothing: a duplicate or a path the delivery does not hold refuses the whole batch.
    Four statements whatever the number of paths (caller, delivery, files, the insert)."""
    delivery = _ready_delivery_for(caller, delivery_id)
    if not paths or len(paths) > MAX_LINKS_PER_REQUEST:
        raise invalid("paths", f"Give 1 to {MAX_LINKS_PER_REQUEST} paths per request.")
    first_seen: dict[str, int] = {}
    duplicates = {}
    for index, path in enumerate(paths):
        if path in first_seen:
            duplicates[str(index)] = [f"Same as paths[{first_seen[path]}]."]
        first_seen.setdefault(path, index)
    if duplicates:
        raise ServiceError(
            "A path is asked for twice.",
            code=ErrorCode.DUPLICATE_PATH,
            fields={"paths": duplicates},
        )
    clean = [path for path in paths if "\x00" not in path]  # PostgreSQL refuses a NUL
    files = {f.path: f for f in DeliveryFile.objects.filter(delivery=delivery, path__in=clean)}
    missing = {str(i): ["Not in the manifest."] for i, p in enumerate(paths) if p not in files}
    if missing:
        raise NotFound("Not every path is a file of this delivery.", fields={"paths": missing})
    expires_in = settings.DELIVERY_LINK_EXPIRY_SECONDS
    expires_at = timezone.now() + timezone.timedelta(seconds=expires_in)
    requester = DownloadEvent.requester(caller, ip_address=ip_address, user_agent=user_agent)
    DownloadEvent.objects.bulk_create(
        [
            DownloadEvent(delivery=delivery, path=path, link_expires_at=expires_at, **requester)
            for path in paths
        ]
    )
    urls = storage.presigned_gets(
        [(f"{delivery.prefix}/{path}", path.rsplit("/", 1)[-1]) for path in paths],
        expires_in=expires_in,
    )
    links = [BatchLink(file=files[path], url=url) for path, url in zip(paths, urls, strict=True)]
    return DownloadLinks(links=links, expires_at=expires_at, expires_in=expires_in)


def delivery_revoke(
    *, delivery_id, caller: Caller | None = None, staff_label: str = ""
) -> Delivery:
    """Stop new links at once (links already issued expire within minutes). Owners or staff."""
    with transaction.atomic():
        if caller is not None:
            delivery = customer_delivery(
                organization=caller.organization, delivery_id=delivery_id, lock=True
            )
            label = actor_label(caller)
        else:
            delivery = Delivery.objects.select_for_update().get(pk=delivery_id)
            label = staff_label or "staff"
        if delivery.revoked_at is None:
            delivery.revoked_at = timezone.now()
            delivery.revoked_by = label
            delivery.save(update_fields=["revoked_at", "revoked_by"])
    return delivery


# --- The whole delivery as one archive (small datasets) ------------------------------------------

TAR_BLOCK = 512
TAR_RECORD = 20 * TAR_BLOCK


class ArchiveTooLarge(Conflict):
    code = ErrorCode.ARCHIVE_TOO_LARGE


@dataclass(frozen=True)
class DeliveryArchive:
    filename: str
    size: int  # exact length of the tar stream (the response's Content-Length)
    chunks: object  # an iterator of bytes


def _ready_delivery_for(caller: Caller, delivery_id) -> Delivery:
    delivery = customer_delivery(organization=caller.organization, delivery_id=delivery_id)
    if delivery.is_revoked:
        raise Conflict(
            "This delivery was revoked: no new links are issued.", code=ErrorCode.DELIVERY_REVOKED
        )
    if delivery.status != Delivery.Status.READY:
        raise Conflict("This delivery is not ready yet.", code=ErrorCode.DELIVERY_NOT_READY)
    return delivery


def delivery_archive_size(delivery: Delivery) -> int:
    """What the tar of a delivery weighs: the files, plus headers and padding."""
    body = sum(_tar_header_size(delivery, f) + _padded(f.size_bytes) for f in delivery.files.all())
    return body + _tar_end(body)


def _archive_root(delivery: Delivery) -> str:
    return f"dataset-{str(delivery.id)[:8]}"


def _tar_info(delivery: Delivery, file: DeliveryFile):
    import tarfile

    info = tarfile.TarInfo(name=f"{_archive_root(delivery)}/{file.path}")
    info.size = file.size_bytes
    info.mtime = int((delivery.ready_at or delivery.created_at).timestamp())
    info.mode = 0o644
    return info


def _tar_header(delivery: Delivery, file: DeliveryFile) -> bytes:
    import tarfile

    return _tar_info(delivery, file).tobuf(format=tarfile.PAX_FORMAT)


def _tar_header_size(delivery: Delivery, file: DeliveryFile) -> int:
    return len(_tar_header(delivery, file))


def _padded(size: int) -> int:
    return -(-size // TAR_BLOCK) * TAR_BLOCK


def _tar_end(written: int) -> int:
    """Two zero blocks, then zeros up to a whole record (as tarfile writes it)."""
    end = written + 2 * TAR_BLOCK
    return 2 * TAR_BLOCK + (-end % TAR_RECORD)


def delivery_archive(
    *, caller: Caller, delivery_id, ip_address: str | None, user_agent: str
) -> DeliveryArchive:
    """The whole delivery as one uncompressed tar (parquet is compressed already), streamed
    file by file from storage: memory stays one chunk whatever the size. Only deliveries up to
    DELIVERY_ARCHIVE_MAX_BYTES (larger ones: the download command). Recorded like a link."""
    delivery = _ready_delivery_for(caller, delivery_id)
    size = delivery_archive_size(delivery)
    limit = settings.DELIVERY_ARCHIVE_MAX_BYTES
    if size > limit:
        raise ArchiveTooLarge(
            f"This dataset is {size // 1024**2} MiB; single archives are offered up to "
            f"{limit // 1024**2} MiB. Use the marketplace-download command instead.",
        )
    filename = f"{_archive_root(delivery)}.tar"
    DownloadEvent.objects.create(
        delivery=delivery,
        path=f"archive:{filename}",
        **DownloadEvent.requester(caller, ip_address=ip_address, user_agent=user_agent),
        link_expires_at=timezone.now(),
    )
    files = list(delivery.files.all())
    return DeliveryArchive(filename=filename, size=size, chunks=_tar_chunks(delivery, files))


def _tar_chunks(delivery: Delivery, files: list[DeliveryFile]):
    import hashlib
    import logging

    written = 0
    for file in files:
        header = _tar_header(delivery, file)
        yield header
        written += len(header)
        digest = hashlib.sha256()
        sent = 0
        for block in storage.stream(f"{delivery.prefix}/{file.path}"):
            digest.update(block)
            sent += len(block)
            yield block
        if sent != file.size_bytes or (file.sha256 and digest.hexdigest() != file.sha256):
            # Never hand out an archive that differs from the manifest: cut the stream, so
            # the client sees a truncated download rather than wrong bytes.
            logging.getLogger(__name__).error(
                "archive of delivery %s: %s differs from the manifest", delivery.id, file.path
            )
            raise storage.StorageError(f"{file.path} differs from the manifest")
        padding = _padded(sent) - sent
        if padding:
            yield b"\0" * padding
        written += sent + padding
    yield b"\0" * _tar_end(written)
