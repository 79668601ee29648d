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


@pytest.mark.django_db
def test_a_compiled_insert_stores_what_save_stores_with_its_signals():
    from datetime import timedelta
    from decimal import Decimal

    from django.db.models.signals import post_save, pre_save
    from django.utils import timezone

    from marketplace.compiled_sql import CompiledInsert
    from orders.models import Quote
    from orders.services import DatasetRequest, _priced_quote

    insert = CompiledInsert(Quote)
    request = DatasetRequest(
        task_type="peg-insertion",
        embodiment="franka-fr3",
        hours=Decimal("12.5"),
        environments=2,
        sensors=("wrist-camera",),
        rush=True,
    )
    organization = accounts.organization_create(name="o", kind=Organization.Kind.CUSTOMER)
    by_save, by_insert = (
        _priced_quote(organization=organization, request=request) for _ in range(2)
    )
    by_save.save(force_insert=True)
    seen = []

    def record(signal, **kwargs):
        seen.append((signal, kwargs["instance"], kwargs.get("created"), kwargs["raw"]))

    pre_save.connect(record, sender=Quote, dispatch_uid="t-pre")
    post_save.connect(record, sender=Quote, dispatch_uid="t-post")
    try:
        with CaptureQueriesContext(connection) as ctx:
            insert.save(by_insert)
    finally:
        pre_save.disconnect(dispatch_uid="t-pre", sender=Quote)
        post_save.disconnect(dispatch_uid="t-post", sender=Quote)
    # one INSERT, counted; the signals as save() sends them; the instance marked saved
    assert len(ctx.captured_queries) == 1
    assert ctx.captured_queries[0]["sql"].startswith('INSERT INTO "orders_quote"')
    assert [(s, i, c, r) for s, i, c, r in seen] == [
        (pre_save, by_insert, None, False),
        (post_save, by_insert, True, False),
    ]
    assert by_insert._state.adding is False and by_insert._state.db == "default"
    assert by_insert.created_at is not None
    assert timezone.now() - by_insert.created_at < timedelta(minutes=1)

    # the stored rows are alike, field for field, but for the id and creation moment
    def stored(quote):
        row = Quote.objects.get(pk=quote.pk)
        return {
            f.attname: getattr(row, f.attname)
            for f in Quote._meta.concrete_fields
            if f.attname not in ("id", "created_at", "expires_at")
        }

    assert stored(by_insert) == stored(by_save)
    assert Quote.objects.get(pk=by_insert.pk).created_at == by_insert.created_at
    # a second insert reuses the statement with its own values
    again = _priced_quote(organization=None, request=request)
    insert.save(again)
    assert Quote.objects.get(pk=again.pk).organization_id is None


@pytest.mark.django_db
def test_a_compiled_insert_leaves_expressions_to_save():
    from decimal import Decimal

    from django.db.models import Value

    from marketplace.compiled_sql import CompiledInsert
    from orders.models import Quote
    from orders.services import DatasetRequest, _priced_quote

    quote = _priced_quote(
        organization=None,
        request=DatasetRequest(task_type="peg-insertion", embodiment="ur5e", hours=Decimal(3)),
    )
    quote.currency = Value("EUR")
    CompiledInsert(Quote).save(quote)
    assert Quote.objects.get(pk=quote.pk).currency == "EUR"
    # a primary key the database assigns is not for it, nor an instance without its key
    from django.contrib.auth.models import Group

    with pytest.raises(ValueError):
        CompiledInsert(Group)
    with pytest.raises(ValueError):
        CompiledInsert(Quote).save(Quote(id=None))


