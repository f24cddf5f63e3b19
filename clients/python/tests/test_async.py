"""The asyncio client: the same behaviours as the sync one, on the loop."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, AsyncIterator

import psycopg
import psycopg_pool
import pytest
import pytest_asyncio
from psycopg import sql

import pgcoord
from conftest import advisory_holders


@pytest_asyncio.fixture
async def client(dsn: str, schema: str) -> AsyncIterator[pgcoord.AsyncClient]:
    async with pgcoord.AsyncClient(dsn, schema=schema, heartbeat=0.2, heartbeat_timeout=2) as c:
        yield c


async def test_lock_with_and_pinned(client: pgcoord.AsyncClient, admin: psycopg.Connection[Any]) -> None:
    k = pgcoord.key("apy-lock")
    async with client.lock("apy-lock", wait=5) as lk:
        assert advisory_holders(admin, k) == [lk.conn.info.backend_pid]
        assert await client.try_lock("apy-lock") is None
        with pytest.raises(pgcoord.LockBusyError):
            await client.lock("apy-lock", wait=0)
    assert advisory_holders(admin, k) == []
    lk2 = await client.lock("apy-lock")
    await lk2.release()
    assert advisory_holders(admin, k) == []


async def test_singleton_one_of_five(client: pgcoord.AsyncClient) -> None:
    ran = 0

    async def instance() -> None:
        nonlocal ran
        lk = await client.try_lock("apy-single")
        if lk is None:
            return
        async with lk:
            ran += 1
            await asyncio.sleep(0.3)

    await asyncio.gather(*(instance() for _ in range(5)))
    assert ran == 1


async def test_deadline_against_role_timeouts(client: pgcoord.AsyncClient, dsn: str, schema: str) -> None:
    pool = psycopg_pool.AsyncConnectionPool(
        dsn, min_size=1, max_size=2, open=False,
        kwargs={"autocommit": True, "options": "-c statement_timeout=200ms -c lock_timeout=100ms"},
    )
    await pool.open()
    try:
        other = pgcoord.AsyncClient(pool, schema=schema)
        async with client.lock("apy-deadline"):
            t0 = time.monotonic()
            with pytest.raises(pgcoord.LockTimeoutError):
                await other.lock("apy-deadline", wait=1.5)
            assert 1.4 <= time.monotonic() - t0 < 5
        async with pool.connection() as c:
            cur = await c.execute("SHOW statement_timeout")
            assert await cur.fetchone() == ("200ms",)
    finally:
        await pool.close()


async def test_wait_granted_when_released(client: pgcoord.AsyncClient) -> None:
    held = await client.lock("apy-wait")

    async def later() -> None:
        await asyncio.sleep(0.3)
        await held.release()

    task = asyncio.create_task(later())
    async with client.lock("apy-wait", wait=10):
        pass
    await task


async def test_lost_session_seen_within_bound(client: pgcoord.AsyncClient, admin: psycopg.Connection[Any]) -> None:
    lk = await client.lock("apy-lost")
    t0 = time.monotonic()
    admin.execute("SELECT pg_terminate_backend(%s)", [lk.conn.info.backend_pid])
    reason = await asyncio.wait_for(lk.wait_lost(), timeout=10)
    assert reason == "its session ended"
    assert time.monotonic() - t0 < 2.5
    with pytest.raises(pgcoord.LostError):
        lk.check()
    with pytest.raises(pgcoord.LostError):
        await lk.release()
    async with client.lock("apy-lost", wait=5):
        pass


async def test_xact_lock_refused_outside_transaction(client: pgcoord.AsyncClient, dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.raises(pgcoord.UsageError, match="no transaction is open"):
            await client.xact_lock(conn, "apy-xact")
        async with conn.transaction():
            await client.xact_lock(conn, "apy-xact", wait=1)
            assert await client.try_lock("apy-xact") is None
        lk = await client.try_lock("apy-xact")
        assert lk is not None
        await lk.release()


async def test_transaction_retries(client: pgcoord.AsyncClient) -> None:
    calls = 0

    async def fn(conn: psycopg.AsyncConnection[Any]) -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            await conn.execute("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40P01'; END $$")
        return calls

    assert await client.transaction(fn, backoff_base=0.001) == 3

    async def bad(conn: psycopg.AsyncConnection[Any]) -> None:
        nonlocal calls
        calls += 1
        await conn.execute("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '22012'; END $$")

    with pytest.raises(psycopg.errors.DivisionByZero):
        await client.transaction(bad)
    assert calls == 4
    with pytest.raises(pgcoord.RetryExhaustedError):
        await client.transaction(lambda c: c.execute("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$"), attempts=2, backoff_base=0.001)


async def test_lease_async_with(client: pgcoord.AsyncClient, dsn: str, admin: psycopg.Connection[Any], schema: str) -> None:
    name = f"apy-leader-{uuid.uuid4().hex[:8]}"
    async with client.lease(name, ttl=0.6, holder="a") as lease:
        assert lease.token > 0
        assert await client.try_lease(name, ttl=1, holder="b") is None
        await asyncio.sleep(1.0)  # beyond the TTL: held because renewed
        assert not lease.lost.is_set()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            async with conn.transaction():
                assert await lease.fence_check(conn) == lease.token
    # Loss: someone else is granted the name after it expired behind our back.
    a = await client.lease(name, ttl=0.9, holder="a")
    admin.execute(
        sql.SQL("UPDATE {}.leases SET expires_at = clock_timestamp() WHERE name = %s").format(sql.Identifier(schema)), [name]
    )
    b = await client.lease(name, ttl=5, holder="b", wait=2)
    reason = await asyncio.wait_for(a.wait_lost(), timeout=5)
    assert "superseded" in reason
    with pytest.raises(pgcoord.LostError):
        await a.release()
    await b.release()


async def test_enqueue_rollback(client: pgcoord.AsyncClient, dsn: str, admin: psycopg.Connection[Any], schema: str) -> None:
    ids = await client.enqueue_many("apy-q", [{"n": 1}, {"n": 2}])
    assert all(isinstance(i, int) for i in ids)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        try:
            async with conn.transaction():
                jid = await client.enqueue("apy-q", {"n": 3}, conn=conn)
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
    row = admin.execute(
        sql.SQL("SELECT count(*) FROM {}.jobs WHERE id = %s").format(sql.Identifier(schema)), [jid]
    ).fetchone()
    assert row == (0,)


async def test_on_one_async_connection(dsn: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        one = pgcoord.AsyncClient(conn, schema=schema)
        async with one.lock("apy-one"):
            assert await one.enqueue("apy-q", {"one": True}) is not None
        with psycopg.Connection.connect(dsn) as sync_conn:
            with pytest.raises(pgcoord.UsageError, match="Client for sync"):
                pgcoord.AsyncClient(sync_conn)  # type: ignore[arg-type]


async def test_one_call_lease(client: pgcoord.AsyncClient) -> None:
    name = f"apy-onecall-{uuid.uuid4().hex[:8]}"
    a = await client.lease_acquire(name, ttl=10, holder="a")
    assert a.granted and a.token > 0
    b = await client.lease_acquire(name, ttl=10, holder="b")
    assert not b.granted and b.holder == "a"
    assert (await client.lease_renew(name, a.token, ttl=10)).status == "ok"
    assert await client.lease_release(name, a.token) == "ok"
    b = await client.lease_acquire(name, ttl=10, holder="b")
    assert b.granted and b.token > a.token
    assert (await client.lease_renew(name, a.token, ttl=10)).status == "superseded"
    assert await client.lease_release(name, b.token) == "ok"
