"""pgcoord for Python: coordination through PostgreSQL, on psycopg 3, sync and asyncio.

- :class:`Client` (threads) and :class:`AsyncClient` (asyncio), the same names on both:
  advisory locks that cannot leak through a pool, the transaction runner that retries
  40001/40P01, leases with fencing tokens, enqueue into the job queue.
- :func:`key`: a lock name's advisory key, the same in every pgcoord client.
- :mod:`pgcoord.diag`: who waits for whom and who holds a lock, as dataclasses
  (``blocking_forest()``, ``lock_holders()`` on both clients).
- :mod:`pgcoord.errors`: the exceptions, each carrying the SQLSTATE.

The client speaks version 1 of the pgcoord protocol (``docs/PROTOCOL.md``).
"""

from ._common import PROTOCOL_VERSION
from ._key import key, xxh64
from .aio import AsyncClient, AsyncLease, AsyncLock
from .client import Client, Lease, Lock
from .diag import BlockingForest, BlockingSession, BlockingTree, LockHolder
from .errors import (
    CommitUnknownError,
    ConfigError,
    ConflictError,
    FencedError,
    FinishedError,
    LeaseHeldError,
    LockBusyError,
    LockTimeoutError,
    LostError,
    NotFoundError,
    NotHeldError,
    PgcoordError,
    RetryExhaustedError,
    RetryLaterError,
    SchemaError,
    StaleError,
    UsageError,
)
from .types import Job, JobResult, JobStatus, LeaseInfo, PoolerInfo, ReapResult, Renewal
from .worker import AsyncWorker, RetryLater, Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION",
    "key",
    "xxh64",
    "Client",
    "Lock",
    "Lease",
    "AsyncClient",
    "AsyncLock",
    "AsyncLease",
    "LeaseInfo",
    "PoolerInfo",
    "BlockingForest",
    "BlockingSession",
    "BlockingTree",
    "LockHolder",
    "Job",
    "JobStatus",
    "JobResult",
    "Renewal",
    "ReapResult",
    "Worker",
    "AsyncWorker",
    "WorkerStats",
    "RetryLater",
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
