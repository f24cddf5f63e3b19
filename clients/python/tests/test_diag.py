"""Diagnostics against a real blocking chain: A holds a lock through the client, B holds a row
lock and waits for A's lock, C waits for B's row."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import psycopg
import psycopg_pool
import pytest
import pytest_asyncio
from psycopg import sql

import pgcoord
from conftest import wait_for


@pytest.fixture
def client(dsn: str, schema: str) -> Iterator[pgcoord.Client]:
    pool = psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=4, kwargs={"autocommit": True})
    with pool, pgcoord.Client(pool, schema=schema, heartbeat=0.2, heartbeat_timeout=2) as c:
        yield c


@pytest_asyncio.fixture
async def aclient(dsn: str, schema: str) -> Any:
    async with pgcoord.AsyncClient(dsn, schema=schema, heartbeat=0.2, heartbeat_timeout=2) as c:
        yield c


def _waiters(admin: psycopg.Connection[Any], pid: int) -> bool:
    row = admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return row is not None and row[0] == "Lock"


@contextmanager
def chain(dsn: str, schema: str, admin: psycopg.Connection[Any], name: str) -> Iterator[tuple[int, int]]:
    """B and C below whoever holds ``name``: yields their pids once both wait. Every session
    it opened is ended on every path (terminated, then its thread joined)."""
    table = sql.Identifier(schema, "py_diag_" + uuid.uuid4().hex[:8])
    admin.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(table))
    admin.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(table))
    conns: list[psycopg.Connection[Any]] = []
    threads: list[threading.Thread] = []
    row = sql.SQL("SELECT id FROM {} WHERE id = 1 FOR UPDATE").format(table)

    def blocked(conn: psycopg.Connection[Any], stmt: Any, params: Optional[list[Any]] = None) -> None:
        def run() -> None:
            try:
                conn.execute(stmt, params)
            except psycopg.Error:
                pass  # terminated at the end

        t = threading.Thread(target=run, daemon=True)
        threads.append(t)
        t.start()

    try:
        b = psycopg.connect(dsn)  # not autocommit: the row lock stays until the end
        conns.append(b)
        c = psycopg.connect(dsn)
        conns.append(c)
        b.execute(row)
        blocked(b, "SELECT pg_advisory_lock(%s)", [pgcoord.key(name)])
        wait_for(lambda: _waiters(admin, b.info.backend_pid), 30, "B waiting for the lock")
        blocked(c, row)
        wait_for(lambda: _waiters(admin, c.info.backend_pid), 30, "C waiting for B's row")
        yield b.info.backend_pid, c.info.backend_pid
    finally:
        for conn in conns:
            admin.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "a blocked session did not end after its backend was terminated"
        for conn in conns:
            conn.close()
        admin.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))


def check_forest(f: pgcoord.BlockingForest, pa: int, pb: int, pc: int) -> None:
    a, b, c = f.session(pa), f.session(pb), f.session(pc)
    assert a is not None and b is not None and c is not None
    assert a.root and a.depth == 0 and a.blocked_by == () and a.blocks == (pb,) and a.blocks_total == 2
    assert not b.root and b.depth == 1 and b.blocked_by == (pa,) and b.blocks == (pc,)
    assert b.wait_locktype == "advisory" and b.wait_mode == "ExclusiveLock" and b.state == "active"
    assert not b.in_cycle and b.wait_target is not None
    assert not c.root and c.depth == 2 and c.blocked_by == (pb,) and c.blocks == ()
    assert c.wait_locktype == "transactionid" and c.backend_start is not None and c.query
    assert c.xact_age is not None and c.xact_age.total_seconds() > 0
    assert pa in [r.pid for r in f.roots] and not {pb, pc} & {r.pid for r in f.roots}
    assert [s.pid for s in f.children(pa)] == [pb] and [s.pid for s in f.children(pb)] == [pc]
    (tree,) = [t for t in f.trees() if t.session.pid == pa]
    assert [t.session.pid for t in tree.children] == [pb]
    assert [t.session.pid for t in tree.children[0].children] == [pc]
    assert tree.children[0].children[0].children == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.pid = 0  # type: ignore[misc]  # frozen


def check_holders(hs: list[pgcoord.LockHolder], pa: int, pb: int) -> None:
    assert [(h.pid, h.granted, h.mode) for h in hs] == [(pa, True, "ExclusiveLock"), (pb, False, "ExclusiveLock")]
    assert not hs[0].is_self and hs[0].backend_start is not None and hs[1].state == "active"


def test_forest_and_holders(client: pgcoord.Client, dsn: str, schema: str, admin: psycopg.Connection[Any]) -> None:
    name = f"py-diag-{uuid.uuid4().hex[:8]}"
    with client.lock(name, wait=5) as a:
        pa = a.conn.info.backend_pid
        with chain(dsn, schema, admin, name) as (pb, pc):
            f = client.blocking_forest()
            check_forest(f, pa, pb, pc)
            check_holders(client.lock_holders(name), pa, pb)
            check_holders(client.lock_holders(pgcoord.key(name)), pa, pb)
    assert client.lock_holders(name) == []
    assert client.blocking_forest().session(pa) is None
    with pytest.raises(pgcoord.UsageError):
        client.lock_holders("")


async def test_forest_and_holders_async(aclient: pgcoord.AsyncClient, dsn: str, schema: str, admin: psycopg.Connection[Any]) -> None:
    name = f"apy-diag-{uuid.uuid4().hex[:8]}"
    async with aclient.lock(name, wait=5) as a:
        pa = a.conn.info.backend_pid
        # The chain's sessions are sync, in threads; built off the loop so the lock's
        # heartbeat keeps running.
        cm = chain(dsn, schema, admin, name)
        pb, pc = await asyncio.to_thread(cm.__enter__)
        try:
            check_forest(await aclient.blocking_forest(), pa, pb, pc)
            check_holders(await aclient.lock_holders(name), pa, pb)
        finally:
            await asyncio.to_thread(cm.__exit__, None, None, None)
    t0 = time.monotonic()
    while await aclient.lock_holders(name):
        assert time.monotonic() - t0 < 15, "the lock still has holders after its release"
        await asyncio.sleep(0.02)
