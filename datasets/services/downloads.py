"""Getting a delivery out: freshly signed, audited links to its files; revoking them."""

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from datasets import storage
from datasets.error_codes import ErrorCode
from datasets.models import Delivery, DeliveryFile, DownloadEvent, EpisodeExclusion
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
    """A freshly signed GET for one file of a ready, unrevoked, current delivery, recorded
    first; never for a file holding a credited episode."""
    delivery = issuing_delivery(caller, delivery_id)
    # No stored path holds a NUL byte, and PostgreSQL refuses one in a query (it was a 500).
    file = None if "\x00" in path else delivery.files.filter(path=path).first()
    if file is None:
        raise NotFound("No such file in this delivery.", fields={"path": ["Not in the manifest."]})
    _refuse_credited(delivery, {path: file}, field="path")
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


class EpisodesCredited(Conflict):
    code = ErrorCode.EPISODES_CREDITED


def credited_episode_ids(order_id) -> set[str]:
    """The order's episodes the customer was credited for (a refund instead of the data)."""
    return {
        str(pk)
        for pk in EpisodeExclusion.objects.filter(
            order_id=order_id, remedy=EpisodeExclusion.Remedy.CREDIT
        ).values_list("episode_id", flat=True)
    }


def file_episodes(delivery: Delivery, file: DeliveryFile) -> set[str]:
    """The episodes whose frames a file holds: as recorded at assembly; a data or video file
    of a version assembled before that was recorded is taken to hold every episode."""
    if file.episode_ids:
        return set(file.episode_ids)
    if file.path.startswith(("data/", "videos/")):
        return set(delivery.episode_ids)
    return set()


def _refuse_credited(delivery: Delivery, files: dict, *, field: str = "paths") -> None:
    """No link to a file holding an episode that was credited, in any version (`files`: the
    request's key for each file -> DeliveryFile)."""
    credited = credited_episode_ids(delivery.order_id) & set(delivery.episode_ids)
    if not credited:
        return
    refused = sorted(key for key, f in files.items() if file_episodes(delivery, f) & credited)
    if refused:
        raise EpisodesCredited(
            f"{len(refused)} file{'s' if len(refused) != 1 else ''} of this version hold "
            "episodes the customer was credited for: no new links to them. The order's latest "
            "version leaves those episodes out.",
            fields={field: {key: ["Holds credited episodes."] for key in refused[:50]}},
        )


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
    delivery = issuing_delivery(caller, delivery_id)
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
    _refuse_credited(delivery, {str(i): files[path] for i, path in enumerate(paths)})
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


def issuing_delivery(caller: Caller, delivery_id, *, whole: bool = False) -> Delivery:
    """The caller's delivery, if it still issues links: ready, unrevoked, and not replaced by
    a newer version that is ready (links signed before expire on their own, within
    DELIVERY_LINK_EXPIRY_SECONDS). `whole` (the archive, the bucket export: every file):
    refused while any file holds a credited episode."""
    delivery = customer_delivery(organization=caller.organization, delivery_id=delivery_id)
    if delivery.is_revoked:
        raise Conflict(
            "This delivery was revoked: no new links are issued.", code=ErrorCode.DELIVERY_REVOKED
        )
    if delivery.status != Delivery.Status.READY:
        raise Conflict("This delivery is not ready yet.", code=ErrorCode.DELIVERY_NOT_READY)
    successor = ready_successor(delivery)
    if successor is not None:
        raise Conflict(
            f"Version {delivery.version} is replaced by version {successor.version}, which is "
            "ready: download that one (no new links to a replaced version).",
            code=ErrorCode.DELIVERY_SUPERSEDED,
            fields={"delivery": [str(successor.id)]},
        )
    if whole:
        _refuse_credited(delivery, {f.path: f for f in delivery.files.all()})
    return delivery


def ready_successor(delivery: Delivery) -> Delivery | None:
    """The ready version that replaces a superseded one (None while it is assembling)."""
    if delivery.superseded_at is None:
        return None
    return (
        Delivery.objects.filter(
            order_id=delivery.order_id,
            kind=delivery.kind,
            version__gt=delivery.version,
            status=Delivery.Status.READY,
        )
        .order_by("version")
        .first()
    )


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
    delivery = issuing_delivery(caller, delivery_id, whole=True)
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
