"""The worker against a real server, with real faults: its session terminated, a SIGKILLed
worker's job rescued by another, a running job cancelled, a graceful stop with a grace."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest

import pgcoord

from conftest import wait_for

HERE = Path(__file__).resolve().parent
PY = sys.executable


@pytest.fixture
def client(dsn: str, schema: str) -> Iterator[pgcoord.Client]:
    with pgcoord.Client(dsn, schema=schema) as c:
        yield c


def status(client: pgcoord.Client, jid: int) -> str:
    return client.job(jid).status


def test_results_failures_and_retry_later(client: pgcoord.Client, dsn: str, schema: str) -> None:
    ok = client.enqueue_many("w-1", [{"n": i} for i in range(20)])
    bad = client.enqueue("w-1", {"fail": True}, max_attempts=1)
    later = client.enqueue("w-1", {"later": True})
    w = pgcoord.Worker(dsn, schema=schema, concurrency=4)
    deferred: set[int] = set()

    @w.handler("w-1")
    def handle(job: pgcoord.Job) -> Any:
        if job.payload.get("fail"):
            raise ValueError("no good")
        if job.payload.get("later") and job.id not in deferred:
            deferred.add(job.id)
            raise pgcoord.RetryLater(0.05)
        return {"double": job.payload.get("n", 0) * 2}

    w.start()
    try:
        assert bad is not None and later is not None
        wait_for(lambda: all(client.job(i).finished for i in [*ok, bad, later] if i is not None), what="every job finished")
    finally:
        w.stop(5)
        st = w.wait(20)
    assert st is not None and st.completed == 21 and st.failed == 1 and st.retried == 1
    assert client.job_result(ok[3] or 0).result == {"double": 6}
    j = client.job(bad)
    assert j.status == "failed" and "ValueError: no good" in (j.last_error or "")
    assert client.job(later).status == "succeeded"


def test_cancel_seen_by_sync_and_async_handlers(client: pgcoord.Client, dsn: str, schema: str) -> None:
    seen: dict[str, str] = {}
    # A lease of two minutes: renewals every 40 s, so only the worker's own channel can tell
    # the handlers within the bound below.
    w = pgcoord.Worker(dsn, schema=schema, concurrency=2, lease=120)

    @w.handler("w-2s")
    def sync_handler(job: pgcoord.Job) -> None:
        job.lost.wait(30)
        seen["sync"] = "cancelled" if job.cancelled.is_set() else "timeout"

    @w.handler("w-2a")
    async def async_handler(job: pgcoord.Job) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen["async"] = "cancelled" if job.cancelled.is_set() else "other"
            raise

    a = client.enqueue("w-2s", {})
    b = client.enqueue("w-2a", {})
    assert a is not None and b is not None
    w.start()
    try:
        wait_for(lambda: status(client, a) == "running" and status(client, b) == "running", what="both running")
        t0 = time.monotonic()
        assert client.cancel(a) and client.cancel(b)
        wait_for(lambda: len(seen) == 2, what="both handlers told")
        # Told through the worker's own channel, not at the next renewal (40 s away).
        assert time.monotonic() - t0 < 30
    finally:
        w.stop(5)
        st = w.wait(20)
    assert seen == {"sync": "cancelled", "async": "cancelled"}
    assert st is not None and st.cancelled == 2 and st.completed == 0
    assert status(client, a) == "cancelled" and status(client, b) == "cancelled"


def test_session_terminated(client: pgcoord.Client, dsn: str, schema: str, admin: psycopg.Connection[Any]) -> None:
    gate = threading.Event()
    w = pgcoord.Worker(dsn, schema=schema, concurrency=2, application_name="pgcpy-term")

    @w.handler("w-3")
    def handle(job: pgcoord.Job) -> int:
        gate.wait(30)
        return int(job.payload)

    first = client.enqueue("w-3", 1)
    assert first is not None
    w.start()
    try:
        wait_for(lambda: status(client, first) == "running", what="the job running")
        # Every session of the worker, both the dispatcher's and the LISTEN one.
        n = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'pgcpy-term%%'"
        ).fetchone()
        assert n is not None and n[0] == 2
        gate.set()
        wait_for(lambda: status(client, first) == "succeeded", what="the held job completed on a new session")
        second = client.enqueue("w-3", 2)
        assert second is not None
        wait_for(lambda: status(client, second) == "succeeded", what="a new job after the reconnect")
        wait_for(lambda: w.listening, what="LISTEN back")
    finally:
        w.stop(5)
        st = w.wait(20)
    assert st is not None and st.reconnects >= 1 and st.completed == 2 and st.stale == 0
    assert client.job(first).attempts == 1, "not run twice"


def test_graceful_stop_releases_after_grace(client: pgcoord.Client, dsn: str, schema: str) -> None:
    quick_done = threading.Event()
    w = pgcoord.Worker(dsn, schema=schema, concurrency=2)

    @w.handler("w-4")
    def handle(job: pgcoord.Job) -> str:
        if job.payload == "quick":
            time.sleep(0.3)
            quick_done.set()
            return "done"
        job.lost.wait(30)
        return "too late"

    quick = client.enqueue("w-4", "quick")
    slow = client.enqueue("w-4", "slow")
    assert quick is not None and slow is not None
    w.start()
    wait_for(lambda: status(client, quick) == "running" and status(client, slow) == "running", what="both running")
    t0 = time.monotonic()
    w.stop(1.0)
    st = w.wait(20)
    took = time.monotonic() - t0
    assert st is not None and 0.9 <= took < 10
    assert status(client, quick) == "succeeded"
    j = client.job(slow)
    assert j.status == "pending" and j.attempts == 0, "released, its attempt given back"
    assert st.released == 1


def test_sigkilled_worker_rescued(client: pgcoord.Client, dsn: str, schema: str, tmp_path: Path) -> None:
    (tmp_path / "hangs.py").write_text(
        "import time\ndef handle(job):\n    print('started', job.id, flush=True)\n    time.sleep(600)\n"
    )
    jid = client.enqueue("w-5", {"x": 1})
    assert jid is not None
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    p = subprocess.Popen(
        [PY, "-m", "pgcoord", "worker", "hangs:handle", "--queue", "w-5", "--dsn", dsn, "--schema", schema, "--lease", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert p.stdout is not None
        assert p.stdout.readline().split() == ["started", str(jid)]
    finally:
        p.kill()
        p.wait()
    w = pgcoord.Worker(dsn, schema=schema, concurrency=1, lease=1)
    got: list[int] = []

    @w.handler("w-5")
    def rescue(job: pgcoord.Job) -> None:
        got.append(job.attempts)

    w.start()
    try:
        wait_for(lambda: status(client, jid) == "succeeded", what="the job rescued after its lease")
    finally:
        w.stop(5)
        w.wait(20)
    assert got == [2]


def test_cli_usage_and_sigterm(client: pgcoord.Client, dsn: str, schema: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    r = subprocess.run([PY, "-m", "pgcoord", "worker", "nomodule:h", "--queue", "q", "--dsn", dsn], env=env, capture_output=True, text=True)
    assert r.returncode == 64 and "cannot import nomodule" in r.stderr
    r = subprocess.run([PY, "-m", "pgcoord", "worker", "x:y"], env=env, capture_output=True, text=True)
    assert r.returncode == 64 and "--queue" in r.stderr
    r = subprocess.run([PY, "-m", "pgcoord", "worker", "--help"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "MODULE:HANDLER" in r.stdout and "Exit codes" in r.stdout
    (tmp_path / "ok.py").write_text("def handle(job):\n    print('ran', job.id, flush=True)\n    return {'ok': job.payload}\n")
    r = subprocess.run([PY, "-m", "pgcoord", "worker", "ok:handle", "-q", "q", "--dsn", dsn, "--schema", "nosuchschema"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 69 and "nosuchschema" in r.stderr
    jid = client.enqueue("w-6", 7)
    assert jid is not None
    p = subprocess.Popen(
        [PY, "-m", "pgcoord", "worker", "ok:handle", "-q", "w-6", "--dsn", dsn, "--schema", schema],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert p.stdout is not None
        assert p.stdout.readline().split() == ["ran", str(jid)]
        wait_for(lambda: status(client, jid) == "succeeded", what="the job completed")
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert client.job_result(jid).result == {"ok": 7}


async def test_async_worker_many_at_once(dsn: str, schema: str) -> None:
    async with pgcoord.AsyncClient(dsn, schema=schema) as c:
        ids = await c.enqueue_many("w-7", list(range(200)))
        w = pgcoord.AsyncWorker(c, concurrency=32)
        at_once = [0, 0]

        @w.handler("w-7")
        async def handle(job: pgcoord.Job) -> int:
            at_once[0] += 1
            at_once[1] = max(at_once[1], at_once[0])
            await asyncio.sleep(0.01)
            at_once[0] -= 1
            if w.stats.claimed >= 200 and at_once[0] == 0:
                w.stop(5)
            return int(job.payload) + 1

        st = await asyncio.wait_for(w.run(), 60)
        assert st.completed == 200 and at_once[1] > 8
        last = ids[-1]
        assert last is not None and (await c.job_result(last)).result == 200


def test_polling_keeps_up_with_a_trickle(client: pgcoord.Client, dsn: str, schema: str) -> None:
    """Without LISTEN, jobs arriving one by one are claimed at the shortest poll: a claim that
    finds a job starts the adaptive poll over. (It once doubled whenever a claim came back with
    fewer jobs than free slots: each job of a trickle waited twice as long as the one before,
    twelve jobs about forty seconds.)"""
    w = pgcoord.Worker(dsn, schema=schema, concurrency=4, listen=False, poll=20)
    handled: list[int] = []

    @w.handler("w-trickle")
    def handle(job: pgcoord.Job) -> None:
        handled.append(int(job.payload))

    w.start()
    try:
        t0 = time.monotonic()
        for i in range(12):
            client.enqueue("w-trickle", i)
            wait_for(lambda: len(handled) == i + 1, bound=60, what=f"job {i} handled")
        took = time.monotonic() - t0
        # At the shortest poll (10 ms, then 20, 40... until the next job) about half a second.
        assert took < 15, f"twelve jobs one at a time took {took:.1f} s"
    finally:
        w.stop(5)
        w.wait(20)
