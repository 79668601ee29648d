"""A hot read's SQL compiled by the ORM once per process and database, then run with new values.

Building and compiling a queryset (filters resolved into joins, the SELECT list, quoting)
costs more Python than a warm request's own work: a third of an order detail's time. Here
the queryset is built once with sentinel values in place of the request's, compiled, and the
positions of the sentinels among the statement's parameters are kept; each request runs that
statement with its values at those positions, through Django's cursor (query counting,
execute wrappers and health checks as for any query), and the rows get the same conversions
the ORM applies (`from_db_value` of each selected column). The queryset stays the source of
the query (on every database Django supports): only its compilation is reused. The database
is the one the router names for reading the queryset's model (`db_for_read`), as the ORM
would choose it. Whether PostgreSQL prepares the statement is the connection's setting
(DATABASES OPTIONS `prepare_threshold`, marketplace/settings.py), as for every query.

Values are passed as the ORM would pass them once prepared for the database: UUIDs as UUID
objects (or their hex on a database without a UUID type), strings as strings, datetimes aware
(as a DateTimeField's `get_prep_value` gives them; spelled as naive UTC text on SQLite).
A query whose shape depends on the values (an `__in` list's length, a filter added when a
value is set) is not for this: the compile checks that every value appears among the parameters.
"""

import datetime
import secrets
import threading
import uuid
from collections.abc import Callable

from django.db import connections, router
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
        sentinels = self._sentinels()
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

    def bound(self, values: dict, alias: str) -> tuple[str, list]:
        """The compiled statement and its parameters with these values in their places."""
        compiled = self._compiled_for(alias)
        params = list(compiled[1])
        for index, name, spelling in compiled[2]:
            params[index] = spelling(values[name])
        return compiled[0], params

    def alias(self) -> str:
        """The database the router chooses for reading this query's model."""
        model = self._model
        if model is None:
            model = self._model = self.build(**self._sentinels()).model
        return router.db_for_read(model)

    _model = None

    def _sentinels(self) -> dict:
        return {name: _SENTINEL_KINDS[kind]() for name, kind in self.kinds.items()}

    def _run(self, values: dict) -> tuple[list, tuple, str]:
        alias = self.alias()
        compiled = self._compiled_for(alias)
        _, _, _, compiler, converters, _, _ = compiled
        sql, params = self.bound(values, alias)
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        if converters:
            rows = list(compiler.apply_converters(rows, converters))
        return rows, compiled, alias

    def values(self, **values) -> list[dict]:
        rows, compiled, _ = self._run(values)
        names = compiled[5]
        return [dict(zip(names, row, strict=True)) for row in rows]

    def models(self, **values) -> list:
        rows, compiled, alias = self._run(values)
        compiler, model = compiled[3], compiled[6]
        fields = compiler.klass_info["select_fields"]
        attnames = [compiler.select[i][0].target.attname for i in fields]
        start, end = fields[0], fields[-1] + 1
        return [model.from_db(alias, attnames, row[start:end]) for row in rows]


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
