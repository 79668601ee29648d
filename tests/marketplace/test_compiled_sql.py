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


@pytest.mark.django_db
def test_model_rows_equal_the_orm_and_each_call_takes_its_own_value():
    # given two keys of two organizations
    keys = [
        accounts.api_key_create(
            organization=accounts.organization_create(
                name=f"org {n}", kind=Organization.Kind.CUSTOMER
            ),
            name="k",
        ).api_key
        for n in range(2)
    ]
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
