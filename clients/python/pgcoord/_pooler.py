"""Is a pooler between the client and PostgreSQL, and which kind: the C library's probe
(``src/conn/conn_pooler.c``), sync and asyncio.

PgBouncer and the other poolers give each client a backend pid of their own in the
connection's BackendKeyData (psycopg's ``conn.info.backend_pid``), so a session whose pid
equals ``pg_backend_pid()`` is direct; that costs one round trip. Otherwise a second session
like this one opens a transaction, and this session asks for its pid again while that
transaction is open. Through a transaction-mode pooler the statement either waits for the
other client's transaction to end (the pool is exhausted), or runs on another backend than
before, or on the very backend the other client was given; a session-mode pool keeps it where
it was. A pooler that refuses BEGIN is in statement mode. When none of those signs shows, the
last test decides: this session LISTENs and the other one notifies it; through a
transaction-mode pooler the LISTEN ran on a server session this client no longer has, and the
notification never comes.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
import time
from typing import Any, Optional

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from . import errors as E
from ._common import drain_notifies
from ._dsn import scrub
from .types import PoolerInfo

SQL_PID = "SELECT pg_catalog.pg_backend_pid()"
PROBE_APPLICATION_NAME = "pgcoord/pooler-probe"
DEFAULT_WAIT = 2.0
"""Seconds the probe waits for a queued statement, and for the notification."""


def conninfo_of(conn: Any) -> str:
    """A conninfo string opening a session like conn's (its password included: never print it)."""
    opts = {o.keyword.decode(): o.val.decode() for o in conn.pgconn.info if o.val is not None}
    return make_conninfo(**opts)


def _first_line(e: BaseException, dsn: Optional[str]) -> str:
    text = str(e).strip()
    return scrub(text.splitlines()[0] if text else type(e).__name__, dsn)


def _start(conn: Any, thorough: bool) -> tuple[bool, int]:
    """Refuses a busy session; (in a transaction, the pid the connection was told)."""
    st = conn.info.transaction_status
    if conn.closed or st in (TransactionStatus.ACTIVE, TransactionStatus.INERROR, TransactionStatus.UNKNOWN):
        raise E.UsageError("the pooler probe: the session is busy, or closed, or its transaction failed")
    return st == TransactionStatus.INTRANS, int(conn.info.backend_pid)


def _direct(pid: int) -> PoolerInfo:
    return PoolerInfo("none", f"direct session: libpq's backend pid ({pid}) is the server's", pid, pid)


def _in_tx(libpq_pid: int, pid1: int) -> PoolerInfo:
    # Inside a transaction every statement stays on one server session, whatever the pooler.
    return PoolerInfo(
        "unknown",
        f"something is in between (libpq was told pid {libpq_pid}, the server says {pid1}), and inside a"
        " transaction its kind cannot be tested",
        libpq_pid,
        pid1,
    )


def _signs(libpq_pid: int, pid1: int, pid2: int, other_pid: int, queued: bool) -> Optional[PoolerInfo]:
    why = None
    if queued:
        why = (f"a statement outside any transaction waited until another client's transaction ended"
               f" (pid {pid1}, then {pid2})")  # fmt: skip
    elif pid2 != pid1:
        why = f"the backend pid changed between two statements outside a transaction ({pid1}, then {pid2})"
    elif other_pid == pid1:
        why = f"another client connection was given this connection's backend (pid {pid1})"
    return None if why is None else PoolerInfo("transaction", why, libpq_pid, pid1)


def _heard(libpq_pid: int, pid1: int, heard: bool, wait: float) -> PoolerInfo:
    if not heard:
        return PoolerInfo(
            "transaction",
            f"a notification sent to this session's LISTEN never arrived within {wait:g} s: the LISTEN ran on a"
            " server session this client does not keep",
            libpq_pid,
            pid1,
        )
    if pid1 != libpq_pid:
        return PoolerInfo(
            "session",
            f"libpq was told pid {libpq_pid}, the server says {pid1}, and the session keeps its backend between"
            " transactions",
            libpq_pid,
            pid1,
        )
    return PoolerInfo("none", f"direct session: the backend pid ({pid1}) stays the same between statements", libpq_pid, pid1)


def _channel(libpq_pid: int) -> str:
    return f"pgcoord_pooler_probe_{libpq_pid & 0xFFFFFFFF}_{os.getpid()}"


# ---- sync ---------------------------------------------------------------------------------


def _one(conn: "psycopg.Connection[Any]", query: Any, params: Optional[list[Any]] = None) -> Any:
    """The first value of a statement run as a unit of its own."""
    with conn.cursor(row_factory=tuple_row) as cur:
        if conn.autocommit:
            cur.execute(query, params)
        else:
            with conn.transaction():
                cur.execute(query, params)
        row = cur.fetchone() if cur.description is not None else None
    return None if row is None else row[0]


