"""What the sync and asyncio clients share: statements, error mapping, checks, backoff."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from typing import Any, Iterable, Optional, Sequence, Union

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from . import errors as E
from ._dsn import scrub
from ._key import key as name_key
from .types import Job, JobResult, JobStatus, LeaseInfo, ReapResult, Renewal

PROTOCOL_VERSION = 1
"""The protocol version this client speaks (``docs/PROTOCOL.md``)."""

DEFAULT_SCHEMA = "pgcoord"
DEFAULT_APPLICATION_NAME = "pgcoord-python"
WAIT_BACKSTOP = 5.0
"""Seconds a lock wait may run past its deadline before the client cancels it itself."""
LOCK_TIMEOUT_MAX_MS = 2147483647

RETRY_TX = frozenset({"40001", "40P01"})

KeyLike = Union[str, int]


def check_schema(schema: object) -> str:
    """Check a schema name (1 to 63 bytes); it is always quoted as an identifier."""
    if not isinstance(schema, str) or not schema or len(schema.encode("utf-8", "replace")) > 63:
        raise E.UsageError(f"schema must be a name of 1 to 63 bytes, not {schema!r}")
    if "\x00" in schema:
        raise E.UsageError("schema must not contain a NUL character")
    return schema


class Statements:
    """The statements of one schema, composed once with the schema quoted as an identifier."""

    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema)
        self.schema = schema

        def f(text: str) -> sql.Composed:
            return sql.SQL(text).format(s=s)

        self.protocol_version = f("SELECT {s}.protocol_version()")
        self.lease_acquire = f(
            "SELECT granted, token, holder, granted_at, expires_at, db_now"
            " FROM {s}.lease_acquire(%s, %s, %s::bigint, %s::integer)"
        )
        self.lease_renew = f(
            "SELECT status, token, holder, granted_at, expires_at, db_now"
            " FROM {s}.lease_renew(%s, %s::bigint, %s::bigint)"
        )
        self.lease_release = f("SELECT {s}.lease_release(%s, %s::bigint)")
        self.fence_next = f("SELECT {s}.fence_next(%s, %s, %s::integer)")
        self.fence_check = f("SELECT {s}.fence_check(%s, %s::bigint)")
        self.enqueue = f(
            "SELECT e.id FROM {s}.enqueue(%s, %s::text[], %s::text[], %s::integer,"
            " coalesce(%s::timestamptz, clock_timestamp() + %s::interval), %s::integer,"
            " %s::integer, %s::text, %s::bigint[], %s::boolean, %s::text) AS e ORDER BY e.ord"
        )
        # The queue's calls (docs/PROTOCOL.md, "Queue: jobs" and "administration").
        self.claim = f(
            "SELECT id, token, attempts, max_attempts, priority, payload, key"
            " FROM {s}.claim(%s, %s::integer, %s::bigint, %s)"
        )
        self.complete = f("SELECT id FROM {s}.complete(%s::bigint[], %s::bigint[], NULL, NULL, %s::text[]::jsonb[])")
        self.fail = f(
            "SELECT {s}.fail(%s::bigint, %s::bigint, %s, %s::bigint, %s::bigint, NULL, NULL, %s::bigint)"
        )
        self.retry_later = f("SELECT {s}.retry_later(%s::bigint, %s::bigint, %s::bigint)")
        self.release = f("SELECT {s}.release(%s::bigint[], %s::bigint[], %s::boolean)")
        self.renew = f("SELECT id, status FROM {s}.renew(%s::bigint[], %s::bigint[], %s::bigint)")
        self.cancel = f("SELECT {s}.cancel(%s::bigint)")
        self.reap = f("SELECT failed, returned, aged, purged FROM {s}.reap()")
        self.job = f(
            "SELECT id, queue, status, attempts, max_attempts, last_error FROM {s}.jobs WHERE id = %s::bigint"
            " UNION ALL"
            " SELECT id, queue, status, attempts, max_attempts, last_error FROM {s}.job_history"
            " WHERE id = %s::bigint"
        )
        self.job_result = f("SELECT status, result FROM {s}.job_result(%s::bigint)")
        self.flow_set = f(
            "SELECT {s}.queue_flow_set(%s, %s::integer, %s::integer, %s::bigint, %s::integer, %s::bigint, %s::integer)"
        )
        self.key_set = f("SELECT {s}.queue_key_set(%s, %s, %s::integer, %s::integer, %s::integer, %s::bigint)")
        self.queue_channel = f("SELECT channel FROM {s}.queue_settings")
        self.next_run_ms = f("SELECT {s}.next_run_ms(%s::text[])")
        self.worker_register = f("SELECT {s}.worker_register(%s, %s::text[], %s::integer)")
        self.worker_unregister = f("SELECT {s}.worker_unregister(%s)")


# Statements that name no schema.
SQL_TRY = {False: "SELECT pg_try_advisory_lock(%s::bigint)", True: "SELECT pg_try_advisory_lock_shared(%s::bigint)"}
SQL_WAIT = {False: "SELECT pg_advisory_lock(%s::bigint)", True: "SELECT pg_advisory_lock_shared(%s::bigint)"}
SQL_UNLOCK = {False: "SELECT pg_advisory_unlock(%s::bigint)", True: "SELECT pg_advisory_unlock_shared(%s::bigint)"}
SQL_XACT_TRY = {
    False: "SELECT pg_try_advisory_xact_lock(%s::bigint)",
    True: "SELECT pg_try_advisory_xact_lock_shared(%s::bigint)",
}
SQL_XACT_WAIT = {
    False: "SELECT pg_advisory_xact_lock(%s::bigint)",
    True: "SELECT pg_advisory_xact_lock_shared(%s::bigint)",
}
SQL_SAVE_TIMEOUTS = "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
# statement_timeout off and the caller's deadline as lock_timeout, for the one lock statement
# that follows in the same transaction (a role's settings neither cut it short nor stretch it).
SQL_SET_TIMEOUTS = "SELECT set_config('statement_timeout', '0', true), set_config('lock_timeout', %s, true)"
SQL_RESTORE_TIMEOUTS = "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true)"
SQL_GRANTED = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory'"
    " AND pid = pg_backend_pid() AND granted"
    " AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())"
    " AND classid = %s::oid AND objid = %s::oid AND objsubid = 1 AND mode = %s)"
)
SQL_ISOLATION = {
    "serializable": "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    "repeatable read": "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    "read committed": "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
}


def lock_key(name: KeyLike) -> tuple[int, str]:
    """The key of a lock name (or a bigint key as is) and how to describe it in messages."""
    if isinstance(name, bool):
        raise E.UsageError("a lock is named by a str or a bigint key, not a bool")
    if isinstance(name, int):
        if not -(1 << 63) <= name < (1 << 63):
            raise E.UsageError(f"lock key {name} is out of the bigint range")
        return name, f"key {name}"
    k = name_key(name)
    return k, f"{name} (key {k})"


def granted_params(k: int, shared: bool) -> tuple[int, int, str]:
    """pg_locks' identity of a bigint advisory key: classid, objid, mode (objsubid is 1)."""
    u = k & 0xFFFFFFFFFFFFFFFF
    return u >> 32, u & 0xFFFFFFFF, "ShareLock" if shared else "ExclusiveLock"


