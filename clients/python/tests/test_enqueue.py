"""Enqueue on the client's connection or in the caller's transaction."""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterator

import psycopg
import pytest
from psycopg import sql

import pgcoord


@pytest.fixture
def client(dsn: str, schema: str) -> Iterator[pgcoord.Client]:
    with pgcoord.Client(dsn, schema=schema) as c:
        yield c


def job(admin: psycopg.Connection[Any], schema: str, jid: int) -> Any:
    return admin.execute(
        sql.SQL(
            "SELECT queue, status, priority, max_attempts, max_deferrals, key, unique_key, payload"
            " FROM {}.jobs WHERE id = %s"
        ).format(sql.Identifier(schema)),
        [jid],
    ).fetchone()


def test_one_and_many(client: pgcoord.Client, admin: psycopg.Connection[Any], schema: str) -> None:
    jid = client.enqueue("py-q", {"to": "ann", "n": [1, 2]})
    assert isinstance(jid, int)
    assert job(admin, schema, jid) == ("py-q", "pending", 0, 25, 100, None, None, {"to": "ann", "n": [1, 2]})
    ids = client.enqueue_many("py-q", [1, "two", None, {"x": "é"}], unique_keys=["u1", None, "u1", "u2"])
    assert ids[0] is not None and ids[1] is not None and ids[2] is None and ids[3] is not None
    assert job(admin, schema, ids[3])[7] == {"x": "é"}
    assert client.enqueue("py-q", 5, unique_key="u2") is None


def test_options(client: pgcoord.Client, admin: psycopg.Connection[Any], schema: str) -> None:
    jid = client.enqueue(
        "py-q-opts", {"a": 1}, priority=7, run_at=dt.timedelta(hours=1), max_attempts=3, max_deferrals=2, key="tenant-1"
    )
    assert jid is not None
    assert job(admin, schema, jid)[:6] == ("py-q-opts", "scheduled", 7, 3, 2, "tenant-1")
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    j2 = client.enqueue("py-q-opts", {}, run_at=later, after=[jid])
    assert j2 is not None and job(admin, schema, j2)[1] == "waiting"


def test_rolled_back_transaction_leaves_no_job(client: pgcoord.Client, admin: psycopg.Connection[Any], schema: str, dsn: str) -> None:
    class Abort(Exception):
        pass

    with psycopg.connect(dsn) as conn:
        got: list[int] = []
        with pytest.raises(Abort):
            with conn.transaction():
                jid = client.enqueue("py-q-tx", {"n": 1}, conn=conn)
                assert jid is not None
                got.append(jid)
                # Visible inside the transaction, to no one else.
                assert conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.jobs WHERE id = %s").format(sql.Identifier(schema)), [jid]
                ).fetchone() == (1,)
                assert job(admin, schema, jid) is None
                raise Abort()
        assert job(admin, schema, got[0]) is None
        with conn.transaction():
            kept = client.enqueue("py-q-tx", {"n": 2}, conn=conn)
        assert kept is not None and job(admin, schema, kept) is not None


def test_bad_input(client: pgcoord.Client) -> None:
    with pytest.raises(pgcoord.UsageError, match="priority") as ei:
        client.enqueue("py-q", {}, priority=99999)
    assert ei.value.sqlstate == "22023"
    with pytest.raises(pgcoord.UsageError, match="queue name is empty"):
        client.enqueue("", {})
    with pytest.raises(pgcoord.UsageError, match="JSON"):
        client.enqueue("py-q", {"x": object()})
    with pytest.raises(pgcoord.UsageError, match="aware"):
        client.enqueue("py-q", {}, run_at=dt.datetime(2030, 1, 1))
    with pytest.raises(pgcoord.NotFoundError):
        client.enqueue("py-q", {}, group="no-such-group")
    with pytest.raises(pgcoord.UsageError, match="unique_keys has 1"):
        client.enqueue_many("py-q", [1, 2], unique_keys=["a"])
