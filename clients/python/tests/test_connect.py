"""Connecting: the protocol version check, application_name, passwords never shown."""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg_pool
import pytest
from psycopg import sql

import pgcoord
from pgcoord._dsn import mask_dsn


def test_mask_dsn() -> None:
    assert mask_dsn("postgresql://u:s3cr%40t@h:5432/db?sslmode=require") == "postgresql://u:********@h:5432/db?sslmode=require"
    assert mask_dsn("postgres://h/db?user=u&password=pw&x=1") == "postgres://h/db?user=u&password=********&x=1"
    assert mask_dsn("host=h password=pw user=u") == "host=h password=******** user=u"
    assert mask_dsn("host=h password = 'p w\\' x' user=u") == "host=h password = ******** user=u"
    assert mask_dsn("host=h user=u") == "host=h user=u"


@pytest.mark.parametrize(
    "bad",
    [
        "postgresql://who:s3cret-pw@127.0.0.1:1/nodb?connect_timeout=2",
        "host=127.0.0.1 port=1 password=s3cret-pw connect_timeout=2",
        "host=127.0.0.1 password='s3cret-pw' nonsense=1",
        "host=127.0.0.1 password=s3cret-pw bogus",
    ],
)
def test_password_never_in_errors(bad: str) -> None:
    c = pgcoord.Client(bad)
    assert "s3cret" not in repr(c)
    with pytest.raises(pgcoord.PgcoordError) as ei:
        c.open()
    assert "s3cret" not in str(ei.value)
    assert "s3cret" not in repr(ei.value)
    assert ei.value.__cause__ is None and ei.value.__suppress_context__


def test_version_checked_once_and_application_name(dsn: str, schema: str, admin: psycopg.Connection[Any]) -> None:
    with pgcoord.Client(dsn, schema=schema) as client:
        assert client.enqueue("t_conn", {"n": 1}) is not None
        rows = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgcoord-python'"
        ).fetchone()
        assert rows is not None and rows[0] >= 1


def test_schema_missing_names_the_fix(dsn: str) -> None:
    with pytest.raises(pgcoord.SchemaError, match=r"pgcoord init --schema no_such_schema") as ei:
        pgcoord.Client(dsn, schema="no_such_schema").open()
    assert ei.value.sqlstate == "3F000"


def test_other_version_refused_naming_both(dsn: str, admin: psycopg.Connection[Any]) -> None:
    s = sql.Identifier("pgcpy_future")
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(s))
    admin.execute(sql.SQL("CREATE FUNCTION {}.protocol_version() RETURNS integer LANGUAGE sql AS 'SELECT 2'").format(s))
    try:
        with pytest.raises(pgcoord.SchemaError) as ei:
            pgcoord.Client(dsn, schema="pgcpy_future").open()
        msg = str(ei.value)
        assert "version 2" in msg and "version 1" in msg and "pgcoord init" in msg
        # The same through a connection and through a pool.
        with psycopg.connect(dsn) as conn:
            with pytest.raises(pgcoord.SchemaError, match="version 2"):
                pgcoord.Client(conn, schema="pgcpy_future").open()
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=2) as pool:
            with pytest.raises(pgcoord.SchemaError, match="version 2"):
                pgcoord.Client(pool, schema="pgcpy_future").open()
    finally:
        admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(s))


def test_schema_is_an_identifier(dsn: str) -> None:
    # A hostile schema name is quoted, never pasted: it is simply not found.
    with pytest.raises(pgcoord.SchemaError):
        pgcoord.Client(dsn, schema='x"; DROP TABLE y; --').open()


def test_wrong_source_type() -> None:
    with pytest.raises(pgcoord.UsageError, match="AsyncClient"):
        pgcoord.Client(42)  # type: ignore[arg-type]
