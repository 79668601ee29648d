"""bench/pg_statements.py counts what PostgreSQL receives, including what Django's query log
cannot see (BEGIN, COMMIT, conn_health_checks' SELECT 1): the load bench's "on wire" figure."""

import psycopg
import pytest
from django.db import connection

from bench.pg_statements import StatementCounter


@pytest.mark.django_db
def test_it_counts_every_statement_sent_simple_or_extended():
    settings = connection.settings_dict
    host, port = settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432)
    url = f"postgres://{settings['USER']}@{host}:{port}/{settings['NAME']}"
    with StatementCounter(host, port) as proxy:
        proxied = proxy.database_url(url)
        assert "sslmode=disable" in proxied and f":{proxy.port}/" in proxied
        with psycopg.connect(proxied) as conn:  # not autocommit: BEGIN comes first
            start = proxy.count
            conn.execute("SELECT 1")  # BEGIN + SELECT
            conn.execute("SELECT %s::int", [2])  # with a parameter: extended protocol
            conn.commit()  # COMMIT
            assert proxy.count - start == 4
            assert conn.execute("SELECT 40 + 2").fetchone() == (42,)  # answers pass through
        texts = b" ".join(proxy.statements)
        assert b"BEGIN" in texts and b"COMMIT" in texts and b"SELECT 1" in texts