@pytest.mark.django_db
def test_a_compiled_insert_under_a_condition_stores_only_while_it_holds():
    from decimal import Decimal

    from django.db.models import Value
    from django.db.models.signals import post_save

    from marketplace.api_key_cache import still_active
    from marketplace.compiled_sql import CompiledInsert
    from orders.models import Quote
    from orders.services import DatasetRequest, _priced_quote

    insert = CompiledInsert(Quote)
    (key,) = _keys_of_organizations(1)
    request = DatasetRequest(task_type="peg-insertion", embodiment="ur5e", hours=Decimal(3))
    guarded, plain = (_priced_quote(organization=key.organization, request=request) for _ in "ab")
    saved = []

    def record(sender, instance, **kwargs):
        saved.append(instance.pk)

    post_save.connect(record, sender=Quote, dispatch_uid="t-guard")
    try:
        # while the key is unrevoked: stored, in one statement, the row an unguarded insert stores
        with CaptureQueriesContext(connection) as ctx:
            assert insert.save(guarded, only_if=still_active(key)) is True
        assert insert.save(plain) is True
        (statement,) = ctx.captured_queries
        assert " SELECT " in statement["sql"] and " WHERE EXISTS (" in statement["sql"]
        assert guarded._state.adding is False and saved == [guarded.pk, plain.pk]

        def stored(quote):
            row = Quote.objects.filter(pk=quote.pk).values().get()
            return {k: v for k, v in row.items() if k not in ("id", "created_at", "expires_at")}

        assert stored(guarded) == stored(plain)
        # revoked: nothing stored, the instance unsaved, no post_save
        accounts.api_key_revoke(api_key=key)
        refused = _priced_quote(organization=key.organization, request=request)
        assert insert.save(refused, only_if=still_active(key)) is False
        assert not Quote.objects.filter(pk=refused.pk).exists()
        assert refused._state.adding is True and saved == [guarded.pk, plain.pk]
        # an instance with an expression (saved by save()) is held to the condition too
        refused.currency = Value("EUR")
        assert insert.save(refused, only_if=still_active(key)) is False
        assert not Quote.objects.filter(pk=refused.pk).exists()
        (live,) = _keys_of_organizations(1)
        assert insert.save(refused, only_if=still_active(live)) is True
        assert Quote.objects.get(pk=refused.pk).currency == "EUR"
    finally:
        post_save.disconnect(dispatch_uid="t-guard", sender=Quote)


def _orm_values(quote) -> list:
    """What the ORM's insert compiler passes for `quote`: pre_save(add=True), get_db_prep_save."""
    from orders.models import Quote

    return [
        field.get_db_prep_save(field.pre_save(quote, True), connection=connection)
        for field in Quote._meta.local_concrete_fields
    ]


def _comparable(value):
    from psycopg.types.json import Jsonb

    # a JSON value is compared by what it wraps and how it is written out
    return ("jsonb", value.obj, value.dumps(value.obj)) if isinstance(value, Jsonb) else value


@pytest.mark.django_db
def test_a_compiled_insert_passes_the_values_the_orm_passes_type_for_type():
    import random
    from decimal import Decimal

    from marketplace.compiled_sql import CompiledInsert
    from orders.models import Quote, SensorAddon
    from orders.services import DatasetRequest, _priced_quote

    insert = CompiledInsert(Quote)
    organization = accounts.organization_create(name="o", kind=Organization.Kind.CUSTOMER)
    sensors = list(SensorAddon.objects.values_list("slug", flat=True))
    rng = random.Random(19)
    created = Quote._meta.get_field("created_at")
    for _ in range(60):
        # given quotes priced from varied requests, anonymous or not
        request = DatasetRequest(
            task_type=rng.choice(["bin-picking", "peg-insertion", "cloth-folding", "pouring"]),
            embodiment=rng.choice(["franka-fr3", "ur5e", "aloha-bimanual"]),
            hours=Decimal(rng.randint(1_000, 200_000)) / 100,
            environments=rng.randint(1, 10),
            complexity=rng.choice([None, 1, 3, 5]),
            objects_per_environment=rng.randint(1, 5),
            sensors=tuple(rng.sample(sensors, rng.randint(0, len(sensors)))),
            rush=rng.random() < 0.5,
        )
        quote = _priced_quote(organization=rng.choice([None, organization]), request=request)
        # when its values are prepared, and the ORM's for the same instance
        ours, theirs = insert.values(quote), _orm_values(quote)
        # then they are the same values of the same types (the creation moment: each its own)
        for field, mine, orm in zip(Quote._meta.local_concrete_fields, ours, theirs, strict=True):
            assert type(mine) is type(orm), field.name
            if field is not created:
                assert _comparable(mine) == _comparable(orm), field.name
        assert ours[Quote._meta.local_concrete_fields.index(created)].tzinfo is not None


