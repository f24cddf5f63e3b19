#!/usr/bin/python3
"""pgcoord_conformance_adapter.py - the Python client's conformance adapter.

The protocol is tests/conformance/README.md: one JSON request a line on stdin, one JSON answer
a line on stdout, in order, each flushed at once. Every op runs on the Python client's own API
(pgcoord.Client on one psycopg connection: the adapter's session) except `sql`, the runner's
look at that session, and `init`, which runs `pgcoord init --schema` as the client's README
says to.

Run it with an interpreter that has psycopg 3 and psycopg_pool (Debian's /usr/bin/python3);
the package is imported from the directory of this file. `work` runs a pgcoord.Worker (its
own sessions, handlers in threads); its events are written by those threads under one lock. PGCOORD_BIN names the pgcoord tool
for `init` (default: build/pgcoord of the source tree, then pgcoord on PATH). End of input
exits, releasing everything with the session.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import datetime as dt
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg  # noqa: E402
from psycopg import pq  # noqa: E402

import pgcoord  # noqa: E402
from pgcoord import errors as E  # noqa: E402

PROTOCOL = 1
FEATURES = ["queue", "results", "keys", "locks", "leases", "tx", "diag"]
HANDLERS = {"ok", "fail", "sleep", "hang", "result", "check_cancel"}
_out_lock = threading.Lock()
ISOLATIONS = {"read committed", "repeatable read", "serializable"}


class Answer(Exception):
    """An error answer: kind, sqlstate, message."""

    def __init__(self, kind: str, message: str, sqlstate: Optional[str] = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.sqlstate = kind, message, sqlstate


def kind_of(e: BaseException) -> str:
    """The protocol's error kind of a client exception (README: the kinds every client shares)."""
    if isinstance(e, (E.UsageError, E.ConfigError)):
        return "usage"
    if isinstance(e, E.SchemaError):
        return "schema"
    # A wait that ran out is "conflict" in the protocol, though the client files it under
    # RetryLaterError: test it before its base class.
    if isinstance(e, E.StaleError):
        return "stale"
    if isinstance(e, (E.ConflictError, E.LockTimeoutError)):
        return "conflict"
    if isinstance(e, E.NotFoundError):
        return "not_found"
    if isinstance(e, E.FencedError):
        return "fenced"
    if isinstance(e, E.RetryLaterError):
        return "retry_later"
    if isinstance(e, E.LostError):
        return "lost"
    if isinstance(e, psycopg.Error):
        if e.sqlstate in ("40001", "40P01"):
            return "retry_later"
        return "sql" if e.sqlstate else "lost"
    if isinstance(e, E.PgcoordError):
        return "sql" if e.sqlstate else "internal"
    return "internal"


