"""A hot read's SQL compiled by the ORM once per process and database, then run with new values.

Building and compiling a queryset (filters resolved into joins, the SELECT list, quoting)
costs more Python than a warm request's own work: a third of an order detail's time. Here
the queryset is built once with sentinel values in place of the request's, compiled, and the
positions of the sentinels among the statement's parameters are kept; each request runs that
statement with its values at those positions, through Django's cursor (query counting,
execute wrappers and health checks as for any query), and the rows get the same conversions
the ORM applies (`from_db_value` of each selected column). The queryset stays the source of
the query (on every database Django supports): only its compilation is reused. On
PostgreSQL (marketplace.postgresql) the statement is also prepared once per connection
(`prepared_cursor()`): PostgreSQL parses and plans it once, then only binds each call's values.

Values are passed as the ORM would pass them once prepared for the database: UUIDs as UUID
objects (or their hex on a database without a UUID type), strings as strings, datetimes aware
(as a DateTimeField's `get_prep_value` gives them; spelled as naive UTC text on SQLite).
A query whose shape depends on the values (an `__in` list's length, a filter added when a
value is set) is not for this: the compile checks that every value appears among the parameters.
"""

import datetime
import functools
import operator
import secrets
import threading
import uuid
from collections.abc import Callable
from decimal import Decimal

from django.db import connections, models
from django.db.models import QuerySet

_SENTINEL_KINDS = {
    "uuid": lambda: uuid.uuid4(),
    "str": lambda: f"~{secrets.token_hex(16)}~",
    # a moment no row holds: year 1901, a random microsecond of the year
    "datetime": lambda: (
        datetime.datetime(1901, 1, 1, tzinfo=datetime.UTC)
        + datetime.timedelta(microseconds=secrets.randbelow(365 * 86400 * 10**6))
    ),
}


class CompiledQuery:
    """`CompiledQuery(build, prefix="str")` where build(prefix=...) returns the queryset;
    `.values(prefix=...)` its rows as dicts (a `.values()` queryset), `.models(prefix=...)`
    its rows as model instances (a plain model queryset without select_related)."""

    def __init__(self, build: Callable[..., QuerySet], **kinds: str):
        self.build = build
        self.kinds = kinds
        self._compiled: dict[str, tuple] = {}
        self._lock = threading.Lock()

    def _compile(self, alias: str) -> tuple:
        sentinels = {name: _SENTINEL_KINDS[kind]() for name, kind in self.kinds.items()}
        queryset = self.build(**sentinels)
        compiler = queryset.query.get_compiler(using=alias)
        sql, params = compiler.as_sql()
        slots = []
        for index, param in enumerate(params):
            for name, sentinel in sentinels.items():
                spelling = _spelling(param, sentinel)
                if spelling is not None:
                    slots.append((index, name, spelling))
        missing = set(sentinels) - {name for _, name, _ in slots}
        if missing:
            raise ValueError(f"Not among the compiled query's parameters: {sorted(missing)}")
        columns = [column for column, _, _ in compiler.select[: compiler.col_count]]
        converters = compiler.get_converters(columns)
        query = queryset.query
        names = [*query.extra_select, *query.values_select, *query.annotation_select]
        return sql, list(params), slots, compiler, converters, names, queryset.model

    def _compiled_for(self, alias: str) -> tuple:
        compiled = self._compiled.get(alias)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.setdefault(alias, self._compile(alias))
        return compiled

    def bound(self, values: dict, alias: str = "default") -> tuple[str, list]:
        """The compiled statement and its parameters with these values in their places."""
        compiled = self._compiled_for(alias)
        params = list(compiled[1])
        for index, name, spelling in compiled[2]:
            params[index] = spelling(values[name])
        return compiled[0], params

    def _run(self, values: dict) -> tuple[list, tuple]:
        alias = "default"
        compiled = self._compiled_for(alias)
        _, _, _, compiler, converters, _, _ = compiled
        sql, params = self.bound(values, alias)
        connection = connections[alias]
        with getattr(connection, "prepared_cursor", connection.cursor)() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        if converters:
            rows = list(compiler.apply_converters(rows, converters))
        return rows, compiled

    def values(self, **values) -> list[dict]:
        rows, compiled = self._run(values)
        names = compiled[5]
        return [dict(zip(names, row, strict=True)) for row in rows]

    def models(self, **values) -> list:
        rows, compiled = self._run(values)
        compiler, model = compiled[3], compiled[6]
        fields = compiler.klass_info["select_fields"]
        attnames = [compiler.select[i][0].target.attname for i in fields]
        start, end = fields[0], fields[-1] + 1
        return [model.from_db("default", attnames, row[start:end]) for row in rows]


