"""Shared fixtures: organizations of each kind, API clients authenticated by key, local S3."""

import importlib
from contextlib import contextmanager

import pytest
from django.core.cache import cache
from pytest_django.plugin import blocking_manager_key
from rest_framework.test import APIClient

from local_s3 import launcher as local_s3
from marketplace import api_key_cache, services
from marketplace.celery import app as celery_app
from marketplace.models import Membership, Organization
from orders import catalog, supply
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory
from tests.faults import figures as fault_figures

pytest_plugins = ["tests.celery_worker", "tests.datasets.helpers"]


# The longest tests (minutes each, --durations) start first: under pytest-xdist each worker
# takes one of them at once and the short tests fill in around them, instead of the two demos
# queueing at the end of the collection on one worker while the other idles.
LONGEST_FIRST = (
    "tests/test_demo.py::",
    "tests/security/test_api_fuzz.py::test_every_operation_survives_fuzzing",
    "tests/fleets/test_worker.py::test_sigkill_mid_dispatch",
    "tests/marketplace/test_run_platform.py::",
    "tests/marketplace/test_migrations.py::test_every_app_migrates_to_zero",
)


def pytest_collection_modifyitems(items):
    def rank(item) -> int:  # in LONGEST_FIRST's order, then the collection's (a stable sort)
        starts = [i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)]
        return starts[0] if starts else len(LONGEST_FIRST)

    items.sort(key=rank)


def pytest_sessionfinish(session):
    fault_figures.hand_over(session.config)  # in an xdist worker, to the controller


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, in its controller
def pytest_testnodedown(node, error):
    fault_figures.take_over(node)


def pytest_terminal_summary(terminalreporter):
    fault_figures.report(terminalreporter)


@contextmanager
def celery_eagerly():
    """Tasks run where they are enqueued (after the enqueuing transaction commits), and their
    exceptions propagate; the previous mode comes back afterwards."""
    previous = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = celery_app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = previous


@pytest.fixture
def eager_celery():
    with celery_eagerly():
        yield


def _is_transactional(item) -> bool:
    marker = item.get_closest_marker("django_db")
    return bool(
        (marker and marker.kwargs.get("transaction"))
        or {"transactional_db", "live_server"} & set(getattr(item, "fixturenames", ()))
    )


def _seed_catalog_if_flushed() -> None:
    """The catalog and rate card v1, as the data migrations seed them, if a flush emptied them."""
    from django.apps import apps as django_apps

    from orders.models import RateCard

    if not RateCard.objects.exists():
        importlib.import_module("orders.migrations.0002_seed_catalog").seed(django_apps, None)
        importlib.import_module("orders.migrations.0005_stream_catalog").fill(django_apps, None)
        importlib.import_module("orders.migrations.0006_seed_state_limits").seed(django_apps, None)
        importlib.import_module("orders.migrations.0008_seed_object_fee").seed(django_apps, None)


@pytest.fixture(autouse=True)
def _seeded_catalog(request):
    """Transactional tests start from the seeded catalog (serialized_rollback would too, but
    clashes with the content types a plain flush makes)."""
    if _is_transactional(request.node):
        request.getfixturevalue("transactional_db")
        _seed_catalog_if_flushed()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A transactional test empties every table when it ends, seeded catalog included: put it
    back at once, so the tests after it on this worker (any kind, in any order: LONGEST_FIRST
    and xdist reorder them) find what the migrations seeded."""
    yield
    # (no next test: the session's fixtures, the test database included, are gone by now)
    if nextitem is not None and _is_transactional(item):
        with item.config.stash[blocking_manager_key].unblock():
            _seed_catalog_if_flushed()


@pytest.fixture(scope="session", autouse=True)
def _supply_check_registered():
    """The supply check (fleets/supply.py) answers only in tests marked `supply_check`: the
    others (and the module-scoped worlds they build) place orders on platforms built without
    fleets, which it rightly finds uncoverable (such an order then needs the waitlist).
    Unregistered, it answers "unknown", which never blocks an order."""
    registered = supply.registered_supply_check()
    supply.register_supply_check(None)
    yield registered
    supply.register_supply_check(registered)


@pytest.fixture(autouse=True)
def _supply_check(request, _supply_check_registered):
    if not request.node.get_closest_marker("supply_check"):
        yield
        return
    supply.register_supply_check(_supply_check_registered)
    try:
        yield
    finally:
        supply.register_supply_check(None)


@pytest.fixture(autouse=True)
def _clear_cache():
    """Throttle counters live in the cache, the catalog's copy in the process (rows a test
    made, or re-seeded with new ids, are gone after it); start every test from zero."""
    cache.clear()
    catalog.forget()
    api_key_cache.forget()
    yield
    cache.clear()
    catalog.forget()
    api_key_cache.forget()


class Tenant:
    """An organization with an owner and an API key, and clients for both."""

    def __init__(self, kind: str, role: str = Membership.Role.OWNER):
        self.organization = OrganizationFactory(kind=kind)
        self.user = UserFactory()
        MembershipFactory(user=self.user, organization=self.organization, role=role)
        issued = services.api_key_create(
            organization=self.organization, name="test key", created_by=self.user, role=role
        )
        self.api_key = issued.api_key
        self.raw_key = issued.raw_key
        self.client = APIClient()
        self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.raw_key}")

    def session_client(self) -> APIClient:
        client = APIClient()
        client.force_login(self.user)
        return client


@pytest.fixture
def make_tenant(db):
    def make(kind: str = Organization.Kind.CUSTOMER, role: str = Membership.Role.OWNER) -> Tenant:
        return Tenant(kind, role)

    return make


@pytest.fixture
def customer(make_tenant) -> Tenant:
    return make_tenant(Organization.Kind.CUSTOMER)


@pytest.fixture
def other_customer(make_tenant) -> Tenant:
    return make_tenant(Organization.Kind.CUSTOMER)


@pytest.fixture
def fleet_operator(make_tenant) -> Tenant:
    return make_tenant(Organization.Kind.FLEET_OPERATOR)


@pytest.fixture
def anon_client() -> APIClient:
    return APIClient()


# --- Object storage: the local S3 server, which checks signatures and expiry ------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """local_s3/server.js on a free loopback port with its own folder, for the whole session."""
    with local_s3.running(
        tmp_path_factory.mktemp("s3"),
        bucket="test-bucket",
        access_key="test-key",
        secret_key="test-secret",
    ) as server:
        yield server


@pytest.fixture(scope="session")
def s3_keeping_server(tmp_path_factory):
    """The same server in its checksum-keeping mode (local_s3/checksums.js): it verifies,
    keeps and returns SHA-256 checksums as AWS S3 does."""
    with local_s3.running(
        tmp_path_factory.mktemp("s3-keeping"),
        bucket="test-bucket",
        access_key="test-key",
        secret_key="test-secret",
        keep_checksums=True,
    ) as server:
        yield server


@pytest.fixture
def s3_keeping(s3_keeping_server, settings):
    """Point storage at the checksum-keeping local S3 server for one test."""
    for name, value in s3_keeping_server.settings().items():
        setattr(settings, name, value)
    return s3_keeping_server


@pytest.fixture
def s3(s3_server, settings):
    """Point storage at the session's local S3 server for one test."""
    for name, value in s3_server.settings().items():
        setattr(settings, name, value)
    return s3_server
