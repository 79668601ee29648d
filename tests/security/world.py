"""The authorization matrix's fixture world: two customers (A, B), two fleet operators (X, Y)
and a staff user, each tenant owning one object of every kind, built with the factories and
the services. Also: the callers (principals), and a fingerprint of every row in the
database, to prove that a refused write changed nothing."""

import re
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.apps import apps
from django.db import connection
from django.test import Client
from django.utils import timezone
from psycopg import sql
from rest_framework.test import APIClient

from billing.models import Payment
from datasets.models import Claim, ClaimItem, Delivery, DeliveryFile, Dispute, Episode
from fleets.models import (
    CameraCalibration,
    Job,
    JobEvent,
    Operator,
    Scene,
    SiteObject,
    WebhookDelivery,
)
from marketplace import services as account_services
from marketplace.models import Membership, Organization
from orders import services as order_services
from orders.models import Order
from tests.billing.factories import PaymentFactory
from tests.factories import (
    FleetFactory,
    JobFactory,
    MembershipFactory,
    OrderFactory,
    OrganizationFactory,
    RobotFactory,
    SiteFactory,
    UserFactory,
)
from tests.web.fleet_helpers import offered_job

OWNER, MEMBER, BILLING = Membership.Role.OWNER, Membership.Role.MEMBER, Membership.Role.BILLING
ROLES = (OWNER, MEMBER, BILLING)
CUSTOMER, FLEET = Organization.Kind.CUSTOMER, Organization.Kind.FLEET_OPERATOR
SPEC = {"task_type": "bin-picking", "embodiment": "ur5e", "hours": "10"}


# A job on offer to one fleet is still open for bids from every capable fleet (DESIGN 4):
# its id is the marketplace's, not the fleet's (the bid view hides order, fleet and site).
MARKETPLACE_OBJECTS = ("offered_job",)


@dataclass
class Tenant:
    """One organization: a user and an API key per role, and the objects it owns."""

    label: str
    organization: Organization
    users: dict = field(default_factory=dict)  # role -> User
    raw_keys: dict = field(default_factory=dict)  # role -> secret
    objects: dict = field(default_factory=dict)  # kind of object -> its id
    # ids of other tenants' objects this tenant may legitimately see (e.g. a held job's order)
    may_see: set = field(default_factory=set)

    @property
    def kind(self) -> str:
        return self.organization.kind

    def private_ids(self) -> set[str]:
        shared = {str(self.objects[name]) for name in MARKETPLACE_OBJECTS if name in self.objects}
        ids = {str(value) for value in self.objects.values()} | {str(self.organization.id)}
        return ids - shared


def _tenant(label: str, kind: str) -> Tenant:
    organization = OrganizationFactory(kind=kind, name=f"Tenant {label}")
    tenant = Tenant(label=label, organization=organization)
    for role in ROLES:
        user = UserFactory(username=f"{label.lower()}-{role}")
        MembershipFactory(user=user, organization=organization, role=role)
        tenant.users[role] = user
        issued = account_services.api_key_create(
            organization=organization, name=f"{label} {role}", created_by=user, role=role
        )
        tenant.raw_keys[role] = issued.raw_key
        tenant.objects[f"key_{role}"] = issued.api_key.id
    # A key nobody uses, for the revoke routes.
    spare = account_services.api_key_create(organization=organization, name=f"{label} spare")
    tenant.objects["api_key"] = spare.api_key.id
    return tenant


def _customer_objects(tenant: Tenant) -> None:
    organization = tenant.organization
    caller = account_services_caller(tenant)
    quote = order_services.quote_create(
        organization=organization,
        request=order_services.DatasetRequest(
            task_type="bin-picking", embodiment="ur5e", hours=Decimal("10")
        ),
    )
    order = order_services.order_create(
        caller=caller,
        request=order_services.DatasetRequest(
            task_type="bin-picking", embodiment="ur5e", hours=Decimal("10")
        ),
        details=order_services.OrderDetails(),
    )
    payment = PaymentFactory(order=order)
    # An order in review, with a pilot delivery waiting for the customer's decision.
    reviewed = OrderFactory(
        organization=organization, status=Order.Status.IN_REVIEW, hours=Decimal("4")
    )
    delivery = Delivery.objects.create(
        order=reviewed,
        kind=Delivery.Kind.PILOT,
        status=Delivery.Status.READY,
        prefix=f"orders/{reviewed.id}/deliveries/pilot",
        episodes=1,
        frames=300,
        seconds=Decimal("10"),
        review=Delivery.Review.PENDING,
        ready_at=timezone.now(),
    )
    DeliveryFile.objects.create(delivery=delivery, path="manifest.json", size_bytes=100)
    DeliveryFile.objects.create(
        delivery=delivery, path="meta/info.json", size_bytes=200, sha256="a" * 64
    )
    tenant.objects.update(
        quote=quote.id,
        order=order.id,
        payment=payment.id,
        reviewed_order=reviewed.id,
        delivery=delivery.id,
    )
    assert Payment.objects.filter(organization=organization).count() == 1