def probe(conn: "psycopg.Connection[Any]", conninfo: Optional[str], wait: float = DEFAULT_WAIT,
          thorough: bool = False) -> tuple[PoolerInfo, bool]:  # fmt: skip
    """What is between conn and the server, and whether the answer may be kept (an answer
    found inside a transaction may not). conninfo opens the second session (None: like conn)."""
    in_tx, libpq_pid = _start(conn, thorough)
    pid1 = int(_one(conn, SQL_PID))
    if pid1 == libpq_pid and not thorough:
        return _direct(pid1), True
    if in_tx:
        return _in_tx(libpq_pid, pid1), False
    info = conninfo if conninfo is not None else conninfo_of(conn)
    try:
        other = psycopg.connect(info, autocommit=True, application_name=PROBE_APPLICATION_NAME,
                                prepare_threshold=None)  # fmt: skip
    except psycopg.Error as e:
        return PoolerInfo("unknown", f"no second session to test with: {_first_line(e, conninfo)}", libpq_pid, pid1), True
    try:
        return _with_second(conn, other, libpq_pid, pid1, wait, conninfo), True
    finally:
        other.close()


def _with_second(conn: "psycopg.Connection[Any]", other: "psycopg.Connection[Any]", libpq_pid: int, pid1: int,
                 wait: float, dsn: Optional[str]) -> PoolerInfo:  # fmt: skip
    try:
        other.execute("BEGIN")
        other_pid = int(_one(other, SQL_PID))
    except psycopg.Error as e:
        if "BEGIN" in str(e) or other.info.transaction_status != TransactionStatus.INTRANS:
            return PoolerInfo("statement", f"BEGIN was refused: {_first_line(e, dsn)}", libpq_pid, pid1)
        return PoolerInfo("unknown", f"the second session failed: {_first_line(e, dsn)}", libpq_pid, pid1)
    # A direct session answers at once; one that waits is queued behind the other client's
    # server connection.
    got: list[Any] = []

    def ask() -> None:
        try:
            got.append(int(_one(conn, SQL_PID)))
        except BaseException as e:
            got.append(e)

    t = threading.Thread(target=ask, name="pgcoord-pooler-probe", daemon=True)
    t.start()
    t.join(wait)
    queued = t.is_alive()
    try:
        other.execute("COMMIT")
    except psycopg.Error:
        pass
    t.join(10 + wait)
    if t.is_alive():
        try:
            conn.cancel()
        except Exception:
            pass
        t.join(5)
        raise E.RetryLaterError(f"the server (or a pooler) did not answer SELECT pg_backend_pid() within {10 + wait:g} s")
    if isinstance(got[0], BaseException):
        raise got[0]
    found = _signs(libpq_pid, pid1, got[0], other_pid, queued)
    if found is not None:
        return found
    return _heard(libpq_pid, pid1, _notify_reaches(conn, other, libpq_pid, wait), wait)


def _notify_reaches(conn: "psycopg.Connection[Any]", other: "psycopg.Connection[Any]", libpq_pid: int,
                    wait: float) -> bool:  # fmt: skip
    channel = _channel(libpq_pid)
    heard = [False]

    def note(n: psycopg.Notify) -> None:
        heard[0] = heard[0] or n.channel == channel

    conn.add_notify_handler(note)
    try:
        _one(conn, sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        try:
            other.execute("SELECT pg_catalog.pg_notify(%s, '')", [channel])
            end = time.monotonic() + wait
            while not heard[0] and (left := end - time.monotonic()) > 0:
                if select.select([conn.fileno()], [], [], left)[0]:
                    with conn.lock:
                        got = drain_notifies(conn.pgconn)
                    heard[0] = heard[0] or any(ch == channel for ch, _ in got)
        finally:
            # Whatever came, stop listening; a notification that arrives later is dropped.
            _one(conn, sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))
    finally:
        conn.remove_notify_handler(note)
    return heard[0]


# ---- asyncio ------------------------------------------------------------------------------


async def _aone(conn: "psycopg.AsyncConnection[Any]", query: Any, params: Optional[list[Any]] = None) -> Any:
    async with conn.cursor(row_factory=tuple_row) as cur:
        if conn.autocommit:
            await cur.execute(query, params)
        else:
            async with conn.transaction():
                await cur.execute(query, params)
        row = await cur.fetchone() if cur.description is not None else None
    return None if row is None else row[0]


