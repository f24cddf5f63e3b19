"""The worker: handlers registered by queue, run with the protocol's leases, renewals,
cancellation, results, graceful stop and reconnects (``docs/PROTOCOL.md``).

One dispatcher owns the worker's session: it claims only for idle handler slots, sends the
completions that piled up in one ``complete`` call, renews every held lease in one ``renew``
every third of the lease (and at once when told of a cancellation), and runs the reaper. A
second, dedicated session ``LISTEN``s on the queue channel and a channel of the worker's own
(registered with ``worker_register``, so that an enqueue wakes one worker with free slots);
without it (behind a transaction- or statement-mode pooler, which the worker finds by itself
as the C library does, or ``listen=False``) the worker polls, every 10 ms doubling up to
``poll`` while its queues are empty, and sleeps until ``next_run_ms`` for scheduled jobs. The dispatcher runs on asyncio: async handlers run on its loop, sync handlers in
a thread pool of ``concurrency`` threads. :class:`AsyncWorker` runs on the caller's loop,
:class:`Worker` on a loop of its own (in the calling thread, or one it starts).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import socket
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import psycopg
from psycopg import sql

from . import errors as E
from ._common import (
    DEFAULT_BACKOFF,
    DEFAULT_SCHEMA,
    PROTOCOL_VERSION,
    Statements,
    check_schema,
    drain_notifies,
    from_psycopg,
    jobs_of,
    ms,
    result_text,
    version_error,
)
from ._dsn import mask_dsn
from ._pooler import aprobe, pooler_what
from .types import Job, PoolerInfo

__all__ = ["Worker", "AsyncWorker", "WorkerStats", "RetryLater", "Handler"]

log = logging.getLogger("pgcoord.worker")

Handler = Callable[[Job], Any]
"""A handler: called with the claimed :class:`Job`; a plain function runs in a thread, an
``async def`` on the worker's loop. What it returns (JSON-serializable, at most 64 kB, ``None``
for none) is stored as the job's result; an exception fails the attempt (retried with the
protocol's backoff while attempts are left); :class:`RetryLater` defers the job."""

ERROR_MAX = 4000
"""The most characters of a handler's error kept in the job's last error."""


class RetryLater(Exception):
    """Raise it from a handler to run the job again after ``delay`` seconds without spending an
    attempt ("not now": a rate limit, a resource not ready); past the job's ``max_deferrals``
    the job fails for good instead."""

    def __init__(self, delay: float = 0.0, reason: str = "") -> None:
        super().__init__(reason or f"retry in {delay} s")
        self.delay = delay


@dataclass
class WorkerStats:
    """What a worker did so far: jobs ``claimed``, ``completed``, ``failed`` (attempts),
    ``retried`` (deferred by :class:`RetryLater`), ``cancelled`` (by an administrator while
    held), ``stale`` (their lease lost before the outcome), ``released`` (given back at a
    stop), ``reaped`` (expired leases the reaper returned), ``wakeups`` (notifications that
    named a queue) and ``reconnects``."""

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    stale: int = 0
    released: int = 0
    reaped: int = 0
    wakeups: int = 0
    reconnects: int = 0


class _Run:
    """One held job: its handler's future and, once it returned, its outcome."""

    __slots__ = ("job", "fut", "outcome")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.fut: Optional[asyncio.Future[Any]] = None
        # ("ok", result_text) | ("fail", error) | ("retry", delay) | ("lost",)
        self.outcome: Optional[tuple[Any, ...]] = None


def _error_text(e: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(e), e)).strip() or type(e).__name__
    text = text.replace("\x00", "?")
    return text if len(text) <= ERROR_MAX else text[: ERROR_MAX - 3] + "..."


def _outcome_of(job: Job, value: Any) -> tuple[Any, ...]:
    if job.lost.is_set():
        return ("lost",)
    try:
        return ("ok", result_text(value))
    except E.UsageError as e:
        return ("fail", f"the handler's result was refused: {e}")


def _call_sync(fn: Handler, job: Job) -> tuple[Any, ...]:
    try:
        value = fn(job)
    except RetryLater as e:
        return ("retry", e.delay)
    except BaseException as e:  # a handler's SystemExit must not take its thread with it
        return ("lost",) if job.lost.is_set() else ("fail", _error_text(e))
    return _outcome_of(job, value)


