"""The client behind a real PgBouncer in transaction mode (tests/cli/client_python_pgbouncer.sh
starts one and sets PGCOORD_TEST_POOLER_DSN; skipped otherwise): it finds the pooler by itself
as the C library does, its worker polls instead of LISTEN and sends no prepared statement,
session locks are refused as the C library refuses them, and job_result waits poll. No LISTEN
is left behind on any of the pool's server sessions."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from typing import Any, Iterator

import psycopg
import pytest
from psycopg import sql

import pgcoord

from conftest import advisory_holders, wait_for


@pytest.fixture(scope="module")
def pooled() -> str:
    d = os.environ.get("PGCOORD_TEST_POOLER_DSN")
    if not d:
        pytest.skip("PGCOORD_TEST_POOLER_DSN is not set (tests/cli/client_python_pgbouncer.sh sets it)")
    return d


@pytest.fixture
def client(pooled: str, schema: str) -> Iterator[pgcoord.Client]:
    with pgcoord.Client(pooled, schema=schema, pool_size=2) as c:
        yield c


def pool_listens(pooled: str) -> set[str]:
    """The channels any server session of the pool listens on: as many clients as the pool
    has server sessions each open a transaction, which holds one server session apiece."""
    size = int(os.environ.get("PGCOORD_TEST_POOLER_SIZE", "4"))
    conns = [psycopg.connect(pooled, autocommit=True, prepare_threshold=None) for _ in range(size)]
    try:
        got: set[str] = set()
        pids: set[int] = set()
        for c in conns:
            c.execute("BEGIN")
            pids.add(c.execute("SELECT pg_backend_pid()").fetchall()[0][0])
            got |= {r[0] for r in c.execute("SELECT pg_listening_channels()").fetchall()}
        assert len(pids) == size, f"the sweep saw {len(pids)} server sessions, not {size}"
        return got
    finally:
        for c in conns:
            c.close()


def queue_channel(admin: psycopg.Connection[Any], schema: str) -> str:
    q = sql.SQL("SELECT channel FROM {}.queue_settings").format(sql.Identifier(schema))
    return str(admin.execute(q).fetchall()[0][0])


def test_detects_transaction_mode(pooled: str, dsn: str, schema: str, client: pgcoord.Client) -> None:
    p = client.pooler()
    assert p.mode == "transaction", p.why
    assert not p.session_kept and p.no_prepare and p.client_pid != p.server_pid
    assert client.pooler() is p  # kept for the client's life
    assert client.pooler(thorough=True).mode == "transaction"
    with pgcoord.Client(dsn, schema=schema, pool_size=1) as direct:
        assert direct.pooler().mode == "none"
    # A client on one connection: the probe turns prepared statements off on it.
    with psycopg.connect(pooled, autocommit=True) as conn:
        assert pgcoord.Client(conn, schema=schema).pooler().mode == "transaction"
        assert conn.prepare_threshold is None
    # Many times the same statements (psycopg prepares from the fifth): none is prepared.
    jid = client.enqueue("pool-detect", {"n": 1})
    assert jid is not None
    for _ in range(30):
        assert client.job(jid).status == "pending"

    async def go() -> str:
        async with pgcoord.AsyncClient(pooled, schema=schema, pool_size=2) as ac:
            for _ in range(20):
                await ac.job(jid)
            return (await ac.pooler()).mode

    assert asyncio.run(go()) == "transaction"


def test_worker_drains_polls_and_never_listens(
    pooled: str, schema: str, client: pgcoord.Client, admin: psycopg.Connection[Any]
) -> None:
    ids = client.enqueue_many("pool-w", [{"n": i} for i in range(200)])
    ran: list[int] = []
    mu = threading.Lock()
    w = pgcoord.Worker(pooled, schema=schema, concurrency=4, poll=1.0, reap_interval=0)

    @w.handler("pool-w")
    def handle(job: pgcoord.Job) -> Any:
        with mu:
            ran.append(job.id)
        return {"n": job.payload["n"]}

    done = sql.SQL("SELECT count(*) FROM {}.job_history WHERE queue = 'pool-w' AND status = 'succeeded'").format(
        sql.Identifier(schema)
    )
    w.start()
    try:
        wait_for(lambda: admin.execute(done).fetchall()[0][0] == 200, 30, "the 200 jobs done through the pooler")
        assert w.pooler is not None and w.pooler.mode == "transaction"
        assert not w.listen and not w.listening
        # Idle now: an enqueue through the pooler is found by the poll (at most 1 s apart).
        time.sleep(1.5)
        t0 = time.monotonic()
        late = client.enqueue("pool-w", {"n": 200})
        took = wait_for(lambda: admin.execute(done).fetchall()[0][0] == 201, 10, "the idle worker to poll")
        assert took < 3.0, f"the polling worker took {took:.2f} s to find a new job"
        assert time.monotonic() - t0 < 3.0
    finally:
        w.stop(5)
        st = w.wait(20)
    assert st is not None and st.wakeups == 0 and st.reconnects == 0, st
    counts = Counter(ran)
    assert set(counts) == {*ids, late} and max(counts.values()) == 1, "every job ran once"
    assert queue_channel(admin, schema) not in pool_listens(pooled)


def test_session_locks_refused_as_the_c_library(
    pooled: str, schema: str, client: pgcoord.Client, admin: psycopg.Connection[Any]
) -> None:
    k = pgcoord.key("pool-lock")
    with pytest.raises(pgcoord.ConfigError, match="transaction-mode pooler is in between") as e:
        client.lock("pool-lock", wait=0)
    assert "xact_lock" in str(e.value)
    with pytest.raises(pgcoord.ConfigError, match="transaction-mode pooler"):
        client.try_lock("pool-lock")
    assert advisory_holders(admin, k) == []
    # The documented path: a transaction lock in a transaction of its own.
    with psycopg.connect(pooled, autocommit=True, prepare_threshold=None) as conn:
        with conn.transaction():
            assert client.try_xact_lock(conn, "pool-lock")
            assert len(advisory_holders(admin, k)) == 1
    assert advisory_holders(admin, k) == []

    async def go() -> None:
        async with pgcoord.AsyncClient(pooled, schema=schema, pool_size=1) as ac:
            with pytest.raises(pgcoord.ConfigError, match="transaction-mode pooler"):
                await ac.lock("pool-lock", wait=1)

    asyncio.run(go())
    assert advisory_holders(admin, k) == []


def test_job_result_waits_poll(
    pooled: str, dsn: str, schema: str, client: pgcoord.Client, admin: psycopg.Connection[Any]
) -> None:
    jid = client.enqueue("pool-r", {"n": 1})
    jid2 = client.enqueue("pool-r", {"n": 2})
    assert jid is not None and jid2 is not None

    def finish(after: float) -> None:
        time.sleep(after)
        with pgcoord.Client(dsn, schema=schema, pool_size=1) as d:
            for j in d.claim("pool-r", max=1):
                d.complete(j.id, j.token, result={"done": j.payload["n"]})

    t = threading.Thread(target=finish, args=(0.3,))
    t.start()
    t0 = time.monotonic()
    r = client.job_result(jid, wait=15)
    took = time.monotonic() - t0
    t.join()
    assert r.finished and r.status == "succeeded" and r.result == {"done": 1}, r
    assert took < 3.0, f"job_result took {took:.2f} s to see the result"
    # The deadline with nothing coming: not finished, on time.
    t0 = time.monotonic()
    assert not client.job_result(jid2, wait=0.5).finished
    assert 0.4 < time.monotonic() - t0 < 2.0

    async def go() -> pgcoord.JobResult:
        async with pgcoord.AsyncClient(pooled, schema=schema, pool_size=1) as ac:
            return await ac.job_result(jid2, wait=15)

    t = threading.Thread(target=finish, args=(0.3,))
    t.start()
    r2 = asyncio.run(go())
    t.join()
    assert r2.finished and r2.result == {"done": 2}, r2
    assert queue_channel(admin, schema) + ".result" not in pool_listens(pooled)
