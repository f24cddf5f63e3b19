"""The synchronous client: :class:`Client`, its :class:`Lock` and :class:`Lease` handles."""

from __future__ import annotations

import datetime as dt
import os
import select
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, TypeVar, Union

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.rows import tuple_row

from . import _beat
from . import errors as E
from ._common import (
    DEFAULT_APPLICATION_NAME,
    DEFAULT_SCHEMA,
    PROTOCOL_VERSION,
    RETRY_TX,
    SQL_GRANTED,
    SQL_ISOLATION,
    SQL_RESTORE_TIMEOUTS,
    SQL_SAVE_TIMEOUTS,
    SQL_SET_TIMEOUTS,
    SQL_TRY,
    SQL_UNLOCK,
    SQL_WAIT,
    SQL_XACT_TRY,
    SQL_XACT_WAIT,
    WAIT_BACKSTOP,
    KeyLike,
    Statements,
    backoff,
    check_schema,
    check_state,
    enqueue_params,
    from_psycopg,
    granted_params,
    in_transaction,
    is_lost,
    lease_info,
    lock_key,
    ttl_ms,
    DEFAULT_BACKOFF,
    drain_notifies,
    end_outcome,
    flow_params,
    id_tokens,
    job_result_of,
    job_status_of,
    jobs_of,
    ms,
    queue_error,
    reap_of,
    renewal_of,
    result_text,
    version_error,
    wait_ms,
)
from ._dsn import mask_dsn
from ._key import name_bytes
from ._pooler import DEFAULT_WAIT, probe, session_lock_refusal
from .types import Job, JobResult, JobStatus, LeaseInfo, PoolerInfo, ReapResult, Renewal
from .diag import BlockingForest, LockHolder, forest_of, forest_sql, holders_of, holders_sql

RESULT_RECHECK = 1.0
"""Seconds between two looks at a job while waiting for its result without a notification."""
RESULT_POLL_FIRST = 0.01
"""Behind a pooler that drops LISTEN, the first pause of the adaptive poll for a result
(doubling up to RESULT_RECHECK)."""

__all__ = ["Client", "Lock", "Lease"]

T = TypeVar("T")
Conn = psycopg.Connection[Any]
Source = Union[str, "psycopg.Connection[Any]", "psycopg_pool.ConnectionPool"]