async def _call_async(fn: Handler, job: Job) -> tuple[Any, ...]:
    try:
        value = await fn(job)
    except asyncio.CancelledError:
        if job.lost.is_set():
            return ("lost",)
        return ("fail", "the handler was cancelled")
    except RetryLater as e:
        return ("retry", e.delay)
    except Exception as e:
        return ("lost",) if job.lost.is_set() else ("fail", _error_text(e))
    return _outcome_of(job, value)


class _Base:
    """What :class:`Worker` and :class:`AsyncWorker` share: the options, the handlers, the
    dispatcher's loop (a coroutine), stop and stats."""

    def __init__(
        self,
        dsn: Any,
        *,
        schema: Optional[str] = None,
        concurrency: int = 4,
        lease: float = 30.0,
        poll: float = 2.0,
        listen: Optional[bool] = None,
        reap_interval: float = 1.0,
        backoff: tuple[float, float] = DEFAULT_BACKOFF,
        worker_id: Optional[str] = None,
        application_name: str = "pgcoord-python/worker",
    ) -> None:
        if not isinstance(dsn, str):
            given = getattr(dsn, "_dsn", None)
            if given is None:
                raise E.UsageError(
                    "a worker needs a DSN (or a Client made from one): it opens sessions of its own,"
                    f" not {type(dsn).__name__}"
                )
            schema = schema or getattr(dsn, "schema", None)
            dsn = given
        self.dsn: str = dsn
        self.schema = check_schema(schema or DEFAULT_SCHEMA)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 1024:
            raise E.UsageError(f"concurrency must be an integer of 1 to 1024, not {concurrency!r}")
        self.concurrency = concurrency
        self.lease = lease
        self._lease_ms = ms(lease, "lease", 100)
        self._poll = ms(poll, "poll", 1) / 1000
        self._reap = ms(reap_interval, "reap_interval") / 1000
        self._backoff_ms = (ms(backoff[0], "backoff base"), ms(backoff[1], "backoff cap"))
        if listen is not None and not isinstance(listen, bool):
            raise E.UsageError(f"listen must be True, False or None (decide by the pooler in between), not {listen!r}")
        self._listen_opt = listen
        self.listen = listen is not False
        """Whether the worker LISTENs: ``listen`` when given, else true unless a pooler in
        between drops LISTEN (known once the worker's first session is open)."""
        self.pooler: Optional[PoolerInfo] = None
        """What is between the worker and PostgreSQL (found on its first session)."""
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.application_name = application_name
        self._stmts = Statements(self.schema)
        self._handlers: dict[str, Handler] = {}
        self.stats = WorkerStats()
        """What the worker did so far (:class:`WorkerStats`)."""
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop_req = False
        self._grace: Optional[float] = None
        self._running_flag = False
        self._listening = False
        self._own = f"{self.schema[:30]}.w.{random.getrandbits(64):016x}"

    def __repr__(self) -> str:
        return f"<pgcoord.{type(self).__name__} {mask_dsn(self.dsn)!r} queues={sorted(self._handlers)}>"

    # ---- handlers -----------------------------------------------------------------------

    def handler(self, queue: str) -> Callable[[Handler], Handler]:
        """A decorator registering the function as the handler of ``queue``::

            @worker.handler("emails")
            def send(job: pgcoord.Job) -> dict:
                ...
        """

        def register(fn: Handler) -> Handler:
            self.add_handler(queue, fn)
            return fn

        return register

    def add_handler(self, queue: Union[str, Sequence[str]], fn: Handler) -> None:
        """Register ``fn`` as the handler of ``queue`` (a name, or several)."""
        for q in [queue] if isinstance(queue, str) else list(queue):
            if not isinstance(q, str) or not q or len(q.encode("utf-8", "replace")) > 128:
                raise E.UsageError(f"a queue name is 1 to 128 bytes, not {q!r}")
            if self._running_flag:
                raise E.UsageError("add handlers before the worker runs")
            if not callable(fn):
                raise E.UsageError(f"the handler of {q!r} is not callable")
            self._handlers[q] = fn

    @property
    def queues(self) -> list[str]:
        """The queues the worker has handlers for."""
        return list(self._handlers)

    @property
    def listening(self) -> bool:
        """Whether the worker's LISTEN session is up (otherwise it polls)."""
        return self._listening

    # ---- stop ---------------------------------------------------------------------------

    def stop(self, grace: float = 30.0) -> None:
        """Stop gracefully: no new claims, running handlers get ``grace`` seconds to end, then
        their jobs are released back to pending (their handlers told: ``job.lost``, or a
        cancel). Thread-safe and signal-safe; a second call may only shorten the grace."""
        g = max(0.0, float(grace))
        self._grace = g if self._grace is None else min(self._grace, g)
        self._stop_req = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._poke)
            except RuntimeError:
                pass

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ---- the dispatcher -----------------------------------------------------------------

    _wake: Optional[asyncio.Event] = None

    async def _main(self) -> WorkerStats:
        if not self._handlers:
            raise E.UsageError("the worker has no handlers: register one with @worker.handler(queue)")
        if self._running_flag:
            raise E.UsageError("the worker is already running")
        self._running_flag = True
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._queues = list(self._handlers)
        self._is_async = {q: inspect.iscoroutinefunction(fn) for q, fn in self._handlers.items()}
        self._pool: Optional[ThreadPoolExecutor] = None
        if not all(self._is_async.values()):
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="pgcoord-handler")
        self._held: dict[int, _Run] = {}
        self._done: list[_Run] = []
        self._running = 0
        self._more = {q: True for q in self._queues}
        self._forward: set[str] = set()
        self._hb_now = False
        self._conn: Optional[psycopg.AsyncConnection[Any]] = None
        self._listener: Optional[asyncio.Task[None]] = None
        self._call_timeout = max(5.0, self._lease_ms / 10000)
        try:
            self._conn = await self._connect()
            if self.listen:
                self._listener = asyncio.create_task(self._listen_loop())
            await self._dispatch()
        finally:
            if self._listener is not None:
                self._listener.cancel()
                try:
                    await self._listener
                except BaseException:
                    pass
            if self._conn is not None:
                await self._unregister()
                await self._conn.close()
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._loop = None
        return self.stats

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, application_name=self.application_name,
                prepare_threshold=None if self.pooler is not None and self.pooler.no_prepare else 5,
            )  # fmt: skip
        except psycopg.Error as e:
            raise from_psycopg(e, f"connecting to {mask_dsn(self.dsn)}", self.dsn) from None
        try:
            try:
                got = (await (await conn.execute(self._stmts.protocol_version)).fetchall())[0][0]
            except psycopg.Error as e:
                if e.sqlstate in ("42883", "3F000"):
                    raise version_error(self.schema, e, None) from None
                raise
            if got != PROTOCOL_VERSION:
                raise version_error(self.schema, None, got)
            pooled = await self._pooler_on(conn)
            self._channel = str((await (await conn.execute(self._stmts.queue_channel)).fetchall())[0][0])
            if not pooled:
                # The queue's statements are short; JIT compilation would cost more than it
                # saves. (Through a pooler a SET would stay on whichever server session ran it.)
                await conn.execute("SET jit = off")
        except psycopg.Error as e:
            await conn.close()
            raise from_psycopg(e, "setting up the worker's session", self.dsn, conn) from None
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _pooler_on(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """The pooler probe, once per worker (as the C worker's): behind a pooler that does not
        keep the session (transaction or statement mode, or one whose kind cannot be told),
        LISTEN cannot work, so the worker polls (unless ``listen`` was given), and statements
        are not prepared. True when the session is not kept."""
        if self.pooler is None:
            p, keep = await aprobe(conn, self.dsn)
            if not keep:
                return False
            self.pooler = p
            if not p.session_kept:
                if self._listen_opt is None:
                    self.listen = False
                if self.listen:
                    log.warning("%s: LISTEN cannot work, but listen=True was given", pooler_what(p))
                else:
                    log.warning("%s: LISTEN cannot work, polling instead (every 10 ms to %g s when idle)%s",
                                pooler_what(p), self._poll, "" if p.mode == "unknown" else ", statements unprepared")
        if self.pooler.no_prepare:
            conn.prepare_threshold = None
        return not self.pooler.session_kept

    async def _q(self, stmt: Any, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        assert self._conn is not None
        cur = await self._conn.execute(stmt, params)
        return await cur.fetchall() if cur.description is not None else []

    def _free(self) -> int:
        return self.concurrency - self._running

    async def _dispatch(self) -> None:
        assert self._wake is not None
        now = time.monotonic()
        hb_every = self._lease_ms / 3000
        next_hb = now + hb_every
        next_claim = now
        next_reap = now + self._reap / 2
        next_register = now
        idle_poll = 0.01
        stopping = False
        stop_at = 0.0
        deadline = 0.0
        released = False
        while True:
            now = time.monotonic()
            self._wake.clear()
            # -- stop: no new claims, the grace, then release what still runs
            if self._stop_req:
                if not stopping:
                    stopping, stop_at = True, now
                    log.info("stopping: no new claims; waiting up to %.3g s for %d running job(s)", self._grace, self._running)
                    await self._unregister()
                deadline = stop_at + (self._grace or 0.0)
                if self._running == 0 and not self._done:
                    return
                if now >= deadline and self._running > 0 and not released:
                    await self._release_running()
                    released = True
                if released and not self._done:
                    return
            # -- the session
            if self._conn is None or self._conn.broken or self._conn.closed:
                if stopping:
                    return  # what is held returns to pending after its lease
                if not await self._reconnect():
                    continue
                next_hb = now  # learn at once what became of the jobs held
            try:
                for q in list(self._forward):
                    self._forward.discard(q)
                    await self._q("SELECT pg_notify(%s, %s)", [self._channel, q])
                    await self._q(self._stmts.worker_register, [self._own, self._queues, 0])
                    next_register = now + 1.0
                await asyncio.wait_for(self._settle_others(), self._call_timeout)
                do_hb = now >= next_hb or self._hb_now
                if now >= next_claim:
                    for q in self._queues:
                        self._more[q] = True
                    next_claim = now + (self._poll if self._listening else idle_poll)
                want = not stopping and self._free() > 0 and any(self._more.values())
                if self._done or do_hb or want:
                    short, got = await asyncio.wait_for(self._trip(do_hb, want), self._call_timeout)
                    if do_hb:
                        next_hb = time.monotonic() + hb_every
                        self._hb_now = False
                    if short:
                        # Empty: sleep until the next run_at, a notification or the poll. The
                        # adaptive poll starts over at its shortest while claims find jobs
                        # (they trickle in), and doubles only after a claim that found none.
                        if not self._listening and got:
                            idle_poll = 0.01
                        wait = self._poll if self._listening else idle_poll
                        if not self._listening and not got:
                            idle_poll = min(self._poll, idle_poll * 2)
                        nr = (await self._q(self._stmts.next_run_ms, [self._queues]))[0][0]
                        if nr is not None and nr / 1000 < wait:
                            wait = max(0.005, nr / 1000)
                        next_claim = time.monotonic() + wait
                    elif want:
                        idle_poll = 0.01
                # -- maintenance: the registration, the reaper
                now = time.monotonic()
                if not stopping and self._listening and now >= next_register:
                    await self._q(self._stmts.worker_register, [self._own, self._queues, max(0, self._free())])
                    next_register = now + 1.0
                if not stopping and self._reap > 0 and now >= next_reap:
                    await self._reap_once()
                    next_reap = now + self._reap / 2 + random.random() * self._reap
            except (psycopg.Error, E.PgcoordError, asyncio.TimeoutError) as e:
                await self._trouble(e)
                continue
            # -- sleep until something happens
            if self._done or (stopping and self._running == 0):
                continue
            now = time.monotonic()
            until = now if self._hb_now else next_hb
            if not stopping:
                if self._free() > 0 and any(self._more.values()):
                    until = now
                until = min(until, next_claim, next_reap if self._reap > 0 else until)
                if self._listening:
                    until = min(until, next_register)
            else:
                until = min(until, deadline)
            timeout = min(60.0, until - now)
            if timeout > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except asyncio.TimeoutError:
                    pass

    async def _trouble(self, e: BaseException) -> None:
        conn = self._conn
        if isinstance(e, asyncio.TimeoutError):
            log.warning("the server did not answer within %.3g s: a new session", self._call_timeout)
        else:
            log.warning("%s", e)
        if conn is not None and (conn.broken or conn.closed or isinstance(e, (asyncio.TimeoutError, E.LostError))
                                 or getattr(e, "sqlstate", "") in ("25006", "57P01", "57P02", "57P03")
                                 or isinstance(e, psycopg.OperationalError)):  # fmt: skip
            self._conn = None
            try:
                await conn.close()
            except Exception:
                pass
        else:
            await asyncio.sleep(0.2)

    async def _reconnect(self) -> bool:
        delay = 0.1
        while not self._stop_req:
            try:
                self._conn = await self._connect()
            except E.PgcoordError as e:
                log.warning("reconnecting: %s", e)
                assert self._wake is not None
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                delay = min(1.0, delay * 2)
                continue
            log.info("reconnected")
            self.stats.reconnects += 1
            for q in self._queues:
                self._more[q] = True
            return True
        return False

    async def _unregister(self) -> None:
        conn = self._conn
        if conn is None or conn.broken or conn.closed or not self.listen:
            return
        try:
            await asyncio.wait_for(self._q(self._stmts.worker_unregister, [self._own]), self._call_timeout)
        except (psycopg.Error, asyncio.TimeoutError):
            pass

    async def _reap_once(self) -> None:
        try:
            r = (await self._q(self._stmts.reap))[0]
        except psycopg.Error as e:
            if e.sqlstate == "55P03":
                return  # another pass runs
            raise
        n = int(r[0]) + int(r[1])
        if n:
            self.stats.reaped += n
            log.info("reaper: %d expired lease(s) returned to pending, %d failed", int(r[1]), int(r[0]))

    # ---- jobs ---------------------------------------------------------------------------

    def _start(self, job: Job) -> None:
        run = _Run(job)
        self._held[job.id] = run
        self._running += 1
        fn = self._handlers[job.queue]
        loop = self._loop
        assert loop is not None
        fut: asyncio.Future[Any]
        if self._is_async[job.queue]:
            fut = loop.create_task(_call_async(fn, job))
        else:
            fut = loop.run_in_executor(self._pool, _call_sync, fn, job)
        run.fut = fut

        def finished(f: asyncio.Future[Any]) -> None:
            self._finished(run, f)

        fut.add_done_callback(finished)

    def _finished(self, run: _Run, fut: asyncio.Future[Any]) -> None:
        self._running -= 1
        if fut.cancelled():
            run.outcome = ("lost",)
        else:
            exc = fut.exception()
            run.outcome = ("fail", _error_text(exc)) if exc is not None else fut.result()
        if self._held.get(run.job.id) is run:
            self._done.append(run)
        if self._wake is not None:
            self._wake.set()

    def _drop(self, run: _Run) -> None:
        if self._held.get(run.job.id) is run:
            del self._held[run.job.id]

    def _mark_lost(self, run: _Run, cancelled: bool) -> None:
        if cancelled:
            run.job.cancelled.set()
        run.job.lost.set()
        if run.fut is not None and not run.fut.done() and self._is_async[run.job.queue]:
            run.fut.cancel()

    async def _settle_others(self) -> None:
        """Failures and deferrals, one call each (they are rare); lost ones are counted."""
        keep: list[_Run] = []
        for run in self._done:
            o = run.outcome or ("lost",)
            j = run.job
            if o[0] == "ok" and not j.lost.is_set():
                keep.append(run)
                continue
            if o[0] == "lost" or j.lost.is_set():
                if j.cancelled.is_set():
                    self.stats.cancelled += 1
                else:
                    self.stats.stale += 1
            elif o[0] == "retry":
                r = await self._q(self._stmts.retry_later, [j.id, j.token, ms(max(0.0, float(o[1])), "delay")])
                self._count_end(j, str(r[0][0]), None)
            else:
                r = await self._q(self._stmts.fail, [j.id, j.token, o[1], *self._backoff_ms, None])
                self._count_end(j, str(r[0][0]), o[1])
            self._drop(run)
            self._more[j.queue] = True
        self._done = keep

    def _count_end(self, j: Job, outcome: str, error: Optional[str]) -> None:
        if outcome == "stale":
            self.stats.stale += 1
            log.warning("job %d: its outcome was not recorded: its lease was lost or it was cancelled", j.id)
        elif error is None:
            self.stats.retried += 1 if outcome == "retried" else 0
            self.stats.failed += 1 if outcome == "dead" else 0
        else:
            self.stats.failed += 1
            if outcome == "dead":
                log.warning("job %d failed for good after %d attempt(s): %.300s", j.id, j.attempts, error)

    async def _complete(self, runs: list[_Run]) -> None:
        ids = [r.job.id for r in runs]
        try:
            rows = await self._q(self._stmts.complete, [ids, [r.job.token for r in runs], [r.outcome[1] for r in runs]])  # type: ignore[index]
        except psycopg.errors.DataException as e:
            # A result the server refused (its position in the column field, or not JSON to
            # it): that job fails its attempt, the others go again.
            col = e.diag.column_name
            bad = int(col) - 1 if col and col.isdigit() and 0 < int(col) <= len(runs) else None
            if bad is None and len(runs) > 1:
                for r in runs:
                    await self._complete([r])
                return
            r = runs[bad or 0]
            r.outcome = ("fail", f"the handler's result was refused: {str(e).strip().splitlines()[0]}")
            return
        completed = {int(x[0]) for x in rows}
        for r in runs:
            self._drop(r)
            self._done.remove(r)
            # A slot is free, and perhaps a key's turn or a dependent job: worth a claim.
            self._more[r.job.queue] = True
            if r.job.id in completed:
                self.stats.completed += 1
            elif r.job.cancelled.is_set():
                self.stats.cancelled += 1
            else:
                self.stats.stale += 1
                log.warning("job %d: its completion came too late: its lease was lost or it was cancelled", r.job.id)

    async def _trip(self, do_hb: bool, want: bool) -> tuple[bool, int]:
        """The round trip: completions, the heartbeat, the claims. Whether a claim came back
        short (every queue claimed is empty for now), and how many jobs the claims gave."""
        ok = [r for r in self._done if r.outcome is not None and r.outcome[0] == "ok"]
        if ok:
            await self._complete(ok)
        if do_hb:
            runs = [r for r in self._held.values() if not r.job.lost.is_set()]
            if runs:
                rows = await self._q(self._stmts.renew, [[r.job.id for r in runs], [r.job.token for r in runs], self._lease_ms])
                st = {int(x[0]): str(x[1]) for x in rows}
                for r in runs:
                    s = st.get(r.job.id, "lost")
                    if s != "held":
                        log.log(logging.INFO if s == "cancelled" else logging.WARNING, "job %d: %s", r.job.id,
                                "cancelled: telling its handler" if s == "cancelled" else "lease lost (reaped or claimed elsewhere)")  # fmt: skip
                        self._mark_lost(r, s == "cancelled")
        if not want:
            return False, 0
        short = True
        got = 0
        for q in self._queues:
            free = self._free()
            if free <= 0:
                short = False
                break
            if not self._more[q]:
                continue
            rows = await self._q(self._stmts.claim, [q, free, self._lease_ms, self.worker_id])
            if len(rows) < free:
                self._more[q] = False
            else:
                short = False
            for job in jobs_of(q, rows):
                self.stats.claimed += 1
                got += 1
                self._start(job)
        return short and not any(self._more.values()), got

    async def _release_running(self) -> None:
        runs = [r for r in self._held.values() if r.outcome is None and not r.job.lost.is_set()]
        log.warning("grace period over: releasing %d unfinished job(s)", len(runs))
        for r in runs:
            self._mark_lost(r, False)
            self._drop(r)
        if not runs or self._conn is None or self._conn.broken:
            return
        try:
            n = (await asyncio.wait_for(
                self._q(self._stmts.release, [[r.job.id for r in runs], [r.job.token for r in runs], True]), self._call_timeout
            ))[0][0]  # fmt: skip
            self.stats.released += int(n)
        except (psycopg.Error, asyncio.TimeoutError) as e:
            log.warning("cannot release %d job(s) (they return after their lease): %s", len(runs), e)

    # ---- wake-ups -----------------------------------------------------------------------

    def _notified(self, channel: str, payload: str) -> None:
        assert self._wake is not None
        if channel == self._own and payload.startswith("cancel "):
            try:
                jid = int(payload[7:])
            except ValueError:
                return
            if jid in self._held:
                self._hb_now = True
                self._wake.set()
            return
        if payload in self._more:
            self._more[payload] = True
            self.stats.wakeups += 1
            if channel == self._own and self._free() <= 0:
                self._forward.add(payload)  # picked while full: pass it on to everyone
            self._wake.set()

    async def _listen_loop(self) -> None:
        loop = asyncio.get_running_loop()
        delay = 0.1
        while not self._stop_req:
            conn: Optional[psycopg.AsyncConnection[Any]] = None
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, application_name=self.application_name + "/listen"
                )
                for ch in (self._channel, self._own):
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(ch)))
                gone = asyncio.Event()
                pg = conn.pgconn

                def readable() -> None:
                    try:
                        got = drain_notifies(pg)
                    except psycopg.Error:
                        gone.set()
                        return
                    for ch, payload in got:
                        self._notified(ch, payload)

                fd = pg.socket
                loop.add_reader(fd, readable)
                self._listening = True
                delay = 0.1
                for q in self._queues:
                    self._more[q] = True  # what was enqueued before we listened
                if self._wake is not None:
                    self._wake.set()
                try:
                    await gone.wait()
                finally:
                    loop.remove_reader(fd)
                log.warning("the LISTEN session was lost; polling until it is back")
            except psycopg.Error as e:
                log.warning("LISTEN session: %s", from_psycopg(e, "listening", self.dsn))
            finally:
                self._listening = False
                if conn is not None:
                    await conn.close()
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)