def _spelling(param, sentinel):
    """How the ORM passed the sentinel (itself, or for a UUID its hex or text): the function
    that spells a request's value the same way; None when `param` is not the sentinel."""
    if isinstance(sentinel, uuid.UUID):
        if param is sentinel or param == sentinel:
            return _as_uuid
        if param == sentinel.hex:
            return _uuid_hex
        if param == str(sentinel):
            return _uuid_text
        return None
    if isinstance(sentinel, datetime.datetime):
        if param == sentinel and isinstance(param, datetime.datetime):
            return _same
        return _naive_utc_text if param == _naive_utc_text(sentinel) else None
    return _same if param == sentinel else None


def _same(value):
    return value


def _as_uuid(value):
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _uuid_hex(value):
    return uuid.UUID(str(value)).hex


def _uuid_text(value):
    return str(uuid.UUID(str(value)))


def _naive_utc_text(value):
    # SQLite's spelling of an aware datetime (DatabaseOperations.adapt_datetimefield_value)
    return str(value.astimezone(datetime.UTC).replace(tzinfo=None))


# Field classes whose database value, for a value of the plain type beside them, does not
# depend on the value: the value itself (or, for integers, the backend's typed wrapper of it).
# Checked on each backend by asking the field (_value_preparers).
_PLAIN_SAMPLES = (
    ((models.CharField, models.TextField, models.SlugField), str, "x"),
    ((models.BooleanField,), bool, True),
    ((models.UUIDField,), uuid.UUID, uuid.UUID(int=1)),
    ((models.DecimalField,), Decimal, Decimal("1.5")),
    (
        (models.DateTimeField,),
        datetime.datetime,
        datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC),
    ),
)
_DECLINED = object()


def _value_preparers(fields, connection) -> list[tuple]:
    """Per field: (field, how save() reads its value, {plain type: preparation}). A value of
    any other type, or one a preparation declines (a non-finite Decimal, a naive datetime),
    takes the field's own get_db_prep_save. Each preparation is the field's own, learnt once
    by preparing a sample through get_db_prep_save on this backend and kept only if the
    result is the sample itself or an int wrapper of it (psycopg's Int2/Int4/Int8 for integer
    columns on PostgreSQL): a backend that spells a type otherwise (SQLite's UUID hex, its
    datetime text) keeps the field's path for that type."""
    preparers = []
    for field in fields:
        target = field.target_field if field.is_relation else field
        plain = {}
        if isinstance(target, models.IntegerField):  # AutoFields included
            prepared = _prepared_sample(field, 7, connection)
            wrapper = type(prepared)
            if issubclass(wrapper, int) and wrapper is not bool and prepared == 7:
                plain[int] = _same if wrapper is int else wrapper
        for classes, kind, sample in _PLAIN_SAMPLES:
            if type(target) in classes and _prepared_sample(field, sample, connection) is sample:
                plain[kind] = _PLAIN_GUARDS.get(kind, _same)
        if type(field).pre_save is models.Field.pre_save:
            read = operator.attrgetter(field.attname)
        else:  # auto_now_add and the like set the value as they read it
            read = functools.partial(_pre_save, field)
        preparers.append((field, read, plain))
    return preparers


def _prepared_sample(field, sample, connection):
    try:
        return field.get_db_prep_save(sample, connection=connection)
    except Exception:  # a field or backend that refuses the sample keeps its own path
        return _DECLINED


def _pre_save(field, instance):
    return field.pre_save(instance, True)


def _finite_decimal(value):
    return value if value.is_finite() else _DECLINED  # the field raises ValidationError


def _aware_datetime(value):
    return value if value.tzinfo is not None else _DECLINED  # the field warns, makes it aware


_PLAIN_GUARDS = {Decimal: _finite_decimal, datetime.datetime: _aware_datetime}


