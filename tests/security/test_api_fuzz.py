"""Schemathesis over /api/schema/: every operation, generated valid and invalid requests, sent
as each role (anonymous, customer by API key and by session, fleet operator by API key, staff).

The app runs in-process through its WSGI handler against PostgreSQL; the world below is made
once per test and every request runs in a savepoint that is rolled back, so writes never leak.
Bound: FUZZ_MAX_EXAMPLES cases per operation (default 12: ~3,400 requests). bench/fuzz_api.py
runs the same with more.
"""

import os
import secrets
from datetime import timedelta
from decimal import Decimal

import pytest
import schemathesis
from django.test import Client
from django.utils import timezone

from datasets.models import Claim, ClaimItem, Delivery, DeliveryFile, Dispute
from fleets.models import Offer
from marketplace import services
from marketplace.models import Organization
from marketplace.wsgi import application
from orders.models import Order
from tests.datasets.helpers import Collection
from tests.factories import JobFactory, OrderFactory, SiteFactory, UserFactory
from tests.security.fuzz_driver import (
    FuzzCaller,
    FuzzReport,
    connection_kept_open,
    fuzz_schema,
    send,
)

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "12"))

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3")]


def _session_caller(role: str, user) -> FuzzCaller:
    client = Client()
    client.force_login(user)
    # SessionAuthentication enforces CSRF on writes: send a matching cookie and header, as
    # the portal's pages do, so writes are fuzzed past the CSRF check.
    csrf = secrets.token_hex(16)
    return FuzzCaller(
        role=role,
        headers={"X-CSRFToken": csrf},
        cookies={"sessionid": client.cookies["sessionid"].value, "csrftoken": csrf},
    )


class World:
    """Two customers, a fleet operator holding a job with an episode, a delivery, an offer."""

    def __init__(self, make_tenant):
        customer = make_tenant(Organization.Kind.CUSTOMER)
        other_customer = make_tenant(Organization.Kind.CUSTOMER)
        operator = make_tenant(Organization.Kind.FLEET_OPERATOR)
        staff = UserFactory(is_staff=True, is_superuser=True)

        collection = Collection(operator, customer)
        registered = collection.register(b"x" * 1024)
        assert registered.status_code == 201, registered.content
        unpaid = OrderFactory(organization=customer.organization)
        foreign = OrderFactory(organization=other_customer.organization)
        offered_job = JobFactory(
            order=collection.order, site=None, fleet=None, status="offered", sequence=50
        )
        offer = Offer.objects.create(
            job=offered_job,
            fleet=collection.site.fleet,
            site=collection.site,
            score=1.0,
            rate_per_hour=collection.site.fleet.payout_rate_per_hour,
            currency=collection.site.fleet.currency,
            expires_at=timezone.now() + timedelta(hours=1),
        )
        delivery = Delivery.objects.create(
            order=collection.order,
            kind=Delivery.Kind.FULL,
            status=Delivery.Status.READY,
            prefix=f"deliveries/{collection.order.id}/full/",
            episodes=1,
            frames=30,
            seconds=Decimal("1"),
            ready_at=timezone.now(),
        )
        DeliveryFile.objects.create(delivery=delivery, path="manifest.json", size_bytes=10)
        claim = Claim.objects.create(
            order=collection.order,
            delivery=delivery,
            remedy=Claim.Remedy.CREDIT,
            status=Claim.Status.DISPUTED,
            actor_label="user:fuzz",
        )
        dispute = Dispute.objects.create(
            claim=claim,
            fleet=collection.site.fleet,
            answer_due_at=timezone.now() + timedelta(days=5),
        )
        ClaimItem.objects.create(
            claim=claim,
            episode_id=registered.json()["id"],
            dispute=dispute,
            reason_code="wrong_task",
            seconds=Decimal("1"),
            status=ClaimItem.Status.DISPUTED,
        )
        spare_key = services.api_key_create(
            organization=customer.organization, name="spare", created_by=customer.user
        ).api_key
        quote = customer.client.post(
            "/api/v1/quotes",
            {"task_type": "peg-insertion", "embodiment": "franka-fr3", "hours": "5"},
            format="json",
        )
        assert quote.status_code == 201, quote.content

        self.callers = [
            FuzzCaller(role="anonymous"),
            FuzzCaller(
                role="customer key", headers={"Authorization": f"Bearer {customer.raw_key}"}
            ),
            _session_caller("customer session", customer.user),
            FuzzCaller(role="fleet key", headers={"Authorization": f"Bearer {operator.raw_key}"}),
            _session_caller("staff session", staff),
        ]
        # Ids of real objects per first path segment after /api/v1/ (and /fleet/).
        self.ids = {
            "api-keys": [customer.api_key.id, spare_key.id, operator.api_key.id],
            "orders": [collection.order.id, unpaid.id, foreign.id],
            "quotes": [quote.json()["id"]],
            "deliveries": [delivery.id],
            "episodes": [registered.json()["id"]],
            "fleets": [collection.site.fleet.id],
            "sites": [collection.site.id, SiteFactory().id],
            "robots": [collection.robot.id],
            "jobs": [collection.job.id, offered_job.id],
            "offers": [offer.id],
            "claims": [claim.id],
            "disputes": [dispute.id],
        }
        assert unpaid.status == Order.Status.AWAITING_PAYMENT

    def real_ids_for(self, path: str) -> list[str]:
        segments = [s for s in path.split("/") if s][2:]
        if segments and segments[0] == "fleet":
            segments = segments[1:]
        return [str(pk) for pk in self.ids.get(segments[0] if segments else "", [])]


