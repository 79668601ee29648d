"""The compiled quote INSERT on PostgreSQL: bound by the server and prepared once per
connection (marketplace.postgresql's prepared_cursor), prepared again on the connection that
replaces a dropped one, nothing else prepared; on SQLite it runs through cursor()."""

import copy
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, connections
from django.test.utils import CaptureQueriesContext

from marketplace.compiled_sql import CompiledInsert
from orders.models import Quote
from orders.services import DatasetRequest, _priced_quote
from tests.marketplace.helpers import run_on_embedded_defaults, terminate_backend

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the PostgreSQL backend's prepared statements"
)
REQUEST = DatasetRequest(
    task_type="peg-insertion", embodiment="franka-fr3", hours=Decimal("12.5"), rush=True
)


@pytest.fixture
def kept(kept):
    """tests/marketplace/conftest.py's kept connection; the quotes it stored are deleted after
    the test (they were committed outside the test's transaction)."""
    yield kept
    with kept.cursor() as cursor:
        cursor.execute(
            "DELETE FROM orders_quote WHERE id = ANY(%s)", [getattr(kept, "test_quotes", [])]
        )


def prepared_inserts(wrapper) -> list[tuple]:
    with wrapper.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE 'INSERT INTO \"orders_quote\"%%'"
        )
        return cursor.fetchall()


def save_quotes(wrapper, insert: CompiledInsert, count: int) -> list[Quote]:
    quotes = [_priced_quote(organization=None, request=REQUEST) for _ in range(count)]
    for quote in quotes:
        insert.save(quote, using=wrapper.alias)
    wrapper.test_quotes = [*getattr(wrapper, "test_quotes", []), *(q.pk for q in quotes)]
    return quotes


@postgresql_only
@pytest.mark.django_db
def test_the_insert_is_prepared_once_per_connection_and_run_with_each_quotes_values(kept):
    # given a compiled insert, when it stores three quotes on one connection
    quotes = save_quotes(kept, CompiledInsert(Quote), 3)
    # then the connection holds one prepared INSERT with $n placeholders, run three times
    ((statement, runs),) = prepared_inserts(kept)
    assert "$1" in statement and "%s" not in statement
    assert runs == 3
    # and each row holds its own quote's values
    with kept.cursor() as cursor:
        cursor.execute(
            "SELECT id, total, rush, hours FROM orders_quote WHERE id = ANY(%s)",
            [[q.pk for q in quotes]],
        )
        rows = {row[0]: row[1:] for row in cursor.fetchall()}
    assert rows == {q.pk: (q.total, True, Decimal("12.50")) for q in quotes}


@postgresql_only
@pytest.mark.django_db
def test_the_prepared_insert_is_counted_and_logged_with_its_values(kept):
    insert = CompiledInsert(Quote)
    save_quotes(kept, insert, 1)
    with CaptureQueriesContext(kept) as captured:
        (quote,) = save_quotes(kept, insert, 1)
    ((query,),) = [[q["sql"]] for q in captured.captured_queries]
    assert query.startswith('INSERT INTO "orders_quote"') and str(quote.total) in query
    assert quote.pk.hex in query.replace("-", "")


@postgresql_only
@pytest.mark.django_db
def test_after_the_server_dropped_the_connection_the_insert_is_prepared_again(kept):
    # given the insert prepared on a connection the server then terminates
    insert = CompiledInsert(Quote)
    save_quotes(kept, insert, 2)
    pid = terminate_backend(kept, wait=True)
    # when the next request stores a quote (its health check runs first)
    kept.health_check_done = False
    (quote,) = save_quotes(kept, insert, 1)
    # then it is stored over a new connection, on which the insert was prepared again
    assert kept.connection.info.backend_pid != pid
    assert [runs for _, runs in prepared_inserts(kept)] == [1]
    with kept.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM orders_quote WHERE id = %s", [quote.pk])
        assert cursor.fetchone() == (1,)


