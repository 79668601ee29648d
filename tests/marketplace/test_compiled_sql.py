"""CompiledQuery: the ORM's SQL compiled once, run with each call's values, rows as the ORM
gives them (values and model instances), counted like any query."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from marketplace import services as accounts
from marketplace.compiled_sql import CompiledQuery
from marketplace.models import ApiKey, Organization
from orders.models import Order, OrderEvent
from orders.representations import EVENT_COLUMNS
from tests.factories import OrderFactory

KEY_BY_PREFIX = CompiledQuery(
    lambda prefix: ApiKey.objects.filter(prefix=prefix).order_by("pk")[:1], prefix="str"
)
EVENTS = CompiledQuery(
    lambda order_id: (
        OrderEvent.objects.filter(order_id=order_id)
        .order_by(*OrderEvent._meta.ordering)
        .values(*EVENT_COLUMNS)
    ),
    order_id="uuid",
)


def _keys_of_organizations(count: int) -> list[ApiKey]:
    return [
        accounts.api_key_create(
            organization=accounts.organization_create(
                name=f"org {n}", kind=Organization.Kind.CUSTOMER
            ),
            name="k",
        ).api_key
        for n in range(count)
    ]


@pytest.mark.django_db
def test_model_rows_equal_the_orm_and_each_call_takes_its_own_value():
    # given two keys of two organizations
    keys = _keys_of_organizations(2)
    for key in keys:
        # when each is read by its prefix through the compiled query, in one statement
        with CaptureQueriesContext(connection) as ctx:
            (found,) = KEY_BY_PREFIX.models(prefix=key.prefix)
        # then it is that key, field for field as the ORM loads it, and the query was counted
        expected = ApiKey.objects.get(pk=key.pk)
        assert found.pk == key.pk
        assert {f.attname: getattr(found, f.attname) for f in ApiKey._meta.concrete_fields} == {
            f.attname: getattr(expected, f.attname) for f in ApiKey._meta.concrete_fields
        }
        assert found._state.adding is False
        assert len(ctx.captured_queries) == 1
    assert KEY_BY_PREFIX.models(prefix="no-such-prefix") == []


@pytest.mark.django_db
def test_value_rows_equal_the_orm_with_its_conversions():
    # given two orders with events
    orders = [OrderFactory(), OrderFactory()]
    for order in orders:
        for to_status in ("draft", "awaiting_payment"):
            OrderEvent.objects.create(order=order, from_status="", to_status=to_status)
    for order in orders:
        # when its events are read through the compiled query (the id as text, too)
        rows = EVENTS.values(order_id=order.pk)
        by_text = EVENTS.values(order_id=str(order.pk))
        # then they are the ORM's rows, converted the same way (aware datetimes, UUIDs)
        expected = list(
            OrderEvent.objects.filter(order=order)
            .order_by(*OrderEvent._meta.ordering)
            .values(*EVENT_COLUMNS)
        )
        assert rows == expected == by_text
        assert len(rows) == 2


def test_a_value_the_compiled_query_would_not_take_is_refused_at_compile():
    # given a query whose parameter is not the value (a lookup that rewrites it)
    query = CompiledQuery(lambda slug: Order.objects.filter(notes__contains=slug), slug="str")
    # when it is first run, then it is refused instead of silently keeping the sentinel
    with pytest.raises(ValueError, match="slug"):
        query._compile("default")


def _prepared_runs(sql_like: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans + custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            [sql_like],
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's prepared statements")
@pytest.mark.django_db
def test_on_postgresql_a_read_run_past_the_threshold_is_prepared_once(settings):
    # DATABASES OPTIONS (DATABASE_PREPARE_THRESHOLD): psycopg prepares after that many runs
    threshold = settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"]
    keys = _keys_of_organizations(threshold + 3)
    statement = 'SELECT %"marketplace_apikey"."prefix" = $1%'
    # when keys are read by prefix more times than the threshold, each finds its own
    for key in keys:
        (found,) = KEY_BY_PREFIX.models(prefix=key.prefix)
        assert found.pk == key.pk
    # then the statement was prepared once on the connection, and run as prepared since
    runs = _prepared_runs(statement)
    assert len(runs) == 1 and runs[0] >= 2


class _ReplicaRouter:
    def db_for_read(self, model, **hints):
        return "replica"


def test_the_database_is_the_routers_for_reading(settings):
    # given a router that sends the model's reads to another alias (Django's setting_changed
    # receiver drops the router cache)
    settings.DATABASE_ROUTERS = [_ReplicaRouter()]
    # then the compiled query runs there, not on "default"
    assert KEY_BY_PREFIX.alias() == "replica"
