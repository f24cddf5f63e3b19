/**
 * Errors: every failure of this client is a {@link PgcoordError} whose `code` says what kind of
 * failure it is (the same classes as the pgcoord tool's exit codes and the other clients), and
 * whose `sqlstate` is the server's SQLSTATE when the server raised it.
 *
 * @module
 */

/**
 * The class of a failure:
 * - `usage`: a bad argument or a call in the wrong place; fix the caller
 * - `conflict`: taken, busy, timed out waiting, a duplicate unique key, the wrong state
 * - `notFound`: no such job, lease, group or fencing token
 * - `lost`: the session (and whatever it held) is gone, or a COMMIT's outcome is unknown
 * - `retryLater`: serialization failure, deadlock, a standby, retries exhausted
 * - `schema`: no pgcoord schema, or one speaking another protocol version
 * - `fenced`: a fencing token older than the newest granted for its name
 * - `stale`: a claim token that is no longer its job's (the lease ran out, the job was
 *   cancelled or claimed again): the outcome was not recorded
 * - `sql`: any other server error
 */
export type ErrorCode = "usage" | "conflict" | "notFound" | "lost" | "retryLater" | "schema" | "fenced" | "stale" | "sql";

/** What a {@link PgcoordError} may carry besides its message. */
export interface PgcoordErrorOptions {
  /** The server's SQLSTATE, when the server raised the error. */
  sqlstate?: string | undefined;
  /** The server's DETAIL. */
  detail?: string | undefined;
  /** The server's HINT, or the client's advice. */
  hint?: string | undefined;
  /** The underlying error (a `pg` DatabaseError, a socket error). */
  cause?: unknown;
}

/** The base class of every error this client throws. Test `err.code`, or `instanceof` a subclass. */
export class PgcoordError extends Error {
  /** The class of the failure. */
  readonly code: ErrorCode = "sql";
  /** The server's SQLSTATE (five characters), or undefined when the server did not raise it. */
  readonly sqlstate: string | undefined;
  /** The server's DETAIL, if any. */
  readonly detail: string | undefined;
  /** The server's HINT or the client's advice, if any. */
  readonly hint: string | undefined;

  /** @param message - what failed, naming the object */
  constructor(message: string, options: PgcoordErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.sqlstate = options.sqlstate;
    this.detail = options.detail;
    this.hint = options.hint;
  }
}

/** A bad argument, or a call where it cannot work (a transaction lock outside a transaction). */
export class UsageError extends PgcoordError {
  override readonly code = "usage";
}

/** Taken, busy, timed out waiting, a duplicate unique key, or an object in the wrong state. */
export class ConflictError extends PgcoordError {
  override readonly code = "conflict";
}

/** No such job, group, schedule, lease, or fencing token. */
export class NotFoundError extends PgcoordError {
  override readonly code = "notFound";
}

/** The session is gone, and with it what it held (a lock); nothing sent on it is known to have happened. */
export class LostError extends PgcoordError {
  override readonly code = "lost";
}

/**
 * The session died after COMMIT was sent: the transaction may or may not have committed. It is
 * never retried; only the caller can find out (look for what the transaction wrote).
 */
export class CommitUnknownError extends LostError {
  /** Always true: tells this error from other losses. */
  readonly commitUnknown = true;
}

/** Serialization failure, deadlock, a read-only standby, or retries exhausted: try again later. */
export class RetryLaterError extends PgcoordError {
  override readonly code = "retryLater";
}

/** No pgcoord schema, or one that speaks another protocol version. The message names the fix. */
export class SchemaError extends PgcoordError {
  override readonly code = "schema";
}

/** A fencing token older than the newest granted for its name: this writer must stop. */
export class FencedError extends PgcoordError {
  override readonly code = "fenced";
}

/**
 * A completion, failure, deferral or release whose claim token is no longer the job's: its
 * lease ran out (the reaper returned it, another worker may hold it now) or it was cancelled.
 * Nothing was changed.
 */
export class StaleError extends PgcoordError {
  override readonly code = "stale";
  /** The job. */
  readonly jobId: bigint;
  /** The token that is no longer the job's. */
  readonly token: bigint;

