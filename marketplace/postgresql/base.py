"""Django's PostgreSQL backend, but the health check of a kept connection (CONN_HEALTH_CHECKS,
run before a request's first query) costs no round trip when nothing happened to it.

Django checks a connection kept from an earlier request with `SELECT 1`: one more statement
and round trip on every request (a fifth of a warm order detail's). A server that drops a
connection (pg_terminate_backend, a restart, an idle timeout, a proxy closing it) sends its
FATAL error and closes the socket, so the idle connection's socket has something to read.
Here the check is a poll of that socket: nothing to read and the connection idle, it is
usable; anything to read (a termination, EOF, or a harmless notification), `SELECT 1`
decides as before. A connection not idle, closed or broken takes Django's own check. Only a
peer that vanished without a word (a cut cable) is no longer noticed before the first query:
the request fails and the connection is replaced after it, as a failure mid-request always
was.

And `timestamptz` values are parsed by psycopg's C loader (psycopg[binary] or [c]) where it
is installed: Django's loader is psycopg's pure-Python one (it subclasses it to set the
timezone), a fifth of a 50-order page's time. The result is Django's exactly: the C loader
parses as psycopg's Python loader does (the session's TimeZone), and the value's tzinfo is
then replaced by Django's timezone as Django's loader does
(tests/marketplace/test_postgresql_backend.py).
"""

import functools
import select

import psycopg
import psycopg.types.datetime
from django.db.backends.postgresql import base
from psycopg import adapt, pq

_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
# psycopg's own loader for timestamptz text: its C class when psycopg's C part is installed
_C_TIMESTAMPTZ = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, pq.Format.TEXT)
HAS_C_TIMESTAMPTZ = _C_TIMESTAMPTZ is not psycopg.types.datetime.TimestamptzLoader


class _TzLoader(adapt.Loader):
    """Django's BaseTzLoader (psycopg_any.py) with the parsing done in C. `timezone` is set by
    subclass, as Django's register_tzloader does (its cursors compare it)."""

    timezone = None

    def __init__(self, oid, context=None):
        super().__init__(oid, context)
        self._parse = _C_TIMESTAMPTZ(oid, context).load

    def load(self, data):
        return self._parse(data).replace(tzinfo=self.timezone)


@functools.lru_cache
def _adapters_with_c_tzloader(template: adapt.AdaptersMap, timezone) -> adapt.AdaptersMap:
    adapters = adapt.AdaptersMap(template)
    adapters.register_loader("timestamptz", type("TzLoader", (_TzLoader,), {"timezone": timezone}))
    return adapters


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self):
        params = super().get_connection_params()
        if HAS_C_TIMESTAMPTZ and "context" in params:
            params["context"] = _adapters_with_c_tzloader(params["context"], self.timezone)
        return params

    def is_usable(self):
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        if connection.info.transaction_status != pq.TransactionStatus.IDLE:
            return super().is_usable()
        try:
            readable, _, _ = select.select([connection.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable or super().is_usable()
