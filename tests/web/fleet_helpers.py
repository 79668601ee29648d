"""Objects for the fleet portal tests: an operator's fleet with a site and robot, and jobs
offered to it, shaped as fleets.services.job_dispatch leaves them."""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from fleets.models import Job, JobEvent, Offer
from orders.models import Order
from tests.factories import FleetFactory, OrderFactory, RobotFactory, SiteFactory


def operator_fleet(organization, **kwargs):
    fleet = FleetFactory(organization=organization, **kwargs)
    site = SiteFactory(fleet=fleet, name=f"{fleet.name} bench")
    robot = RobotFactory(site=site, fleet=fleet)
    return fleet, site, robot


def offered_job(site, *, expires_in=timedelta(minutes=15), customer_org=None, sequence=1):
    """A paid order's job on offer to `site` (as job_dispatch leaves it: offered, held)."""
    order = OrderFactory(
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("2"),
        environments=1,
        **({"organization": customer_org} if customer_org else {}),
    )
    job = Job.objects.create(
        order=order,
        sequence=sequence,
        environment_index=0,
        embodiment=order.embodiment,
        end_effector="parallel_gripper",
        target_hours=Decimal("2"),
        deadline=timezone.now() + timedelta(days=30),
        status=Job.Status.OFFERED,
        fleet=site.fleet,
        site=site,
    )
    JobEvent.objects.create(job=job, to_status=Job.Status.OPEN, reason="Planned.")
    JobEvent.objects.create(
        job=job,
        from_status=Job.Status.OPEN,
        to_status=Job.Status.OFFERED,
        fleet=site.fleet,
        reason=f"Offered to {site.fleet.name}.",
    )
    offer = Offer.objects.create(
        job=job,
        fleet=site.fleet,
        site=site,
        score=0.8,
        rate_per_hour=site.fleet.payout_rate_per_hour,
        currency=site.fleet.currency,
        expires_at=timezone.now() + expires_in,
    )
    return job, offer
