"""The asyncio client: :class:`AsyncClient`, its :class:`AsyncLock` and :class:`AsyncLease`.

The same names and semantics as the sync client (:mod:`pgcoord.client`), on
``psycopg.AsyncConnection`` and ``psycopg_pool.AsyncConnectionPool``; heartbeats and
renewals are tasks of the running loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Generator, Generic, Iterable, Optional, Sequence, TypeVar, Union

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
from ._pooler import DEFAULT_WAIT, aprobe, session_lock_refusal
from .client import RESULT_POLL_FIRST, default_holder
from .types import Job, JobResult, JobStatus, LeaseInfo, PoolerInfo, ReapResult, Renewal
from .diag import BlockingForest, LockHolder, forest_of, forest_sql, holders_of, holders_sql

RESULT_RECHECK = 1.0
"""Seconds between two looks at a job while waiting for its result without a notification."""

__all__ = ["AsyncClient", "AsyncLock", "AsyncLease", "Acquiring"]

T = TypeVar("T")
AConn = psycopg.AsyncConnection[Any]
ASource = Union[str, "psycopg.AsyncConnection[Any]", "psycopg_pool.AsyncConnectionPool"]


async def _fetch(conn: AConn, query: Any, params: Optional[Sequence[Any]] = None) -> list[tuple[Any, ...]]:
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


@asynccontextmanager
async def _guard(mu: asyncio.Lock, use: bool) -> AsyncIterator[None]:
    """Hold mu when use is true (a client on one connection serializes its sequences)."""
    if use:
        async with mu:
            yield
    else:
        yield


class AsyncClient:
    """The asyncio twin of :class:`pgcoord.Client`, on psycopg's asyncio objects.

    ``source`` is a DSN (the client keeps an ``AsyncConnectionPool`` of its own), a
    ``psycopg_pool.AsyncConnectionPool``, or a ``psycopg.AsyncConnection``. Open it with
    ``async with`` (or ``await client.open()``), which checks the schema's protocol
    version once::

        async with pgcoord.AsyncClient(dsn) as client:
            async with client.lease("leader", ttl=30) as lease:
                ...
    """

    protocol_version = PROTOCOL_VERSION

    def __init__(
        self,
        source: ASource,
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
        self._conn: Optional[AConn] = None
        self._pool: Optional[psycopg_pool.AsyncConnectionPool] = None
        self._own_pool = False
        if isinstance(source, str):
            self._dsn = source
        elif isinstance(source, psycopg.AsyncConnection):
            self._conn = source
        elif isinstance(source, psycopg_pool.AsyncConnectionPool):
            self._pool = source
        else:
            raise E.UsageError(
                "AsyncClient takes a DSN, a psycopg.AsyncConnection or a psycopg_pool.AsyncConnectionPool,"
                f" not {type(source).__name__} (use Client for sync objects)"
            )
        if pool_size < 1:
            raise E.UsageError(f"pool_size must be at least 1, not {pool_size}")
        self._pool_size = pool_size
        self._pool_timeout = pool_timeout
        self.heartbeat = heartbeat
        self.heartbeat_timeout = heartbeat_timeout
        self._mu: Optional[asyncio.Lock] = None
        self._conn_mu_: Optional[asyncio.Lock] = None
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
        return f"<pgcoord.AsyncClient {src} schema={self.schema!r}>"

    @property
    def _conn_mu(self) -> asyncio.Lock:
        if self._conn_mu_ is None:
            self._conn_mu_ = asyncio.Lock()
        return self._conn_mu_

    # ---- opening and closing ------------------------------------------------------------

    async def open(self) -> "AsyncClient":
        """Connect (for a DSN) and check the schema's protocol version; returns the client."""
        await self._ensure()
        return self

    async def close(self) -> None:
        """Close the pool the client made for a DSN; a connection or pool given is left open."""
        self._closed = True
        if self._own_pool and self._pool is not None:
            await self._pool.close()

    async def __aenter__(self) -> "AsyncClient":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _ensure(self) -> None:
        if self._checked:
            return
        if self._mu is None:
            self._mu = asyncio.Lock()
        async with self._mu:
            if self._checked:
                return
            if self._closed:
                raise E.UsageError("the client is closed")
            if self._dsn is not None and self._pool is None:
                kw: dict[str, Any] = {"autocommit": True, "fallback_application_name": self.application_name}
                try:
                    conn = await psycopg.AsyncConnection.connect(
                        self._dsn, autocommit=True, fallback_application_name=self.application_name
                    )
                except psycopg.Error as e:
                    raise from_psycopg(e, f"connecting to {mask_dsn(self._dsn)}", self._dsn) from None
                try:
                    await self._check_version(conn)
                    await self._probe(conn, self._dsn)
                finally:
                    await conn.close()
                if self._pooler is not None and self._pooler.no_prepare:
                    kw["prepare_threshold"] = None
                pool = psycopg_pool.AsyncConnectionPool(
                    self._dsn, min_size=1, max_size=self._pool_size, kwargs=kw, open=False, name="pgcoord"
                )
                await pool.open()
                self._pool = pool
                self._own_pool = True
            elif self._conn is not None:
                async with self._conn_mu:
                    await self._check_version(self._conn)
                    await self._probe(self._conn, None)
            else:
                async with self._pool_conn() as conn:
                    await self._check_version(conn)
                    await self._probe(conn, None)
            self._checked = True

    async def _check_version(self, conn: AConn) -> None:
        try:
            rows = await self._run(conn, lambda: _fetch(conn, self._stmts.protocol_version))
        except psycopg.Error as e:
            if e.sqlstate in ("42883", "3F000"):
                raise version_error(self.schema, e, None) from None
            raise from_psycopg(e, "checking the protocol version", self._dsn, conn) from None
        got = rows[0][0]
        if got != PROTOCOL_VERSION:
            raise version_error(self.schema, None, got)

    # ---- the pooler in between ----------------------------------------------------------

    async def _probe(self, conn: AConn, conninfo: Optional[str], thorough: bool = False,
                     wait: float = DEFAULT_WAIT) -> PoolerInfo:  # fmt: skip
        """See :meth:`pgcoord.Client._probe`."""
        if self._pooler is not None and not thorough:
            return self._pooler
        try:
            p, keep = await aprobe(conn, conninfo if conninfo is not None else self._dsn, wait, thorough)
        except psycopg.Error as e:
            raise from_psycopg(e, "testing for a pooler in between", self._dsn, conn) from e
        if keep:
            self._pooler = p
        if p.no_prepare:
            conn.prepare_threshold = None
        return p

    async def pooler(self, *, thorough: bool = False, wait: float = DEFAULT_WAIT) -> PoolerInfo:
        """What is between the client and PostgreSQL; see :meth:`pgcoord.Client.pooler`."""
        await self._ensure()
        if self._pooler is not None and not thorough:
            return self._pooler
        ms(wait, "wait", 100)
        async with self._borrow() as conn:
            return await self._probe(conn, None, thorough, wait)

    def _unprepared(self, conn: AConn) -> AConn:
        if self._pooler is not None and self._pooler.no_prepare:
            conn.prepare_threshold = None
        return conn

    # ---- connections --------------------------------------------------------------------

    @asynccontextmanager
    async def _pool_conn(self) -> AsyncIterator[AConn]:
        assert self._pool is not None
        try:
            conn = self._unprepared(await self._pool.getconn(timeout=self._pool_timeout))
        except psycopg_pool.PoolTimeout:
            raise E.RetryLaterError(f"no connection from the pool within {self._pool_timeout} s") from None
        try:
            yield conn
        finally:
            await self._pool.putconn(conn)

    @asynccontextmanager
    async def _borrow(self) -> AsyncIterator[AConn]:
        await self._ensure()
        if self._conn is not None:
            async with self._conn_mu:
                yield self._conn
        else:
            async with self._pool_conn() as conn:
                yield conn

    @staticmethod
    async def _run(conn: AConn, fn: Callable[[], Awaitable[T]]) -> T:
        if conn.autocommit and not in_transaction(conn):
            return await fn()
        async with conn.transaction():
            return await fn()

    async def _call(self, what: str, fn: Callable[[AConn], Awaitable[T]]) -> T:
        async with self._borrow() as conn:
            check_state(conn, what)
            try:
                return await self._run(conn, lambda: fn(conn))
            except psycopg.Error as e:
                raise from_psycopg(e, what, self._dsn, conn) from e

    # ---- session locks ------------------------------------------------------------------

    def _held_count(self, conn: AConn, k: int, shared: bool) -> int:
        return self._held.get(id(conn), {}).get((k, shared), 0)

    def _held_add(self, conn: AConn, k: int, shared: bool, n: int) -> None:
        t = self._held.setdefault(id(conn), {})
        t[(k, shared)] = t.get((k, shared), 0) + n
        if t[(k, shared)] <= 0:
            del t[(k, shared)]
        if not t:
            del self._held[id(conn)]

    def _held_forget(self, conn: AConn) -> None:
        self._held.pop(id(conn), None)

    async def _granted_now(self, conn: AConn, k: int, shared: bool) -> bool:
        return bool((await self._run(conn, lambda: _fetch(conn, SQL_GRANTED, granted_params(k, shared))))[0][0])

    async def _pin(self) -> tuple[AConn, bool]:
        await self._ensure()
        if self._conn is not None:
            return self._conn, False
        assert self._pool is not None
        try:
            return self._unprepared(await self._pool.getconn(timeout=self._pool_timeout)), True
        except psycopg_pool.PoolTimeout:
            raise E.RetryLaterError(f"no connection from the pool within {self._pool_timeout} s") from None

    async def _unpin(self, conn: AConn, pooled: bool, clean: bool) -> None:
        if not pooled:
            return
        self._held_forget(conn)
        if not clean and not is_lost(conn):
            try:
                if in_transaction(conn) or conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    await conn.rollback()
                await self._run(conn, lambda: _fetch(conn, "SELECT pg_advisory_unlock_all()"))
            except BaseException:
                await conn.close()
        assert self._pool is not None
        await self._pool.putconn(conn)

    async def _acquire(self, conn: AConn, k: int, shared: bool, ms: Optional[int], desc: str) -> bool:
        check_state(conn, f"lock {desc}")
        if ms == 0:
            try:
                return bool((await self._run(conn, lambda: _fetch(conn, SQL_TRY[shared], [k])))[0][0])
            except psycopg.Error as e:
                raise from_psycopg(e, f"trying lock {desc}", self._dsn, conn) from e
        in_tx = in_transaction(conn)
        before = self._held_count(conn, k, shared)
        backstop: Optional[asyncio.TimerHandle] = None
        try:
            async with conn.transaction():
                saved = (await _fetch(conn, SQL_SAVE_TIMEOUTS))[0] if in_tx else None
                await _fetch(conn, SQL_SET_TIMEOUTS, [f"{ms or 0}ms"])
                if ms is not None:
                    backstop = asyncio.get_running_loop().call_later(ms / 1000 + WAIT_BACKSTOP, _cancel, conn)
                await _fetch(conn, SQL_WAIT[shared], [k])
                if saved is not None:
                    await _fetch(conn, SQL_RESTORE_TIMEOUTS, saved)
            return True
        except psycopg.Error as e:
            if is_lost(conn):
                raise E.LostError(
                    f"waiting for lock {desc}: the session ended: {str(e).strip()}", sqlstate=e.sqlstate
                ) from e
            if before == 0 and await self._granted_now(conn, k, shared):
                return True
            if e.sqlstate in ("55P03", "57014"):
                raise E.LockTimeoutError(
                    f"timed out after {ms} ms waiting for lock {desc}", sqlstate=e.sqlstate
                ) from None
            raise from_psycopg(e, f"waiting for lock {desc}", self._dsn, conn) from e
        finally:
            if backstop is not None:
                backstop.cancel()

    async def _lock(self, name: KeyLike, wait: Optional[float], shared: bool, try_only: bool) -> Optional["AsyncLock"]:
        k, desc = lock_key(name)
        ms = 0 if try_only else wait_ms(wait)
        conn, pooled = await self._pin()
        got = False
        try:
            async with _guard(self._conn_mu, not pooled):
                # Session locks are never taken where the session is not kept.
                refused = session_lock_refusal(await self._probe(conn, None))
                if refused is not None:
                    raise refused
                got = await self._acquire(conn, k, shared, ms, desc)
                if got:
                    self._held_add(conn, k, shared, 1)
        finally:
            if not got:
                await self._unpin(conn, pooled, clean=False)
        if not got:
            if try_only:
                return None
            raise E.LockBusyError(f"lock {desc} is held by another session")
        return AsyncLock(self, conn, pooled, name, k, shared, desc)

    def lock(self, name: KeyLike, *, wait: Optional[float] = None, shared: bool = False) -> "Acquiring[AsyncLock]":
        """Take the session advisory lock ``name``; see :meth:`pgcoord.Client.lock`.

        ``async with client.lock("x", wait=5) as lock:`` takes it and releases it on every
        exit path; ``lock = await client.lock("x", wait=5)`` takes it, to release with
        ``await lock.release()``.
        """

        async def go() -> AsyncLock:
            lk = await self._lock(name, wait, shared, False)
            assert lk is not None
            return lk

        return Acquiring(go)

    async def try_lock(self, name: KeyLike, *, shared: bool = False) -> Optional["AsyncLock"]:
        """Take the lock if it is free at once: its handle, or ``None`` when someone holds it."""
        return await self._lock(name, 0, shared, True)

    # ---- transaction locks --------------------------------------------------------------

    async def _xact(self, conn: AConn, name: KeyLike, ms: Optional[int], shared: bool) -> bool:
        k, desc = lock_key(name)
        check_state(conn, f"transaction lock {desc}")
        if not in_transaction(conn):
            raise E.UsageError(
                f"transaction lock {desc}: no transaction is open on the connection, so the lock would"
                " end as soon as it is taken; open one (async with conn.transaction():) or take a"
                " session lock with client.lock()"
            )
        try:
            if ms == 0:
                return bool((await _fetch(conn, SQL_XACT_TRY[shared], [k]))[0][0])
            backstop: Optional[asyncio.TimerHandle] = None
            try:
                async with conn.transaction():
                    saved = (await _fetch(conn, SQL_SAVE_TIMEOUTS))[0]
                    await _fetch(conn, SQL_SET_TIMEOUTS, [f"{ms or 0}ms"])
                    if ms is not None:
                        backstop = asyncio.get_running_loop().call_later(ms / 1000 + WAIT_BACKSTOP, _cancel, conn)
                    await _fetch(conn, SQL_XACT_WAIT[shared], [k])
                    await _fetch(conn, SQL_RESTORE_TIMEOUTS, saved)
            finally:
                if backstop is not None:
                    backstop.cancel()
            return True
        except psycopg.Error as e:
            if not is_lost(conn) and e.sqlstate in ("55P03", "57014"):
                raise E.LockTimeoutError(
                    f"timed out after {ms} ms waiting for transaction lock {desc}", sqlstate=e.sqlstate
                ) from None
            raise from_psycopg(e, f"transaction lock {desc}", self._dsn, conn) from e

    async def xact_lock(self, conn: AConn, name: KeyLike, *, wait: Optional[float] = None, shared: bool = False) -> None:
        """Take a transaction-scoped lock in the transaction open on ``conn``; see
        :meth:`pgcoord.Client.xact_lock`. Refused outside a transaction."""
        if not await self._xact(conn, name, wait_ms(wait), shared):
            raise E.LockBusyError(f"transaction lock {lock_key(name)[1]} is held by another session")

    async def try_xact_lock(self, conn: AConn, name: KeyLike, *, shared: bool = False) -> bool:
        """Take a transaction-scoped lock if it is free at once; whether it was taken."""
        return await self._xact(conn, name, 0, shared)

    # ---- the transaction runner ---------------------------------------------------------

    async def transaction(
        self,
        fn: Callable[[AConn], Awaitable[T]],
        *,
        attempts: int = 10,
        isolation: Optional[str] = None,
        backoff_base: float = 0.01,
        backoff_cap: float = 1.0,
    ) -> T:
        """Run ``await fn(conn)`` in a transaction, retrying on 40001/40P01; see
        :meth:`pgcoord.Client.transaction`."""
        if attempts < 1:
            raise E.UsageError(f"attempts must be at least 1, not {attempts}")
        iso = None
        if isolation is not None:
            iso = SQL_ISOLATION.get(isolation.lower())
            if iso is None:
                raise E.UsageError(f"isolation must be one of {', '.join(SQL_ISOLATION)}, not {isolation!r}")
        async with self._borrow() as conn:
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
                    async with conn.transaction():
                        if iso is not None:
                            await conn.execute(iso)
                        result = await fn(conn)
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
                    await asyncio.sleep(backoff(attempt, backoff_base, backoff_cap))
            assert last is not None
            err = E.RetryExhaustedError(
                f"transaction failed {attempts} times in a row: {str(last).strip()}", sqlstate=last.sqlstate
            )
            err.attempts = attempts
            raise err from last

    # ---- leases and fencing -------------------------------------------------------------

    async def _lease(
        self, name: str, ttl: float, holder: Optional[str], wait: Optional[float], try_only: bool
    ) -> Optional["AsyncLease"]:
        name_bytes("lease name", name, 200)
        holder = holder if holder is not None else default_holder()
        ms = ttl_ms(ttl)
        wms = 0 if try_only else wait_ms(wait)
        deadline = None if wms is None else time.monotonic() + wms / 1000
        h = holder
        while True:
            t0 = time.monotonic()
            info: Optional[LeaseInfo] = None
            try:
                info = await self._call(
                    f'acquiring lease "{name}"',
                    lambda c: _lease_row(c, self._stmts.lease_acquire, name, [name, h, ms, 1000], True),
                )
            except E.RetryLaterError as e:
                if wms == 0 or e.sqlstate != "55P03":
                    raise
            if info is not None and info.granted:
                return AsyncLease(self, info, ttl, t0)
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
            await asyncio.sleep(min(max(info.remaining if info else 0.05, 0.05), 1.0, left))

    def lease(
        self, name: str, *, ttl: float = 30.0, holder: Optional[str] = None, wait: Optional[float] = None
    ) -> "Acquiring[AsyncLease]":
        """Acquire the lease ``name`` and keep it renewed; see :meth:`pgcoord.Client.lease`.

        ``async with client.lease("leader", ttl=30) as lease:`` acquires it and releases it on
        every exit path; ``lease = await client.lease(...)`` acquires it, to release with
        ``await lease.release()``.
        """

        async def go() -> AsyncLease:
            ls = await self._lease(name, ttl, holder, wait, False)
            assert ls is not None
            return ls

        return Acquiring(go)

    async def try_lease(self, name: str, *, ttl: float = 30.0, holder: Optional[str] = None) -> Optional["AsyncLease"]:
        """Acquire the lease if it is free now: its handle, or ``None`` when another holds it."""
        return await self._lease(name, ttl, holder, 0, True)

    async def lease_acquire(self, name: str, *, ttl: float, holder: Optional[str] = None) -> LeaseInfo:
        """One attempt to take the lease, with no handle and no renewal; see
        :meth:`pgcoord.Client.lease_acquire`."""
        name_bytes("lease name", name, 200)
        h = holder if holder is not None else default_holder()
        ms = ttl_ms(ttl)
        return await self._call(
            f'acquiring lease "{name}"',
            lambda c: _lease_row(c, self._stmts.lease_acquire, name, [name, h, ms, 1000], True),
        )

    async def lease_renew(self, name: str, token: int, *, ttl: float) -> LeaseInfo:
        """One renewal of the lease granted with ``token``; ``info.status`` says whether it was
        renewed; see :meth:`pgcoord.Client.lease_renew`."""
        ms = ttl_ms(ttl)
        return await self._call(
            f'renewing lease "{name}"',
            lambda c: _lease_row(c, self._stmts.lease_renew, name, [name, token, ms], False),
        )

    async def lease_release(self, name: str, token: int) -> str:
        """Release the lease granted with ``token``; the server's status; see
        :meth:`pgcoord.Client.lease_release`."""

        async def go(c: AConn) -> str:
            return str((await _fetch(c, self._stmts.lease_release, [name, token]))[0][0])

        return await self._call(f'releasing lease "{name}"', go)

    async def fence_check(self, conn: AConn, name: str, token: int) -> int:
        """Check ``token`` in the writer's transaction on ``conn``; see
        :meth:`pgcoord.Client.fence_check`."""
        if conn.autocommit and not in_transaction(conn):
            raise E.UsageError(
                "fence_check: no transaction is open on the connection; call it in the transaction"
                " that writes what the token protects"
            )
        check_state(conn, "fence_check")
        try:
            return int((await _fetch(conn, self._stmts.fence_check, [name, token]))[0][0])
        except psycopg.Error as e:
            raise from_psycopg(e, f'fence_check of "{name}" token {token}', self._dsn, conn) from e

    async def fence_next(self, name: str, holder: Optional[str] = None) -> int:
        """A fencing token for a name held by other means; see :meth:`pgcoord.Client.fence_next`."""
        h = holder if holder is not None else default_holder()

        async def go(c: AConn) -> int:
            return int((await _fetch(c, self._stmts.fence_next, [name, h, 1000]))[0][0])

        return await self._call(f'fence_next of "{name}"', go)

    # ---- enqueue ------------------------------------------------------------------------

    async def enqueue_many(
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
        conn: Optional[AConn] = None,
    ) -> list[Optional[int]]:
        """Enqueue one job per payload, all or nothing; see :meth:`pgcoord.Client.enqueue_many`."""
        params = enqueue_params(
            queue, payloads, unique_keys, priority, run_at, max_attempts, max_deferrals, key, after, run_anyway, group
        )
        what = f'enqueue into "{queue}"'

        async def go(c: AConn) -> list[Optional[int]]:
            return [r[0] for r in await _fetch(c, self._stmts.enqueue, params)]

        if conn is None:
            return await self._call(what, go)
        check_state(conn, what)
        try:
            return await go(conn)
        except psycopg.Error as e:
            raise from_psycopg(e, what, self._dsn, conn) from e

    async def enqueue(
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
        conn: Optional[AConn] = None,
    ) -> Optional[int]:
        """Enqueue one job; see :meth:`pgcoord.Client.enqueue`."""
        ids = await self.enqueue_many(
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
        )
        return ids[0]

    # ---- the queue: claims and their ends ------------------------------------------------

    async def _qcall(self, what: str, stmt: Any, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return await self._call_q(what, lambda c: _fetch(c, stmt, params))

    async def claim(self, queue: str, *, max: int = 1, lease: float = 30.0, worker: Optional[str] = None) -> list[Job]:
        """Claim up to ``max`` runnable jobs of ``queue``, each with a fresh claim token and a
        lease of ``lease`` seconds on the server's clock (renew it every third: :meth:`renew`).

        One call for every queue: the server's ``claim`` hands a flow queue (concurrency keys,
        rates, fair shares) to ``claim_flow`` itself. An empty list is an empty queue. Run it
        outside a transaction (the protocol's "autocommit"). ``worker`` is recorded on the jobs.
        """
        rows = await self._qcall(f'claim from "{queue}"', self._stmts.claim, [queue, max, ms(lease, "lease", 1), worker])
        return jobs_of(queue, rows)

    async def complete_many(
        self, ids: Sequence[int], tokens: Sequence[int], results: Optional[Sequence[Any]] = None
    ) -> list[int]:
        """Complete the running jobs ``(ids[i], tokens[i])`` in one call, with ``results[i]``
        (any JSON-serializable value, ``None`` for none) stored as each one's result. Returns
        the ids completed: a pair whose token is stale is left out, its outcome not recorded."""
        a, b = id_tokens(ids, tokens)
        texts = [result_text(r) for r in results] if results is not None else [None] * len(a)
        if len(texts) != len(a):
            raise E.UsageError(f"{len(a)} ids but {len(texts)} results")
        rows = await self._qcall(f"complete {len(a)} job(s)", self._stmts.complete, [a, b, texts])
        return [int(r[0]) for r in rows]

    async def complete(self, id: int, token: int, *, result: Any = None) -> None:
        """Complete the running job ``id`` under its claim ``token``; ``result`` (any
        JSON-serializable value of at most 64 kB, ``None`` for none) is stored as its result,
        read by :meth:`job_result`. :class:`StaleError` when the token is no longer the job's
        (its lease ran out, or it was cancelled); :class:`UsageError` for a result too big."""
        if not await self.complete_many([id], [token], [result]):
            raise E.StaleError(f"complete job {id}: token {token} is no longer the job's (its lease ran out, or it was cancelled)")

    async def fail(
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
        rows = await self._qcall(f"fail job {id}", self._stmts.fail, params)
        return end_outcome(rows[0], id, token, "fail")

    async def retry_later(self, id: int, token: int, delay: float) -> str:
        """Defer the running job ``id`` for ``delay`` seconds without spending an attempt (a
        rate limit, a resource not ready); past its ``max_deferrals`` it fails for good instead.
        Returns ``"retried"`` or ``"dead"``; :class:`StaleError` when the token is stale."""
        rows = await self._qcall(f"retry_later job {id}", self._stmts.retry_later, [id, token, ms(delay, "delay")])
        return end_outcome(rows[0], id, token, "retry_later")

    async def release(self, ids: Sequence[int], tokens: Sequence[int], *, started: bool = True) -> int:
        """Give the running jobs ``(ids[i], tokens[i])`` back to pending at once, their attempt
        given back (``started``: their handlers had begun). Returns how many were released;
        stale pairs are ignored."""
        a, b = id_tokens(ids, tokens)
        rows = await self._qcall(f"release {len(a)} job(s)", self._stmts.release, [a, b, started])
        return int(rows[0][0])

    async def renew(self, ids: Sequence[int], tokens: Sequence[int], *, lease: float = 30.0) -> Renewal:
        """Extend the leases of the running jobs ``(ids[i], tokens[i])`` to ``lease`` seconds
        from now, in one call: every third of the lease (the protocol's rule 1). The answer
        says which are ``held``, ``lost`` (no longer this claim's) and, among the lost, which
        were ``cancelled``: stop their handlers' side effects."""
        a, b = id_tokens(ids, tokens)
        if not a:
            return Renewal([], [], [])
        rows = await self._qcall(f"renew {len(a)} lease(s)", self._stmts.renew, [a, b, ms(lease, "lease", 1)])
        return renewal_of(a, rows)

    # ---- the queue: administration and looks ---------------------------------------------

    async def cancel(self, id: int) -> bool:
        """Cancel a live job (waiting, scheduled, pending or running); returns whether it was
        running (its worker learns at its next renewal). :class:`FinishedError` when it has
        finished already, :class:`NotFoundError` when there is no such job."""
        rows = await self._qcall(f"cancel job {id}", self._stmts.cancel, [id])
        return bool(rows[0][0])

    async def reap(self) -> ReapResult:
        """One pass of the reaper: expired leases back to pending (or failed for good), aging,
        the history's retention. :class:`ConflictError` (SQLSTATE 55P03) while another pass
        runs. A worker runs it every second or so by itself."""
        return reap_of((await self._qcall("reap", self._stmts.reap, []))[0])

    async def job(self, id: int) -> JobStatus:
        """Where job ``id`` is now: its status, attempts and last error
        (:class:`NotFoundError` when there is none, or it left the history)."""
        return job_status_of(id, await self._qcall(f"look at job {id}", self._stmts.job, [id, id]))

    async def flow_set(
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
        rows = await self._qcall(f'flow settings of "{queue}"', self._stmts.flow_set, flow_params(queue, key_limit, rate, key_rate, fair))
        return int(rows[0][0])

    async def key_set(
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
        await self._qcall(f'settings of key "{key}" in "{queue}"', self._stmts.key_set,
                    [queue, key, p[1], -1 if weight is None else weight, p[2], p[3]])  # fmt: skip

    async def _call_q(self, what: str, fn: Callable[[AConn], Awaitable[T]]) -> T:
        async with self._borrow() as conn:
            check_state(conn, what)
            try:
                return await self._run(conn, lambda: fn(conn))
            except psycopg.Error as e:
                raise queue_error(e, what, self._dsn, conn) from e

    async def _result_channel(self) -> str:
        if self._rchan is None:
            rows = await self._qcall("read the queue channel", self._stmts.queue_channel, [])
            self._rchan = str(rows[0][0]) + ".result"
        return self._rchan

    async def job_result(self, id: int, *, wait: Optional[float] = None) -> JobResult:
        """Job ``id``'s status and result, waiting up to ``wait`` seconds for it to finish;
        see :meth:`pgcoord.Client.job_result`."""
        what = f"job_result of job {id}"
        if not wait:
            return job_result_of(id, (await self._qcall(what, self._stmts.job_result, [id]))[0])
        ms(wait, "wait")
        deadline = time.monotonic() + wait
        await self._ensure()
        if self._pooler is not None and not self._pooler.session_kept:
            # Behind a pooler that drops LISTEN: a look every 10 ms, doubling up to a second.
            pause = RESULT_POLL_FIRST
            while True:
                r = job_result_of(id, (await self._qcall(what, self._stmts.job_result, [id]))[0])
                left = deadline - time.monotonic()
                if r.finished or left <= 0:
                    return r
                await asyncio.sleep(min(pause, left))
                pause = min(RESULT_RECHECK, pause * 2)
        chan = await self._result_channel()
        loop = asyncio.get_running_loop()
        async with self._borrow() as conn:
            check_state(conn, what)
            if in_transaction(conn):
                raise E.UsageError(f"{what}: waiting needs a connection outside a transaction (its LISTEN would wait for the commit)")
            key = str(id)
            heard = asyncio.Event()

            def note(n: psycopg.Notify) -> None:
                if n.channel == chan and n.payload == key:
                    heard.set()

            def readable() -> None:
                try:
                    if (chan, key) in drain_notifies(conn.pgconn):
                        heard.set()
                except psycopg.Error:
                    heard.set()  # the next statement says what became of the session

            conn.add_notify_handler(note)
            try:
                await self._run(conn, lambda: conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(chan))))
                while True:
                    heard.clear()
                    rows = await self._run(conn, lambda: _fetch(conn, self._stmts.job_result, [id]))
                    r = job_result_of(id, rows[0])
                    if r.finished or time.monotonic() >= deadline:
                        return r
                    end = min(deadline, time.monotonic() + RESULT_RECHECK)
                    fd = conn.pgconn.socket
                    loop.add_reader(fd, readable)
                    try:
                        await asyncio.wait_for(heard.wait(), max(0.0, end - time.monotonic()))
                    except asyncio.TimeoutError:
                        pass
                    finally:
                        loop.remove_reader(fd)
            except psycopg.Error as e:
                raise queue_error(e, what, self._dsn, conn) from e
            finally:
                conn.remove_notify_handler(note)
                if not is_lost(conn):
                    try:
                        await self._run(conn, lambda: conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(chan))))
                    except psycopg.Error:
                        pass

    # ---- diagnostics --------------------------------------------------------------------

    async def blocking_forest(self) -> BlockingForest:
        """Who waits for whom now: :meth:`pgcoord.Client.blocking_forest`, awaited."""
        return forest_of(await self._call("reading the blocking forest", lambda c: _fetch(c, forest_sql(self.schema))))

    async def lock_holders(self, name: KeyLike) -> list[LockHolder]:
        """Who holds or waits for the lock ``name`` (a str or a bigint key):
        :meth:`pgcoord.Client.lock_holders`, awaited."""
        k, desc = lock_key(name)
        return holders_of(await self._call(f"reading the holders of lock {desc}", lambda c: _fetch(c, holders_sql(self.schema), [k])))