class AsyncWorker(_Base):
    """The worker on the caller's asyncio loop::

        worker = pgcoord.AsyncWorker(dsn, concurrency=64)

        @worker.handler("emails")
        async def send(job: pgcoord.Job) -> dict:
            await mailer.send(job.payload)
            return {"sent": True}

        await worker.run()          # until worker.stop()

    ``dsn``: a DSN, or a client made from one (its schema is then the default); the worker
    opens two sessions of its own (one to work, one to listen). ``concurrency`` handlers at
    once (sync ones in as many threads); ``lease`` seconds per claim, renewed every third;
    ``poll`` the fallback poll (the idle bound of the adaptive poll without LISTEN);
    ``listen`` None to decide by the pooler in between (poll only behind a transaction- or
    statement-mode one), True or False to decide yourself; ``reap_interval`` the
    reaper's period (0: never); ``backoff`` a failed attempt's base and cap in seconds.
    """

    async def run(self) -> WorkerStats:
        """Work until :meth:`stop` (then gracefully); returns the stats. Raises at once when the
        first session cannot be opened or the schema speaks another protocol version; later
        losses of the session are retried with backoff (jobs held keep their leases)."""
        return await self._main()


class Worker(_Base):
    """The worker for sync programs: the same as :class:`AsyncWorker`, its dispatcher on an
    asyncio loop of its own. Sync handlers run in threads; ``async def`` handlers run on that
    loop::

        worker = pgcoord.Worker(dsn, concurrency=8)

        @worker.handler("emails")
        def send(job: pgcoord.Job) -> None:
            if job.cancelled.is_set():
                return
            ...

        worker.run()                # blocks until worker.stop() (a signal handler may call it)

    or ``worker.start()`` to run it in a thread, then ``worker.stop(grace)`` and
    ``worker.wait()``.
    """

    def __init__(self, dsn: Any, **kw: Any) -> None:
        super().__init__(dsn, **kw)
        self._thread: Optional[threading.Thread] = None
        self._result: Optional[WorkerStats] = None
        self._error: Optional[BaseException] = None
        self._started = threading.Event()

    def run(self) -> WorkerStats:
        """Work until :meth:`stop`, in the calling thread; returns the stats."""
        return asyncio.run(self._main())

    def start(self) -> None:
        """Run the worker in a thread of its own; returns once it is up (or raises why not)."""

        def main() -> None:
            async def go() -> WorkerStats:
                task = asyncio.create_task(self._main())
                while self._wake is None and not task.done():
                    await asyncio.sleep(0.001)
                # Up once the first session is open (or the start failed).
                while not task.done() and getattr(self, "_conn", None) is None and not self._stop_req:
                    await asyncio.sleep(0.005)
                self._started.set()
                return await task

            try:
                self._result = asyncio.run(go())
            except BaseException as e:
                self._error = e
            finally:
                self._started.set()

        self._thread = threading.Thread(target=main, name="pgcoord-worker", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error

    def wait(self, timeout: Optional[float] = None) -> Optional[WorkerStats]:
        """Wait for a worker started by :meth:`start` to stop; its stats (``None`` when
        ``timeout`` ran out first). Raises what ended it, if it failed."""
        if self._thread is None:
            raise E.UsageError("the worker was not started")
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None
        if self._error is not None:
            raise self._error
        return self._result
