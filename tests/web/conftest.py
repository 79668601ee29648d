"""Fixtures for the web portal tests: Django test clients logged in as each kind of user."""

import pytest
from django.test import Client

from marketplace.models import Membership, Organization


def logged_in(tenant) -> Client:
    client = Client()
    client.force_login(tenant.user)
    return client


@pytest.fixture
def customer_client(customer) -> Client:
    return logged_in(customer)


@pytest.fixture
def other_client(other_customer) -> Client:
    return logged_in(other_customer)


@pytest.fixture
def fleet_client(fleet_operator) -> Client:
    return logged_in(fleet_operator)


@pytest.fixture
def member_client(make_tenant) -> Client:
    return logged_in(make_tenant(Organization.Kind.CUSTOMER, Membership.Role.MEMBER))


@pytest.fixture
def billing_tenant(make_tenant):
    return make_tenant(Organization.Kind.CUSTOMER, Membership.Role.BILLING)