  /** @param jobId - the job; @param token - the stale claim token */
  constructor(jobId: bigint, token: bigint, message?: string) {
    super(message ?? `job ${jobId} is not running under token ${token}: its lease ran out, or it was cancelled or claimed again`);
    this.jobId = jobId;
    this.token = token;
  }
}

/** Any other server error, as the server said it. */
export class SqlError extends PgcoordError {
  override readonly code = "sql";
}

/** The fields of a `pg` DatabaseError this client reads. */
interface PgErrorLike {
  message?: unknown;
  code?: unknown;
  detail?: unknown;
  hint?: unknown;
  severity?: unknown;
}

function str(v: unknown): string | undefined {
  return typeof v === "string" && v !== "" ? v : undefined;
}

/** The SQLSTATE of a server error, or undefined for anything else (a socket error's code is not one). */
export function sqlstateOf(err: unknown): string | undefined {
  if (err instanceof PgcoordError) return err.sqlstate;
  if (typeof err !== "object" || err === null) return undefined;
  const c = (err as PgErrorLike).code;
  return typeof c === "string" && /^[0-9A-Z]{5}$/.test(c) ? c : undefined;
}

/** Is this SQLSTATE one of a session that is gone (08xxx, 57P01..57P03)? */
export function isLostState(state: string | undefined): boolean {
  return state !== undefined && (state.startsWith("08") || /^57P0[123]$/.test(state));
}

/**
 * Is this error a sign that the session is gone: a server error of class 08 or 57P01..57P03, or
 * an error `pg` raises for a dead socket (no SQLSTATE)?
 */
export function isConnectionLoss(err: unknown): boolean {
  if (err instanceof LostError) return true;
  const st = sqlstateOf(err);
  if (st !== undefined) return isLostState(st);
  if (typeof err !== "object" || err === null) return false;
  const msg = String((err as PgErrorLike).message ?? "");
  const code = (err as PgErrorLike).code;
  return (
    /Connection terminated|not queryable|ECONNRESET|EPIPE|socket|timeout expired|Client was closed/i.test(msg) ||
    (typeof code === "string" && /^E[A-Z]+$/.test(code))
  );
}

type Ctor = new (message: string, options?: PgcoordErrorOptions) => PgcoordError;

/** The error class of a SQLSTATE (docs/PROTOCOL.md, "Errors"). */
export function classOfState(state: string | undefined): Ctor {
  if (state === undefined) return LostError;
  switch (state) {
    case "22023":
    case "22P02":
    case "22004":
    case "25P01":
      return UsageError;
    case "23505":
    case "55000":
    case "55P03":
    case "PCF03":
      return ConflictError;
    case "P0002":
    case "PCF02":
      return NotFoundError;
    case "PCF01":
      return FencedError;
    case "40001":
    case "40P01":
    case "25006":
      return RetryLaterError;
    case "3F000":
      return SchemaError;
  }
  if (isLostState(state)) return LostError;
  return SqlError;
}

/**
 * Turns anything thrown by `pg` into a {@link PgcoordError} of the class its SQLSTATE says,
 * keeping the original as `cause`. A PgcoordError is returned as it is.
 *
 * @param err - what was thrown
 * @param context - prefixed to the message ("enqueue to queue \"q\"")
 * @param mask - applied to the message (hides passwords)
 */
export function fromPg(err: unknown, context?: string, mask: (s: string) => string = (s) => s): PgcoordError {
  if (err instanceof PgcoordError) return err;
  const e = (typeof err === "object" && err !== null ? err : { message: String(err) }) as PgErrorLike;
  const state = sqlstateOf(err);
  const raw = mask(String(e.message ?? err));
  const message = context ? `${context}: ${raw}` : raw;
  const Cls = state === undefined && !isConnectionLoss(err) ? SqlError : classOfState(state);
  return new Cls(message, {
    sqlstate: state,
    detail: str(e.detail) === undefined ? undefined : mask(str(e.detail) as string),
    hint: str(e.hint),
    cause: err,
  });
}