async def aprobe(conn: "psycopg.AsyncConnection[Any]", conninfo: Optional[str], wait: float = DEFAULT_WAIT,
                 thorough: bool = False) -> tuple[PoolerInfo, bool]:  # fmt: skip
    """:func:`probe` on an asyncio connection."""
    in_tx, libpq_pid = _start(conn, thorough)
    pid1 = int(await _aone(conn, SQL_PID))
    if pid1 == libpq_pid and not thorough:
        return _direct(pid1), True
    if in_tx:
        return _in_tx(libpq_pid, pid1), False
    info = conninfo if conninfo is not None else conninfo_of(conn)
    try:
        other = await psycopg.AsyncConnection.connect(info, autocommit=True, application_name=PROBE_APPLICATION_NAME,
                                                      prepare_threshold=None)  # fmt: skip
    except psycopg.Error as e:
        return PoolerInfo("unknown", f"no second session to test with: {_first_line(e, conninfo)}", libpq_pid, pid1), True
    try:
        return await _awith_second(conn, other, libpq_pid, pid1, wait, conninfo), True
    finally:
        await other.close()


async def _awith_second(conn: "psycopg.AsyncConnection[Any]", other: "psycopg.AsyncConnection[Any]", libpq_pid: int,
                        pid1: int, wait: float, dsn: Optional[str]) -> PoolerInfo:  # fmt: skip
    try:
        await other.execute("BEGIN")
        other_pid = int(await _aone(other, SQL_PID))
    except psycopg.Error as e:
        if "BEGIN" in str(e) or other.info.transaction_status != TransactionStatus.INTRANS:
            return PoolerInfo("statement", f"BEGIN was refused: {_first_line(e, dsn)}", libpq_pid, pid1)
        return PoolerInfo("unknown", f"the second session failed: {_first_line(e, dsn)}", libpq_pid, pid1)
    task = asyncio.create_task(_aone(conn, SQL_PID))
    done, _ = await asyncio.wait({task}, timeout=wait)
    queued = not done
    try:
        await other.execute("COMMIT")
    except psycopg.Error:
        pass
    try:
        pid2 = int(await asyncio.wait_for(task, 10 + wait))
    except asyncio.TimeoutError:
        raise E.RetryLaterError(
            f"the server (or a pooler) did not answer SELECT pg_backend_pid() within {10 + wait:g} s"
        ) from None
    found = _signs(libpq_pid, pid1, pid2, other_pid, queued)
    if found is not None:
        return found
    return _heard(libpq_pid, pid1, await _anotify_reaches(conn, other, libpq_pid, wait), wait)


async def _anotify_reaches(conn: "psycopg.AsyncConnection[Any]", other: "psycopg.AsyncConnection[Any]",
                           libpq_pid: int, wait: float) -> bool:  # fmt: skip
    channel = _channel(libpq_pid)
    heard = asyncio.Event()
    loop = asyncio.get_running_loop()

    def note(n: psycopg.Notify) -> None:
        if n.channel == channel:
            heard.set()

    def readable() -> None:
        try:
            if any(ch == channel for ch, _ in drain_notifies(conn.pgconn)):
                heard.set()
        except psycopg.Error:
            heard.set()  # the UNLISTEN says what became of the session

    conn.add_notify_handler(note)
    try:
        await _aone(conn, sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        try:
            await other.execute("SELECT pg_catalog.pg_notify(%s, '')", [channel])
            fd = conn.pgconn.socket
            loop.add_reader(fd, readable)
            try:
                await asyncio.wait_for(heard.wait(), wait)
            except asyncio.TimeoutError:
                pass
            finally:
                loop.remove_reader(fd)
        finally:
            await _aone(conn, sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))
    finally:
        conn.remove_notify_handler(note)
    return heard.is_set()


# ---- what the clients refuse behind a pooler ----------------------------------------------


def session_lock_refusal(p: PoolerInfo) -> Optional[E.ConfigError]:
    """The error a session lock gets where its session is not kept (None: it may be taken);
    the C library's refusals, word for word where they can be."""
    if p.mode == "statement":
        return E.ConfigError(
            f"a statement-mode pooler is in between ({p.why}): no advisory lock can be kept through it;"
            " connect straight to PostgreSQL, or through a pool in session or transaction mode"
        )
    if p.mode == "transaction":
        return E.ConfigError(
            f"a transaction-mode pooler is in between ({p.why}): a session lock would be taken on a server"
            " session this client does not keep, and could neither be trusted nor released; connect straight"
            " to PostgreSQL or through a pool in session mode, or hold the lock in a transaction"
            " (client.xact_lock(conn, name) inside conn.transaction())"
        )
    if p.mode == "unknown":
        return E.ConfigError(
            f"cannot tell whether the pooler in between keeps this session ({p.why}): call client.pooler()"
            " outside a transaction first, or hold the lock in a transaction (client.xact_lock)"
        )
    return None


def pooler_what(p: PoolerInfo) -> str:
    """What is in between, for a message: "a transaction-mode pooler is in between (why)"."""
    if p.mode == "unknown":
        return f"cannot tell whether the pooler in between keeps this session ({p.why})"
    return f"a {p.mode}-mode pooler is in between ({p.why})"