def api_schema():
    with connection_kept_open():
        return schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


def test_every_operation_survives_fuzzing_as_every_role(make_tenant):
    # given
    world = World(make_tenant)
    schema = api_schema()

    # when
    report = fuzz_schema(
        schema, world.callers, max_examples=MAX_EXAMPLES, real_ids_for=world.real_ids_for
    )

    # then
    print(report.summary())
    assert report.operations >= 60
    assert report.requests >= report.operations * MAX_EXAMPLES * len(world.callers) // 2
    assert not report.findings, f"{report.summary()}\n{report.details()}"
    assert report.server_errors == 0


# --- The check can fail: a deliberately broken app is caught -----------------------------------

BROKEN_SCHEMA = {
    "openapi": "3.0.3",
    "info": {"title": "broken", "version": "1"},
    "paths": {
        "/crash": {"get": {"responses": {"200": {"description": "ok"}}}},
        "/teapot": {"get": {"responses": {"200": {"description": "ok"}}}},
        "/shape": {
            "get": {
                "responses": {
                    "200": {
                        "description": "ok",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["id"],
                                    "properties": {"id": {"type": "string"}},
                                }
                            }
                        },
                    }
                }
            }
        },
    },
}

BROKEN_RESPONSES = {
    "/crash": ("500 Internal Server Error", b'{"code": "server_error"}'),
    "/teapot": ("418 I'm a teapot", b"{}"),
    "/shape": ("200 OK", b'{"id": 7}'),
}


def broken_app(environ, start_response):
    status, body = BROKEN_RESPONSES[environ["PATH_INFO"]]
    start_response(status, [("Content-Type", "application/json")])
    return [body]


def test_the_fuzz_checks_flag_a_crash_an_undocumented_status_and_a_wrong_body():
    # given
    schema = schemathesis.openapi.from_dict(BROKEN_SCHEMA)
    schema.app = broken_app
    caller = FuzzCaller(role="anonymous")

    # when
    report = fuzz_schema(schema, [caller], max_examples=3, real_ids_for=lambda path: [])

    # then
    flagged = {f.operation: f for f in report.findings.values()}
    assert report.server_errors == report.statuses[500] > 0
    assert flagged["GET /crash"].status == 500
    assert "Server error" in flagged["GET /crash"].title
    assert "Undocumented status code" in flagged["GET /teapot"].title
    assert "Response violates schema" in flagged["GET /shape"].title


def test_a_rolled_back_request_leaves_no_write(make_tenant):
    """The savepoint around each fuzzed request: a created order does not survive it."""
    # given
    customer = make_tenant(Organization.Kind.CUSTOMER)
    schema = api_schema()
    operation = schema["/api/v1/orders"]["POST"]
    case = operation.Case(
        body={"task_type": "peg-insertion", "embodiment": "franka-fr3", "hours": "2"},
        media_type="application/json",
    )
    report = FuzzReport()

    # when
    send(case, FuzzCaller("customer key", {"Authorization": f"Bearer {customer.raw_key}"}), report)

    # then
    assert report.statuses == {201: 1}
    assert not Order.objects.filter(organization=customer.organization).exists()
