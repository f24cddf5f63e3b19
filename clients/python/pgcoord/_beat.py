"""The heartbeat of a pinned session: one bounded ``SELECT 1`` through libpq's own calls.

It runs beside the application, which may use the same connection: it never waits for the
connection's lock (a busy connection is in use, and the use itself will see a loss), and it
sends nothing inside an aborted transaction. An answer that does not come within the bound
means the session cannot be vouched for: the caller closes it, which is also what makes the
server release whatever it held.
"""

from __future__ import annotations

import asyncio
import select
import time
from typing import Any

from psycopg import pq

ALIVE, SKIPPED, LOST, SILENT = "alive", "skipped", "lost", "silent"


def _usable(pg: pq.abc.PGconn) -> str:
    if pg.status != pq.ConnStatus.OK:
        return LOST
    if pg.transaction_status in (pq.TransactionStatus.ACTIVE, pq.TransactionStatus.INERROR):
        return SKIPPED
    return ALIVE


def _drain(pg: pq.abc.PGconn) -> str:
    while True:
        r = pg.get_result()
        if r is None:
            break
    return ALIVE if pg.status == pq.ConnStatus.OK else LOST


def beat(conn: Any, timeout: float) -> str:
    """One heartbeat on a sync connection: ALIVE, SKIPPED (busy), LOST, or SILENT (no answer)."""
    if conn.closed:
        return LOST
    if not conn.lock.acquire(blocking=False):
        return SKIPPED
    try:
        pg = conn.pgconn
        state = _usable(pg)
        if state != ALIVE:
            return state
        deadline = time.monotonic() + timeout
        pg.send_query(b"SELECT 1")
        while pg.flush() != 0:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [pg.socket], [], left)[1]:
                return SILENT
        while True:
            pg.consume_input()
            if not pg.is_busy():
                return _drain(pg)
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pg.socket], [], [], left)[0]:
                return SILENT
    except Exception:
        return LOST
    finally:
        conn.lock.release()


async def _wait_fd(fd: int, write: bool, timeout: float) -> bool:
    # A timer rather than asyncio.wait_for: before Python 3.12, wait_for swallows a
    # cancellation that arrives as the awaited future completes, and a lock's release, which
    # cancels the heartbeat and waits for it, then waited forever.
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[bool] = loop.create_future()

    def done(ok: bool) -> None:
        if not fut.done():
            fut.set_result(ok)

    (loop.add_writer if write else loop.add_reader)(fd, done, True)
    timer = loop.call_later(timeout, done, False)
    try:
        return await fut
    finally:
        timer.cancel()
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def beat_async(conn: Any, timeout: float) -> str:
    """One heartbeat on an asyncio connection; the same answers as :func:`beat`."""
    if conn.closed:
        return LOST
    if conn.lock.locked():
        return SKIPPED
    async with conn.lock:
        try:
            pg = conn.pgconn
            state = _usable(pg)
            if state != ALIVE:
                return state
            deadline = time.monotonic() + timeout
            pg.send_query(b"SELECT 1")
            while pg.flush() != 0:
                if not await _wait_fd(pg.socket, True, max(0.0, deadline - time.monotonic())):
                    return SILENT
            while True:
                pg.consume_input()
                if not pg.is_busy():
                    return _drain(pg)
                left = deadline - time.monotonic()
                if left <= 0 or not await _wait_fd(pg.socket, False, left):
                    return SILENT
        except Exception:
            return LOST