def default_holder() -> str:
    """A holder name unique to this process and call: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _fetch(conn: Conn, query: Any, params: Optional[Sequence[Any]] = None) -> list[tuple[Any, ...]]:
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query, params)
        return cur.fetchall()


class Client:
    """A pgcoord client on a psycopg connection, a psycopg_pool pool, or a DSN.

    ``source`` is one of:

    - a DSN (URI or key=value): the client keeps a pool of its own (``pool_size``
      connections, autocommit, ``application_name`` ``pgcoord-python`` unless the DSN names
      one), closed by :meth:`close`;
    - a :class:`psycopg_pool.ConnectionPool`: every call borrows a connection; a lock keeps
      the one it was taken on until it is released;
    - a :class:`psycopg.Connection`: every call runs on it (locks stack on its session).

    The schema's ``protocol_version()`` is checked once, at :meth:`open` or the first call;
    a schema that speaks another version is refused with :class:`SchemaError`. Use it as a
    context manager to open and close it::

        with pgcoord.Client("postgresql://app@db/app") as client:
            with client.lock("nightly-report", wait=5):
                ...

    ``heartbeat`` is the period, in seconds, of a held lock's heartbeat and
    ``heartbeat_timeout`` the bound on its answer: a lock whose session ends is marked lost
    within about ``heartbeat + heartbeat_timeout``.
    """

    protocol_version = PROTOCOL_VERSION

    def __init__(
        self,
        source: Source,
        *,
        schema: str = DEFAULT_SCHEMA,
        application_name: str = DEFAULT_APPLICATION_NAME,
        pool_size: int = 10,
        pool_timeout: float = 30.0,
        heartbeat: float = 1.0,
        heartbeat_timeout: float = 5.0,
    ) -> None:
        self._stmts = Statements(check_schema(schema))
        self.schema = schema
        self.application_name = application_name
        self._dsn: Optional[str] = None
        self._conn: Optional[Conn] = None
        self._pool: Optional[psycopg_pool.ConnectionPool] = None
        self._own_pool = False
        if isinstance(source, str):
            self._dsn = source
        elif isinstance(source, psycopg.Connection):
            self._conn = source
        elif isinstance(source, psycopg_pool.ConnectionPool):
            self._pool = source
        else:
            raise E.UsageError(
                "Client takes a DSN, a psycopg.Connection or a psycopg_pool.ConnectionPool,"
                f" not {type(source).__name__} (use AsyncClient for asyncio objects)"
            )
        if pool_size < 1:
            raise E.UsageError(f"pool_size must be at least 1, not {pool_size}")
        self._pool_size = pool_size
        self._pool_timeout = pool_timeout
        self.heartbeat = heartbeat
        self.heartbeat_timeout = heartbeat_timeout
        self._mu = threading.Lock()
        self._conn_mu = threading.RLock()
        self._checked = False
        self._closed = False
        self._held: dict[int, dict[tuple[int, bool], int]] = {}
        self._rchan: Optional[str] = None
        self._pooler: Optional[PoolerInfo] = None

    def __repr__(self) -> str:
        if self._dsn is not None:
            src = repr(mask_dsn(self._dsn))
        elif self._conn is not None:
            src = "connection"
        else:
            src = "pool"
        return f"<pgcoord.Client {src} schema={self.schema!r}>"

    # ---- opening and closing ------------------------------------------------------------

    def open(self) -> "Client":
        """Connect (for a DSN) and check the schema's protocol version; returns the client."""
        self._ensure()
        return self

    def close(self) -> None:
        """Close the pool the client made for a DSN; a connection or pool given is left open."""
        self._closed = True
        if self._own_pool and self._pool is not None:
            self._pool.close()

    def __enter__(self) -> "Client":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure(self) -> None:
        if self._checked:
            return
        with self._mu:
            if self._checked:
                return
            if self._closed:
                raise E.UsageError("the client is closed")
            if self._dsn is not None and self._pool is None:
                kw: dict[str, Any] = {"autocommit": True, "fallback_application_name": self.application_name}
                try:
                    conn = psycopg.connect(self._dsn, autocommit=True, fallback_application_name=self.application_name)
                except psycopg.Error as e:
                    raise from_psycopg(e, f"connecting to {mask_dsn(self._dsn)}", self._dsn) from None
                try:
                    self._check_version(conn)
                    self._probe(conn, self._dsn)
                finally:
                    conn.close()
                if self._pooler is not None and self._pooler.no_prepare:
                    kw["prepare_threshold"] = None
                self._pool = psycopg_pool.ConnectionPool(
                    self._dsn, min_size=1, max_size=self._pool_size, kwargs=kw, open=True, name="pgcoord"
                )
                self._own_pool = True
            elif self._conn is not None:
                with self._conn_mu:
                    self._check_version(self._conn)
                    self._probe(self._conn, None)
            else:
                assert self._pool is not None
                with self._pool_conn() as conn:
                    self._check_version(conn)
                    self._probe(conn, None)
            self._checked = True

    def _check_version(self, conn: Conn) -> None:
        try:
            rows = self._run(conn, lambda: _fetch(conn, self._stmts.protocol_version))
        except psycopg.Error as e:
            if e.sqlstate in ("42883", "3F000"):
                raise version_error(self.schema, e, None) from None
            raise from_psycopg(e, "checking the protocol version", self._dsn, conn) from None
        got = rows[0][0]
        if got != PROTOCOL_VERSION:
            raise version_error(self.schema, None, got)

    # ---- the pooler in between ----------------------------------------------------------

    def _probe(self, conn: Conn, conninfo: Optional[str], thorough: bool = False, wait: float = DEFAULT_WAIT) -> PoolerInfo:
        """What is between conn and the server, kept for the client's life (an answer found
        inside a transaction is not kept); a pooler that moves sessions turns prepared
        statements off on conn."""
        if self._pooler is not None and not thorough:
            return self._pooler
        try:
            p, keep = probe(conn, conninfo if conninfo is not None else self._dsn, wait, thorough)
        except psycopg.Error as e:
            raise from_psycopg(e, "testing for a pooler in between", self._dsn, conn) from e
        if keep:
            self._pooler = p
        if p.no_prepare:
            conn.prepare_threshold = None
        return p

    def pooler(self, *, thorough: bool = False, wait: float = DEFAULT_WAIT) -> PoolerInfo:
        """What is between the client and PostgreSQL: a :class:`PoolerInfo` whose ``mode`` is
        ``none``, ``session``, ``transaction``, ``statement`` or ``unknown``, and ``why``. Found
        once (at :meth:`open`) and kept; ``thorough`` tests again, all the way (a second session
        and, when nothing else shows, a LISTEN/NOTIFY), waiting up to ``wait`` seconds."""
        self._ensure()
        if self._pooler is not None and not thorough:
            return self._pooler
        ms(wait, "wait", 100)
        with self._borrow() as conn:
            return self._probe(conn, None, thorough, wait)

    def _unprepared(self, conn: Conn) -> Conn:
        if self._pooler is not None and self._pooler.no_prepare:
            conn.prepare_threshold = None
        return conn

    # ---- connections --------------------------------------------------------------------

    @contextmanager
    def _pool_conn(self) -> Iterator[Conn]:
        assert self._pool is not None
        try:
            conn = self._unprepared(self._pool.getconn(timeout=self._pool_timeout))
        except psycopg_pool.PoolTimeout:
            raise E.RetryLaterError(f"no connection from the pool within {self._pool_timeout} s") from None
        try:
            yield conn
        finally:
            self._pool.putconn(conn)

    @contextmanager
    def _borrow(self) -> Iterator[Conn]:
        self._ensure()
        if self._conn is not None:
            with self._conn_mu:
                yield self._conn
        else:
            with self._pool_conn() as conn:
                yield conn

    @staticmethod
    def _run(conn: Conn, fn: Callable[[], T]) -> T:
        """Run fn as a unit of its own on a borrowed connection."""
        if conn.autocommit and not in_transaction(conn):
            return fn()
        with conn.transaction():
            return fn()

    def _call(self, what: str, fn: Callable[[Conn], T]) -> T:
        with self._borrow() as conn:
            check_state(conn, what)
            try:
                return self._run(conn, lambda: fn(conn))
            except psycopg.Error as e:
                raise from_psycopg(e, what, self._dsn, conn) from e

    # ---- session locks ------------------------------------------------------------------

    def _held_count(self, conn: Conn, k: int, shared: bool) -> int:
        with self._mu:
            return self._held.get(id(conn), {}).get((k, shared), 0)

    def _held_add(self, conn: Conn, k: int, shared: bool, n: int) -> None:
        with self._mu:
            t = self._held.setdefault(id(conn), {})
            t[(k, shared)] = t.get((k, shared), 0) + n
            if t[(k, shared)] <= 0:
                del t[(k, shared)]
            if not t:
                del self._held[id(conn)]

    def _held_forget(self, conn: Conn) -> None:
        with self._mu:
            self._held.pop(id(conn), None)

    def _granted_now(self, conn: Conn, k: int, shared: bool) -> bool:
        return bool(self._run(conn, lambda: _fetch(conn, SQL_GRANTED, granted_params(k, shared)))[0][0])

    def _pin(self) -> tuple[Conn, bool]:
        self._ensure()
        if self._conn is not None:
            return self._conn, False
        assert self._pool is not None
        try:
            return self._unprepared(self._pool.getconn(timeout=self._pool_timeout)), True
        except psycopg_pool.PoolTimeout:
            raise E.RetryLaterError(f"no connection from the pool within {self._pool_timeout} s") from None

    def _unpin(self, conn: Conn, pooled: bool, clean: bool) -> None:
        """Give a pinned connection back. Unless clean, a pooled one drops every advisory lock
        first (it was ours alone), or is closed: a lock never goes back to the pool."""
        if not pooled:
            return
        self._held_forget(conn)
        if not clean and not is_lost(conn):
            try:
                if in_transaction(conn) or conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    conn.rollback()
                self._run(conn, lambda: _fetch(conn, "SELECT pg_advisory_unlock_all()"))
            except BaseException:
                conn.close()
        assert self._pool is not None
        self._pool.putconn(conn)

    def _acquire(self, conn: Conn, k: int, shared: bool, ms: Optional[int], desc: str) -> bool:
        check_state(conn, f"lock {desc}")
        if ms == 0:
            try:
                return bool(self._run(conn, lambda: _fetch(conn, SQL_TRY[shared], [k]))[0][0])
            except psycopg.Error as e:
                raise from_psycopg(e, f"trying lock {desc}", self._dsn, conn) from e
        in_tx = in_transaction(conn)
        before = self._held_count(conn, k, shared)
        timer = None
        if ms is not None:
            timer = threading.Timer(ms / 1000 + WAIT_BACKSTOP, _cancel, [conn])
            timer.daemon = True
        try:
            # In a transaction of its own (or a savepoint of the caller's): statement_timeout
            # off and lock_timeout the deadline for this one statement, then as they were.
            with conn.transaction():
                saved = _fetch(conn, SQL_SAVE_TIMEOUTS)[0] if in_tx else None
                _fetch(conn, SQL_SET_TIMEOUTS, [f"{ms or 0}ms"])
                if timer is not None:
                    timer.start()
                _fetch(conn, SQL_WAIT[shared], [k])
                if saved is not None:
                    _fetch(conn, SQL_RESTORE_TIMEOUTS, saved)
            return True
        except psycopg.Error as e:
            if is_lost(conn):
                raise E.LostError(
                    f"waiting for lock {desc}: the session ended: {str(e).strip()}", sqlstate=e.sqlstate
                ) from e
            # The server can grant the lock in the same instant as the timeout or the cancel:
            # the lock then survives the error. Timed out means nothing held.
            if before == 0 and self._granted_now(conn, k, shared):
                return True
            if e.sqlstate in ("55P03", "57014"):
                raise E.LockTimeoutError(
                    f"timed out after {ms} ms waiting for lock {desc}", sqlstate=e.sqlstate
                ) from None
            raise from_psycopg(e, f"waiting for lock {desc}", self._dsn, conn) from e
        finally:
            if timer is not None:
                timer.cancel()

    def _lock(self, name: KeyLike, wait: Optional[float], shared: bool, try_only: bool) -> Optional["Lock"]:
        k, desc = lock_key(name)
        ms = 0 if try_only else wait_ms(wait)
        conn, pooled = self._pin()
        got = False
        try:
            with _guard(self._conn_mu, not pooled):
                # Session locks are never taken where the session is not kept.
                refused = session_lock_refusal(self._probe(conn, None))
                if refused is not None:
                    raise refused
                got = self._acquire(conn, k, shared, ms, desc)
                if got:
                    self._held_add(conn, k, shared, 1)
        finally:
            if not got:
                self._unpin(conn, pooled, clean=False)
        if not got:
            if try_only:
                return None
            raise E.LockBusyError(f"lock {desc} is held by another session")
        return Lock(self, conn, pooled, name, k, shared, desc)

    def lock(self, name: KeyLike, *, wait: Optional[float] = None, shared: bool = False) -> "Lock":
        """Take the session advisory lock ``name`` (a str, hashed by :func:`pgcoord.key`, or a
        bigint key) and return its handle, to use in ``with`` or :meth:`Lock.release`.

        ``wait`` is the deadline in seconds: ``None`` waits without one, ``0`` tries once
        (:class:`LockBusyError` when held), any other value waits at most that long
        (:class:`LockTimeoutError`). The role's ``statement_timeout`` and ``lock_timeout``
        neither cut the wait short nor stretch it. The lock is taken on one connection,
        pinned for its life and released on it; ``shared`` takes the shared mode.
        """
        lk = self._lock(name, wait, shared, False)
        assert lk is not None
        return lk

    def try_lock(self, name: KeyLike, *, shared: bool = False) -> Optional["Lock"]:
        """Take the lock if it is free at once: its handle, or ``None`` when someone holds it."""
        return self._lock(name, 0, shared, True)

    # ---- transaction locks --------------------------------------------------------------

    def _xact(self, conn: Conn, name: KeyLike, ms: Optional[int], shared: bool) -> bool:
        k, desc = lock_key(name)
        check_state(conn, f"transaction lock {desc}")
        if not in_transaction(conn):
            raise E.UsageError(
                f"transaction lock {desc}: no transaction is open on the connection, so the lock would"
                " end as soon as it is taken; open one (with conn.transaction():) or take a session"
                " lock with client.lock()"
            )
        try:
            if ms == 0:
                return bool(_fetch(conn, SQL_XACT_TRY[shared], [k])[0][0])
            timer = None
            if ms is not None:
                timer = threading.Timer(ms / 1000 + WAIT_BACKSTOP, _cancel, [conn])
                timer.daemon = True
            try:
                with conn.transaction():
                    saved = _fetch(conn, SQL_SAVE_TIMEOUTS)[0]
                    _fetch(conn, SQL_SET_TIMEOUTS, [f"{ms or 0}ms"])
                    if timer is not None:
                        timer.start()
                    _fetch(conn, SQL_XACT_WAIT[shared], [k])
                    _fetch(conn, SQL_RESTORE_TIMEOUTS, saved)
            finally:
                if timer is not None:
                    timer.cancel()
            return True
        except psycopg.Error as e:
            if not is_lost(conn) and e.sqlstate in ("55P03", "57014"):
                raise E.LockTimeoutError(
                    f"timed out after {ms} ms waiting for transaction lock {desc}", sqlstate=e.sqlstate
                ) from None
            raise from_psycopg(e, f"transaction lock {desc}", self._dsn, conn) from e

    def xact_lock(self, conn: Conn, name: KeyLike, *, wait: Optional[float] = None, shared: bool = False) -> None:
        """Take a transaction-scoped advisory lock in the transaction open on ``conn``.

        It ends with the transaction (commit or rollback); there is no unlock. Refused with
        :class:`UsageError` when no transaction is open. ``wait`` as for :meth:`lock`; the
        wait runs under a savepoint, so a timeout leaves the transaction usable.
        """
        if not self._xact(conn, name, wait_ms(wait), shared):
            raise E.LockBusyError(f"transaction lock {lock_key(name)[1]} is held by another session")

    def try_xact_lock(self, conn: Conn, name: KeyLike, *, shared: bool = False) -> bool:
        """Take a transaction-scoped lock if it is free at once; whether it was taken."""
        return self._xact(conn, name, 0, shared)

    # ---- the transaction runner ---------------------------------------------------------

    def transaction(
        self,
        fn: Callable[[Conn], T],
        *,
        attempts: int = 10,
        isolation: Optional[str] = None,
        backoff_base: float = 0.01,
        backoff_cap: float = 1.0,
    ) -> T:
        """Run ``fn(conn)`` in a transaction and commit; run it all again on 40001 or 40P01.

        Between attempts it sleeps a jittered, capped exponential backoff; after ``attempts``
        failures it raises :class:`RetryExhaustedError`. Any other error is raised at once, as
        it came (an exception of ``fn`` is never retried). When the session dies after COMMIT
        was sent, :class:`CommitUnknownError`: the transaction may or may not have committed.
        ``isolation`` is ``"serializable"``, ``"repeatable read"`` or ``"read committed"``.
        ``fn`` may run several times: keep its side effects in the transaction.
        """
        if attempts < 1:
            raise E.UsageError(f"attempts must be at least 1, not {attempts}")
        iso = None
        if isolation is not None:
            iso = SQL_ISOLATION.get(isolation.lower())
            if iso is None:
                raise E.UsageError(f"isolation must be one of {', '.join(SQL_ISOLATION)}, not {isolation!r}")
        with self._borrow() as conn:
            check_state(conn, "transaction")
            if in_transaction(conn):
                raise E.UsageError(
                    "transaction(): a transaction is already open on the connection; the runner must"
                    " own the whole transaction to run it again"
                )
            last: Optional[psycopg.Error] = None
            for attempt in range(attempts):
                committing = False
                try:
                    with conn.transaction():
                        if iso is not None:
                            conn.execute(iso)
                        result = fn(conn)
                        committing = True
                    return result
                except psycopg.Error as e:
                    if is_lost(conn):
                        if committing:
                            raise E.CommitUnknownError(
                                "the session ended after COMMIT was sent: the transaction may or may not"
                                f" have committed ({str(e).strip()})",
                                sqlstate=e.sqlstate,
                            ) from e
                        raise from_psycopg(e, "transaction", self._dsn, conn) from e
                    if e.sqlstate not in RETRY_TX:
                        raise
                    last = e
                if attempt + 1 < attempts:
                    time.sleep(backoff(attempt, backoff_base, backoff_cap))
            assert last is not None
            err = E.RetryExhaustedError(
                f"transaction failed {attempts} times in a row: {str(last).strip()}", sqlstate=last.sqlstate
            )
            err.attempts = attempts
            raise err from last

    # ---- leases and fencing -------------------------------------------------------------

    def _lease_acquire(self, name: str, holder: str, ms: int) -> tuple[LeaseInfo, float]:
        t0 = time.monotonic()
        info = self._call(
            f'acquiring lease "{name}"',
            lambda c: lease_info(name, _fetch(c, self._stmts.lease_acquire, [name, holder, ms, 1000])[0], True),
        )
        return info, t0

    def _lease(self, name: str, ttl: float, holder: Optional[str], wait: Optional[float], try_only: bool) -> Optional["Lease"]:
        name_bytes("lease name", name, 200)
        holder = holder if holder is not None else default_holder()
        ms = ttl_ms(ttl)
        wms = 0 if try_only else wait_ms(wait)
        deadline = None if wms is None else time.monotonic() + wms / 1000
        while True:
            try:
                info, t0 = self._lease_acquire(name, holder, ms)
            except E.RetryLaterError as e:
                if wms == 0 or e.sqlstate != "55P03":
                    raise
                info, t0 = None, time.monotonic()
            if info is not None and info.granted:
                return Lease(self, info, ttl, t0)
            left = float("inf") if deadline is None else deadline - time.monotonic()
            if wms == 0:
                if try_only:
                    return None
                assert info is not None
                err = E.LeaseHeldError(
                    f'lease "{name}" is held by {info.holder} (token {info.token}) for {info.remaining:.1f} s more'
                )
                err.holder, err.token = info.holder, info.token
                raise err
            if left <= 0:
                raise E.LockTimeoutError(f'timed out after {wait} s waiting for lease "{name}"')
            pause = min(max(info.remaining if info else 0.05, 0.05), 1.0, left)
            time.sleep(pause)

    def lease(self, name: str, *, ttl: float = 30.0, holder: Optional[str] = None, wait: Optional[float] = None) -> "Lease":
        """Acquire the lease ``name`` for ``ttl`` seconds and keep it renewed: a leader election.

        ``wait``: ``None`` campaigns until granted, ``0`` tries once (:class:`LeaseHeldError`),
        a number waits at most that long (:class:`LockTimeoutError`). The handle renews every
        third of the TTL and sets :attr:`Lease.lost` when a renewal says it is no longer held
        or none succeeds before it runs out. Pass :attr:`Lease.token` to the writes it
        protects and check it there with :meth:`fence_check`. ``holder`` names this candidate
        (default: host, pid and a random suffix).
        """
        ls = self._lease(name, ttl, holder, wait, False)
        assert ls is not None
        return ls

    def try_lease(self, name: str, *, ttl: float = 30.0, holder: Optional[str] = None) -> Optional["Lease"]:
        """Acquire the lease if it is free now: its handle, or ``None`` when another holds it."""
        return self._lease(name, ttl, holder, 0, True)

    def lease_acquire(self, name: str, *, ttl: float, holder: Optional[str] = None) -> LeaseInfo:
        """One attempt to take the lease, with no handle and no renewal: the call :meth:`lease`
        is built on, for a caller that renews on its own schedule (or in another process).

        ``info.granted`` says whether it was granted; ``info.token`` is then the fencing token,
        else the current holder's. Unrenewed, the lease runs out after ``ttl`` seconds.
        """
        name_bytes("lease name", name, 200)
        info, _ = self._lease_acquire(name, holder if holder is not None else default_holder(), ttl_ms(ttl))
        return info

    def lease_renew(self, name: str, token: int, *, ttl: float) -> LeaseInfo:
        """One renewal of the lease granted with ``token``, for ``ttl`` seconds from now.

        ``info.status`` is ``ok`` (renewed) or says why not: ``expired``, ``released``,
        ``superseded`` (a newer token was granted) or ``unknown``. A stale token is an answer,
        not an exception: the caller stops what the lease protected.
        """
        ms = ttl_ms(ttl)
        return self._call(
            f'renewing lease "{name}"',
            lambda c: lease_info(name, _fetch(c, self._stmts.lease_renew, [name, token, ms])[0], False),
        )

    def lease_release(self, name: str, token: int) -> str:
        """Release the lease granted with ``token`` so a candidate can take it at once; the
        server's status: ``ok``, ``released`` (already), ``superseded`` or ``unknown``."""
        return self._call(
            f'releasing lease "{name}"', lambda c: str(_fetch(c, self._stmts.lease_release, [name, token])[0][0])
        )

    def fence_check(self, conn: Conn, name: str, token: int) -> int:
        """Check, in the writer's transaction on ``conn``, that ``token`` is the newest for ``name``.

        Holds the lease's row until that transaction ends, so no newer token can be granted
        before it commits. Raises :class:`FencedError` for a stale token (roll back and stop),
        :class:`NotFoundError` for one never granted, :class:`UsageError` outside a transaction.
        """
        if conn.autocommit and not in_transaction(conn):
            raise E.UsageError(
                "fence_check: no transaction is open on the connection; call it in the transaction"
                " that writes what the token protects"
            )
        check_state(conn, "fence_check")
        try:
            return int(_fetch(conn, self._stmts.fence_check, [name, token])[0][0])
        except psycopg.Error as e:
            raise from_psycopg(e, f'fence_check of "{name}" token {token}', self._dsn, conn) from e

    def fence_next(self, name: str, holder: Optional[str] = None) -> int:
        """A fencing token for ``name`` held by other means (an advisory lock): the same counter
        as the leases. :class:`LeaseHeldError` while a lease on the name is held."""
        holder = holder if holder is not None else default_holder()
        return self._call(
            f'fence_next of "{name}"', lambda c: int(_fetch(c, self._stmts.fence_next, [name, holder, 1000])[0][0])
        )

    # ---- enqueue ------------------------------------------------------------------------

    def enqueue_many(
        self,
        queue: str,
        payloads: Iterable[Any],
        *,
        unique_keys: Optional[Sequence[Optional[str]]] = None,
        priority: Optional[int] = None,
        run_at: Union[dt.datetime, dt.timedelta, None] = None,
        max_attempts: Optional[int] = None,
        max_deferrals: Optional[int] = None,
        key: Optional[str] = None,
        after: Optional[Iterable[int]] = None,
        run_anyway: Optional[bool] = None,
        group: Optional[str] = None,
        conn: Optional[Conn] = None,
    ) -> list[Optional[int]]:
        """Enqueue one job per payload (any JSON-serializable value), all or nothing.

        Returns the job ids in order; an id is ``None`` where the job's unique key was taken by
        a pending or running job of the queue. With ``conn`` the jobs are enqueued in the
        transaction open on it and exist only if it commits; without, in a transaction of
        their own. Options (``None`` keeps the server's default): ``unique_keys`` one per
        payload, ``priority`` (-32768..32767, higher first), ``run_at`` an aware datetime or a
        timedelta from now, ``max_attempts``, ``max_deferrals``, ``key`` the concurrency key,
        ``after`` job ids to wait for, ``run_anyway`` whether to run when one of them fails,
        ``group`` an open job group to join.
        """
        params = enqueue_params(
            queue, payloads, unique_keys, priority, run_at, max_attempts, max_deferrals, key, after, run_anyway, group
        )
        what = f'enqueue into "{queue}"'

        def go(c: Conn) -> list[Optional[int]]:
            return [r[0] for r in _fetch(c, self._stmts.enqueue, params)]

        if conn is None:
            return self._call(what, go)
        check_state(conn, what)
        try:
            return go(conn)
        except psycopg.Error as e:
            raise from_psycopg(e, what, self._dsn, conn) from e

    def enqueue(
        self,
        queue: str,
        payload: Any,
        *,
        unique_key: Optional[str] = None,
        priority: Optional[int] = None,
        run_at: Union[dt.datetime, dt.timedelta, None] = None,
        max_attempts: Optional[int] = None,
        max_deferrals: Optional[int] = None,
        key: Optional[str] = None,
        after: Optional[Iterable[int]] = None,
        run_anyway: Optional[bool] = None,
        group: Optional[str] = None,
        conn: Optional[Conn] = None,
    ) -> Optional[int]:
        """Enqueue one job; its id, or ``None`` when ``unique_key`` is taken. Options as for
        :meth:`enqueue_many`; with ``conn``, in the caller's transaction."""
        return self.enqueue_many(
            queue,
            [payload],
            unique_keys=None if unique_key is None else [unique_key],
            priority=priority,
            run_at=run_at,
            max_attempts=max_attempts,
            max_deferrals=max_deferrals,
            key=key,
            after=after,
            run_anyway=run_anyway,
            group=group,
            conn=conn,
        )[0]

    # ---- the queue: claims and their ends ------------------------------------------------

    def _qcall(self, what: str, stmt: Any, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._call_q(what, lambda c: _fetch(c, stmt, params))

    def claim(self, queue: str, *, max: int = 1, lease: float = 30.0, worker: Optional[str] = None) -> list[Job]:
        """Claim up to ``max`` runnable jobs of ``queue``, each with a fresh claim token and a
        lease of ``lease`` seconds on the server's clock (renew it every third: :meth:`renew`).

        One call for every queue: the server's ``claim`` hands a flow queue (concurrency keys,
        rates, fair shares) to ``claim_flow`` itself. An empty list is an empty queue. Run it
        outside a transaction (the protocol's "autocommit"). ``worker`` is recorded on the jobs.
        """
        rows = self._qcall(f'claim from "{queue}"', self._stmts.claim, [queue, max, ms(lease, "lease", 1), worker])
        return jobs_of(queue, rows)

    def complete_many(
        self, ids: Sequence[int], tokens: Sequence[int], results: Optional[Sequence[Any]] = None
    ) -> list[int]:
        """Complete the running jobs ``(ids[i], tokens[i])`` in one call, with ``results[i]``
        (any JSON-serializable value, ``None`` for none) stored as each one's result. Returns
        the ids completed: a pair whose token is stale is left out, its outcome not recorded."""
        a, b = id_tokens(ids, tokens)
        texts = [result_text(r) for r in results] if results is not None else [None] * len(a)
        if len(texts) != len(a):
            raise E.UsageError(f"{len(a)} ids but {len(texts)} results")
        rows = self._qcall(f"complete {len(a)} job(s)", self._stmts.complete, [a, b, texts])
        return [int(r[0]) for r in rows]

    def complete(self, id: int, token: int, *, result: Any = None) -> None:
        """Complete the running job ``id`` under its claim ``token``; ``result`` (any
        JSON-serializable value of at most 64 kB, ``None`` for none) is stored as its result,
        read by :meth:`job_result`. :class:`StaleError` when the token is no longer the job's
        (its lease ran out, or it was cancelled); :class:`UsageError` for a result too big."""
        if not self.complete_many([id], [token], [result]):
            raise E.StaleError(f"complete job {id}: token {token} is no longer the job's (its lease ran out, or it was cancelled)")

    def fail(
        self,
        id: int,
        token: int,
        error: str,
        *,
        retry_in: Optional[float] = None,
        backoff: tuple[float, float] = DEFAULT_BACKOFF,
    ) -> str:
        """Record a failed attempt of the running job ``id`` with its ``error`` text. With
        attempts left it runs again after ``retry_in`` seconds, or after the protocol's
        backoff ``min(base * 2**(attempt-1), cap)`` with jitter (``backoff``: base and cap in
        seconds); without, it fails for good. Returns ``"retried"`` or ``"dead"``;
        :class:`StaleError` when the token is no longer the job's."""
        params = [id, token, error, ms(backoff[0], "backoff base"), ms(backoff[1], "backoff cap"),
                  None if retry_in is None else ms(retry_in, "retry_in")]  # fmt: skip
        rows = self._qcall(f"fail job {id}", self._stmts.fail, params)
        return end_outcome(rows[0], id, token, "fail")

    def retry_later(self, id: int, token: int, delay: float) -> str:
        """Defer the running job ``id`` for ``delay`` seconds without spending an attempt (a
        rate limit, a resource not ready); past its ``max_deferrals`` it fails for good instead.
        Returns ``"retried"`` or ``"dead"``; :class:`StaleError` when the token is stale."""
        rows = self._qcall(f"retry_later job {id}", self._stmts.retry_later, [id, token, ms(delay, "delay")])
        return end_outcome(rows[0], id, token, "retry_later")

    def release(self, ids: Sequence[int], tokens: Sequence[int], *, started: bool = True) -> int:
        """Give the running jobs ``(ids[i], tokens[i])`` back to pending at once, their attempt
        given back (``started``: their handlers had begun). Returns how many were released;
        stale pairs are ignored."""
        a, b = id_tokens(ids, tokens)
        rows = self._qcall(f"release {len(a)} job(s)", self._stmts.release, [a, b, started])
        return int(rows[0][0])

    def renew(self, ids: Sequence[int], tokens: Sequence[int], *, lease: float = 30.0) -> Renewal:
        """Extend the leases of the running jobs ``(ids[i], tokens[i])`` to ``lease`` seconds
        from now, in one call: every third of the lease (the protocol's rule 1). The answer
        says which are ``held``, ``lost`` (no longer this claim's) and, among the lost, which
        were ``cancelled``: stop their handlers' side effects."""
        a, b = id_tokens(ids, tokens)
        if not a:
            return Renewal([], [], [])
        rows = self._qcall(f"renew {len(a)} lease(s)", self._stmts.renew, [a, b, ms(lease, "lease", 1)])
        return renewal_of(a, rows)

    # ---- the queue: administration and looks ---------------------------------------------

    def cancel(self, id: int) -> bool:
        """Cancel a live job (waiting, scheduled, pending or running); returns whether it was
        running (its worker learns at its next renewal). :class:`FinishedError` when it has
        finished already, :class:`NotFoundError` when there is no such job."""
        rows = self._qcall(f"cancel job {id}", self._stmts.cancel, [id])
        return bool(rows[0][0])

    def reap(self) -> ReapResult:
        """One pass of the reaper: expired leases back to pending (or failed for good), aging,
        the history's retention. :class:`ConflictError` (SQLSTATE 55P03) while another pass
        runs. A worker runs it every second or so by itself."""
        return reap_of(self._qcall("reap", self._stmts.reap, [])[0])

    def job(self, id: int) -> JobStatus:
        """Where job ``id`` is now: its status, attempts and last error
        (:class:`NotFoundError` when there is none, or it left the history)."""
        return job_status_of(id, self._qcall(f"look at job {id}", self._stmts.job, [id, id]))

    def flow_set(
        self,
        queue: str,
        *,
        key_limit: Optional[int] = None,
        rate: Optional[tuple[int, float]] = None,
        key_rate: Optional[tuple[int, float]] = None,
        fair: Optional[bool] = None,
    ) -> int:
        """Make ``queue`` a flow queue and change its settings; ``None`` keeps a setting, 0 (or a
        rate of ``(0, 0)``) removes it: ``key_limit`` jobs of one concurrency key at once,
        ``rate`` ``(n, seconds)`` starts of the queue, ``key_rate`` of each key, ``fair`` keys
        taking turns. Returns the number of keys whose limit changed."""
        rows = self._qcall(f'flow settings of "{queue}"', self._stmts.flow_set, flow_params(queue, key_limit, rate, key_rate, fair))
        return int(rows[0][0])

    def key_set(
        self,
        queue: str,
        key: str,
        *,
        limit: Optional[int] = None,
        weight: Optional[int] = None,
        rate: Optional[tuple[int, float]] = None,
    ) -> None:
        """A concurrency key's own settings in a flow queue; ``None`` keeps one, 0 removes it
        (the queue's applies): ``limit`` running at once, ``weight`` its fair share, ``rate``
        ``(n, seconds)`` starts."""
        p = flow_params(queue, limit, rate, None, None)
        self._qcall(f'settings of key "{key}" in "{queue}"', self._stmts.key_set,
                    [queue, key, p[1], -1 if weight is None else weight, p[2], p[3]])  # fmt: skip

    def _call_q(self, what: str, fn: Callable[[Conn], T]) -> T:
        with self._borrow() as conn:
            check_state(conn, what)
            try:
                return self._run(conn, lambda: fn(conn))
            except psycopg.Error as e:
                raise queue_error(e, what, self._dsn, conn) from e

    def _result_channel(self) -> str:
        if self._rchan is None:
            self._rchan = str(self._qcall("read the queue channel", self._stmts.queue_channel, [])[0][0]) + ".result"
        return self._rchan

    def job_result(self, id: int, *, wait: Optional[float] = None) -> JobResult:
        """Job ``id``'s status and the result its handler gave (``None``: none, always for a
        failed or cancelled job). With ``wait`` (seconds), wait up to that long for it to
        finish: ``LISTEN`` on the result channel, and a look every second as well (a job that
        fails, or completes without a result, notifies nobody); the answer is then the last
        look, ``finished`` false when the deadline passed first. :class:`NotFoundError` when
        there is no such job. Not inside a transaction (its LISTEN would wait for the commit).
        Behind a transaction- or statement-mode pooler, which drops ``LISTEN``, it polls
        instead: every 10 ms, doubling up to a second."""
        what = f"job_result of job {id}"
        if not wait:
            return job_result_of(id, self._qcall(what, self._stmts.job_result, [id])[0])
        ms(wait, "wait")
        deadline = time.monotonic() + wait
        self._ensure()
        if self._pooler is not None and not self._pooler.session_kept:
            return self._poll_result(id, what, deadline)
        chan = self._result_channel()
        with self._borrow() as conn:
            check_state(conn, what)
            if in_transaction(conn):
                raise E.UsageError(f"{what}: waiting needs a connection outside a transaction (its LISTEN would wait for the commit)")
            heard = [False]
            key = str(id)

            def note(n: psycopg.Notify) -> None:
                heard[0] = heard[0] or (n.channel == chan and n.payload == key)

            conn.add_notify_handler(note)
            try:
                self._run(conn, lambda: conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(chan))))
                while True:
                    heard[0] = False
                    r = job_result_of(id, self._run(conn, lambda: _fetch(conn, self._stmts.job_result, [id]))[0])
                    if r.finished or time.monotonic() >= deadline:
                        return r
                    end = min(deadline, time.monotonic() + RESULT_RECHECK)
                    while not heard[0] and (left := end - time.monotonic()) > 0:
                        if select.select([conn.fileno()], [], [], left)[0]:
                            with conn.lock:
                                got = drain_notifies(conn.pgconn)
                            heard[0] = heard[0] or (chan, key) in got
            except psycopg.Error as e:
                raise queue_error(e, what, self._dsn, conn) from e
            finally:
                conn.remove_notify_handler(note)
                if not is_lost(conn):
                    try:
                        self._run(conn, lambda: conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(chan))))
                    except psycopg.Error:
                        pass

    def _poll_result(self, id: int, what: str, deadline: float) -> JobResult:
        """job_result's wait without LISTEN: a look every 10 ms, doubling up to RESULT_RECHECK."""
        pause = RESULT_POLL_FIRST
        while True:
            r = job_result_of(id, self._qcall(what, self._stmts.job_result, [id])[0])
            left = deadline - time.monotonic()
            if r.finished or left <= 0:
                return r
            time.sleep(min(pause, left))
            pause = min(RESULT_RECHECK, pause * 2)

    # ---- diagnostics --------------------------------------------------------------------

    def blocking_forest(self) -> BlockingForest:
        """Who waits for whom now (the protocol's ``blocking_forest()``, what ``pgcoord
        blockers --json`` shows): a :class:`pgcoord.diag.BlockingForest` of the sessions that
        wait for a lock or block one, roots first; its ``roots``, ``children(pid)`` and
        ``trees()`` read it without another query. The connection that asks is left out:
        on a client made on one connection, that connection's own locks are not shown."""
        return forest_of(self._call("reading the blocking forest", lambda c: _fetch(c, forest_sql(self.schema))))

    def lock_holders(self, name: KeyLike) -> list[LockHolder]:
        """Who holds or waits for the advisory lock ``name`` (a str, hashed by
        :func:`pgcoord.key` as :meth:`lock` does, or a bigint key): holders first, then
        waiters in the order they began waiting, as :class:`pgcoord.diag.LockHolder`."""
        k, desc = lock_key(name)
        return holders_of(self._call(f"reading the holders of lock {desc}", lambda c: _fetch(c, holders_sql(self.schema), [k])))