def wait_ms(wait: Optional[float], what: str = "wait") -> Optional[int]:
    """Seconds to whole milliseconds (at least 1), ``None`` for no deadline; refuses the absurd."""
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or math.isnan(wait) or wait < 0:
        raise E.UsageError(f"{what} must be a number of seconds >= 0, or None to wait without a deadline; got {wait!r}")
    if wait == 0:
        return 0
    ms = max(1, math.ceil(wait * 1000))
    if ms > LOCK_TIMEOUT_MAX_MS:
        raise E.UsageError(f"{what} is longer than {LOCK_TIMEOUT_MAX_MS // 1000} s; use None to wait without a deadline")
    return ms


def ttl_ms(ttl: float) -> int:
    """A lease's TTL in whole milliseconds; at least 1 ms."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or math.isnan(ttl) or ttl <= 0 or math.isinf(ttl):
        raise E.UsageError(f"ttl must be a positive number of seconds, not {ttl!r}")
    return max(1, math.ceil(ttl * 1000))


def backoff(attempt: int, base: float, cap: float) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0, min(cap, base * (2 ** min(attempt, 30))))


def check_state(conn: Any, what: str) -> None:
    """Refuse a connection that is busy or in an aborted transaction."""
    if conn.closed:
        raise E.LostError(f"{what}: the connection is closed")
    st = conn.info.transaction_status
    if st == TransactionStatus.ACTIVE:
        raise E.UsageError(f"{what}: the connection is busy with another command")
    if st == TransactionStatus.INERROR:
        raise E.UsageError(f"{what}: the current transaction is aborted; roll it back first")


def in_transaction(conn: Any) -> bool:
    """Whether a transaction block is open on conn."""
    return bool(conn.info.transaction_status == TransactionStatus.INTRANS)


def is_lost(conn: Any) -> bool:
    """Whether conn's session is gone (closed, broken, or libpq says so)."""
    try:
        return bool(conn.closed or conn.broken or conn.pgconn.status != psycopg.pq.ConnStatus.OK)
    except Exception:
        return True


