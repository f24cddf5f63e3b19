"""Session and transaction advisory locks, sync, against a real server with real faults."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import psycopg
import psycopg_pool
import pytest

import pgcoord
from conftest import advisory_holders, wait_for


@pytest.fixture
def pool(dsn: str) -> Iterator[psycopg_pool.ConnectionPool]:
    with psycopg_pool.ConnectionPool(dsn, min_size=2, max_size=4, kwargs={"autocommit": True}) as p:
        yield p


@pytest.fixture
def client(pool: psycopg_pool.ConnectionPool, schema: str) -> Iterator[pgcoord.Client]:
    with pgcoord.Client(pool, schema=schema, heartbeat=0.2, heartbeat_timeout=2) as c:
        yield c


def test_singleton_one_of_five_runs(client: pgcoord.Client, admin: psycopg.Connection[Any]) -> None:
    ran: list[int] = []
    start = threading.Barrier(5)

    def instance(i: int) -> None:
        start.wait()
        lk = client.try_lock("py-singleton")
        if lk is None:
            return
        with lk:
            ran.append(i)
            time.sleep(0.3)

    ts = [threading.Thread(target=instance, args=(i,)) for i in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(ran) == 1
    assert advisory_holders(admin, pgcoord.key("py-singleton")) == []


def test_pool_trap_cannot_happen(client: pgcoord.Client, pool: psycopg_pool.ConnectionPool, admin: psycopg.Connection[Any]) -> None:
    k = pgcoord.key("py-pool-trap")
    with client.lock("py-pool-trap", wait=5) as lk:
        pid = lk.conn.info.backend_pid
        assert advisory_holders(admin, k) == [pid]
        # Every other connection of the pool is another session: none can take it.
        with pool.connection() as other:
            assert other.info.backend_pid != pid
            assert other.execute("SELECT pg_try_advisory_lock(%s)", [k]).fetchone() == (False,)
    # Released on the session that took it, and the connection is back in the pool.
    assert advisory_holders(admin, k) == []
    assert pool.get_stats().get("pool_available", 0) >= 1


def test_busy_forms(client: pgcoord.Client, dsn: str, schema: str) -> None:
    with pgcoord.Client(dsn, schema=schema) as other:
        with client.lock("py-busy"):
            assert other.try_lock("py-busy") is None
            with pytest.raises(pgcoord.LockBusyError, match="py-busy"):
                other.lock("py-busy", wait=0)
        lk = other.try_lock("py-busy")
        assert lk is not None
        lk.release()
        lk.release()  # idempotent


def test_wait_is_granted_when_released(client: pgcoord.Client, dsn: str, schema: str) -> None:
    with pgcoord.Client(dsn, schema=schema) as other:
        held = client.lock("py-wait")
        threading.Timer(0.3, held.release).start()
        t0 = time.monotonic()
        with other.lock("py-wait", wait=10):
            assert 0.2 < time.monotonic() - t0 < 5


def _client_with_role_settings(dsn: str, schema: str, st: str, lt: str) -> pgcoord.Client:
    # The settings a role or database could give every session, given here per session.
    p = psycopg_pool.ConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True, "options": f"-c statement_timeout={st} -c lock_timeout={lt}"}
    )
    return pgcoord.Client(p, schema=schema)


def test_deadline_not_cut_short_by_role_timeouts(client: pgcoord.Client, dsn: str, schema: str) -> None:
    other = _client_with_role_settings(dsn, schema, "200ms", "100ms")
    try:
        with client.lock("py-deadline"):
            t0 = time.monotonic()
            with pytest.raises(pgcoord.LockTimeoutError, match="timed out after 1500 ms"):
                other.lock("py-deadline", wait=1.5)
            took = time.monotonic() - t0
            assert 1.4 <= took < 5, took
        # The session's own settings are as they were.
        with other._pool.connection() as c:  # type: ignore[union-attr]
            assert c.execute("SHOW statement_timeout").fetchone() == ("200ms",)
            assert c.execute("SHOW lock_timeout").fetchone() == ("100ms",)
    finally:
        other._pool.close()  # type: ignore[union-attr]


def test_deadline_not_stretched_by_role_timeouts(client: pgcoord.Client, dsn: str, schema: str) -> None:
    other = _client_with_role_settings(dsn, schema, "60s", "60s")
    try:
        with client.lock("py-deadline2"):
            t0 = time.monotonic()
            with pytest.raises(pgcoord.LockTimeoutError):
                other.lock("py-deadline2", wait=0.5)
            assert time.monotonic() - t0 < 3
    finally:
        other._pool.close()  # type: ignore[union-attr]


def test_wait_inside_callers_transaction_keeps_it_usable(client: pgcoord.Client, dsn: str, schema: str) -> None:
    with psycopg.connect(dsn) as conn:  # not autocommit: a transaction is open after the SET
        conn.execute("SET LOCAL lock_timeout = '50ms'")
        one = pgcoord.Client(conn, schema=schema)
        with client.lock("py-in-tx"):
            with pytest.raises(pgcoord.LockTimeoutError):
                one.lock("py-in-tx", wait=0.5)
        assert conn.execute("SHOW lock_timeout").fetchone() == ("50ms",)
        assert conn.execute("SELECT 1").fetchone() == (1,)
        with one.lock("py-in-tx", wait=1):
            pass
        conn.rollback()


def test_lost_session_is_seen_within_bound(client: pgcoord.Client, admin: psycopg.Connection[Any]) -> None:
    lk = client.lock("py-lost")
    pid = lk.conn.info.backend_pid
    t0 = time.monotonic()
    admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    # The bound: heartbeat 0.2 s plus its 2 s answer bound; polled with room to spare.
    assert lk.lost.wait(timeout=10)
    assert time.monotonic() - t0 < 2.5
    assert lk.lost_reason == "its session ended"
    with pytest.raises(pgcoord.LostError, match="py-lost"):
        lk.conn
    with pytest.raises(pgcoord.LostError):
        lk.release()
    # The dead connection did not go back into service: the lock is free and can be taken.
    with client.lock("py-lost", wait=5):
        pass


def test_lost_raises_at_end_of_with(client: pgcoord.Client, admin: psycopg.Connection[Any]) -> None:
    with pytest.raises(pgcoord.LostError):
        with client.lock("py-lost-with") as lk:
            admin.execute("SELECT pg_terminate_backend(%s)", [lk.conn.info.backend_pid])
            wait_for(lk.lost.is_set, 10, "the heartbeat to see the loss")


def test_unlock_behind_back_is_not_held(client: pgcoord.Client) -> None:
    lk = client.lock("py-behind")
    lk.conn.execute("SELECT pg_advisory_unlock(%s)", [lk.key])
    with pytest.raises(pgcoord.NotHeldError):
        lk.release()


def test_one_connection_client_counts_like_the_server(dsn: str, schema: str, admin: psycopg.Connection[Any]) -> None:
    k = pgcoord.key("py-stack")
    with psycopg.connect(dsn, autocommit=True) as conn:
        one = pgcoord.Client(conn, schema=schema)
        a = one.lock("py-stack")
        b = one.lock("py-stack", wait=1)  # the same session: counted, as the server does
        a.release()
        assert advisory_holders(admin, k) == [conn.info.backend_pid]
        b.release()
        assert advisory_holders(admin, k) == []


def test_granted_check_matches_pg_locks(client: pgcoord.Client) -> None:
    # The check that runs after a timeout finds a lock held in either half of the key space.
    for name in ("nightly-report", "abc"):  # a negative and a positive key
        with client.lock(name) as lk:
            assert client._granted_now(lk.conn, lk.key, False)
            assert not client._granted_now(lk.conn, lk.key, True)


def test_transaction_lock_refused_outside_transaction(client: pgcoord.Client, dsn: str, admin: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(pgcoord.UsageError, match="no transaction is open"):
            client.xact_lock(conn, "py-xact")
        with conn.transaction():
            client.xact_lock(conn, "py-xact", wait=1)
            assert advisory_holders(admin, pgcoord.key("py-xact")) == [conn.info.backend_pid]
            with pgcoord.Client(dsn, schema=client.schema) as other:
                assert other.try_lock("py-xact") is None
        assert advisory_holders(admin, pgcoord.key("py-xact")) == []


def test_transaction_lock_wait_times_out_and_keeps_transaction(client: pgcoord.Client, dsn: str) -> None:
    with client.lock("py-xact2"):
        with psycopg.connect(dsn, autocommit=True) as conn:
            with conn.transaction():
                assert not client.try_xact_lock(conn, "py-xact2")
                with pytest.raises(pgcoord.LockTimeoutError):
                    client.xact_lock(conn, "py-xact2", wait=0.3)
                assert conn.execute("SELECT 1").fetchone() == (1,)


def test_bad_arguments(client: pgcoord.Client) -> None:
    with pytest.raises(pgcoord.UsageError, match="wait must be"):
        client.lock("x", wait=-1)
    with pytest.raises(pgcoord.UsageError, match="lock name is empty"):
        client.lock("")
    with pytest.raises(pgcoord.UsageError, match="bigint range"):
        client.lock(1 << 63)
