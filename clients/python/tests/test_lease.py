"""Leases, leader election and fencing tokens, sync."""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterator

import psycopg
import pytest
from psycopg import sql

import pgcoord
from conftest import wait_for


@pytest.fixture
def client(dsn: str, schema: str) -> Iterator[pgcoord.Client]:
    with pgcoord.Client(dsn, schema=schema) as c:
        yield c


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_one_leader_and_tokens_grow(client: pgcoord.Client) -> None:
    name = uniq("leader")
    with client.lease(name, ttl=5, holder="a") as a:
        assert a.token > 0 and a.holder == "a" and a.info.granted
        assert client.try_lease(name, ttl=5, holder="b") is None
        with pytest.raises(pgcoord.LeaseHeldError, match="held by a") as ei:
            client.lease(name, ttl=5, holder="b", wait=0)
        assert ei.value.holder == "a" and ei.value.token == a.token
        first = a.token
    # Released: the next candidate gets it at once, with a newer token.
    with client.lease(name, ttl=5, holder="b", wait=2) as b:
        assert b.token > first


def test_campaign_waits_for_release(client: pgcoord.Client) -> None:
    name = uniq("campaign")
    a = client.lease(name, ttl=1, holder="a")
    import threading

    threading.Timer(0.3, a.release).start()
    t0 = time.monotonic()
    with client.lease(name, ttl=1, holder="b", wait=10) as b:
        assert b.holder == "b"
        assert time.monotonic() - t0 < 5


def test_wait_has_a_deadline(client: pgcoord.Client) -> None:
    name = uniq("deadline")
    with client.lease(name, ttl=10, holder="a"):
        t0 = time.monotonic()
        with pytest.raises(pgcoord.LockTimeoutError):
            client.lease(name, ttl=10, holder="b", wait=0.5)
        assert time.monotonic() - t0 < 3


def test_renewed_every_third(client: pgcoord.Client) -> None:
    name = uniq("renew")
    with client.lease(name, ttl=0.6, holder="a") as a:
        first = a.info.expires_at
        assert first is not None
        wait_for(lambda: a.info.expires_at is not None and a.info.expires_at > first, 5, "a renewal")
        time.sleep(1.0)  # longer than the TTL: held only because it is renewed
        assert not a.lost.is_set()
        assert client.try_lease(name, ttl=1, holder="b") is None


def test_loss_is_observable(client: pgcoord.Client, admin: psycopg.Connection[Any], schema: str) -> None:
    name = uniq("lose")
    a = client.lease(name, ttl=0.9, holder="a")
    # Another holder takes over (as after a partition): expire the row, then acquire.
    admin.execute(
        sql.SQL("UPDATE {}.leases SET expires_at = clock_timestamp() WHERE name = %s").format(sql.Identifier(schema)), [name]
    )
    b = client.lease(name, ttl=5, holder="b", wait=2)
    assert a.lost.wait(timeout=5)
    assert "superseded" in (a.lost_reason or "")
    with pytest.raises(pgcoord.LostError):
        a.check()
    with pytest.raises(pgcoord.LostError):
        a.release()
    b.release()


def test_fence_check_in_writers_transaction(client: pgcoord.Client, dsn: str, admin: psycopg.Connection[Any]) -> None:
    name = uniq("fence")
    t = sql.Identifier(f"pgcpy_fenced_{uuid.uuid4().hex[:8]}")
    admin.execute(sql.SQL("CREATE TABLE {} (v text)").format(t))
    try:
        a = client.lease(name, ttl=5, holder="a")
        old = a.token
        with psycopg.connect(dsn, autocommit=True) as conn:
            with pytest.raises(pgcoord.UsageError, match="no transaction"):
                client.fence_check(conn, name, old)
            with conn.transaction():
                assert a.fence_check(conn) == old
                conn.execute(sql.SQL("INSERT INTO {} VALUES ('a')").format(t))
            a.release()
            b = client.lease(name, ttl=5, holder="b")
            with pytest.raises(pgcoord.FencedError) as ei:
                with conn.transaction():
                    client.fence_check(conn, name, old)
                    conn.execute(sql.SQL("INSERT INTO {} VALUES ('stale')").format(t))
            assert ei.value.sqlstate == "PCF01"
            with pytest.raises(pgcoord.NotFoundError) as nf:
                with conn.transaction():
                    client.fence_check(conn, name, b.token + 100)
            assert nf.value.sqlstate == "PCF02"
            b.release()
        assert admin.execute(sql.SQL("SELECT array_agg(v) FROM {}").format(t)).fetchone() == (["a"],)
    finally:
        admin.execute(sql.SQL("DROP TABLE {}").format(t))


def test_fence_next_for_lock_holders(client: pgcoord.Client) -> None:
    name = uniq("fnext")
    t1 = client.fence_next(name, "locker")
    t2 = client.fence_next(name, "locker")
    assert t2 > t1 > 0
    with client.lease(uniq("x"), ttl=5):
        pass
    other = uniq("held")
    with client.lease(other, ttl=5):
        with pytest.raises(pgcoord.LeaseHeldError) as ei:
            client.fence_next(other, "locker")
        assert ei.value.sqlstate == "PCF03"


def test_bad_arguments(client: pgcoord.Client) -> None:
    with pytest.raises(pgcoord.UsageError, match="ttl"):
        client.lease("x", ttl=0)
    with pytest.raises(pgcoord.UsageError, match="lease name is empty"):
        client.lease("", ttl=1)


def test_one_call_acquire_renew_release(client: pgcoord.Client) -> None:
    # The level under the handle: one call each, no renewal thread, tokens passed by hand
    # (as between processes).
    name = uniq("onecall")
    a = client.lease_acquire(name, ttl=0.3, holder="a")
    assert a.granted and a.token > 0 and a.holder == "a"
    b = client.lease_acquire(name, ttl=10, holder="b")
    assert not b.granted and b.holder == "a" and b.token == a.token
    # Nobody renews it: it runs out, and b is granted a newer token.
    got: list[pgcoord.LeaseInfo] = []
    wait_for(lambda: bool(got.append(client.lease_acquire(name, ttl=10, holder="b")) or got[-1].granted), what="expiry")
    b = got[-1]
    assert b.token > a.token
    assert client.lease_renew(name, a.token, ttl=10).status == "superseded"
    r = client.lease_renew(name, b.token, ttl=10)
    assert r.status == "ok" and r.granted and r.remaining > 5
    assert client.lease_release(name, b.token) == "ok"
    assert client.lease_release(name, b.token) == "released"
    assert client.lease_release(name, a.token) == "superseded"
    assert client.lease_renew(name, b.token, ttl=10).status == "released"
    with pytest.raises(pgcoord.UsageError):
        client.lease_acquire("", ttl=1)