_CLASSES: dict[str, type[E.PgcoordError]] = {
    "22023": E.UsageError,
    "22P02": E.UsageError,
    "22004": E.UsageError,
    "23505": E.ConflictError,
    "55000": E.ConflictError,
    "P0002": E.NotFoundError,
    "PCF01": E.FencedError,
    "PCF02": E.NotFoundError,
    "PCF03": E.LeaseHeldError,
    "40001": E.RetryLaterError,
    "40P01": E.RetryLaterError,
    "25006": E.RetryLaterError,
    "55P03": E.RetryLaterError,
    "57014": E.RetryLaterError,
    "53300": E.RetryLaterError,
    "57P01": E.LostError,
    "57P02": E.LostError,
    "57P03": E.LostError,
    "3D000": E.ConfigError,
    "3F000": E.SchemaError,
}


def error_class(sqlstate: Optional[str]) -> type[E.PgcoordError]:
    """The pgcoord exception class of a SQLSTATE."""
    if sqlstate is None:
        return E.PgcoordError
    if sqlstate.startswith("08"):
        return E.LostError
    if sqlstate.startswith("28"):
        return E.ConfigError
    return _CLASSES.get(sqlstate, E.PgcoordError)


def from_psycopg(e: BaseException, what: str, dsn: Optional[str] = None, conn: Any = None) -> E.PgcoordError:
    """A pgcoord exception for a psycopg one, its message prefixed with what was being done.

    A failure with no SQLSTATE on a connection that is now broken is a lost session.
    """
    state = getattr(e, "sqlstate", None)
    diag = getattr(e, "diag", None)
    cls = error_class(state)
    if state is None and (isinstance(e, psycopg.OperationalError) or (conn is not None and is_lost(conn))):
        cls = E.LostError
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    out = cls(
        scrub(f"{what}: {text}", dsn),
        sqlstate=state,
        detail=scrub(diag.message_detail, dsn) if diag is not None and diag.message_detail else None,
        hint=diag.message_hint if diag is not None else None,
    )
    return out


def version_error(schema: str, e: Optional[BaseException], got: Any) -> E.SchemaError:
    """The refusal of a schema whose protocol version this client does not speak."""
    if e is not None:
        state = getattr(e, "sqlstate", None)
        return E.SchemaError(
            f'the schema "{schema}" has no protocol_version() (SQLSTATE {state}): it is not installed,'
            f" or from before the protocol; run `pgcoord init --schema {schema}` of a release that"
            f" speaks protocol version {PROTOCOL_VERSION}",
            sqlstate=state,
        )
    return E.SchemaError(
        f'the schema "{schema}" speaks protocol version {got}; this client speaks version'
        f" {PROTOCOL_VERSION}: run `pgcoord init --schema {schema}` of a release that speaks version"
        f" {PROTOCOL_VERSION}, or use a client release that speaks version {got}"
    )


