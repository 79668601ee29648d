"""Shared fixtures: organizations of each kind, API clients authenticated by key, local S3."""

import os
import socket
import subprocess
from pathlib import Path

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from marketplace import services
from marketplace.models import Membership, Organization
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory


@pytest.fixture(autouse=True)
def _clear_cache():
    """Throttle counters live in the cache; start every test from zero."""
    cache.clear()
    yield
    cache.clear()


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

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """local_s3/server.js on a free loopback port with its own folder, for the whole session."""
    port = _free_port()
    env = {
        **os.environ,
        "S3_PORT": str(port),
        "S3_DATA_DIR": str(tmp_path_factory.mktemp("s3")),
        "S3_BUCKET": "test-bucket",
        "AWS_ACCESS_KEY_ID": "test-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
    }
    process = subprocess.Popen(
        ["node", str(ROOT / "local_s3" / "server.js")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"local S3 server did not start: {line} {process.stderr.read()}")
        yield {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "bucket": "test-bucket",
            "access_key": "test-key",
            "secret_key": "test-secret",
        }
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def s3(s3_server, settings):
    """Point storage at the session's local S3 server for one test."""
    settings.S3_ENDPOINT_URL = s3_server["endpoint_url"]
    settings.S3_BUCKET = s3_server["bucket"]
    settings.AWS_ACCESS_KEY_ID = s3_server["access_key"]
    settings.AWS_SECRET_ACCESS_KEY = s3_server["secret_key"]
    return s3_server