@postgresql_only
@pytest.mark.django_db
def test_the_cursor_under_it_is_kept_for_the_connections_life(kept):
    insert = CompiledInsert(Quote)
    save_quotes(kept, insert, 1)
    first = kept.prepared_cursor().cursor
    # when more quotes are stored, each counted, on the same psycopg cursor, left open
    with CaptureQueriesContext(kept) as captured:
        quotes = save_quotes(kept, insert, 2)
    assert len(captured.captured_queries) == 2
    assert kept.prepared_cursor().cursor is first and not first.closed
    # an error on it (a quote stored twice) leaves it usable for the next one
    with pytest.raises(IntegrityError):
        insert.save(quotes[0], using=kept.alias)
    (again,) = save_quotes(kept, insert, 1)
    assert kept.prepared_cursor().cursor is first
    # a new connection, or another time zone for its timestamps, gets a cursor of its own
    kept.close()
    save_quotes(kept, insert, 1)
    renewed = kept.prepared_cursor().cursor
    assert renewed is not first and renewed.connection is kept.connection
    # the database's own time zone (a copy: the dict is the default alias's too)
    kept.settings_dict = {**kept.settings_dict, "TIME_ZONE": "Europe/Paris"}
    del kept.timezone  # as Django's setting_changed receiver drops it
    assert kept.prepared_cursor().cursor is not renewed
    with kept.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM orders_quote WHERE id = ANY(%s)",
            [[q.pk for q in (*quotes, again)]],
        )
        assert cursor.fetchone() == (3,)


@postgresql_only
@pytest.mark.django_db
def test_no_other_statement_is_prepared(kept):
    # given the insert prepared on the connection
    save_quotes(kept, CompiledInsert(Quote), 1)
    # when other statements run many times through Django's cursor
    with kept.cursor() as cursor:
        for value in range(10):
            cursor.execute("SELECT %s + 1", [value])
        # then none of them is prepared or counted by psycopg: preparing stays off
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        assert [row[0] for row in cursor.fetchall()] == [prepared_inserts(kept)[0][0]]
    assert kept.connection.prepare_threshold is None


@postgresql_only
@pytest.mark.django_db
def test_a_prepare_threshold_of_none_in_options_turns_preparing_off():
    # given OPTIONS saying prepare_threshold None (a pooler that cannot keep them)
    settings_dict = copy.deepcopy(connections.settings["default"])
    settings_dict["OPTIONS"]["prepare_threshold"] = None
    wrapper = type(connections["default"])(settings_dict, "no_prepare")
    connections["no_prepare"] = wrapper
    try:
        # when the insert runs on it, then it stores the quote and prepares nothing
        (quote,) = save_quotes(wrapper, CompiledInsert(Quote), 1)
        assert prepared_inserts(wrapper) == []
        with wrapper.cursor() as cursor:
            cursor.execute("DELETE FROM orders_quote WHERE id = %s", [quote.pk])
            assert cursor.rowcount == 1
    finally:
        wrapper.close()
        del connections["no_prepare"]


def test_on_sqlite_the_insert_runs_through_django_cursor(tmp_path):
    # given the embedded defaults (SQLite), migrated
    code = (
        "import django; django.setup()\n"
        "from decimal import Decimal\n"
        "from django.core.management import call_command\n"
        "from django.db import connection\n"
        "from orders import services\n"
        "from orders.models import Quote\n"
        "call_command('migrate', verbosity=0)\n"
        "request = services.DatasetRequest(task_type='peg-insertion', embodiment='franka-fr3',"
        " hours=Decimal('12'))\n"
        "quotes = [services.quote_create(organization=None, request=request) for _ in range(7)]\n"
        "stored = {q.pk: q.total for q in Quote.objects.all()}\n"
        "print(connection.vendor, hasattr(connection, 'prepared_cursor'),"
        " stored == {q.pk: q.total for q in quotes})\n"
        "from marketplace import api_key_cache, services as accounts\n"
        "org = accounts.organization_create(name='o', kind='customer')\n"
        "key = accounts.api_key_create(organization=org, name='k').api_key\n"
        "checked = services.quote_create(organization=org, request=request,"
        " only_if=api_key_cache.still_active(key))\n"
        "accounts.api_key_revoke(api_key=key)\n"
        "refused = services.quote_create(organization=org, request=request,"
        " only_if=api_key_cache.still_active(key))\n"
        "print(Quote.objects.filter(organization=org).get().pk == checked.pk, refused)\n"
    )
    # when quotes are stored (one held to its key being unrevoked, as a held key's quote is),
    # then they are, without a prepared cursor; none once the key is revoked
    out = run_on_embedded_defaults(code, tmp_path)
    assert out == ["sqlite", "False", "True", "True", "None"]