@contextmanager
def _guard(mu: "threading.RLock", use: bool) -> Iterator[None]:
    """Hold mu when use is true (a client on one connection serializes its sequences)."""
    if use:
        with mu:
            yield
    else:
        yield


def _cancel(conn: Conn) -> None:
    try:
        conn.cancel()
    except Exception:
        pass


class Lock:
    """A held session advisory lock, pinned to one connection until released.

    Use it as a context manager (released on every exit path) or call :meth:`release`.
    :attr:`lost` is set by the heartbeat within about ``heartbeat + heartbeat_timeout`` of
    the session's end; the next use (:attr:`conn`, :meth:`check`, :meth:`release`, the end of
    the ``with`` block) then raises :class:`LostError`.
    """

    def __init__(self, client: Client, conn: Conn, pooled: bool, name: KeyLike, key: int, shared: bool, desc: str) -> None:
        self.name = name
        """The name (or bigint key) the lock was taken with."""
        self.key = key
        """The advisory key: ``pg_advisory_lock(key)``."""
        self.shared = shared
        """Whether the lock is held in the shared mode."""
        self.lost = threading.Event()
        """Set when the lock's session is known gone (the server released the lock)."""
        self.lost_reason: Optional[str] = None
        """Why the lock was lost, once :attr:`lost` is set."""
        self._client = client
        self._conn = conn
        self._pooled = pooled
        self._desc = desc
        self._released = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._heartbeat, name=f"pgcoord-lock-{key}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        return f"<pgcoord.Lock {self._desc} {state}>"

    def _mark_lost(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._client.heartbeat):
            r = _beat.beat(self._conn, self._client.heartbeat_timeout)
            if r == _beat.LOST:
                self._mark_lost("its session ended")
                return
            if r == _beat.SILENT:
                self._mark_lost(f"a heartbeat went unanswered for {self._client.heartbeat_timeout} s")
                self._conn.close()
                return

    def check(self) -> None:
        """Raise :class:`LostError` if the lock was lost, :class:`UsageError` if released."""
        if self._released:
            raise E.UsageError(f"lock {self._desc} was released")
        if not self.lost.is_set() and is_lost(self._conn):
            self._mark_lost("its session ended")
        if self.lost.is_set():
            raise E.LostError(f"lock {self._desc} was lost: {self.lost_reason}")

    @property
    def conn(self) -> Conn:
        """The pinned connection holding the lock, to run work on its session (checked first)."""
        self.check()
        return self._conn

    @property
    def held(self) -> bool:
        """Whether the lock is held as far as the client knows (not released, not lost)."""
        return not self._released and not self.lost.is_set()

    def release(self) -> None:
        """Unlock on the same session and give the connection back; idempotent.

        Raises :class:`LostError` when the lock had been lost (what it protected ran
        unprotected for a while), :class:`NotHeldError` when the server says the session did
        not hold it.
        """
        if self._released:
            return
        self._released = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        conn, client, clean = self._conn, self._client, False
        try:
            if not self.lost.is_set() and is_lost(conn):
                self._mark_lost("its session ended")
            if self.lost.is_set():
                client._held_forget(conn)
                raise E.LostError(f"lock {self._desc} was lost: {self.lost_reason}")
            with _guard(client._conn_mu, not self._pooled):
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    conn.rollback()
                try:
                    ok = bool(client._run(conn, lambda: _fetch(conn, SQL_UNLOCK[self.shared], [self.key]))[0][0])
                except psycopg.Error as e:
                    if is_lost(conn):
                        self._mark_lost("its session ended")
                        raise E.LostError(f"lock {self._desc} was lost: its session ended") from e
                    raise from_psycopg(e, f"releasing lock {self._desc}", client._dsn, conn) from e
                client._held_add(conn, self.key, self.shared, -1)
                if not ok:
                    raise E.NotHeldError(
                        f"the server says this session does not hold lock {self._desc} (released behind the client's back?)"
                    )
                clean = True
        finally:
            client._unpin(conn, self._pooled, clean)

    def __enter__(self) -> "Lock":
        return self

    def __exit__(
        self, et: Optional[type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        try:
            self.release()
        except E.PgcoordError:
            if et is None:
                raise


class Lease:
    """A held lease, renewed every third of its TTL until released.

    :attr:`token` is the fencing token to pass to the writes it protects. :attr:`lost` is
    set when a renewal says the lease is no longer held, or none succeeded before it ran out
    by the database clock; :meth:`check`, :meth:`release` and the end of a ``with`` block
    then raise :class:`LostError`.
    """

    def __init__(self, client: Client, info: LeaseInfo, ttl: float, t0: float) -> None:
        self.name = info.name
        """The lease's name."""
        self.holder = info.holder
        """This holder's name."""
        self.token = info.token
        """The fencing token of this grant."""
        self.ttl = ttl
        """The TTL in seconds, renewed every third of it."""
        self.info = info
        """The last answer of the server (the grant, then each renewal)."""
        self.lost = threading.Event()
        """Set when the lease is known or presumed no longer held."""
        self.lost_reason: Optional[str] = None
        """Why the lease was lost, once :attr:`lost` is set."""
        self._client = client
        self._ms = ttl_ms(ttl)
        self._released = False
        self._stop = threading.Event()
        self._mu = threading.Lock()
        self._expiry: Optional[threading.Timer] = None
        self._arm(t0 + info.remaining)
        self._thread = threading.Thread(target=self._renew_loop, name=f"pgcoord-lease-{self.name}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        return f"<pgcoord.Lease {self.name!r} token={self.token} {state}>"

    def _mark_lost(self, reason: str) -> None:
        with self._mu:
            if not self.lost.is_set():
                self.lost_reason = reason
                self.lost.set()

    def _arm(self, deadline: float) -> None:
        """(Re)start the timer that declares the lease lost when it runs out unrenewed."""
        with self._mu:
            if self._expiry is not None:
                self._expiry.cancel()
            self._deadline = deadline
            t = threading.Timer(
                max(0.0, deadline - time.monotonic()), self._mark_lost, ["no renewal succeeded before it ran out"]
            )
            t.daemon = True
            self._expiry = t
            t.start()

    def _renew_loop(self) -> None:
        interval = self.ttl / 3
        pause = interval
        while not self._stop.wait(pause):
            if self.lost.is_set():
                return
            t0 = time.monotonic()
            try:
                info = self._client._call(
                    f'renewing lease "{self.name}"',
                    lambda c: lease_info(
                        self.name, _fetch(c, self._client._stmts.lease_renew, [self.name, self.token, self._ms])[0], False
                    ),
                )
            except E.PgcoordError:
                # Try again soon; the expiry timer says lost if none succeeds in time.
                pause = min(interval, max(0.05, self.ttl / 10))
                continue
            if info.status != "ok":
                self._mark_lost(f"a renewal found it {info.status}")
                return
            self.info = info
            self._arm(t0 + info.remaining)
            pause = interval

    def check(self) -> None:
        """Raise :class:`LostError` if the lease was lost, :class:`UsageError` if released."""
        if self._released:
            raise E.UsageError(f'lease "{self.name}" was released')
        if self.lost.is_set():
            raise E.LostError(f'lease "{self.name}" (token {self.token}) was lost: {self.lost_reason}')

    @property
    def held(self) -> bool:
        """Whether the lease is held as far as the client knows."""
        return not self._released and not self.lost.is_set()

    def fence_check(self, conn: Conn) -> int:
        """:meth:`Client.fence_check` of this lease's token in the transaction open on ``conn``."""
        return self._client.fence_check(conn, self.name, self.token)

    def release(self) -> None:
        """Stop renewing and release the lease so a candidate can take it at once; idempotent.
        Raises :class:`LostError` when it had been lost meanwhile."""
        if self._released:
            return
        self._released = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._mu:
            if self._expiry is not None:
                self._expiry.cancel()
        if self.lost.is_set():
            raise E.LostError(f'lease "{self.name}" (token {self.token}) was lost: {self.lost_reason}')
        status = self._client._call(
            f'releasing lease "{self.name}"',
            lambda c: str(_fetch(c, self._client._stmts.lease_release, [self.name, self.token])[0][0]),
        )
        if status in ("superseded", "unknown"):
            self._mark_lost(f"the release found it {status}")
            raise E.LostError(f'lease "{self.name}" (token {self.token}) was lost: the release found it {status}')

    def __enter__(self) -> "Lease":
        return self

    def __exit__(
        self, et: Optional[type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        try:
            self.release()
        except E.PgcoordError:
            if et is None:
                raise
