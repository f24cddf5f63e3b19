"""pgcoord's exceptions: one small hierarchy, each carrying the server's SQLSTATE when there is one.

The classes follow the protocol's error classes (``docs/PROTOCOL.md``), which the command
line tool's exit codes also follow::

    PgcoordError
     ├── UsageError          fix the input: retrying the same call cannot succeed
     ├── ConfigError         fix the configuration (credentials, database, host)
     ├── SchemaError         the schema is missing or speaks another protocol version
     ├── ConflictError       the object is taken or in the wrong state
     │    ├── LockBusyError  a try-lock found the lock held
     │    ├── LeaseHeldError the lease is held by another holder
     │    ├── StaleError     a claim token that is no longer the job's
     │    └── FinishedError  the job has finished already
     ├── NotFoundError       the named job, group, lease or token does not exist
     ├── FencedError         a fencing token older than the newest granted
     ├── RetryLaterError     transient: try again after a pause
     │    ├── LockTimeoutError      the wait for a lock or lease reached its deadline
     │    └── RetryExhaustedError   a transaction kept failing with 40001/40P01
     └── LostError           the session is gone; a lock or lease held on it is lost
          ├── NotHeldError         the server says the lock was no longer held at unlock
          └── CommitUnknownError   the session died after COMMIT was sent
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "PgcoordError",
    "UsageError",
    "ConfigError",
    "SchemaError",
    "ConflictError",
    "LockBusyError",
    "LeaseHeldError",
    "StaleError",
    "FinishedError",
    "NotFoundError",
    "FencedError",
    "RetryLaterError",
    "LockTimeoutError",
    "RetryExhaustedError",
    "LostError",
    "NotHeldError",
    "CommitUnknownError",
]


class PgcoordError(Exception):
    """The base of every error pgcoord raises.

    ``sqlstate`` is the server's five-character code, or ``None`` for an error found on the
    client side; ``detail`` and ``hint`` are the server's, when it gave them.
    """

    def __init__(
        self,
        message: str,
        *,
        sqlstate: Optional[str] = None,
        detail: Optional[str] = None,
        hint: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(PgcoordError):
    """A bad argument or a call in the wrong state: nothing was done; fix the call."""


class ConfigError(PgcoordError):
    """A setting that cannot work: the credentials, the database name, the host."""


class SchemaError(PgcoordError):
    """The pgcoord schema is not installed, or speaks a protocol version this client does not."""


class ConflictError(PgcoordError):
    """The object is taken (a unique key, a lock, a lease) or in the wrong state."""


class LockBusyError(ConflictError):
    """A try-lock (``wait=0``) found the lock held by another session."""


class LeaseHeldError(ConflictError):
    """The lease is held by another holder; ``holder`` and ``token`` describe it."""

    holder: Optional[str] = None
    token: Optional[int] = None


class StaleError(ConflictError):
    """A call naming a job's claim token that is no longer the job's: its lease ran out and it
    was reaped or claimed again, or it was cancelled. Nothing was changed (the protocol's
    rule 2)."""


class FinishedError(ConflictError):
    """The job has finished already (SQLSTATE 55000 from ``cancel``): nothing was changed."""


class NotFoundError(PgcoordError):
    """The named job, group, schedule, lease or fencing token does not exist (P0002, PCF02)."""


class FencedError(PgcoordError):
    """A fencing token older than the newest granted for its name (PCF01): roll back and stop."""


class RetryLaterError(PgcoordError):
    """A transient failure (a standby, a lock timeout, a cancel): try again after a pause."""


class LockTimeoutError(RetryLaterError):
    """The wait for a lock or a lease reached its deadline; nothing is held and nothing queued."""


class RetryExhaustedError(RetryLaterError):
    """A transaction failed with a serialization failure or deadlock on every attempt."""

    attempts: int = 0


class LostError(PgcoordError):
    """The session is gone: whatever was held on it (a lock) is released by the server."""


class NotHeldError(LostError):
    """The server says this session no longer held the lock when it was released."""


class CommitUnknownError(LostError):
    """The session died after COMMIT was sent: the transaction may or may not have committed."""
