"""Diagnostics as data: who waits for whom (:class:`BlockingForest`) and who holds a lock
(:class:`LockHolder`), read from the protocol's ``blocking_forest()`` and ``lock_holders()``
(what ``pgcoord blockers --json`` and ``pgcoord locks`` show).

:meth:`pgcoord.Client.blocking_forest` and :meth:`pgcoord.Client.lock_holders` (and the same
on :class:`pgcoord.AsyncClient`, awaited) return these frozen dataclasses.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

from psycopg import sql

__all__ = ["BlockingSession", "BlockingTree", "BlockingForest", "LockHolder"]


@dataclass(frozen=True)
class BlockingSession:
    """One session that waits for a lock or blocks one (a row of ``blocking_forest()``).

    ``blocked_by``: the sessions it waits for (``pg_blocking_pids`` without duplicates);
    ``blocks``: the sessions waiting directly for it; ``root``: it blocks someone and waits
    for no one (the session to look at first); ``depth``: its distance from the nearest root
    (0 for a root, ``None`` in a wait cycle no root leads to); ``blocks_total``: the sessions
    waiting for it directly or through others; ``in_cycle``: part of a wait cycle (a deadlock
    not broken yet). ``wait_locktype``, ``wait_mode``, ``wait_target``: the lock it waits for,
    the target in one line (``relation public.orders``, ``advisory 4242 "nightly"``, ...);
    ``waited``: for how long (PostgreSQL 14 and later). ``client`` is ``host:port``, or
    ``local`` for a Unix socket. The ages are by the server's clock, ``None`` where not
    applicable (no transaction, no query). A blocker with no row of its own (a prepared
    transaction is pid 0) has only ``pid``, ``blocks`` and ``state``.
    """

    pid: int
    blocked_by: tuple[int, ...]
    blocks: tuple[int, ...]
    root: bool
    depth: Optional[int]
    blocks_total: int
    in_cycle: bool
    wait_locktype: Optional[str]
    wait_mode: Optional[str]
    wait_target: Optional[str]
    waited: Optional[dt.timedelta]
    state: Optional[str]
    wait_event_type: Optional[str]
    wait_event: Optional[str]
    database: Optional[str]
    usename: Optional[str]
    application_name: Optional[str]
    client: Optional[str]
    backend_type: Optional[str]
    backend_start: Optional[dt.datetime]
    xact_age: Optional[dt.timedelta]
    query_age: Optional[dt.timedelta]
    state_age: Optional[dt.timedelta]
    query: Optional[str]


@dataclass(frozen=True)
class BlockingTree:
    """A session of the forest with the sessions waiting directly for it below."""

    session: BlockingSession
    children: tuple["BlockingTree", ...]


@dataclass(frozen=True)
class BlockingForest:
    """Who waits for whom at one moment: the sessions, roots first, then by depth.

    Iterate it for the :class:`BlockingSession` rows; :attr:`roots`, :meth:`children`,
    :meth:`session` and :meth:`trees` read it without another query.
    """

    sessions: tuple[BlockingSession, ...]

    def __iter__(self) -> Iterator[BlockingSession]:
        return iter(self.sessions)

    def __len__(self) -> int:
        return len(self.sessions)

    def session(self, pid: int) -> Optional[BlockingSession]:
        """The row of ``pid``, or ``None`` when the forest has none."""
        for s in self.sessions:
            if s.pid == pid:
                return s
        return None

    @property
    def roots(self) -> tuple[BlockingSession, ...]:
        """The sessions that block others and wait for no one."""
        return tuple(s for s in self.sessions if s.root)

    def children(self, pid: int) -> tuple[BlockingSession, ...]:
        """The sessions waiting directly for ``pid``, in the order of its ``blocks``."""
        s = self.session(pid)
        if s is None:
            return ()
        found = (self.session(w) for w in s.blocks)
        return tuple(c for c in found if c is not None)

    def trees(self) -> tuple[BlockingTree, ...]:
        """One tree per root. A session waiting for two sessions appears under both; a wait
        cycle no root leads to appears in no tree (its sessions have ``in_cycle`` and
        ``depth`` ``None``), and a branch stops where it would enter its own path again."""

        def grow(s: BlockingSession, path: frozenset[int]) -> BlockingTree:
            inner = path | {s.pid}
            return BlockingTree(s, tuple(grow(c, inner) for c in self.children(s.pid) if c.pid not in inner))

        return tuple(grow(r, frozenset()) for r in self.roots)


@dataclass(frozen=True)
class LockHolder:
    """A session that holds or waits for an advisory lock (a row of ``lock_holders()``).

    ``mode``: ``ExclusiveLock`` or ``ShareLock``; ``wait_start``: since when a waiter waits
    (PostgreSQL 14 and later); ``acquired_at``: when a holder took it, where that is known
    (pgcoord's lock-holding transactions, and session locks recorded by ``pgcoord run``);
    ``client_addr``: ``None`` for a Unix socket; ``is_self``: the session that asked.
    """

    pid: int
    mode: str
    granted: bool
    application_name: Optional[str]
    client_addr: Optional[str]
    state: Optional[str]
    wait_start: Optional[dt.datetime]
    state_change: Optional[dt.datetime]
    backend_start: Optional[dt.datetime]
    acquired_at: Optional[dt.datetime]
    is_self: bool


def forest_sql(schema: str) -> sql.Composed:
    """The forest's query in ``schema``, quoted as an identifier."""
    return sql.SQL(
        "SELECT pid, blocked_by, blocks, root, depth, blocks_total, in_cycle, wait_locktype, wait_mode,"
        " wait_target, waited_ms, state, wait_event_type, wait_event, database, usename, application_name,"
        " client, backend_type, backend_start, xact_age_ms, query_age_ms, state_age_ms, query"
        " FROM {s}.blocking_forest()"
    ).format(s=sql.Identifier(schema))


def holders_sql(schema: str) -> sql.Composed:
    """The holders' query in ``schema``, quoted as an identifier; one parameter, the key."""
    return sql.SQL(
        "SELECT pid, mode, granted, application_name, client_addr, state, wait_start, state_change,"
        " backend_start, acquired_at, is_self FROM {s}.lock_holders(%s::bigint)"
    ).format(s=sql.Identifier(schema))


def _ms(v: Optional[int]) -> Optional[dt.timedelta]:
    return None if v is None else dt.timedelta(milliseconds=v)


def forest_of(rows: Sequence[Sequence[Any]]) -> BlockingForest:
    """The forest of ``blocking_forest()``'s rows, in :func:`forest_sql`'s column order."""
    out = []
    for r in rows:
        out.append(
            BlockingSession(
                pid=r[0], blocked_by=tuple(r[1] or ()), blocks=tuple(r[2] or ()), root=bool(r[3]), depth=r[4],
                blocks_total=r[5] or 0, in_cycle=bool(r[6]), wait_locktype=r[7], wait_mode=r[8],
                wait_target=r[9], waited=_ms(r[10]), state=r[11], wait_event_type=r[12], wait_event=r[13],
                database=r[14], usename=r[15], application_name=r[16], client=r[17], backend_type=r[18],
                backend_start=r[19], xact_age=_ms(r[20]), query_age=_ms(r[21]), state_age=_ms(r[22]),
                query=r[23],
            )
        )  # fmt: skip
    return BlockingForest(tuple(out))


def holders_of(rows: Sequence[Sequence[Any]]) -> list[LockHolder]:
    """The holders of ``lock_holders()``'s rows, in :func:`holders_sql`'s column order."""
    return [
        LockHolder(
            pid=r[0], mode=r[1], granted=bool(r[2]), application_name=r[3], client_addr=r[4], state=r[5],
            wait_start=r[6], state_change=r[7], backend_start=r[8], acquired_at=r[9], is_self=bool(r[10]),
        )  # fmt: skip
        for r in rows
    ]
