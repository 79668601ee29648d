"""A dispute as the pages see it, built from rows (no upload, no assembly): a delivered order of
four 12 s episodes whose every file the customer downloaded, then claimed all four for
re-collection ("wrong task", a person judges); the fleet's dispute is open."""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from datasets.models import (
    Claim,
    ClaimEvent,
    ClaimItem,
    Delivery,
    DeliveryFile,
    Dispute,
    DownloadEvent,
    Episode,
)
from fleets.models import Job
from orders.models import Order
from tests.factories import FleetFactory, JobFactory, OrderFactory, RobotFactory, SiteFactory

PERSON = "Disputed: this reason needs a person to judge."


@dataclass
class Disputed:
    order: Order
    delivery: Delivery
    episodes: list
    claim: Claim
    dispute: Dispute


def disputed_order(customer_organization, fleet_organization, *, count: int = 4) -> Disputed:
    order = OrderFactory(
        organization=customer_organization,
        status=Order.Status.DELIVERED,
        hours=Decimal("0.02"),
        environments=1,
        accepted_seconds=Decimal(12 * count),
        accepted_hours=Decimal("0.01"),
    )
    fleet = FleetFactory(organization=fleet_organization, name="Fleet under dispute")
    site = SiteFactory(fleet=fleet)
    robot = RobotFactory(site=site, fleet=fleet)
    job = JobFactory(
        order=order,
        site=site,
        status=Job.Status.COMPLETED,
        target_hours=Decimal("0.02"),
        accepted_seconds=Decimal(12 * count),
    )
    episodes = [
        Episode.objects.create(
            job=job,
            order=order,
            fleet=fleet,
            site=site,
            robot=robot,
            operator=f"op-{index}",
            task_instruction="insert the peg",
            success=True,
            fps=30,
            size_bytes=1000,
            sha256=f"{index:064x}",
            upload_key=f"up/{order.id}/{index}",
            stored_key=f"st/{order.id}/{index}",
            status=Episode.Status.ACCEPTED,
            frames=360,
            duration_seconds=Decimal("12.000"),
            quality_score=0.9,
            idle_fraction=0.05,
        )
        for index in range(count)
    ]
    ids = [str(e.id) for e in episodes]
    delivery = Delivery.objects.create(
        order=order,
        kind=Delivery.Kind.FULL,
        status=Delivery.Status.READY,
        prefix=f"deliveries/{order.id}/v1",
        episodes=count,
        seconds=Decimal(12 * count),
        episode_ids=ids,
        ready_at=timezone.now() - timedelta(hours=2),
    )
    for path, size, held in (
        ("manifest.json", 300, []),
        ("meta/info.json", 900, []),
        ("data/chunk-000/file-000.parquet", 40_000, ids),
    ):
        DeliveryFile.objects.create(delivery=delivery, path=path, size_bytes=size, episode_ids=held)
        DownloadEvent.objects.create(
            delivery=delivery,
            path=path,
            actor_label="api_key:grabber",
            link_expires_at=timezone.now(),
        )
    claim = Claim.objects.create(
        order=order,
        delivery=delivery,
        remedy=Claim.Remedy.RECOLLECT,
        note="none of these is the task",
        status=Claim.Status.DISPUTED,
        actor_label="api_key:grabber",
    )
    dispute = Dispute.objects.create(
        claim=claim, fleet=fleet, answer_due_at=timezone.now() + timedelta(days=5)
    )
    for episode in episodes:
        ClaimItem.objects.create(
            claim=claim,
            episode=episode,
            dispute=dispute,
            reason_code="wrong_task",
            seconds=Decimal("12.000"),
            status=ClaimItem.Status.DISPUTED,
            route=PERSON,
        )
    for action in ("filed", "rechecked", "disputed"):
        ClaimEvent.objects.create(
            claim=claim,
            dispute=dispute if action == "disputed" else None,
            action=action,
            actor_label="system:claims",
        )
    return Disputed(order, delivery, episodes, claim, dispute)
