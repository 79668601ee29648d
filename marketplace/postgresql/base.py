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
"""

import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
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
