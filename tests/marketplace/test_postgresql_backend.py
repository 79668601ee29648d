"""marketplace.postgresql: the health check of a kept connection without a round trip, and a
connection the server dropped still noticed before the next request's first query."""

import time
from unittest import mock

import pytest
from django.db import connection, connections
from django.db.backends.postgresql import base as django_postgresql

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the PostgreSQL backend's own check"
)


@pytest.fixture
def kept():
    """A second connection to the test database, idle between 'requests' as gunicorn's are."""
    wrapper = connections.create_connection("default")
    wrapper.ensure_connection()
    yield wrapper
    wrapper.close()


def test_the_settings_use_the_backend():
    assert type(connections["default"]).__module__ == "marketplace.postgresql.base"


@pytest.mark.django_db
def test_an_idle_connection_is_usable_without_a_statement(kept):
    # given an idle kept connection
    with mock.patch.object(
        django_postgresql.DatabaseWrapper, "is_usable", side_effect=AssertionError("SELECT 1")
    ):
        # when the next request checks it, then it is usable and no SELECT 1 was sent
        assert kept.is_usable() is True
    # and it still answers
    with kept.cursor() as cursor:
        cursor.execute("SELECT 2")
        assert cursor.fetchone() == (2,)


@pytest.mark.django_db
def test_a_connection_the_server_terminated_fails_the_check_and_is_replaced(kept):
    # given the server terminates the kept connection's backend
    pid = kept.connection.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 5
    while kept.is_usable() and time.monotonic() < deadline:
        time.sleep(0.02)
    # when the next request's health check runs
    assert kept.is_usable() is False
    kept.health_check_done = False
    kept.close_if_health_check_failed()
    # then the connection was closed, and the next query opens a new one that works
    assert kept.connection is None
    with kept.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid


@pytest.mark.django_db
def test_something_to_read_on_an_idle_connection_leaves_the_decision_to_select_1(kept):
    # given a notification waiting on an idle, healthy connection
    with kept.cursor() as cursor:
        cursor.execute("LISTEN marketplace_backend_test")
    kept.connection.commit()
    other = connections.create_connection("default")
    with other.cursor() as cursor:
        cursor.execute("NOTIFY marketplace_backend_test")
    other.connection.commit()
    other.close()
    time.sleep(0.1)
    # when it is checked, then SELECT 1 runs and finds it usable
    with mock.patch.object(
        django_postgresql.DatabaseWrapper, "is_usable", autospec=True, return_value=True
    ) as select_1:
        assert kept.is_usable() is True
    assert select_1.called