def lease_info(name: str, row: Sequence[Any], granted_col: bool) -> LeaseInfo:
    """A LeaseInfo from a row of lease_acquire (granted first) or lease_renew (status first)."""
    first, token, holder, granted_at, expires_at, db_now = row
    if granted_col:
        return LeaseInfo(name, int(token or 0), holder or "", granted_at, expires_at, db_now, bool(first), "ok" if first else "held")
    return LeaseInfo(name, int(token or 0), holder or "", granted_at, expires_at, db_now, first == "ok", str(first))


def enqueue_params(
    queue: str,
    payloads: Iterable[Any],
    unique_keys: Optional[Sequence[Optional[str]]],
    priority: Optional[int],
    run_at: Union[dt.datetime, dt.timedelta, None],
    max_attempts: Optional[int],
    max_deferrals: Optional[int],
    key: Optional[str],
    after: Optional[Iterable[int]],
    run_anyway: Optional[bool],
    group: Optional[str],
) -> list[Any]:
    """The parameters of enqueue() in order; payloads are serialized to JSON text here."""
    if not isinstance(queue, str):
        raise E.UsageError(f"queue must be a str, not {type(queue).__name__}")
    try:
        texts = [json.dumps(p, separators=(",", ":"), ensure_ascii=False, allow_nan=False) for p in payloads]
    except (TypeError, ValueError) as e:
        raise E.UsageError(f"a payload is not JSON-serializable: {e}") from None
    if unique_keys is not None:
        unique_keys = list(unique_keys)
        if len(unique_keys) != len(texts):
            raise E.UsageError(f"unique_keys has {len(unique_keys)} elements, payloads {len(texts)}")
    at: Optional[dt.datetime] = None
    delay: Optional[dt.timedelta] = None
    if isinstance(run_at, dt.datetime):
        if run_at.tzinfo is None:
            raise E.UsageError("run_at must be an aware datetime (with a tzinfo), or a timedelta from now")
        at = run_at
    elif isinstance(run_at, dt.timedelta):
        delay = run_at
    elif run_at is not None:
        raise E.UsageError(f"run_at must be a datetime or a timedelta, not {type(run_at).__name__}")
    deps = [int(x) for x in after] if after is not None else None
    return [queue, texts, unique_keys, priority, at, delay, max_attempts, max_deferrals, key, deps, run_anyway, group]


# ---- the queue's calls --------------------------------------------------------------------

RESULT_MAX = 65536
"""The largest result, in bytes of JSON, that ``complete`` stores (the protocol's bound)."""

DEFAULT_BACKOFF = (1.0, 3600.0)
"""A failed attempt's backoff, base and cap in seconds (as the C library's)."""