def account_services_caller(tenant: Tenant):
    from marketplace.tenancy import Caller

    return Caller(organization=tenant.organization, role=OWNER, user=tenant.users[OWNER])


def _fleet_objects(tenant: Tenant, customer: Tenant) -> None:
    """A fleet, site and robot; a job of `customer`'s order it holds, with an episode; a job
    offered to it (pending offer); and a webhook delivery to its fleet."""
    fleet = FleetFactory(organization=tenant.organization, name=f"Fleet {tenant.label}")
    site = SiteFactory(fleet=fleet, name=f"Site {tenant.label}")
    robot = RobotFactory(site=site, fleet=fleet, name=f"Robot {tenant.label}")
    order = Order.objects.get(pk=customer.objects["reviewed_order"])
    held = JobFactory(order=order, site=site, status=Job.Status.ASSIGNED, sequence=1)
    episode = Episode.objects.create(
        job=held,
        order=order,
        fleet=fleet,
        site=site,
        robot=robot,
        operator=f"op-{tenant.label}",
        task_instruction="pick the bin",
        success=True,
        fps=30,
        size_bytes=1000,
        sha256="b" * 64,
        upload_key=f"orders/{order.id}/jobs/{held.id}/episodes/e-{tenant.label}/1.parquet",
    )
    # a registered operator (issue 16), the one the matrix's episode registrations name
    operator = Operator.objects.create(fleet=fleet, pseudonym="op-matrix", site=site)
    # the collection plan's registry (issue 30)
    site_object = SiteObject.objects.create(fleet=fleet, site=site, name="matrix bin")
    scene = Scene.objects.create(
        fleet=fleet, site=site, name="matrix scene", arranged_at=timezone.now()
    )
    calibration = CameraCalibration.objects.create(
        fleet=fleet,
        robot=robot,
        camera="scene",
        calibrated_at=timezone.now(),
        width=640,
        height=480,
        fx=600,
        fy=600,
        cx=320,
        cy=240,
        distortion_model="none",
        extrinsics=[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
    )
    offered, offer = offered_job(site, customer_org=customer.organization, sequence=1)
    webhook = WebhookDelivery.objects.create(
        fleet=fleet,
        event_type="offer.created",
        payload={"offer": str(offer.id)},
        url="http://127.0.0.1:9/hook",
    )
    tenant.objects.update(
        fleet=fleet.id,
        site=site.id,
        robot=robot.id,
        job=held.id,
        episode=episode.id,
        offered_job=offered.id,
        offer=offer.id,
        webhook_delivery=webhook.id,
        operator=operator.id,
        site_object=site_object.id,
        scene=scene.id,
        calibration=calibration.id,
    )
    dispute = _claim_and_dispute(customer, order, episode, fleet)
    tenant.objects["dispute"] = dispute.id
    customer.may_see |= {str(dispute.id)}  # the customer's claim names its disputes
    # The fleet sees the customer order id on the jobs it holds or is offered.
    tenant.may_see |= {str(order.id), str(offered.order_id)}
    customer.may_see |= {str(site.id)}  # coverage names the environment (site)
    customer.may_see |= {str(episode.id)}  # the order's episodes list (issue 16)


def _claim_and_dispute(customer: Tenant, order: Order, episode: Episode, fleet) -> Dispute:
    """The customer's claim on the fleet's episode (issue 28), in dispute with the fleet."""
    claim = Claim.objects.create(
        order=order,
        delivery_id=customer.objects["delivery"],
        remedy=Claim.Remedy.CREDIT,
        status=Claim.Status.DISPUTED,
        actor_label="user:matrix",
    )
    dispute = Dispute.objects.create(
        claim=claim, fleet=fleet, answer_due_at=timezone.now() + timedelta(days=5)
    )
    ClaimItem.objects.create(
        claim=claim,
        episode=episode,
        dispute=dispute,
        reason_code="wrong_task",
        seconds=Decimal("10"),
        status=ClaimItem.Status.DISPUTED,
    )
    customer.objects["claim"] = claim.id
    return dispute


def _open_job(customer: Tenant) -> Job:
    """A job open for bids: every capable fleet sees it (without its order)."""
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("2"),
        environments=1,
    )
    job = Job.objects.create(
        order=order,
        sequence=1,
        environment_index=0,
        embodiment=order.embodiment,
        end_effector="parallel_gripper",
        target_hours=Decimal("1"),
        deadline=timezone.now() + timedelta(days=30),
        status=Job.Status.OPEN,
    )
    JobEvent.objects.create(job=job, to_status=Job.Status.OPEN, reason="Planned.")
    customer.objects["open_order"] = order.id
    return job