H = TypeVar("H")


class Acquiring(Generic[H]):
    """What :meth:`AsyncClient.lock` and :meth:`AsyncClient.lease` return: await it for the
    handle, or use it in ``async with`` to hold it for the block and release it after."""

    def __init__(self, make: Callable[[], Awaitable[H]]) -> None:
        self._make = make
        self._handle: Optional[H] = None

    def __await__(self) -> Generator[Any, None, H]:
        return self._make().__await__()

    async def __aenter__(self) -> H:
        h = await self._make()
        self._handle = h
        return h

    async def __aexit__(
        self, et: Optional[type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        handle: Any = self._handle
        assert handle is not None
        await handle.__aexit__(et, ev, tb)


async def _lease_row(conn: AConn, stmt: Any, name: str, params: list[Any], granted_col: bool) -> LeaseInfo:
    return lease_info(name, (await _fetch(conn, stmt, params))[0], granted_col)


def _cancel(conn: AConn) -> None:
    try:
        conn.cancel()
    except Exception:
        pass


class AsyncLock:
    """A held session advisory lock on one pinned asyncio connection; see :class:`pgcoord.Lock`.

    :attr:`lost` (an ``asyncio.Event``) is set by the heartbeat task when the session ends;
    ``await lock.wait_lost()`` waits for it.
    """

    def __init__(self, client: AsyncClient, conn: AConn, pooled: bool, name: KeyLike, key: int, shared: bool, desc: str) -> None:
        self.name = name
        """The name (or bigint key) the lock was taken with."""
        self.key = key
        """The advisory key."""
        self.shared = shared
        """Whether the lock is held in the shared mode."""
        self.lost = asyncio.Event()
        """Set when the lock's session is known gone."""
        self.lost_reason: Optional[str] = None
        """Why the lock was lost, once :attr:`lost` is set."""
        self._client = client
        self._conn = conn
        self._pooled = pooled
        self._desc = desc
        self._released = False
        self._task = asyncio.get_running_loop().create_task(self._heartbeat(), name=f"pgcoord-lock-{key}")

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        return f"<pgcoord.AsyncLock {self._desc} {state}>"

    def _mark_lost(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._client.heartbeat)
            r = await _beat.beat_async(self._conn, self._client.heartbeat_timeout)
            if r == _beat.LOST:
                self._mark_lost("its session ended")
                return
            if r == _beat.SILENT:
                self._mark_lost(f"a heartbeat went unanswered for {self._client.heartbeat_timeout} s")
                await self._conn.close()
                return

    async def wait_lost(self) -> str:
        """Wait until the lock is lost; returns why."""
        await self.lost.wait()
        return self.lost_reason or "lost"

    def check(self) -> None:
        """Raise :class:`LostError` if the lock was lost, :class:`UsageError` if released."""
        if self._released:
            raise E.UsageError(f"lock {self._desc} was released")
        if not self.lost.is_set() and is_lost(self._conn):
            self._mark_lost("its session ended")
        if self.lost.is_set():
            raise E.LostError(f"lock {self._desc} was lost: {self.lost_reason}")

    @property
    def conn(self) -> AConn:
        """The pinned connection holding the lock (checked first)."""
        self.check()
        return self._conn

    @property
    def held(self) -> bool:
        """Whether the lock is held as far as the client knows."""
        return not self._released and not self.lost.is_set()

    async def release(self) -> None:
        """Unlock on the same session and give the connection back; see :meth:`pgcoord.Lock.release`."""
        if self._released:
            return
        self._released = True
        current = asyncio.current_task()
        if self._task is not current:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        conn, client, clean = self._conn, self._client, False
        try:
            if not self.lost.is_set() and is_lost(conn):
                self._mark_lost("its session ended")
            if self.lost.is_set():
                client._held_forget(conn)
                raise E.LostError(f"lock {self._desc} was lost: {self.lost_reason}")
            async with _guard(client._conn_mu, not self._pooled):
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    await conn.rollback()
                try:
                    rows = await client._run(conn, lambda: _fetch(conn, SQL_UNLOCK[self.shared], [self.key]))
                    ok = bool(rows[0][0])
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
            await client._unpin(conn, self._pooled, clean)

    async def __aenter__(self) -> "AsyncLock":
        return self

    async def __aexit__(
        self, et: Optional[type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        try:
            await self.release()
        except E.PgcoordError:
            if et is None:
                raise


class AsyncLease:
    """A held lease renewed by a task every third of its TTL; see :class:`pgcoord.Lease`.

    :attr:`lost` is an ``asyncio.Event``; ``await lease.wait_lost()`` waits for it.
    """

    def __init__(self, client: AsyncClient, info: LeaseInfo, ttl: float, t0: float) -> None:
        self.name = info.name
        """The lease's name."""
        self.holder = info.holder
        """This holder's name."""
        self.token = info.token
        """The fencing token of this grant."""
        self.ttl = ttl
        """The TTL in seconds."""
        self.info = info
        """The last answer of the server."""
        self.lost = asyncio.Event()
        """Set when the lease is known or presumed no longer held."""
        self.lost_reason: Optional[str] = None
        """Why the lease was lost, once :attr:`lost` is set."""
        self._client = client
        self._ms = ttl_ms(ttl)
        self._released = False
        self._loop = asyncio.get_running_loop()
        self._expiry: Optional[asyncio.TimerHandle] = None
        self._arm(t0 + info.remaining)
        self._task = self._loop.create_task(self._renew_loop(), name=f"pgcoord-lease-{self.name}")

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        return f"<pgcoord.AsyncLease {self.name!r} token={self.token} {state}>"

    def _mark_lost(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    def _arm(self, deadline: float) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        delay = max(0.0, deadline - time.monotonic())
        self._expiry = self._loop.call_later(delay, self._mark_lost, "no renewal succeeded before it ran out")

    async def _renew_loop(self) -> None:
        interval = self.ttl / 3
        pause = interval
        while True:
            await asyncio.sleep(pause)
            if self.lost.is_set():
                return
            t0 = time.monotonic()
            try:
                info = await self._client._call(
                    f'renewing lease "{self.name}"',
                    lambda c: _lease_row(
                        c, self._client._stmts.lease_renew, self.name, [self.name, self.token, self._ms], False
                    ),
                )
            except E.PgcoordError:
                pause = min(interval, max(0.05, self.ttl / 10))
                continue
            if info.status != "ok":
                self._mark_lost(f"a renewal found it {info.status}")
                return
            self.info = info
            self._arm(t0 + info.remaining)
            pause = interval

    async def wait_lost(self) -> str:
        """Wait until the lease is lost; returns why."""
        await self.lost.wait()
        return self.lost_reason or "lost"

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

    async def fence_check(self, conn: AConn) -> int:
        """:meth:`AsyncClient.fence_check` of this lease's token in the transaction on ``conn``."""
        return await self._client.fence_check(conn, self.name, self.token)

    async def release(self) -> None:
        """Stop renewing and release the lease; see :meth:`pgcoord.Lease.release`."""
        if self._released:
            return
        self._released = True
        current = asyncio.current_task()
        if self._task is not current:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._expiry is not None:
            self._expiry.cancel()
        if self.lost.is_set():
            raise E.LostError(f'lease "{self.name}" (token {self.token}) was lost: {self.lost_reason}')

        async def go(c: AConn) -> str:
            return str((await _fetch(c, self._client._stmts.lease_release, [self.name, self.token]))[0][0])

        status = await self._client._call(f'releasing lease "{self.name}"', go)
        if status in ("superseded", "unknown"):
            self._mark_lost(f"the release found it {status}")
            raise E.LostError(f'lease "{self.name}" (token {self.token}) was lost: the release found it {status}')

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(
        self, et: Optional[type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        try:
            await self.release()
        except E.PgcoordError:
            if et is None:
                raise
