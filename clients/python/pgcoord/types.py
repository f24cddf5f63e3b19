"""The data pgcoord hands back: plain frozen dataclasses."""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["LeaseInfo", "Job", "JobStatus", "JobResult", "Renewal", "ReapResult", "PoolerInfo", "FINISHED"]

FINISHED = frozenset({"succeeded", "failed", "cancelled"})
"""The statuses of a job that has finished (its row is in the history)."""


@dataclass(frozen=True)
class LeaseInfo:
    """One answer of the server about a lease (``lease_acquire``, ``lease_renew``).

    ``token`` is the fencing token of the grant; ``holder`` who holds it; ``expires_at`` when
    it runs out by the database clock, ``db_now`` that clock when the answer was made (their
    difference is what is left, whatever the local clock says). ``granted`` and ``status``
    say what the call did: granted true, or a renewal's status ``ok``, ``expired``,
    ``released``, ``superseded`` or ``unknown``.
    """

    name: str
    token: int
    holder: str
    granted_at: Optional[dt.datetime]
    expires_at: Optional[dt.datetime]
    db_now: dt.datetime
    granted: bool = True
    status: str = "ok"

    @property
    def remaining(self) -> float:
        """Seconds left on the lease by the database clock (0 when released or expired)."""
        if self.expires_at is None:
            return 0.0
        return max(0.0, (self.expires_at - self.db_now).total_seconds())


@dataclass(frozen=True)
class Job:
    """A job as a claim returns it: what a worker's handler receives.

    ``token`` is the claim token that every call ending or extending this run must give back
    (the protocol's rule 2); ``attempts`` counts this run; ``key`` is the concurrency key.

    In a worker, two events tell a handler to stop its side effects: ``cancelled`` is set when
    an administrator cancelled the job (``cancel``), ``lost`` whenever the job is no longer
    this worker's (cancelled, its lease lost, released at a stop). A sync handler checks them
    (``job.cancelled.is_set()``, ``job.lost.wait(1)``); an async handler is cancelled instead
    (``asyncio.CancelledError`` at its next ``await``). Whatever it returns then is dropped.
    """

    id: int
    queue: str
    token: int
    attempts: int
    max_attempts: int
    priority: int
    payload: Any
    key: Optional[str] = None
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    lost: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)


@dataclass(frozen=True)
class JobStatus:
    """Where a job is now (``Client.job``): ``status`` is ``waiting``, ``scheduled``,
    ``pending``, ``running``, or in the history ``succeeded``, ``failed``, ``cancelled``."""

    id: int
    queue: str
    status: str
    attempts: int
    max_attempts: int
    last_error: Optional[str] = None

    @property
    def finished(self) -> bool:
        """Whether the job has finished (succeeded, failed or cancelled)."""
        return self.status in FINISHED


@dataclass(frozen=True)
class JobResult:
    """A job's status and the result its handler gave (``Client.job_result``): ``result`` is
    the decoded JSON value, ``None`` when there is none (always for failed and cancelled)."""

    id: int
    status: str
    result: Any = None

    @property
    def finished(self) -> bool:
        """Whether the job has finished (succeeded, failed or cancelled)."""
        return self.status in FINISHED


@dataclass(frozen=True)
class Renewal:
    """What a renewal of leases found (``Client.renew``): ``held`` the ids renewed; ``lost``
    those no longer this claim's (reaped, claimed again, or cancelled); ``cancelled`` those of
    ``lost`` that an administrator cancelled."""

    held: list[int]
    lost: list[int]
    cancelled: list[int]


@dataclass(frozen=True)
class ReapResult:
    """One pass of the reaper (``Client.reap``): expired leases ``returned`` to pending or
    ``failed`` for good, pending jobs ``aged`` ahead, history rows ``purged``."""

    failed: int
    returned: int
    aged: int
    purged: int


POOLER_MODES = ("none", "session", "transaction", "statement", "unknown")


@dataclass(frozen=True)
class PoolerInfo:
    """What is between the client and PostgreSQL (``Client.pooler()``), as the C library's
    ``pgc_conn_pooler()`` finds it.

    ``mode`` is ``none`` (a direct session), ``session``, ``transaction`` or ``statement`` (a
    pooler in that pool mode), or ``unknown`` (something is in between, and its kind could not
    be told); ``why`` says what showed it. ``client_pid`` is the backend pid the connection
    was told at its start (BackendKeyData), ``server_pid`` what ``pg_backend_pid()`` said.
    """

    mode: str
    why: str
    client_pid: int
    server_pid: int

    @property
    def session_kept(self) -> bool:
        """Whether each connection keeps its server session between transactions (no pooler,
        or a session-mode one): only then do session locks and ``LISTEN`` work."""
        return self.mode in ("none", "session")

    @property
    def no_prepare(self) -> bool:
        """Whether prepared statements are unusable: the next transaction may run on a server
        session that lacks them (transaction and statement modes)."""
        return self.mode in ("transaction", "statement")