class CompiledInsert:
    """`save(force_insert=True)` of a new instance of `model`, its INSERT compiled once per
    process and database (the same statement the ORM compiles: every local concrete field,
    the primary key set in Python). Each call prepares the instance's values as the ORM's
    insert compiler does (`pre_save(add=True)`, then `get_db_prep_save`: `values()`), sends
    pre_save and post_save as `save` does, runs the statement through Django's cursor, and
    marks the instance saved. An instance with an expression among its values (an F(), a database
    default) is saved by `save()` itself. For a hot insert (a quote) whose save() costs more
    in compiling the statement than in running it.

    On PostgreSQL (marketplace.postgresql) the statement runs through the backend's
    `prepared_cursor()`: its values bound by the server, not quoted into the text by psycopg,
    and the statement prepared once per connection; elsewhere (SQLite) through `cursor()`.

    `save(instance, only_if=Exists(query, ...))` stores the row only if that query finds a row
    at that moment, in the same one statement (`INSERT ... SELECT <values> WHERE EXISTS
    (<query>)`): a check that rides in the write instead of costing a round trip of its own
    (an API key still unrevoked, marketplace/authentication.py). It says whether it stored."""

    def __init__(self, model):
        meta = model._meta
        if meta.parents or meta.db_returning_fields or meta.pk not in meta.local_concrete_fields:
            raise ValueError(f"{model.__name__}: only a model with its own primary key in Python.")
        if any(field.generated for field in meta.local_concrete_fields):
            raise ValueError(f"{model.__name__}: generated fields are not for this.")
        self.model = model
        self.fields = list(meta.local_concrete_fields)
        self._sql: dict[str, str] = {}
        self._guarded_sql: dict[tuple, str] = {}  # (alias, condition's query) -> statement
        self._preparers: dict[str, list] = {}

    def _compile(self, alias: str) -> str:
        from django.db.models.sql import InsertQuery

        # compiled for a blank instance (the compiler calls pre_save on it): plain values
        # all take the same placeholders, whatever they are
        query = InsertQuery(self.model)
        query.insert_values(self.fields, [self.model()], raw=False)
        ((sql, _),) = query.get_compiler(using=alias).as_sql()
        return sql

    def values(self, instance, using: str = "default") -> list:
        """The statement's parameters for `instance`: each field's `pre_save(add=True)`, then
        its `get_db_prep_save`, the latter skipped for a value of a plain type whose
        preparation the field was asked for once (_value_preparers): the same values, without
        the field's generic path for every value of every insert."""
        preparers = self._preparers.get(using)
        if preparers is None:
            preparers = self._preparers.setdefault(
                using, _value_preparers(self.fields, connections[using])
            )
        params = []
        for field, read, plain in preparers:
            value = read(instance)
            prepare = plain.get(type(value))
            prepared = _DECLINED if prepare is None else prepare(value)
            if prepared is _DECLINED:
                prepared = field.get_db_prep_save(value, connection=connections[using])
            params.append(prepared)
        return params

    def _statement(self, using: str, only_if: "Exists | None") -> tuple[str, list]:
        sql = self._sql.get(using)
        if sql is None:
            sql = self._sql.setdefault(using, self._compile(using))
        if only_if is None:
            return sql, []
        condition_sql, condition_params = only_if.query.bound(only_if.values, using)
        guarded = self._guarded_sql.get((using, only_if.query))
        if guarded is None:
            head, values_clause, row = sql.partition(" VALUES (")
            if not values_clause or not row.endswith(")") or "VALUES (" in row:
                raise ValueError(f"{self.model.__name__}: its insert is not one row of values.")
            guarded = f"{head} SELECT {row[:-1]} WHERE EXISTS ({condition_sql})"
            self._guarded_sql[(using, only_if.query)] = guarded
        return guarded, condition_params

    def save(self, instance, using: str = "default", *, only_if: "Exists | None" = None) -> bool:
        """Insert `instance` (see the class docstring); False when `only_if` found no row, and
        then nothing was stored, the instance stays unsaved and post_save is not sent."""
        from django.db.models.signals import post_save, pre_save

        if instance.pk is None:
            raise ValueError("The primary key is set before the insert.")
        if any(hasattr(getattr(instance, f.attname), "resolve_expression") for f in self.fields):
            if only_if is not None and not only_if.holds(using):
                return False
            instance.save(force_insert=True, using=using)  # compiled by the ORM for it
            return True
        connection = connections[using]
        instance._prepare_related_fields_for_save(operation_name="save")
        pre_save.send(
            sender=self.model, instance=instance, raw=False, using=using, update_fields=None
        )
        params = self.values(instance, using)
        sql, condition_params = self._statement(using, only_if)
        cursor_of = getattr(connection, "prepared_cursor", connection.cursor)
        with cursor_of() as cursor:
            cursor.execute(sql, params + condition_params)
            stored = only_if is None or cursor.rowcount == 1
        if not stored:
            return False
        instance._state.adding = False
        instance._state.db = using
        post_save.send(
            sender=self.model,
            instance=instance,
            created=True,
            update_fields=None,
            raw=False,
            using=using,
        )
        return True


class Exists:
    """A condition for CompiledInsert.save(only_if=...): `query` (a CompiledQuery) run with
    these values finds a row."""

    def __init__(self, query: CompiledQuery, **values):
        self.query = query
        self.values = values

    def holds(self, using: str = "default") -> bool:
        sql, params = self.query.bound(self.values, using)
        with connections[using].cursor() as cursor:
            cursor.execute(f"SELECT EXISTS ({sql})", params)
            return bool(cursor.fetchone()[0])
