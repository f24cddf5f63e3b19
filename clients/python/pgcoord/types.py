"""The data pgcoord hands back: plain frozen dataclasses."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["LeaseInfo", "Job"]


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
    """

    id: int
    queue: str
    token: int
    attempts: int
    max_attempts: int
    priority: int
    payload: Any
    key: Optional[str] = None