@dataclass
class World:
    tenants: dict  # label -> Tenant
    staff_user: object
    open_job_id: object

    def tenant(self, label: str) -> Tenant:
        return self.tenants[label]

    def foreign_ids(self, label: str | None) -> set[str]:
        """Ids a caller of tenant `label` (None: anonymous or staff) must never be shown."""
        mine = self.tenants[label] if label else None
        ids = set()
        for other in self.tenants.values():
            if other is not mine:
                ids |= other.private_ids()
        return ids - (mine.may_see if mine else set())


def build_world() -> World:
    tenants = {label: _tenant(label, kind) for label, kind in TENANT_KINDS.items()}
    for label in ("A", "B"):
        _customer_objects(tenants[label])
    _fleet_objects(tenants["X"], tenants["A"])
    _fleet_objects(tenants["Y"], tenants["B"])
    open_job = _open_job(tenants["A"])
    staff = UserFactory(username="staff", is_staff=True, is_superuser=True)
    return World(tenants=tenants, staff_user=staff, open_job_id=open_job.id)


TENANT_KINDS = {"A": CUSTOMER, "B": CUSTOMER, "X": FLEET, "Y": FLEET}


# --- Callers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """Who calls: a tenant's role by API key or session, staff, or nobody."""

    name: str
    tenant: str | None = None
    role: str | None = None
    auth: str = "anonymous"  # anonymous | key | session | staff

    @property
    def kind(self) -> str | None:
        return TENANT_KINDS.get(self.tenant)

    def api_client(self, world: World) -> APIClient:
        client = APIClient()
        if self.auth == "key":
            raw = world.tenant(self.tenant).raw_keys[self.role]
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        elif self.auth == "session":
            client.force_login(world.tenant(self.tenant).users[self.role])
        elif self.auth == "staff":
            client.force_login(world.staff_user)
        return client

    def web_client(self, world: World) -> Client:
        client = Client()
        if self.auth == "session":
            client.force_login(world.tenant(self.tenant).users[self.role])
        elif self.auth == "staff":
            client.force_login(world.staff_user)
        return client


ANONYMOUS = Principal("anonymous")
STAFF = Principal("staff", auth="staff")


def key(tenant: str, role: str = OWNER) -> Principal:
    return Principal(f"{tenant}-{role}-key", tenant, role, "key")


def session(tenant: str, role: str = OWNER) -> Principal:
    return Principal(f"{tenant}-{role}-session", tenant, role, "session")


# --- Did anything change? ----------------------------------------------------------------------

# Columns that change on every authenticated request by design, not because of its outcome.
VOLATILE_COLUMNS = ("last_used_at", "last_login")
WATCHED_APPS = ("marketplace", "orders", "fleets", "datasets", "billing")


def _watched_tables() -> list[str]:
    tables = []
    for app_label in WATCHED_APPS:
        for model in apps.get_app_config(app_label).get_models():
            tables.append(model._meta.db_table)
    return sorted(set(tables))


def database_fingerprint() -> dict[str, str]:
    """An md5 per table over every row of the project's apps, in one query."""
    row = sql.SQL("(to_jsonb(t) {})::text").format(
        sql.SQL(" ").join(sql.SQL("- {}").format(sql.Literal(c)) for c in VOLATILE_COLUMNS)
    )
    per_table = sql.SQL(
        "SELECT {name}, md5(coalesce(string_agg({row}, ',' ORDER BY {row}), '')) FROM {table} t"
    )
    query = sql.SQL(" UNION ALL ").join(
        per_table.format(name=sql.Literal(table), row=row, table=sql.Identifier(table))
        for table in _watched_tables()
    )
    with connection.cursor() as cursor:
        cursor.execute(query)
        return dict(cursor.fetchall())


def changed_tables(before: dict, after: dict) -> list[str]:
    return sorted(table for table in before if before[table] != after.get(table))


UUID_PATTERN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
