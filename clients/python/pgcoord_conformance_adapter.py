#!/usr/bin/python3
"""pgcoord_conformance_adapter.py - the Python client's conformance adapter.

The protocol is tests/conformance/README.md: one JSON request a line on stdin, one JSON answer
a line on stdout, in order, each flushed at once. Every op runs on the Python client's own API
(pgcoord.Client on one psycopg connection: the adapter's session) except `sql`, the runner's
look at that session, and `init`, which runs `pgcoord init --schema` as the client's README
says to. The client has no worker yet: the ops of the `queue`, `keys` and `results` features
answer error kind `usage`, "not supported", and `hello` does not list them.

Run it with an interpreter that has psycopg 3 and psycopg_pool (Debian's /usr/bin/python3);
the package is imported from the directory of this file. PGCOORD_BIN names the pgcoord tool
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
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg  # noqa: E402
from psycopg import pq  # noqa: E402

import pgcoord  # noqa: E402
from pgcoord import errors as E  # noqa: E402

PROTOCOL = 1
FEATURES = ["locks", "leases", "tx"]
# Ops of features this client does not have yet (the worker and what needs it).
NOT_SUPPORTED = {
    "enqueue", "enqueue_many", "claim", "complete", "fail", "release", "renew", "cancel",
    "reap", "job", "job_result", "flow_set", "work", "stop",
}  # fmt: skip
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
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")
    sys.stdout.flush()


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

    # ---- session ------------------------------------------------------------------------

    def need(self) -> pgcoord.Client:
        if self.client is None:
            raise Answer("usage", "not connected: send connect first")
        return self.client

    def close(self) -> None:
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
            if op in NOT_SUPPORTED:
                raise Answer("usage", f"not supported: {op} needs the worker, which the Python client has not yet")
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
