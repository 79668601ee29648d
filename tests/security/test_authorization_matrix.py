"""The authorization matrix: every route of the OpenAPI schema and every web URL, called by
every kind of caller (anonymous, customers A and B, fleet operators X and Y, their member and
billing roles, API keys and sessions, staff), on its own objects and on another tenant's.

The allowed set of each (caller, route, object owner) comes from the tables below, written
out by hand: the owner gets an answer (2xx, or a 4xx about the request itself, never
401/403/404); another tenant gets 404 for a foreign object (never 403, never 200); anonymous
callers get 401/403, except on the public endpoints; the wrong kind of organization and the
wrong role get 403 (or 404); staff work in the admin, so the organization API refuses them.
A refused write must leave every row of the database as it was, and no answer may carry an
id of another tenant's object. A route or page without an entry in the tables fails the
coverage tests.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.contrib import admin
from django.db import transaction
from django.test import RequestFactory
from django.urls import NoReverseMatch, resolve, reverse
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from tests.security.world import (
    ANONYMOUS,
    BILLING,
    CUSTOMER,
    FLEET,
    MEMBER,
    OWNER,
    ROLES,
    SPEC,
    STAFF,
    UUID_PATTERN,
    build_world,
    changed_tables,
    database_fingerprint,
    key,
    session,
)
from tests.web import test_url_map as url_map

# the module's `world` is built once: its tests share one xdist worker
pytestmark = [pytest.mark.django_db, pytest.mark.xdist_group("authorization-matrix")]


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """One world for the module; each test runs in a savepoint inside it and is rolled back."""
    with django_db_blocker.unblock(), transaction.atomic():
        built = build_world()
        yield built
        transaction.set_rollback(True)


# --- Who calls ---------------------------------------------------------------------------------

API_PRINCIPALS = [
    ANONYMOUS,
    STAFF,
    key("A"),
    session("A"),
    key("A", MEMBER),
    key("A", BILLING),
    key("B"),
    key("X"),
    session("X"),
    key("X", MEMBER),
    key("X", BILLING),
    key("Y"),
]
WEB_PRINCIPALS = [
    ANONYMOUS,
    STAFF,
    session("A"),
    session("A", MEMBER),
    session("A", BILLING),
    session("B"),
    session("X"),
    session("X", MEMBER),
    session("X", BILLING),
    session("Y"),
]

# --- Who may do what ---------------------------------------------------------------------------

PUBLIC = "public"  # anyone, signed in or not
SIGNED_IN = "signed-in"  # any authenticated caller, staff included
ANY_ORG = "any-org"  # a member of an organization of either kind
STAFF_ONLY = "staff-only"  # the staff console
TENANTS_OF = {CUSTOMER: ("A", "B"), FLEET: ("X", "Y"), ANY_ORG: ("A", "B", "X", "Y")}
CAN_WORK = (OWNER, MEMBER)


@dataclass(frozen=True)
class Rule:
    audience: str  # PUBLIC, SIGNED_IN, ANY_ORG, CUSTOMER or FLEET
    obj: str | None = None  # the object the path's id names (a key of Tenant.objects)
    roles: tuple = ROLES  # roles that may call this method
    body: Callable | dict | None = None  # a valid body: dict, or f(world, acting tenant)

    def body_for(self, world, tenant) -> dict | None:
        return self.body(world, tenant) if callable(self.body) else self.body

    @property
    def owner_kind(self) -> str:
        return {PUBLIC: CUSTOMER, SIGNED_IN: CUSTOMER}.get(self.audience, self.audience)


def _bid(world, tenant):
    finish = timezone.now() + timedelta(days=2)
    return {"site": str(tenant.objects["site"]), "price_per_hour": "40", "earliest_finish": finish}


def _episode(world, tenant):
    return {
        "site": str(tenant.objects["site"]),
        "robot": str(tenant.objects["robot"]),
        "operator": "op-matrix",
        "task_instruction": "pick the bin",
        "success": True,
        "fps": 30,
        "size_bytes": 1000,
        "sha256": "c" * 64,
        "frames": 300,
    }


def _site_object(world, tenant):
    return {"site": str(tenant.objects["site"]), "name": "matrix cup"}


def _scene(world, tenant):
    return {"site": str(tenant.objects["site"]), "name": "matrix scene 2"}


def _calibration(world, tenant):
    return {
        "robot": str(tenant.objects["robot"]),
        "camera": "wrist",
        "calibrated_at": timezone.now() - timedelta(hours=1),
        "width": 640,
        "height": 480,
        "fx": 600.0,
        "fy": 600.0,
        "cx": 320.0,
        "cy": 240.0,
        "distortion_model": "none",
        "distortion_coefficients": [],
        "extrinsics": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
    }


NEW_FLEET = {"name": "New fleet", "weekly_capacity_hours": "10", "payout_rate_per_hour": "5"}
RENAME = {"name": "Renamed by the matrix"}
V1 = "/api/v1"

API = {
    # accounts
    (f"{V1}/me", "get"): Rule(SIGNED_IN),
    (f"{V1}/api-keys", "get"): Rule(ANY_ORG, roles=(OWNER,)),
    (f"{V1}/api-keys", "post"): Rule(ANY_ORG, roles=(OWNER,), body={"name": "matrix"}),
    (f"{V1}/api-keys/{{id}}/revoke", "post"): Rule(ANY_ORG, "api_key", (OWNER,)),
    (f"{V1}/organization/webhook", "get"): Rule(ANY_ORG, roles=(OWNER,)),
    (f"{V1}/organization/webhook", "put"): Rule(ANY_ORG, roles=(OWNER,), body={"url": ""}),
    # catalog and quotes: public
    (f"{V1}/catalog/complexity-levels", "get"): Rule(PUBLIC),
    (f"{V1}/catalog/embodiments", "get"): Rule(PUBLIC),
    (f"{V1}/catalog/rate-card", "get"): Rule(PUBLIC),
    (f"{V1}/catalog/sensors", "get"): Rule(PUBLIC),
    (f"{V1}/catalog/task-types", "get"): Rule(PUBLIC),
    (f"{V1}/quotes", "post"): Rule(PUBLIC, body=SPEC),
    (f"{V1}/quotes/preview", "post"): Rule(PUBLIC, body=SPEC),
    # a customer's quote is its own; anonymous quotes are public by id (tests/orders)
    (f"{V1}/quotes/{{id}}", "get"): Rule(PUBLIC, "quote"),
    # orders, coverage, deliveries, payments: customers
    (f"{V1}/orders", "get"): Rule(CUSTOMER),
    (f"{V1}/orders", "post"): Rule(CUSTOMER, roles=CAN_WORK, body=SPEC),
    (f"{V1}/orders/{{id}}", "get"): Rule(CUSTOMER, "order"),
    (f"{V1}/orders/{{id}}/cancel", "post"): Rule(CUSTOMER, "order", CAN_WORK, {"reason": "x"}),
    (f"{V1}/orders/{{id}}/coverage", "get"): Rule(CUSTOMER, "reviewed_order"),
    (f"{V1}/orders/{{id}}/deliveries", "get"): Rule(CUSTOMER, "reviewed_order"),
    (f"{V1}/orders/{{id}}/deliveries", "post"): Rule(
        CUSTOMER, "reviewed_order", CAN_WORK, {"kind": "full", "filters": {"min_quality": 0.5}}
    ),
    (f"{V1}/orders/{{id}}/exclusions", "get"): Rule(CUSTOMER, "reviewed_order"),
    (f"{V1}/orders/{{id}}/exclusions", "post"): Rule(
        CUSTOMER, "reviewed_order", CAN_WORK, {"episodes": [], "reason_code": "idle"}
    ),
    (f"{V1}/orders/{{id}}/episodes", "get"): Rule(CUSTOMER, "reviewed_order"),
    (f"{V1}/orders/{{id}}/operators", "get"): Rule(CUSTOMER, "reviewed_order"),
    (f"{V1}/orders/{{id}}/payments", "get"): Rule(CUSTOMER, "order"),
    (f"{V1}/orders/{{id}}/payments", "post"): Rule(
        CUSTOMER, "order", ROLES, {"method": "payment_intent"}
    ),
    (f"{V1}/payments", "get"): Rule(CUSTOMER),
    (f"{V1}/deliveries/{{id}}", "get"): Rule(CUSTOMER, "delivery"),
    (f"{V1}/deliveries/{{id}}/files", "get"): Rule(CUSTOMER, "delivery"),
    (f"{V1}/deliveries/{{id}}/download", "get"): Rule(CUSTOMER, "delivery"),
    (f"{V1}/deliveries/{{id}}/links", "post"): Rule(
        CUSTOMER, "delivery", body={"paths": ["manifest.json"]}
    ),
    (f"{V1}/deliveries/{{id}}/revoke", "post"): Rule(CUSTOMER, "delivery", (OWNER,)),
    # claims (issue 28): credit is money, for owners and billing (the service decides)
    (f"{V1}/deliveries/{{id}}/claims", "post"): Rule(
        CUSTOMER,
        "delivery",
        (OWNER, BILLING),
        {
            "remedy": "credit",
            "episodes": ["00000000-0000-0000-0000-000000000000"],
            "reason_code": "idle",
        },
    ),
    (f"{V1}/orders/{{id}}/claims", "get"): Rule(CUSTOMER, "reviewed_order"),
    (f"{V1}/claims/{{id}}", "get"): Rule(CUSTOMER, "claim"),
    (f"{V1}/deliveries/{{id}}/approve", "post"): Rule(CUSTOMER, "delivery", CAN_WORK, {}),
    (f"{V1}/deliveries/{{id}}/reject", "post"): Rule(
        CUSTOMER, "delivery", CAN_WORK, {"reason": "not what we asked for"}
    ),
    # the fleet API: fleet operators; reading for every role, changing for owners and members
    (f"{V1}/fleet/fleets", "get"): Rule(FLEET),
    (f"{V1}/fleet/fleets", "post"): Rule(FLEET, roles=CAN_WORK, body=NEW_FLEET),
    (f"{V1}/fleet/fleets/{{id}}", "get"): Rule(FLEET, "fleet"),
    (f"{V1}/fleet/fleets/{{id}}", "put"): Rule(FLEET, "fleet", CAN_WORK, RENAME),
    (f"{V1}/fleet/fleets/{{id}}", "patch"): Rule(FLEET, "fleet", CAN_WORK, RENAME),
    (f"{V1}/fleet/fleets/{{id}}", "delete"): Rule(FLEET, "fleet", CAN_WORK),
    (f"{V1}/fleet/fleets/{{id}}/heartbeat", "post"): Rule(FLEET, "fleet", CAN_WORK),
    (f"{V1}/fleet/fleets/{{id}}/rotate-secret", "post"): Rule(FLEET, "fleet", CAN_WORK),
    (f"{V1}/fleet/sites", "get"): Rule(FLEET),
    (f"{V1}/fleet/sites", "post"): Rule(
        FLEET,
        roles=CAN_WORK,
        body=lambda w, t: {"fleet": str(t.objects["fleet"]), "name": "S2", "kind": "lab_bench"},
    ),
    (f"{V1}/fleet/sites/{{id}}", "get"): Rule(FLEET, "site"),
    (f"{V1}/fleet/sites/{{id}}", "put"): Rule(FLEET, "site", CAN_WORK, RENAME),
    (f"{V1}/fleet/sites/{{id}}", "patch"): Rule(FLEET, "site", CAN_WORK, RENAME),
    (f"{V1}/fleet/sites/{{id}}", "delete"): Rule(FLEET, "site", CAN_WORK),
    (f"{V1}/fleet/robots", "get"): Rule(FLEET),
    (f"{V1}/fleet/robots", "post"): Rule(
        FLEET,
        roles=CAN_WORK,
        body=lambda w, t: {
            "site": str(t.objects["site"]),
            "name": "R2",
            "embodiment": "franka-fr3",
            "end_effector": "parallel_gripper",
        },
    ),
    (f"{V1}/fleet/robots/{{id}}", "get"): Rule(FLEET, "robot"),
    (f"{V1}/fleet/robots/{{id}}", "put"): Rule(FLEET, "robot", CAN_WORK, RENAME),
    (f"{V1}/fleet/robots/{{id}}", "patch"): Rule(FLEET, "robot", CAN_WORK, RENAME),
    (f"{V1}/fleet/robots/{{id}}", "delete"): Rule(FLEET, "robot", CAN_WORK),
    (f"{V1}/fleet/operators", "get"): Rule(FLEET),
    (f"{V1}/fleet/operators", "post"): Rule(
        FLEET,
        roles=CAN_WORK,
        body=lambda w, t: {"fleet": str(t.objects["fleet"]), "pseudonym": "op-new"},
    ),
    (f"{V1}/fleet/operators/{{id}}", "get"): Rule(FLEET, "operator"),
    (f"{V1}/fleet/operators/{{id}}", "put"): Rule(
        FLEET, "operator", CAN_WORK, {"skill_notes": "x"}
    ),
    (f"{V1}/fleet/operators/{{id}}", "patch"): Rule(
        FLEET, "operator", CAN_WORK, {"skill_notes": "x"}
    ),
    (f"{V1}/fleet/operator-figures", "get"): Rule(FLEET),
    # the collection plan's registry (issue 30)
    (f"{V1}/fleet/objects", "get"): Rule(FLEET),
    (f"{V1}/fleet/objects", "post"): Rule(FLEET, roles=CAN_WORK, body=_site_object),
    (f"{V1}/fleet/objects/{{id}}", "get"): Rule(FLEET, "site_object"),
    (f"{V1}/fleet/objects/{{id}}", "patch"): Rule(FLEET, "site_object", CAN_WORK, {"notes": "x"}),
    (f"{V1}/fleet/scenes", "get"): Rule(FLEET),
    (f"{V1}/fleet/scenes", "post"): Rule(FLEET, roles=CAN_WORK, body=_scene),
    (f"{V1}/fleet/scenes/{{id}}", "get"): Rule(FLEET, "scene"),
    (f"{V1}/fleet/scenes/{{id}}", "patch"): Rule(FLEET, "scene", CAN_WORK, {"notes": "x"}),
    (f"{V1}/fleet/calibrations", "get"): Rule(FLEET),
    (f"{V1}/fleet/calibrations", "post"): Rule(FLEET, roles=CAN_WORK, body=_calibration),
    (f"{V1}/fleet/calibrations/{{id}}", "get"): Rule(FLEET, "calibration"),
    (f"{V1}/fleet/offers", "get"): Rule(FLEET),
    (f"{V1}/fleet/offers/{{id}}/accept", "post"): Rule(FLEET, "offer", CAN_WORK),
    (f"{V1}/fleet/offers/{{id}}/decline", "post"): Rule(FLEET, "offer", CAN_WORK, {"reason": "x"}),
    (f"{V1}/fleet/jobs", "get"): Rule(FLEET),
    (f"{V1}/fleet/jobs/open", "get"): Rule(FLEET),
    # own: the job open for bids (any capable fleet); foreign: a job another fleet holds
    (f"{V1}/fleet/jobs/{{id}}/bids", "post"): Rule(FLEET, "open_job", CAN_WORK, _bid),
    (f"{V1}/fleet/jobs/{{id}}/progress", "post"): Rule(
        FLEET, "job", CAN_WORK, {"progress_hours": "0.5"}
    ),
    (f"{V1}/fleet/jobs/{{job_id}}/episodes", "get"): Rule(FLEET, "job"),
    (f"{V1}/fleet/jobs/{{job_id}}/episodes", "post"): Rule(FLEET, "job", CAN_WORK, _episode),
    (f"{V1}/fleet/episodes/{{id}}", "get"): Rule(FLEET, "episode"),
    (f"{V1}/fleet/episodes/{{id}}/upload", "post"): Rule(FLEET, "episode", CAN_WORK),
    (f"{V1}/fleet/episodes/{{id}}/complete", "post"): Rule(FLEET, "episode", CAN_WORK, {}),
    # disputes over the fleet's delivered episodes (issue 28): read by all, answered by workers
    (f"{V1}/fleet/disputes", "get"): Rule(FLEET),
    (f"{V1}/fleet/disputes/{{id}}", "get"): Rule(FLEET, "dispute"),
    (f"{V1}/fleet/disputes/{{id}}/answer", "post"): Rule(
        FLEET, "dispute", CAN_WORK, {"answer": "The episodes show the task."}
    ),
}

# What a caller should get: an answer, a 404, a 401/403 (not signed in), a 403/404 (refused).
ANSWER, NOT_FOUND, UNAUTHENTICATED, REFUSED = "answer", "not-found", "unauthenticated", "refused"
ALLOWED_STATUSES = {
    NOT_FOUND: {404},
    UNAUTHENTICATED: {401, 403},
    REFUSED: {403, 404},
}


def expectation(rule: Rule, principal, target: str | None) -> str:
    own = target is None or target == principal.tenant
    if rule.audience == PUBLIC:
        return ANSWER if own and (rule.obj is None or principal.kind == CUSTOMER) else NOT_FOUND
    if principal.auth == "anonymous":
        return UNAUTHENTICATED
    if rule.audience == SIGNED_IN:
        return ANSWER
    if principal.auth == "staff":
        return REFUSED  # staff run the platform in the admin; the API is for organizations
    if rule.audience != ANY_ORG and principal.kind != rule.audience:
        return REFUSED
    if principal.role not in rule.roles:
        return REFUSED
    return ANSWER if own else NOT_FOUND


def targets(rule: Rule, principal) -> list[str | None]:
    """Whose object the path names: the caller's own and another tenant's, or one sample."""
    if rule.obj is None:
        return [None]
    tenants = TENANTS_OF[rule.owner_kind]
    if principal.tenant in tenants:
        return [principal.tenant] + [t for t in tenants if t != principal.tenant]
    return [tenants[0]]


def object_id(world, rule: Rule, principal, target: str):
    if rule.obj == "open_job":
        mine = target == principal.tenant or principal.kind != FLEET
        return world.open_job_id if mine else world.tenant(target).objects["job"]
    return world.tenant(target).objects[rule.obj]


def acting_tenant(world, rule: Rule, principal, target: str | None):
    """Whose objects a request body names: the caller's, or (wrong kind, anonymous, staff)
    those of the tenant whose object the path names."""
    tenants = TENANTS_OF[rule.owner_kind]
    if principal.tenant in tenants:
        return world.tenant(principal.tenant)
    return world.tenant(target or tenants[0])


def _api_cells():
    for (path, method), rule in API.items():
        for principal in API_PRINCIPALS:
            for target in targets(rule, principal):
                on = f" on {target}'s {rule.obj}" if target else ""
                label = f"{method.upper()} {path} {principal.name}{on}"
                yield pytest.param(path, method, principal, target, id=label)


def _schema_operations() -> set[tuple[str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {
        (path, method)
        for path, operations in schema["paths"].items()
        for method in operations
        if method in ("get", "post", "put", "patch", "delete")
    }


def test_every_api_route_of_the_schema_has_an_entry_in_the_table():
    operations = _schema_operations()
    assert operations - set(API) == set(), "new routes: add them to API with who may call them"
    assert set(API) - operations == set(), "stale entries: these routes are gone"


def _leaked(world, principal, response) -> set[str]:
    text = response.content.decode(errors="replace") + response.get("Location", "")
    return set(UUID_PATTERN.findall(text)) & world.foreign_ids(principal.tenant)


def _assert_error_shape(response) -> None:
    if response.get("Content-Type", "").startswith("application/json"):
        body = response.json()
        assert set(body) >= {"code", "message", "fields"}, body


@pytest.mark.parametrize(("path", "method", "principal", "target"), list(_api_cells()))
def test_api_route(world, path, method, principal, target):
    # given
    rule = API[(path, method)]
    url = path
    if target is not None:
        url = path.replace("{id}", str(object_id(world, rule, principal, target)))
        url = url.replace("{job_id}", str(object_id(world, rule, principal, target)))
    body = rule.body_for(world, acting_tenant(world, rule, principal, target))
    expected = expectation(rule, principal, target)
    client = principal.api_client(world)
    writes = method != "get"
    before = database_fingerprint() if writes and expected != ANSWER else None

    # when
    kwargs = {"format": "json"} if body is not None else {}
    response = getattr(client, method)(url, json.loads(json.dumps(body, default=str)), **kwargs)

    # then
    status = response.status_code
    assert status < 500, response.content[:500]
    if expected == ANSWER:
        # reads answer (a download redirects); writes may be refused for the request itself
        answered = status < 300 or status in ((400, 409) if writes else (302,))
        assert answered, (status, response.content[:500])
        assert not _leaked(world, principal, response), "another tenant's ids in the answer"
    else:
        assert status in ALLOWED_STATUSES[expected], (expected, status, response.content[:300])
    if status >= 400:
        _assert_error_shape(response)
    if before is not None:
        assert changed_tables(before, database_fingerprint()) == []


# --- Web pages ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    audience: str
    obj: str | None = None
    roles: tuple = ROLES
    method: str = "get"

    @property
    def owner_kind(self) -> str:
        # a staff page about an object: a fleet's (the disputes)
        return {PUBLIC: CUSTOMER, STAFF_ONLY: FLEET}.get(self.audience, self.audience)


ORDERING_PAGES = {"order-new", "order-new-quote", "order-cancel-page", "order-exclusions-page"}
FLEET_MANAGING_PAGES = {
    "fleet-new-page",
    "fleet-edit-page",
    "site-new-page",
    "site-edit-page",
    "robot-new-page",
    "robot-edit-page",
    *url_map.FLEET_POST_ONLY,
}
# test_url_map's tables, with the roles each page allows
PAGES = {name: Page(PUBLIC) for name in url_map.PUBLIC}
PAGES |= {
    name: Page(CUSTOMER, obj, CAN_WORK if name in ORDERING_PAGES else ROLES)
    for name, obj in url_map.CUSTOMER_PAGES.items()
}
PAGES |= {name: Page(ANY_ORG, obj, (OWNER,)) for name, obj in url_map.OWNER_PAGES.items()}
PAGES |= {
    "order-cancel-page": Page(CUSTOMER, url_map.POST_ONLY["order-cancel-page"], CAN_WORK, "post"),
    # every customer role may pay (billing.services.PAYING_ROLES)
    "order-pay-page": Page(CUSTOMER, url_map.POST_ONLY["order-pay-page"], ROLES, "post"),
    "api-key-revoke-page": Page(
        ANY_ORG, url_map.POST_ONLY["api-key-revoke-page"], (OWNER,), "post"
    ),
}
PAGES |= {
    name: Page(FLEET, obj, CAN_WORK if name in FLEET_MANAGING_PAGES else ROLES)
    for name, obj in url_map.FLEET_PAGES.items()
}
PAGES |= {name: Page(FLEET, obj, CAN_WORK, "post") for name, obj in url_map.FLEET_POST_ONLY.items()}
# what test_url_map leaves to other tests, walked here too
PAGES |= {
    "delivery-download-page": Page(CUSTOMER, "delivery"),
    "pilot-review-page": Page(CUSTOMER, "delivery", CAN_WORK, "post"),
    "delivery-revoke-page": Page(CUSTOMER, "delivery", (OWNER,), "post"),
    "schema": Page(PUBLIC),
    "api-docs": Page(PUBLIC),
    "api-redoc": Page(PUBLIC),
    "delivery-export-page": Page(CUSTOMER, "delivery", CAN_WORK, "post"),
    # the staff console: is_staff users only
    "staff-attention": Page(STAFF_ONLY),
    "staff-dispatch": Page(STAFF_ONLY),
    "staff-disputes": Page(STAFF_ONLY),
    "staff-dispute-page": Page(STAFF_ONLY, "dispute"),
    # a dispute over the fleet's episodes: read by every role, answered by owners and members
    "fleet-dispute-page": Page(FLEET, "dispute"),
}
# logout is a POST that only ends the session; probes and the Stripe webhook have own tests
NOT_WALKED = {"logout", "healthz", "readyz", "stripe-webhook", "admin"}
# streamed (the archive), a link from an email, staff actions on objects: tests/web/test_portals.py
NOT_WALKED |= {
    "delivery-archive-page",
    "password_reset_confirm",
    "staff-redispatch",
    "staff-delivery-retry",
    "staff-flag-resolve",
    "staff-bank-transfer",
    "staff-order-exclusions-page",  # tests/web/test_exclusion_page.py
}
# an accepted episode's page, poster and clip (tenancy, roles, anonymous, audit):
# tests/web/test_episode_media.py
NOT_WALKED |= {"episode-detail-page", "episode-poster", "episode-clip"}
WEB_FORM = {
    "name": "Hijacked",
    "reason": "hijacked",
    "decision": "approve",
    "kind": "lab_bench",
    "weekly_capacity_hours": "1",
    "payout_rate_per_hour": "1",
    "timezone": "UTC",
    "currency": "USD",
    "status": "paused",
    "embodiment": "franka-fr3",
    "end_effector": "parallel_gripper",
    "active": "",
}


def test_every_portal_url_has_an_entry_in_the_table():
    assert set(url_map._all_names()) - set(PAGES) - NOT_WALKED == set()


def _page_url(world, name: str, page: Page, target: str | None) -> str:
    if page.obj is None:
        return reverse(name)
    value = world.tenant(target).objects[page.obj]
    kwarg = "quote_id" if page.obj == "quote" else "pk"
    return reverse(name, kwargs={kwarg: value})


def _page_cells():
    for name, page in PAGES.items():
        for principal in WEB_PRINCIPALS:
            if page.obj is None:
                page_targets = [None]
            else:
                tenants = TENANTS_OF[page.owner_kind]
                page_targets = (
                    [principal.tenant] + [t for t in tenants if t != principal.tenant]
                    if principal.tenant in tenants
                    else [tenants[0]]
                )
            for target in page_targets:
                on = f" on {target}'s {page.obj}" if target else ""
                yield pytest.param(name, principal, target, id=f"{name} {principal.name}{on}")


def page_expectation(name: str, page: Page, principal, target: str | None) -> str:
    signed_in = principal.auth != "anonymous"
    if page.audience == PUBLIC:
        return "redirect" if name in url_map.SIGNUP_PAGES and signed_in else "page"
    if not signed_in:
        return "login"
    if page.audience == STAFF_ONLY:
        return "page" if principal.auth == "staff" else "forbidden"
    if principal.auth == "staff":
        return "forbidden"  # staff belong to no organization: the admin is theirs
    if page.audience != ANY_ORG and principal.kind != page.audience:
        return "forbidden"
    if principal.role not in page.roles:
        return "forbidden"
    if target is not None and target != principal.tenant:
        return "not-found"
    if page.method == "post":
        return "action"
    return "redirect" if name == "delivery-download-page" else "page"


@pytest.mark.parametrize(("name", "principal", "target"), list(_page_cells()))
def test_web_page(world, name, principal, target):
    # given
    page = PAGES[name]
    url = _page_url(world, name, page, target)
    client = principal.web_client(world)
    expected = page_expectation(name, page, principal, target)
    before = database_fingerprint()

    # when
    response = getattr(client, page.method)(url, WEB_FORM if page.method == "post" else None)

    # then
    status = response.status_code
    if expected == "page":
        assert status == 200, response.content[:300]
        if page.audience != STAFF_ONLY:  # staff see every tenant's objects, by design
            assert not _leaked(world, principal, response), "another tenant's ids on the page"
    elif expected == "redirect":
        assert status == 302 and urlsplit(response.url).path != reverse("login")
    elif expected == "action":
        assert status in (200, 302), response.content[:300]
        assert urlsplit(response.get("Location", "")).path != reverse("login")
    elif expected == "login":
        assert status == 302 and urlsplit(response.url).path == reverse("login")
        assert url in response.url  # ?next= brings them back
    elif expected == "forbidden":
        assert status == 403
    else:
        assert status == 404
    if expected in ("login", "forbidden", "not-found") or page.audience == PUBLIC:
        assert changed_tables(before, database_fingerprint()) == []

    # and a forged POST on another tenant's object is refused and changes nothing
    if expected == "not-found" or (target is not None and expected in ("login", "forbidden")):
        forged = client.post(url, WEB_FORM)
        assert forged.status_code in (302, 403, 404, 405)
        if forged.status_code == 302:
            assert urlsplit(forged.url).path == reverse("login")
        assert changed_tables(before, database_fingerprint()) == []


# --- The admin: staff only ---------------------------------------------------------------------


def _admin_urls(world) -> list[tuple[str, str]]:
    """(url, what) for the admin index, each app, and each model's list, add and change page
    (on one of its rows), history and delete pages, and the custom admin views."""
    urls = [(reverse("admin:index"), "index")]
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        base = f"admin:{meta.app_label}_{meta.model_name}"
        urls.append((reverse("admin:app_list", args=[meta.app_label]), "app"))
        urls.append((reverse(f"{base}_changelist"), "changelist"))
        urls.append((reverse(f"{base}_add"), "add"))
        row = model._default_manager.order_by("pk").first()
        if row is not None:
            for view in ("change", "history", "delete"):
                urls.append((reverse(f"{base}_{view}", args=[row.pk]), view))
        standard = {f"{meta.app_label}_{meta.model_name}{view}" for view in STANDARD_ADMIN_VIEWS}
        for pattern in model_admin.get_urls():
            name = getattr(pattern, "name", None)
            if not name or name in standard:
                continue
            try:
                urls.append((reverse(f"admin:{name}"), "custom"))
            except NoReverseMatch:
                # needs an object: a row of this model
                if row is not None:
                    urls.append((reverse(f"admin:{name}", args=[row.pk]), "custom"))
    return sorted(set(urls))


STANDARD_ADMIN_VIEWS = {"_changelist", "_add", "_change", "_history", "_delete", "_autocomplete"}


@pytest.mark.parametrize(
    "principal",
    [ANONYMOUS, session("A"), session("X"), session("B", BILLING)],
    ids=lambda p: p.name,
)
def test_the_admin_sends_everyone_but_staff_to_its_login(world, principal):
    client = principal.web_client(world)
    for url, _ in _admin_urls(world):
        response = client.get(url)
        assert response.status_code == 302, url
        assert urlsplit(response.url).path == reverse("admin:login"), url


def test_staff_open_every_admin_page(world):
    client = STAFF.web_client(world)
    request = RequestFactory().get("/admin/")
    request.user = world.staff_user
    failures = []
    for url, what in _admin_urls(world):
        response = client.get(url)
        if what == "add":
            model_admin, _ = _admin_for(url)
            expected = {200} if model_admin.has_add_permission(request) else {403}
        elif what == "delete":
            model_admin, row = _admin_for(url)
            expected = {200} if model_admin.has_delete_permission(request, row) else {403}
        elif what == "custom":
            expected = {200, 302, 405}  # exports answer files; actions redirect or want a POST
        else:
            expected = {200}
        if response.status_code not in expected:
            failures.append((url, response.status_code))
    assert failures == [], "\n".join(f"{url} {status}" for url, status in failures)


def _admin_for(url: str):
    """The ModelAdmin behind an add or delete page, and the row a delete page names."""
    match = resolve(url)
    model_admin = match.func.model_admin
    object_id = match.kwargs.get("object_id")
    row = model_admin.model._default_manager.get(pk=object_id) if object_id else None
    return model_admin, row


# --- The checks themselves can fail ------------------------------------------------------------


def test_the_fingerprint_sees_a_changed_row(world):
    from fleets.models import Fleet

    before = database_fingerprint()
    Fleet.objects.filter(pk=world.tenant("Y").objects["fleet"]).update(name="Changed")
    assert changed_tables(before, database_fingerprint()) == ["fleets_fleet"]


def test_the_leak_scan_sees_another_tenants_id(world):
    from django.http import HttpResponse

    response = HttpResponse(f'{{"fleet": "{world.tenant("Y").objects["fleet"]}"}}')
    assert _leaked(world, key("X"), response)
    assert not _leaked(world, key("Y"), response)


# --- Another tenant's ids in a request body ----------------------------------------------------


def _ids(world, label):
    return {name: str(value) for name, value in world.tenant(label).objects.items()}


FOREIGN_REFERENCES = {
    "site on another operator's fleet": (
        "post",
        lambda w: f"{V1}/fleet/sites",
        lambda w: {"fleet": _ids(w, "Y")["fleet"], "name": "Planted", "kind": "lab_bench"},
    ),
    "robot at another operator's site": (
        "post",
        lambda w: f"{V1}/fleet/robots",
        lambda w: {
            "site": _ids(w, "Y")["site"],
            "name": "Planted",
            "embodiment": "franka-fr3",
            "end_effector": "parallel_gripper",
        },
    ),
    "own robot moved to another operator's site": (
        "patch",
        lambda w: f"{V1}/fleet/robots/{_ids(w, 'X')['robot']}",
        lambda w: {"site": _ids(w, "Y")["site"]},
    ),
    "bid from another operator's site": (
        "post",
        lambda w: f"{V1}/fleet/jobs/{w.open_job_id}/bids",
        lambda w: _bid(w, w.tenant("Y")),
    ),
    "object at another operator's site": (
        "post",
        lambda w: f"{V1}/fleet/objects",
        lambda w: _site_object(w, w.tenant("Y")),
    ),
    "scene at another operator's site": (
        "post",
        lambda w: f"{V1}/fleet/scenes",
        lambda w: _scene(w, w.tenant("Y")),
    ),
    "calibration of another operator's robot": (
        "post",
        lambda w: f"{V1}/fleet/calibrations",
        lambda w: _calibration(w, w.tenant("Y")),
    ),
    "episode from another operator's site and robot": (
        "post",
        lambda w: f"{V1}/fleet/jobs/{_ids(w, 'X')['job']}/episodes",
        lambda w: _episode(w, w.tenant("Y")),
    ),
}


@pytest.mark.parametrize("case", list(FOREIGN_REFERENCES))
def test_fleet_bodies_naming_another_operators_objects_are_refused(world, case):
    method, url, body = FOREIGN_REFERENCES[case]
    before = database_fingerprint()
    response = getattr(key("X").api_client(world), method)(
        url(world), json.loads(json.dumps(body(world), default=str)), format="json"
    )
    assert response.status_code in (400, 404), response.content[:300]
    _assert_error_shape(response)
    assert changed_tables(before, database_fingerprint()) == []


def test_an_order_from_another_customers_quote_is_404(world):
    before = database_fingerprint()
    client = key("A").api_client(world)
    response = client.post(f"{V1}/orders", {"quote": _ids(world, "B")["quote"]}, format="json")
    assert response.status_code == 404
    assert changed_tables(before, database_fingerprint()) == []


# --- Keys that no longer count, and organizations one is not in --------------------------------


def test_a_revoked_key_opens_nothing(world):
    from marketplace.models import ApiKey
    from marketplace.services import api_key_revoke

    api_key_revoke(api_key=ApiKey.objects.get(pk=world.tenant("A").objects["key_owner"]))
    client = key("A").api_client(world)
    for path, method in API:
        if method == "get" and "{" not in path:
            assert client.get(path).status_code == 401, path


def test_a_person_cannot_pick_an_organization_they_are_not_in(world):
    client = session("A").api_client(world)
    other = world.tenant("B").organization.id
    response = client.get(f"{V1}/orders", HTTP_X_ORGANIZATION=str(other))
    assert response.status_code == 404
    assert not _leaked(world, session("A"), response)
    response = client.get(f"{V1}/orders", HTTP_X_ORGANIZATION="not-a-uuid")
    assert response.status_code == 404
