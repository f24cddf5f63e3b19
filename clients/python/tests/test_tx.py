"""The transaction runner: retries 40001/40P01 only, a bound, commit unknown."""

from __future__ import annotations

import threading
import uuid
from typing import Any, Iterator

import psycopg
import pytest
from psycopg import sql

import pgcoord


@pytest.fixture
def client(dsn: str, schema: str) -> Iterator[pgcoord.Client]:
    with pgcoord.Client(dsn, schema=schema) as c:
        yield c


@pytest.fixture
def table(admin: psycopg.Connection[Any]) -> Iterator[sql.Identifier]:
    t = sql.Identifier(f"pgcpy_tx_{uuid.uuid4().hex[:8]}")
    admin.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, n int NOT NULL)").format(t))
    admin.execute(sql.SQL("INSERT INTO {} VALUES (1, 0), (2, 0)").format(t))
    yield t
    admin.execute(sql.SQL("DROP TABLE {}").format(t))


RAISE = "DO $$ BEGIN RAISE EXCEPTION 'made to fail' USING ERRCODE = '{}'; END $$"


@pytest.mark.parametrize("state", ["40001", "40P01"])
def test_retries_serialization_and_deadlock(client: pgcoord.Client, table: sql.Identifier, admin: psycopg.Connection[Any], state: str) -> None:
    calls = 0

    def fn(conn: psycopg.Connection[Any]) -> str:
        nonlocal calls
        calls += 1
        conn.execute(sql.SQL("UPDATE {} SET n = n + 1 WHERE id = 1").format(table))
        if calls < 3:
            conn.execute(RAISE.format(state))
        return "done"

    assert client.transaction(fn, backoff_base=0.001) == "done"
    assert calls == 3
    # Only the attempt that committed left its write.
    assert admin.execute(sql.SQL("SELECT n FROM {} WHERE id = 1").format(table)).fetchone() == (1,)


def test_real_serialization_conflict_is_retried(client: pgcoord.Client, table: sql.Identifier, dsn: str) -> None:
    # Two serializable transactions each read both rows and write one: a write skew the
    # server refuses with 40001 for one of them, which the runner runs again.
    barrier = threading.Barrier(2)
    calls = [0, 0]

    def make(i: int) -> Any:
        def fn(conn: psycopg.Connection[Any]) -> None:
            calls[i] += 1
            conn.execute(sql.SQL("SELECT sum(n) FROM {}").format(table)).fetchone()
            if calls[i] == 1:
                barrier.wait(timeout=10)
            conn.execute(sql.SQL("UPDATE {} SET n = n + 1 WHERE id = %s").format(table), [i + 1])

        return fn

    with pgcoord.Client(dsn, schema=client.schema) as other:
        errs: list[BaseException] = []

        def run(c: pgcoord.Client, i: int) -> None:
            try:
                c.transaction(make(i), isolation="serializable", backoff_base=0.001)
            except BaseException as e:  # pragma: no cover - reported below
                errs.append(e)

        ts = [threading.Thread(target=run, args=(c, i)) for i, c in enumerate((client, other))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert not errs
        # One committed at its first attempt; the other was retried until it could (twice,
        # or more when its retry began before the winner's commit was visible).
        assert min(calls) == 1 and max(calls) >= 2, calls


def test_bound_on_attempts(client: pgcoord.Client) -> None:
    calls = 0

    def fn(conn: psycopg.Connection[Any]) -> None:
        nonlocal calls
        calls += 1
        conn.execute(RAISE.format("40001"))

    with pytest.raises(pgcoord.RetryExhaustedError) as ei:
        client.transaction(fn, attempts=3, backoff_base=0.001)
    assert calls == 3 and ei.value.attempts == 3 and ei.value.sqlstate == "40001"


def test_other_errors_never_retried(client: pgcoord.Client, table: sql.Identifier, admin: psycopg.Connection[Any]) -> None:
    calls = 0

    def fn(conn: psycopg.Connection[Any]) -> None:
        nonlocal calls
        calls += 1
        conn.execute(sql.SQL("UPDATE {} SET n = 100 WHERE id = 2").format(table))
        conn.execute(RAISE.format("23505"))

    with pytest.raises(psycopg.errors.UniqueViolation):
        client.transaction(fn)
    assert calls == 1

    def boom(conn: psycopg.Connection[Any]) -> None:
        nonlocal calls
        calls += 1
        conn.execute(sql.SQL("UPDATE {} SET n = 100 WHERE id = 2").format(table))
        raise KeyError("mine")

    with pytest.raises(KeyError):
        client.transaction(boom)
    assert calls == 2
    assert admin.execute(sql.SQL("SELECT n FROM {} WHERE id = 2").format(table)).fetchone() == (0,)


def test_commit_unknown_when_session_dies_at_commit(client: pgcoord.Client, admin: psycopg.Connection[Any], table: sql.Identifier) -> None:
    # A deferred trigger ends the session while COMMIT runs: the answer never comes.
    fn_name = sql.Identifier(f"{table.as_string(admin).strip(chr(34))}_die")
    admin.execute(
        sql.SQL(
            "CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5); RETURN NULL; END $$"
        ).format(f=fn_name)
    )
    admin.execute(
        sql.SQL(
            "CREATE CONSTRAINT TRIGGER die AFTER UPDATE ON {t} DEFERRABLE INITIALLY DEFERRED"
            " FOR EACH ROW EXECUTE FUNCTION {f}()"
        ).format(t=table, f=fn_name)
    )
    calls = 0

    def fn(conn: psycopg.Connection[Any]) -> None:
        nonlocal calls
        calls += 1
        conn.execute(sql.SQL("UPDATE {} SET n = 7 WHERE id = 1").format(table))

    try:
        with pytest.raises(pgcoord.CommitUnknownError, match="may or may not"):
            client.transaction(fn)
        assert calls == 1
    finally:
        admin.execute(sql.SQL("DROP TRIGGER die ON {}").format(table))
        admin.execute(sql.SQL("DROP FUNCTION {}()").format(fn_name))


def test_usage(client: pgcoord.Client) -> None:
    with pytest.raises(pgcoord.UsageError, match="isolation"):
        client.transaction(lambda c: None, isolation="chaos")
    with pytest.raises(pgcoord.UsageError, match="attempts"):
        client.transaction(lambda c: None, attempts=0)