def out(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def mono_ms() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1_000_000


class Work:
    """One running `work`: a pgcoord.Worker started in its thread, and a waiter for its end."""

    def __init__(self, worker: pgcoord.Worker, stop_after: int) -> None:
        self.worker = worker
        self.stop_after = stop_after
        self.handled = 0
        self.mu = threading.Lock()
        self.finished = threading.Event()
        self.waiter: Optional[threading.Thread] = None

    def count(self) -> None:
        with self.mu:
            self.handled += 1
            n = self.handled
        if self.stop_after > 0 and n == self.stop_after:
            self.worker.stop(30)

    def wait_end(self) -> None:
        ev: dict[str, Any] = {"event": "done"}
        try:
            self.worker.wait()
        except Exception as e:
            ev["error"] = {"kind": kind_of(e), "message": str(e)}
        ev["handled"] = self.handled
        out(ev)
        self.finished.set()


def arg_str(req: dict[str, Any], name: str, required: bool = True) -> Optional[str]:
    v = req.get(name)
    if v is None and not required:
        return None
    if not isinstance(v, str):
        raise Answer("usage", f"{name} must be a string")
    return v


def arg_int(req: dict[str, Any], name: str, default: Optional[int] = None) -> int:
    v = req.get(name)
    if v is None and default is not None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise Answer("usage", f"{name} must be an integer")
    return v


class XactLock:
    """A lock held in a transaction of its own, on a session of its own, until unlock."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def release(self) -> bool:
        try:
            if self.conn.broken or self.conn.closed:
                raise E.LostError("the session holding the transaction lock is gone")
            self.conn.execute("ROLLBACK")
            return True
        except psycopg.Error as e:
            raise E.LostError(f"ending the transaction that held the lock: {e}") from e
        finally:
            self.conn.close()


class Adapter:
    def __init__(self) -> None:
        self.dsn: Optional[str] = None
        self.schema: Optional[str] = None
        self.conn: Optional[psycopg.Connection[Any]] = None
        self.client: Optional[pgcoord.Client] = None
        # name -> held handles, newest last (a session lock stacks as the server counts it).
        self.locks: dict[str, list[Any]] = {}
        self.work: Optional[Work] = None

    # ---- session ------------------------------------------------------------------------

    def need(self) -> pgcoord.Client:
        if self.client is None:
            raise Answer("usage", "not connected: send connect first")
        return self.client

    def close(self) -> None:
        if self.work is not None:
            self.work.worker.stop(0)
            if self.work.waiter is not None:
                self.work.waiter.join(10)
            self.work = None
        for held in self.locks.values():
            for h in held:
                if isinstance(h, XactLock):
                    h.conn.close()
        self.locks = {}
        if self.conn is not None:
            self.conn.close()  # the server releases the session's locks with it
        self.conn = self.client = None

    def op_hello(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"language": "python", "client_version": pgcoord.__version__, "protocol": PROTOCOL, "features": FEATURES}

    def op_connect(self, req: dict[str, Any]) -> dict[str, Any]:
        dsn, schema = arg_str(req, "dsn"), arg_str(req, "schema")
        assert dsn is not None and schema is not None
        self.close()
        self.dsn, self.schema = dsn, schema
        try:
            conn = psycopg.connect(dsn, autocommit=True, application_name="pgcoord/conformance")
        except psycopg.Error as e:
            raise Answer("lost" if e.sqlstate is None else kind_of(e), f"connecting: {e}", e.sqlstate) from None
        self.conn = conn
        self.client = pgcoord.Client(conn, schema=schema)
        # The protocol version is checked here when the schema exists; a schema not created
        # yet (init follows) is checked at the client's first call instead.
        try:
            self.client.open()
        except E.SchemaError as e:
            if e.sqlstate is None:
                raise
        return {}

    def op_init(self, req: dict[str, Any]) -> dict[str, Any]:
        self.need()
        assert self.dsn is not None and self.schema is not None
        exe = None
        for cand in (os.environ.get("PGCOORD_BIN"), str(HERE.parents[1] / "build" / "pgcoord"), shutil.which("pgcoord")):
            if cand and os.access(cand, os.X_OK):
                exe = cand
                break
        if exe is None:
            raise Answer("internal", "no pgcoord tool for init: set PGCOORD_BIN")
        r = subprocess.run(
            [exe, "-d", self.dsn, "init", "--schema", self.schema], capture_output=True, text=True, timeout=120
        )
        if r.returncode != 0:
            raise Answer("schema", f"pgcoord init exited {r.returncode}: {r.stderr.strip()}")
        return {}

    # ---- locks --------------------------------------------------------------------------

    def op_lock_key(self, req: dict[str, Any]) -> dict[str, Any]:
        name = arg_str(req, "name")
        assert name is not None
        return {"key": pgcoord.key(name)}

    def op_lock(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        name = arg_str(req, "name")
        assert name is not None
        mode = arg_str(req, "mode", required=False) or "session"
        wait = arg_int(req, "wait_ms", 0)
        if mode not in ("session", "xact") or wait < 0:
            raise Answer("usage", "mode must be session or xact, wait_ms >= 0")
        pgcoord.key(name)  # an empty or bad name is usage, whatever the mode
        handle: Any = None
        if mode == "session":
            try:
                handle = client.try_lock(name) if wait == 0 else client.lock(name, wait=wait / 1000)
            except (E.LockBusyError, E.LockTimeoutError):
                handle = None
        else:
            assert self.dsn is not None
            conn = psycopg.connect(self.dsn, autocommit=True, application_name="pgcoord/conformance")
            try:
                conn.execute("BEGIN")
                if wait == 0:
                    got = client.try_xact_lock(conn, name)
                else:
                    try:
                        client.xact_lock(conn, name, wait=wait / 1000)
                        got = True
                    except (E.LockBusyError, E.LockTimeoutError):
                        got = False
                if got:
                    handle = XactLock(conn)
            finally:
                if handle is None:
                    conn.close()
        if handle is not None:
            self.locks.setdefault(name, []).append(handle)
        return {"acquired": handle is not None}

    def op_unlock(self, req: dict[str, Any]) -> dict[str, Any]:
        name = arg_str(req, "name")
        assert name is not None
        held = self.locks.get(name)
        if not held:
            return {"released": False}
        h = held.pop()
        if not held:
            del self.locks[name]
        try:
            h.release()
        except E.NotHeldError:
            return {"released": False}
        return {"released": True}

    # ---- diagnostics --------------------------------------------------------------------

    def op_lock_holders(self, req: dict[str, Any]) -> dict[str, Any]:
        name = arg_str(req, "name")
        assert name is not None
        holders = self.need().lock_holders(name)
        return {"holders": [{"pid": h.pid, "mode": h.mode, "granted": h.granted, "is_self": h.is_self}
                            for h in holders]}

    def op_blocking_forest(self, req: dict[str, Any]) -> dict[str, Any]:
        pid = arg_int(req, "pid", -1)
        if pid < 0:
            raise Answer("usage", "pid must be a process id")
        s = self.need().blocking_forest().session(pid)
        if s is None:
            return {"found": False}
        return {"found": True, "blocked_by": list(s.blocked_by), "blocks": list(s.blocks), "root": s.root,
                "depth": s.depth, "in_cycle": s.in_cycle, "blocks_total": s.blocks_total}

    # ---- leases and fencing -------------------------------------------------------------

    def op_lease_acquire(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        name = arg_str(req, "name")
        assert name is not None
        holder = arg_str(req, "holder", required=False) or ""
        info = client.lease_acquire(name, ttl=arg_int(req, "ttl_ms") / 1000, holder=holder)
        return {"acquired": info.granted, "token": info.token if info.granted else None}

    def op_lease_renew(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        name = arg_str(req, "name")
        assert name is not None
        token = arg_int(req, "token")
        info = client.lease_renew(name, token, ttl=arg_int(req, "ttl_ms") / 1000)
        if info.status != "ok":
            raise Answer("stale", f'lease "{name}": token {token} was not renewed: {info.status}')
        return {}

    def op_lease_release(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        name = arg_str(req, "name")
        assert name is not None
        token = arg_int(req, "token")
        status = client.lease_release(name, token)
        # As the C library: released (now or before) is done; a newer token is stale.
        if status == "superseded":
            raise Answer("stale", f'lease "{name}": token {token} is stale, a newer token was granted')
        if status not in ("ok", "released"):
            raise Answer("not_found", f'lease "{name}" has no token {token}')
        return {}

    def op_fence_check(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        assert self.conn is not None
        name = arg_str(req, "name")
        assert name is not None
        token = arg_int(req, "token")
        with self.conn.transaction():
            client.fence_check(self.conn, name, token)
        return {}

    # ---- the queue ----------------------------------------------------------------------

    def op_enqueue(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        assert self.conn is not None
        queue = arg_str(req, "queue")
        assert queue is not None
        run_at: Any = None
        if req.get("run_at") is not None:
            try:
                run_at = dt.datetime.fromisoformat(str(req["run_at"]).replace("Z", "+00:00"))
            except ValueError:
                raise Answer("usage", "run_at must be ISO 8601 with an offset") from None
        elif req.get("delay_ms") is not None:
            run_at = dt.timedelta(milliseconds=arg_int(req, "delay_ms"))
        pol = arg_str(req, "on_dep_failure", required=False)
        if pol not in (None, "cancel", "run"):
            raise Answer("usage", "on_dep_failure must be cancel or run")
        after = req.get("after")
        if after is not None and (not isinstance(after, list) or not all(isinstance(x, int) for x in after)):
            raise Answer("usage", "after must be a list of job ids")
        tx = arg_str(req, "tx", required=False)
        if tx not in (None, "commit", "rollback"):
            raise Answer("usage", "tx must be commit or rollback")
        kw: dict[str, Any] = dict(
            unique_key=arg_str(req, "unique_key", required=False),
            priority=req.get("priority"),
            run_at=run_at,
            max_attempts=req.get("max_attempts"),
            key=arg_str(req, "key", required=False),
            after=after,
            run_anyway=True if pol == "run" else None,
            group=arg_str(req, "group", required=False),
        )
        payload = req.get("payload", {})
        if tx == "rollback":
            with self.conn.transaction(force_rollback=True):
                client.enqueue(queue, payload, conn=self.conn, **kw)
            return {"job_id": 0}
        if tx == "commit":
            with self.conn.transaction():
                jid = client.enqueue(queue, payload, conn=self.conn, **kw)
        else:
            jid = client.enqueue(queue, payload, **kw)
        if jid is None:
            raise Answer("conflict", f"unique key {kw['unique_key']!r} is taken by a pending or running job", "23505")
        return {"job_id": jid}

    def op_enqueue_many(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        queue = arg_str(req, "queue")
        assert queue is not None
        payloads, keys = req.get("payloads"), req.get("unique_keys")
        if not isinstance(payloads, list) or (keys is not None and (not isinstance(keys, list) or len(keys) != len(payloads))):
            raise Answer("usage", "payloads must be a list, unique_keys one of the same length")
        ids = client.enqueue_many(queue, payloads, unique_keys=keys)
        return {"job_ids": [0 if i is None else i for i in ids]}

    def op_claim(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        queue = arg_str(req, "queue")
        assert queue is not None
        jobs = client.claim(queue, max=arg_int(req, "max", 1), lease=arg_int(req, "lease_ms", 30000) / 1000)
        return {"jobs": [{"job_id": j.id, "token": j.token, "attempt": j.attempts, "payload": j.payload, "key": j.key} for j in jobs]}

    def op_complete(self, req: dict[str, Any]) -> dict[str, Any]:
        self.need().complete(arg_int(req, "job_id"), arg_int(req, "token"), result=req.get("result"))
        return {}

    def op_fail(self, req: dict[str, Any]) -> dict[str, Any]:
        retry = req.get("retry_in_ms")
        outcome = self.need().fail(
            arg_int(req, "job_id"), arg_int(req, "token"), arg_str(req, "error", required=False) or "failed",
            retry_in=None if retry is None else arg_int(req, "retry_in_ms") / 1000,
        )
        return {"dead": outcome == "dead"}

    def op_release(self, req: dict[str, Any]) -> dict[str, Any]:
        self.need().release([arg_int(req, "job_id")], [arg_int(req, "token")])
        return {}

    def op_renew(self, req: dict[str, Any]) -> dict[str, Any]:
        ids, tokens = req.get("job_ids"), req.get("tokens")
        if not isinstance(ids, list) or not isinstance(tokens, list) or len(ids) != len(tokens) or not ids:
            raise Answer("usage", "job_ids and tokens must be lists of the same length")
        r = self.need().renew(ids, tokens, lease=arg_int(req, "lease_ms", 30000) / 1000)
        return {"lost": r.lost, "cancelled": r.cancelled}

    def op_cancel(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"was_running": self.need().cancel(arg_int(req, "job_id"))}

    def op_reap(self, req: dict[str, Any]) -> dict[str, Any]:
        r = self.need().reap()
        return {"returned": r.returned, "failed": r.failed}

    def op_job(self, req: dict[str, Any]) -> dict[str, Any]:
        j = self.need().job(arg_int(req, "job_id"))
        return {"status": j.status, "attempts": j.attempts}

    def op_job_result(self, req: dict[str, Any]) -> dict[str, Any]:
        jid, wait = arg_int(req, "job_id"), arg_int(req, "wait_ms", 0)
        if jid <= 0 or wait < 0:
            raise Answer("usage", "job_id must be a positive integer, wait_ms one not negative")
        r = self.need().job_result(jid, wait=wait / 1000 if wait else None)
        if not r.finished:
            raise Answer("conflict", f"job {jid} is still {r.status} after {wait} ms")
        return {"status": r.status, "result": r.result}

    def op_flow_set(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        queue = arg_str(req, "queue")
        assert queue is not None

        def rate(name: str) -> Optional[tuple[int, float]]:
            v = req.get(name)
            if v is None:
                return None
            if not isinstance(v, dict) or not isinstance(v.get("n"), int) or not isinstance(v.get("per_ms"), int):
                raise Answer("usage", f"{name} must be {{n, per_ms}}")
            return v["n"], v["per_ms"] / 1000

        limit = req.get("key_limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise Answer("usage", "key_limit must be an integer")
        key = arg_str(req, "key", required=False)
        if key is not None:
            client.key_set(queue, key, limit=limit, rate=rate("key_rate"))
        else:
            client.flow_set(queue, key_limit=limit, rate=rate("rate"), key_rate=rate("key_rate"))
        return {}

    # ---- the worker ---------------------------------------------------------------------

    def op_work(self, req: dict[str, Any]) -> dict[str, Any]:
        self.need()
        assert self.dsn is not None and self.schema is not None
        if self.work is not None and self.work.finished.is_set():
            self.work = None
        if self.work is not None:
            raise Answer("usage", "work is already running: stop it first")
        queues: list[str] = []
        if req.get("queue") is not None:
            queues.append(str(arg_str(req, "queue")))
        more = req.get("queues")
        if more is not None:
            if not isinstance(more, list) or not all(isinstance(q, str) for q in more):
                raise Answer("usage", "queues must be a list of names")
            queues += more
        h = req.get("handler") or {}
        if not isinstance(h, dict) or h.get("do", "ok") not in HANDLERS or not queues:
            raise Answer("usage", "unknown handler" if isinstance(h, dict) else "bad work arguments")
        kind = h.get("do", "ok")
        wait_ms: int = h["ms"] if isinstance(h.get("ms"), int) else 0
        error = h.get("error") if isinstance(h.get("error"), str) else "failed"
        result = h.get("result")
        worker = pgcoord.Worker(
            self.dsn, schema=self.schema, concurrency=arg_int(req, "concurrency", 1),
            lease=arg_int(req, "lease_ms", 30000) / 1000, application_name="pgcoord/conformance",
        )  # fmt: skip
        wk = Work(worker, arg_int(req, "stop_after", 0))

        def handle(job: pgcoord.Job) -> Any:
            out({"event": "job_started", "job_id": job.id, "attempt": job.attempts, "key": job.key, "t_ms": mono_ms()})
            outcome, value = "succeeded", None
            if kind == "fail":
                outcome = "failed"
            elif kind == "sleep":
                end = time.monotonic() + wait_ms / 1000
                while time.monotonic() < end and not job.lost.is_set():
                    job.lost.wait(0.005)
                outcome = "lost" if job.lost.is_set() else outcome
            elif kind == "hang":
                job.lost.wait()
                outcome = "lost"
            elif kind == "check_cancel":
                job.lost.wait((wait_ms or 30000) / 1000)
                outcome = "cancelled" if job.cancelled.is_set() else "lost" if job.lost.is_set() else outcome
            elif kind == "result":
                value = result
            out({"event": "job_ended", "job_id": job.id, "outcome": outcome, "t_ms": mono_ms()})
            wk.count()
            if outcome != "succeeded":
                raise RuntimeError(error if outcome == "failed" else outcome)
            return value

        for q in queues:
            worker.add_handler(q, handle)
        worker.start()
        wk.waiter = threading.Thread(target=wk.wait_end, daemon=True)
        wk.waiter.start()
        self.work = wk
        return {"started": True}

    def op_stop(self, req: dict[str, Any]) -> dict[str, Any]:
        wk = self.work
        if wk is None:
            return {"stopped": False, "handled": 0}
        wk.worker.stop(arg_int(req, "grace_ms", 5000) / 1000)
        assert wk.waiter is not None
        wk.waiter.join()
        self.work = None
        return {"stopped": True, "handled": wk.handled}

    # ---- transactions and SQL -----------------------------------------------------------

    def op_tx(self, req: dict[str, Any]) -> dict[str, Any]:
        client = self.need()
        given = req.get("statements")
        if not isinstance(given, list) or not all(isinstance(s, str) for s in given):
            raise Answer("usage", "statements must be a list of strings")
        stmts: list[str] = given
        iso = arg_str(req, "isolation", required=False)
        if iso is not None and iso not in ISOLATIONS:
            raise Answer("usage", f"isolation must be one of {', '.join(sorted(ISOLATIONS))}")
        runs = 0

        def body(conn: psycopg.Connection[Any]) -> None:
            nonlocal runs
            runs += 1
            for s in stmts:
                conn.execute(s)

        client.transaction(body, attempts=arg_int(req, "max_attempts", 10), isolation=iso)
        return {"attempts": runs}

    def op_sql(self, req: dict[str, Any]) -> dict[str, Any]:
        self.need()
        assert self.conn is not None
        stmt = arg_str(req, "statement")
        assert stmt is not None
        # The runner's check on this session, rows as the server's text: one simple-protocol
        # statement through libpq, under the connection's lock (the heartbeat skips it then).
        with self.conn.lock:
            res = self.conn.pgconn.exec_(stmt.encode())
        if res.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            state = res.error_field(pq.DiagnosticField.SQLSTATE)
            msg = res.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or self.conn.pgconn.error_message
            raise Answer("lost" if state is None else "sql", msg.decode(errors="replace"), state.decode() if state else None)
        rows = [
            [None if (v := res.get_value(i, j)) is None else bytes(v).decode() for j in range(res.nfields)]
            for i in range(res.ntuples)
        ]
        return {"rows": rows}

    # ---- the loop -----------------------------------------------------------------------

    def op_quit(self, req: dict[str, Any]) -> NoReturn:
        out({"id": req.get("id"), "ok": True})
        self.close()
        sys.exit(0)

    def dispatch(self, req: dict[str, Any]) -> None:
        rid = req.get("id")
        op = req.get("op")
        try:
            if not isinstance(op, str):
                raise Answer("usage", "a request needs an op")
            if op == "kill":
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            fn: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = getattr(self, "op_" + op, None)
            if fn is None:
                raise Answer("usage", f"unknown op {op}")
            ans = fn(req)
        except Answer as a:
            out({"id": rid, "ok": False, "error": {"kind": a.kind, "sqlstate": a.sqlstate, "message": a.message}})
            return
        except Exception as e:
            msg = str(e).strip() or type(e).__name__
            out({"id": rid, "ok": False, "error": {"kind": kind_of(e), "sqlstate": getattr(e, "sqlstate", None), "message": msg}})
            return
        out({"id": rid, "ok": True, **ans})


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ad = Adapter()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError as e:
            out({"id": None, "ok": False, "error": {"kind": "usage", "sqlstate": None, "message": f"bad JSON: {e}"}})
            continue
        if not isinstance(req, dict):
            out({"id": None, "ok": False, "error": {"kind": "usage", "sqlstate": None, "message": "a request is an object"}})
            continue
        ad.dispatch(req)
    # The runner is gone: close the session, which releases whatever it held.
    ad.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
