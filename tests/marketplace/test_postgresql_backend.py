"""marketplace.postgresql: the health check of a kept connection without a round trip, and a
connection the server dropped still noticed before the next request's first query."""

import time
from unittest import mock

import pytest
from django.db import connection, connections
from django.db.backends.postgresql import base as django_postgresql

from tests.marketplace.helpers import terminate_backend

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the PostgreSQL backend's own check"
)


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
    pid = terminate_backend(kept)
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


TIMESTAMPS = [
    "2026-12-02 01:30:00.123456+00",
    "2026-12-02 01:30:00+00",
    "1999-12-31 23:59:59.999999+00",
    "2026-06-30 12:00:00.5+05:30",
    "0001-01-01 00:00:00+00",
    "9999-12-30 23:59:59.999999+00",
]


@pytest.mark.django_db
@pytest.mark.parametrize("session_zone", ["UTC", "Europe/Berlin"])
def test_timestamptz_values_load_exactly_as_djangos_loader_loads_them(session_zone):
    from django.db.backends.postgresql.psycopg_any import register_tzloader

    from marketplace.postgresql.base import HAS_C_TIMESTAMPTZ, _TzLoader

    select = "SELECT " + ", ".join(f"'{text}'::timestamptz" for text in TIMESTAMPS)
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(f"SET TIME ZONE '{session_zone}'")
        try:
            cursor.execute(select)
            ours = cursor.fetchone()
            # Django's own (pure-Python) loader on a cursor of the same connection
            raw = connection.connection.cursor()
            register_tzloader(connection.timezone, raw)
            djangos = raw.execute(select).fetchone()
        finally:
            cursor.execute("SET TIME ZONE 'UTC'")
    assert ours == djangos
    assert [value.tzinfo for value in ours] == [value.tzinfo for value in djangos]
    assert {value.tzinfo for value in ours} == {connection.timezone}
    loader = connection.connection.adapters.get_loader(
        django_postgresql.TIMESTAMPTZ_OID, django_postgresql.Format.TEXT
    )
    # the C parser where psycopg has it (psycopg[binary] here), with Django's timezone
    assert loader.timezone == connection.timezone
    assert issubclass(loader, _TzLoader) == HAS_C_TIMESTAMPTZ