@pytest.mark.django_db
def test_a_compiled_insert_leaves_other_values_to_the_fields_own_preparation():
    import datetime
    from decimal import Decimal

    from django.core.exceptions import ValidationError

    from marketplace.compiled_sql import CompiledInsert
    from orders.models import Quote
    from orders.services import DatasetRequest, _priced_quote

    insert = CompiledInsert(Quote)
    fields = Quote._meta.local_concrete_fields
    position = {field.attname: fields.index(field) for field in fields}
    quote = _priced_quote(
        organization=None,
        request=DatasetRequest(task_type="peg-insertion", embodiment="ur5e", hours=Decimal(3)),
    )
    # values of other types than the plain ones take the field's own path, as the ORM does
    quote.environments, quote.hours, quote.rush = "4", "12.50", 1
    ours, theirs = insert.values(quote), _orm_values(quote)
    for name in ("environments", "hours", "rush"):
        assert type(ours[position[name]]) is type(theirs[position[name]]), name
        assert ours[position[name]] == theirs[position[name]], name
    assert ours[position["environments"]] == 4 and ours[position["hours"]] == Decimal("12.50")
    # a naive moment: made aware, with the field's warning
    quote.expires_at = datetime.datetime(2030, 1, 1, 12)
    with pytest.warns(RuntimeWarning):
        moment = insert.values(quote)[position["expires_at"]]
    with pytest.warns(RuntimeWarning):
        assert moment.tzinfo is not None and moment == _orm_values(quote)[position["expires_at"]]
    # a Decimal that is no number is refused as the field refuses it
    quote.expires_at, quote.total = datetime.datetime.now(datetime.UTC), Decimal("NaN")
    with pytest.raises(ValidationError):
        insert.values(quote)
    with pytest.raises(ValidationError):
        _orm_values(quote)


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
def test_on_postgresql_a_compiled_read_is_prepared_once_and_rerun_with_each_value():
    keys = _keys_of_organizations(3)
    statement = 'SELECT %"marketplace_apikey"."prefix" = $1%'
    before = sum(_prepared_runs(statement))
    # when three keys are read by prefix, each finds its own
    for key in keys:
        (found,) = KEY_BY_PREFIX.models(prefix=key.prefix)
        assert found.pk == key.pk
    # then one statement was prepared on the connection, and run three more times
    runs = _prepared_runs(statement)
    assert len(runs) == 1 and runs[0] - before == 3


@pytest.mark.django_db
def test_a_field_that_refuses_the_sample_keeps_its_own_preparation(monkeypatch):
    import uuid

    from django.db import models

    from marketplace.compiled_sql import _value_preparers
    from orders.models import Quote

    prepare = models.UUIDField.get_db_prep_save

    def refusing(field, value, connection):
        if value == uuid.UUID(int=1):  # the sample only
            raise ValueError("not this one")
        return prepare(field, value, connection)

    monkeypatch.setattr(models.UUIDField, "get_db_prep_save", refusing)
    preparers = {
        f.attname: plain
        for f, _, plain in _value_preparers(Quote._meta.local_concrete_fields, connection)
    }
    assert uuid.UUID not in preparers["id"]
    assert str in preparers["currency"]  # the others as before
