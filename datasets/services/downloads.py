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
from marketplace.errors import Conflict, NotFound
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
        actor_label=actor_label(caller),
        user=caller.user,
        api_key=caller.api_key,
        ip_address=ip_address,
        user_agent="".join(c for c in user_agent or "" if c.isprintable())[:300],  # no NUL
        link_expires_at=timezone.now() + timezone.timedelta(seconds=expires_in),
    )
    url = storage.presigned_get(
        key=f"{delivery.prefix}/{path}",
        expires_in=expires_in,
        download_name=path.rsplit("/", 1)[-1],
    )
    return DownloadLink(url=url, expires_at=event.link_expires_at, event=event)


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
