"""The queue's calls: claim and its ends, renewals, cancel, reap, results, flow settings."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import psycopg
import pytest

import pgcoord


@pytest.fixture
def client(dsn: str, schema: str) -> Iterator[pgcoord.Client]:
    with pgcoord.Client(dsn, schema=schema) as c:
        yield c


def test_claim_complete_result(client: pgcoord.Client) -> None:
    jid = client.enqueue("qc-1", {"n": 1})
    assert jid is not None
    (job,) = client.claim("qc-1", max=5, lease=10)
    assert (job.id, job.queue, job.attempts, job.payload) == (jid, "qc-1", 1, {"n": 1})
    assert client.job(jid).status == "running"
    assert client.job_result(jid) == pgcoord.JobResult(jid, "running", None)
    client.complete(jid, job.token, result={"answer": 42, "text": "é\"\n"})
    assert client.job_result(jid) == pgcoord.JobResult(jid, "succeeded", {"answer": 42, "text": "é\"\n"})
    with pytest.raises(pgcoord.StaleError):
        client.complete(jid, job.token)
    with pytest.raises(pgcoord.FinishedError):
        client.cancel(jid)
    with pytest.raises(pgcoord.NotFoundError):
        client.job(10**12)
    assert client.claim("qc-1") == []


def test_result_bound(client: pgcoord.Client) -> None:
    jid = client.enqueue("qc-2", {})
    assert jid is not None
    (job,) = client.claim("qc-2")
    with pytest.raises(pgcoord.UsageError, match="over the limit"):
        client.complete(jid, job.token, result="x" * 65535)
    with pytest.raises(pgcoord.UsageError, match="JSON"):
        client.complete(jid, job.token, result={1, 2})
    client.complete(jid, job.token, result="y" * 65534)
    assert client.job_result(jid).result == "y" * 65534


def test_fail_retry_release_renew_cancel(client: pgcoord.Client) -> None:
    a, b = client.enqueue_many("qc-3", [1, 2], max_attempts=1)
    assert a is not None and b is not None
    ja, jb = client.claim("qc-3", max=2, lease=10)
    assert client.fail(ja.id, ja.token, "boom") == "dead"
    assert client.job(ja.id).status == "failed" and client.job(ja.id).last_error == "boom"
    with pytest.raises(pgcoord.StaleError):
        client.fail(ja.id, ja.token, "again")
    assert client.retry_later(jb.id, jb.token, 0) == "retried"
    time.sleep(0.01)
    (jb2,) = client.claim("qc-3", lease=10)
    assert jb2.id == jb.id and jb2.attempts == 1
    assert client.renew([jb2.id], [jb2.token], lease=10) == pgcoord.Renewal([jb2.id], [], [])
    assert client.release([jb2.id], [jb2.token]) == 1
    (jb3,) = client.claim("qc-3", lease=10)
    assert client.cancel(jb3.id) is True
    r = client.renew([jb3.id], [jb3.token], lease=10)
    assert r.lost == [jb3.id] and r.cancelled == [jb3.id] and r.held == []


def test_lease_expiry_and_reap(client: pgcoord.Client) -> None:
    jid = client.enqueue("qc-4", {})
    (job,) = client.claim("qc-4", lease=0.2)
    deadline = time.monotonic() + 15
    returned = 0
    while returned == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            returned += client.reap().returned
        except pgcoord.ConflictError:
            pass  # another pass (a worker's) is running
        if client.job(jid).status == "pending":
            break
    (again,) = client.claim("qc-4")
    assert again.id == jid and again.attempts == 2
    with pytest.raises(pgcoord.StaleError):
        client.complete(jid, job.token)
    client.complete(jid, again.token)


def test_job_result_waits(
    client: pgcoord.Client, dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The once-a-second look made a minute long: only the notification can end the wait soon.
    monkeypatch.setattr(pgcoord.client, "RESULT_RECHECK", 60.0)
    jid = client.enqueue("qc-5", {})
    assert jid is not None
    t0 = time.monotonic()
    r = client.job_result(jid, wait=0.3)
    assert not r.finished and r.status == "pending" and time.monotonic() - t0 >= 0.3
    (job,) = client.claim("qc-5")

    def later() -> None:
        time.sleep(0.3)
        with pgcoord.Client(dsn, schema=schema) as other:
            other.complete(jid, job.token, result=[1, 2])

    threading.Thread(target=later).start()
    t0 = time.monotonic()
    r = client.job_result(jid, wait=20)
    assert r == pgcoord.JobResult(jid, "succeeded", [1, 2])
    assert time.monotonic() - t0 < 30, "woken by the notification, not by the look a minute later"


def test_flow_settings(client: pgcoord.Client) -> None:
    client.flow_set("qc-6", key_limit=1)
    client.enqueue_many("qc-6", [1, 2], key="k")
    assert len(client.claim("qc-6", max=2)) == 1
    client.key_set("qc-6", "k", limit=2)
    assert len(client.claim("qc-6", max=2)) == 1


async def test_async_queue_calls(dsn: str, schema: str) -> None:
    async with pgcoord.AsyncClient(dsn, schema=schema) as c:
        jid = await c.enqueue("qc-7", {"a": 1})
        assert jid is not None
        (job,) = await c.claim("qc-7", lease=10)
        assert (await c.renew([jid], [job.token])).held == [jid]
        assert not (await c.job_result(jid, wait=0.2)).finished
        await c.complete(jid, job.token, result={"ok": True})
        assert (await c.job_result(jid, wait=5)).result == {"ok": True}
        assert (await c.job(jid)).status == "succeeded"
        with pytest.raises(pgcoord.StaleError):
            await c.fail(jid, job.token, "late")
