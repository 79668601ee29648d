"""factory_boy factories shared by every app's tests."""

from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

import factory
from django.db import connection
from django.utils import timezone

from marketplace.models import Membership, Organization, User
from orders.models import ComplexityLevel, Embodiment, Order, RateCard, TaskType


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("pw-for-tests-123")


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization

    name = factory.Sequence(lambda n: f"Org {n}")
    kind = Organization.Kind.CUSTOMER


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    organization = factory.SubFactory(OrganizationFactory)
    role = Membership.Role.OWNER


def seeded_rate_card() -> RateCard:
    """Rate card v1 from the catalog data migration."""
    return RateCard.objects.get(version=1)


class OrderFactory(factory.django.DjangoModelFactory):
    """An order as order_create would leave it (priced with rate card v1, awaiting payment).

    Prices here are not recomputed: use orders.services to test pricing itself.
    """

    class Meta:
        model = Order

    organization = factory.SubFactory(OrganizationFactory)
    task_type = factory.LazyFunction(lambda: TaskType.objects.get(slug="peg-insertion"))
    complexity = factory.LazyFunction(lambda: ComplexityLevel.objects.get(level=4))
    embodiment = factory.LazyFunction(lambda: Embodiment.objects.get(slug="franka-fr3"))
    hours = Decimal("10.00")
    environments = 2
    rate_card = factory.LazyFunction(seeded_rate_card)
    currency = "USD"
    lines = factory.LazyAttribute(
        lambda o: [
            {
                "code": "base",
                "description": "test",
                "quantity": str(o.hours),
                "unit_amount": "100",
                "amount": str(o.total),
            }
        ]
    )
    total = factory.LazyAttribute(lambda o: (o.hours * Decimal(100)).quantize(Decimal("0.01")))
    status = Order.Status.AWAITING_PAYMENT
    deadline = factory.LazyFunction(lambda: timezone.localdate() + timedelta(days=60))


# --- Fleets (issue 3) -------------------------------------------------------------------------


class FleetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "fleets.Fleet"

    organization = factory.SubFactory(OrganizationFactory, kind=Organization.Kind.FLEET_OPERATOR)
    name = factory.Sequence(lambda n: f"Fleet {n}")
    weekly_capacity_hours = Decimal("40")
    payout_rate_per_hour = Decimal("50")
    quality_score = Decimal("0.800")


class SiteFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "fleets.Site"

    fleet = factory.SubFactory(FleetFactory)
    name = factory.Sequence(lambda n: f"Site {n}")
    kind = "lab_bench"


class RobotFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "fleets.Robot"

    site = factory.SubFactory(SiteFactory)
    fleet = factory.LazyAttribute(lambda r: r.site.fleet)
    name = factory.Sequence(lambda n: f"Robot {n}")
    embodiment = factory.LazyFunction(lambda: Embodiment.objects.get(slug="franka-fr3"))
    end_effector = "parallel_gripper"
    sensor_slugs = factory.LazyFunction(list)


@contextmanager
def rows_from_before_the_pay_rule():
    """Offers and assignments as they could be written before the pay rule (fleets migration
    0006: its triggers refuse a rate above the order's price per hour or another currency):
    the triggers are off for the block, in the test's transaction, and on again after. For
    tests of what billing does with such rows (they are held, never paid blindly)."""
    _pay_rule_triggers("DISABLE")
    yield  # on an error the test's rollback turns them on again (ALTER TABLE is transactional)
    _pay_rule_triggers("ENABLE")


def _pay_rule_triggers(action: str) -> None:
    with connection.cursor() as cursor:
        # ALTER TABLE waits for no deferred check: run those (foreign keys) now
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for table in ("fleets_offer", "fleets_assignment"):
            cursor.execute(f"ALTER TABLE {table} {action} TRIGGER {table}_pay_rule")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def equipped_site(*, fleet=None, kind: str = "lab_bench", sensors=(), **fleet_kwargs):
    """A site with one robot able to do the default OrderFactory order (franka, gripper)."""
    fleet = fleet or FleetFactory(**fleet_kwargs)
    site = SiteFactory(fleet=fleet, kind=kind)
    RobotFactory(site=site, fleet=fleet, sensor_slugs=sorted(sensors))
    return site


class JobFactory(factory.django.DjangoModelFactory):
    """A job assigned to a fleet's site (as dispatch leaves it after an accepted offer)."""

    class Meta:
        model = "fleets.Job"
        skip_postgeneration_save = True

    order = factory.SubFactory(OrderFactory, status=Order.Status.IN_COLLECTION)
    # From 1000 up: tests give a job of the same order a small sequence of their own (1, 2, 3,
    # 99), which this process-wide counter reached at some point of a run, so the unique
    # (order, sequence) failed whenever a test happened to run at that count (an xdist worker
    # ran test_delivery_pages' pilot at 99).
    sequence = factory.Sequence(lambda n: n + 1000)
    environment_index = 0
    embodiment = factory.LazyAttribute(lambda j: j.order.embodiment)
    end_effector = "parallel_gripper"
    target_hours = Decimal("1.00")
    deadline = factory.LazyFunction(lambda: timezone.now() + timedelta(days=30))
    status = "assigned"
    site = factory.SubFactory(SiteFactory)
    fleet = factory.LazyAttribute(lambda j: j.site.fleet if j.site else None)

    @factory.post_generation
    def assignment(job, create, extracted, **kwargs):
        if create and job.fleet_id and job.status in ("assigned", "in_progress", "completed"):
            from fleets.models import Assignment

            Assignment.objects.create(
                job=job,
                fleet_id=job.fleet_id,
                site_id=job.site_id,
                rate_per_hour=job.fleet.payout_rate_per_hour,
                currency=job.fleet.currency,
            )


class CompletedJobFactory(factory.django.DjangoModelFactory):
    """A job of an order held (or completed) by a fleet; set accepted_seconds as QA would."""

    class Meta:
        model = "fleets.Job"
        skip_postgeneration_save = True

    order = factory.SubFactory(OrderFactory)
    sequence = factory.Sequence(lambda n: n + 1000)  # as JobFactory's: clear of tests' own
    environment_index = 0
    embodiment = factory.LazyFunction(lambda: Embodiment.objects.get(slug="franka-fr3"))
    end_effector = "parallel_gripper"
    target_hours = Decimal("5.00")
    deadline = factory.LazyFunction(lambda: timezone.now() + timedelta(days=30))
    status = "completed"
    site = factory.SubFactory(SiteFactory)
    fleet = factory.LazyAttribute(lambda j: j.site.fleet)
    accepted_seconds = Decimal("0")

    @factory.post_generation
    def assignment(job, create, extracted, **kwargs):
        """The fleet took the job at its rate then (what dispatch records)."""
        if create and job.fleet_id:
            from fleets.models import Assignment

            Assignment.objects.create(
                job=job,
                fleet_id=job.fleet_id,
                site_id=job.site_id,
                rate_per_hour=job.fleet.payout_rate_per_hour,
                currency=job.fleet.currency,
            )
