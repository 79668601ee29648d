"""Reads of claims and disputes shared by the API and the portal: each tenant's own (another's
is not found), the staff queue, and what staff weigh: the customer's granted-rejection share
across its orders and what it downloaded of the order's deliveries before claiming."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Max, Min, OuterRef, Q, Subquery, Sum

from datasets.models import (
    Claim,
    ClaimItem,
    Delivery,
    DeliveryFile,
    Dispute,
    DownloadEvent,
    EpisodeExclusion,
)
from marketplace.errors import NotFound
from orders.models import Order

ZERO = Decimal(0)


def customer_claims(*, organization, order_id=None):
    claims = Claim.objects.filter(order__organization=organization).prefetch_related(
        "items", "disputes", "events"
    )
    return claims.filter(order_id=order_id) if order_id is not None else claims


def customer_claim(*, organization, claim_id) -> Claim:
    claim = customer_claims(organization=organization).filter(pk=claim_id).first()
    if claim is None:
        raise NotFound("Claim not found.")
    return claim


def fleet_disputes(*, organization):
    return (
        Dispute.objects.filter(fleet__organization=organization)
        .select_related("claim", "fleet")
        .prefetch_related("items__episode")
    )


def fleet_dispute(*, organization, dispute_id) -> Dispute:
    dispute = fleet_disputes(organization=organization).filter(pk=dispute_id).first()
    if dispute is None:
        raise NotFound("Dispute not found.")
    return dispute


def staff_dispute_queue():
    """Disputes to decide first (answered, or the fleet's time is up), then those waiting for
    the fleet, then the decided ones (the latest)."""
    disputes = Dispute.objects.select_related("claim__order__organization", "fleet").annotate(
        episodes=Count("items"), seconds=Sum("items__seconds")
    )
    return {
        "to_decide": list(
            disputes.filter(status=Dispute.Status.AWAITING_DECISION).order_by("created_at")[:200]
        ),
        "with_fleet": list(
            disputes.filter(status=Dispute.Status.OPEN).order_by("answer_due_at")[:200]
        ),
        "decided": list(
            disputes.filter(status=Dispute.Status.DECIDED).order_by("-decided_at")[:50]
        ),
    }


@dataclass(frozen=True)
class RejectionRecord:
    """A customer's rejections across its orders: what it took out of what it was delivered."""

    orders: int
    base_seconds: Decimal
    rejected_seconds: Decimal  # exclusions against the allowance: its own and granted claims
    items_granted: int
    items_refused: int
    items_open: int

    @property
    def share(self) -> float:
        return float(self.rejected_seconds / self.base_seconds) if self.base_seconds else 0.0


def rejection_record(*, organization) -> RejectionRecord:
    first_full = Delivery.objects.filter(
        order=OuterRef("pk"), kind=Delivery.Kind.FULL, ready_at__isnull=False
    ).order_by("ready_at", "version")
    orders = (
        Order.objects.filter(organization=organization)
        .filter(
            Q(deliveries__kind=Delivery.Kind.FULL, deliveries__ready_at__isnull=False)
            | Q(exclusions__against_allowance=True)
        )
        .distinct()
        .annotate(first_seconds=Subquery(first_full.values("seconds")[:1]))
        .values_list("pk", "first_seconds", "hours")
    )
    # the allowance's base per order (datasets.services.allowance): its first full delivery's
    # seconds, or the hours ordered before one
    bases = [seconds if seconds is not None else hours * 3600 for _, seconds, hours in orders]
    base = sum(bases, ZERO)
    rejected = EpisodeExclusion.objects.filter(
        order__organization=organization, against_allowance=True
    ).aggregate(s=Sum("seconds"))["s"]
    items = ClaimItem.objects.filter(claim__order__organization=organization)
    counts = items.aggregate(
        granted=Count("id", filter=Q(status=ClaimItem.Status.GRANTED)),
        refused=Count("id", filter=Q(status=ClaimItem.Status.REFUSED)),
        open=Count(
            "id", filter=Q(status__in=[ClaimItem.Status.PENDING, ClaimItem.Status.DISPUTED])
        ),
    )
    return RejectionRecord(
        orders=len(bases),
        base_seconds=base,
        rejected_seconds=rejected or ZERO,
        items_granted=counts["granted"],
        items_refused=counts["refused"],
        items_open=counts["open"],
    )


@dataclass(frozen=True)
class VersionDownloads:
    """What the customer took of one delivery version: files linked of those it holds."""

    delivery: Delivery
    files: int
    bytes: int
    files_linked: int
    bytes_linked: int
    links: int
    archives: int
    first_at: datetime | None
    last_at: datetime | None
    actors: list

    @property
    def share(self) -> float:
        return self.files_linked / self.files if self.files else 0.0


def download_audit(*, order_id) -> list[VersionDownloads]:
    """Per full delivery version of the order, from its DownloadEvent rows."""
    audit = []
    for delivery in Delivery.objects.filter(
        order_id=order_id, kind=Delivery.Kind.FULL, status=Delivery.Status.READY
    ).order_by("version"):
        files = DeliveryFile.objects.filter(delivery=delivery)
        total = files.aggregate(n=Count("id"), b=Sum("size_bytes"))
        events = DownloadEvent.objects.filter(delivery=delivery)
        linked_paths = (
            events.exclude(path__startswith="archive:").order_by().values("path").distinct()
        )
        archives = events.filter(path__startswith="archive:").count()
        linked = files.filter(path__in=linked_paths).aggregate(n=Count("id"), b=Sum("size_bytes"))
        if archives:  # an archive is every file
            linked = total
        span = events.aggregate(first=Min("created_at"), last=Max("created_at"))
        audit.append(
            VersionDownloads(
                delivery=delivery,
                files=total["n"],
                bytes=total["b"] or 0,
                files_linked=linked["n"],
                bytes_linked=linked["b"] or 0,
                links=events.count(),
                archives=archives,
                first_at=span["first"],
                last_at=span["last"],
                actors=sorted(
                    events.order_by().values_list("actor_label", flat=True).distinct()[:20]
                ),
            )
        )
    return audit