def ms(seconds: Optional[float], what: str, minimum: int = 0) -> int:
    """Seconds to whole milliseconds, refusing what is not a number >= minimum ms."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or math.isnan(seconds) or math.isinf(seconds):
        raise E.UsageError(f"{what} must be a number of seconds, not {seconds!r}")
    v = math.ceil(seconds * 1000)
    if v < minimum:
        raise E.UsageError(f"{what} must be at least {minimum / 1000:g} s, not {seconds!r}")
    return v


def result_text(result: Any) -> Optional[str]:
    """A handler's result as the JSON text ``complete`` stores; ``None`` for none. A value that
    is not JSON-serializable, or over 64 kB, is refused here with :class:`UsageError` (the
    server would refuse the second as well)."""
    if result is None:
        return None
    try:
        text = json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise E.UsageError(f"the result is not JSON-serializable: {e}") from None
    n = len(text.encode("utf-8"))
    if n > RESULT_MAX:
        raise E.UsageError(f"the result is {n} bytes of JSON, over the limit of {RESULT_MAX}")
    return text


def id_tokens(ids: Sequence[int], tokens: Sequence[int]) -> tuple[list[int], list[int]]:
    """Checked lists of ids and their claim tokens, of the same length."""
    a, b = [int(i) for i in ids], [int(t) for t in tokens]
    if len(a) != len(b):
        raise E.UsageError(f"{len(a)} ids but {len(b)} tokens: give one token per id")
    return a, b


def jobs_of(queue: str, rows: Iterable[Sequence[Any]]) -> list[Job]:
    """Jobs from the rows of ``claim``."""
    return [Job(int(r[0]), queue, int(r[1]), int(r[2]), int(r[3]), int(r[4]), r[5], r[6]) for r in rows]


def renewal_of(ids: Sequence[int], rows: Iterable[Sequence[Any]]) -> Renewal:
    """A Renewal from the rows of ``renew`` (an id with no row is lost)."""
    st = {int(r[0]): str(r[1]) for r in rows}
    held = [i for i in ids if st.get(i) == "held"]
    lost = [i for i in ids if st.get(i) != "held"]
    return Renewal(held, lost, [i for i in lost if st.get(i) == "cancelled"])


def end_outcome(row: Sequence[Any], jid: int, token: int, what: str) -> str:
    """The outcome of ``fail`` or ``retry_later``: ``retried`` or ``dead``; stale raises."""
    o = str(row[0])
    if o not in ("retried", "dead"):
        raise E.StaleError(f"{what} job {jid}: token {token} is no longer the job's (its lease ran out, or it was cancelled)")
    return o


def queue_error(e: BaseException, what: str, dsn: Optional[str], conn: Any) -> E.PgcoordError:
    """from_psycopg, with the refusals of the queue's calls as their own classes."""
    out = from_psycopg(e, what, dsn, conn)
    if out.sqlstate == "55000" and type(out) is E.ConflictError:
        return E.FinishedError(out.message, sqlstate=out.sqlstate, detail=out.detail, hint=out.hint)
    if out.sqlstate == "55P03":
        return E.ConflictError(out.message, sqlstate=out.sqlstate, detail=out.detail, hint=out.hint)
    return out


def flow_params(
    queue: str,
    key_limit: Optional[int],
    rate: Optional[tuple[int, float]],
    key_rate: Optional[tuple[int, float]],
    fair: Optional[bool],
) -> list[Any]:
    """The parameters of queue_flow_set: -1 keeps a setting, 0 removes it."""

    def r(v: Optional[tuple[int, float]], what: str) -> tuple[int, int]:
        if v is None:
            return -1, -1
        n, per = v
        return int(n), ms(per, f"{what}'s interval") if n else 0

    rn, rms = r(rate, "rate")
    kn, kms = r(key_rate, "key_rate")
    return [queue, -1 if key_limit is None else key_limit, rn, rms, kn, kms, -1 if fair is None else int(fair)]


def job_status_of(jid: int, rows: Sequence[Sequence[Any]]) -> JobStatus:
    if not rows:
        raise E.NotFoundError(f"no job with id {jid}", sqlstate="P0002")
    r = rows[0]
    return JobStatus(int(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), r[5])


def job_result_of(jid: int, row: Sequence[Any]) -> JobResult:
    return JobResult(jid, str(row[0]), row[1])


def reap_of(row: Sequence[Any]) -> ReapResult:
    return ReapResult(int(row[0]), int(row[1]), int(row[2]), int(row[3]))


def drain_notifies(pgconn: Any) -> list[tuple[str, str]]:
    """The notifications libpq has read on a connection, as (channel, payload); reads what the
    socket has first. Raises psycopg.OperationalError when the session is gone."""
    pgconn.consume_input()
    got = []
    while True:
        n = pgconn.notifies()
        if n is None:
            break
        got.append((n.relname.decode("utf-8", "replace"), n.extra.decode("utf-8", "replace")))
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("the session was lost")
    return got
