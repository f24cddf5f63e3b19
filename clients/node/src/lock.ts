/**
 * Advisory locks that cannot leak through a pool. A session lock checks out one connection for
 * its whole life, takes and releases the lock on it, and only then gives it back; a wait is
 * bounded by the caller's `wait` whatever the role's `statement_timeout` and `lock_timeout`
 * say; the handle knows when its session is lost.
 *
 * @module
 */
import { EventEmitter } from "node:events";
import type pg from "pg";
import { ConflictError, LostError, PgcoordError, UsageError, fromPg, isConnectionLoss, sqlstateOf } from "./errors.js";
import { Checkout, abortReason, bounded, checkMs } from "./internal.js";
import { key as keyOf } from "./key.js";

/** Client-side backstop beyond the server's lock_timeout (as the C library's). */
const WAIT_BACKSTOP_MS = 5000;
/** Bound on a statement that never waits for a lock (try, unlock, the pg_locks look). */
const QUICK_MS = 10000;

/** Options of {@link Client.lock} and {@link Client.tryLock}. */
export interface LockOptions {
  /**
   * How long to wait for the lock, in milliseconds: `0` tries once, `Infinity` (the default)
   * waits until it is granted or `signal` aborts. The role's `statement_timeout` and
   * `lock_timeout` neither cut it short nor stretch it.
   */
  wait?: number;
  /** A shared lock (many shared holders at once, none while an exclusive one is held). */
  shared?: boolean;
  /** Aborts the wait (and the checkout of a connection); the promise rejects with its reason. */
  signal?: AbortSignal;
  /**
   * How often the held lock's session is checked, in milliseconds (default 1000). A session
   * that dies is seen at once when the server says so, and at the next check otherwise.
   */
  heartbeatMs?: number;
  /** How long a check may take before the session counts as lost, in milliseconds (default 5000). */
  heartbeatTimeoutMs?: number;
}

/** Options of {@link Client.xactLock} and {@link Client.tryXactLock}. */
export interface XactLockOptions {
  /** As {@link LockOptions.wait}: `0` tries once, `Infinity` (the default) waits. */
  wait?: number;
  /** A shared lock. */
  shared?: boolean;
  /** Aborts the wait; the promise rejects with its reason. */
  signal?: AbortSignal;
}

/** A lock target: a name (hashed with {@link key}) or a key given as a signed 64-bit bigint. */
export type LockTarget = string | bigint;

/** The key and a description of a lock target. @internal */
export function resolveTarget(target: LockTarget): { key: bigint; name: string | undefined; label: string } {
  if (typeof target === "bigint") {
    if (target !== BigInt.asIntN(64, target)) throw new UsageError(`lock key ${target} is not a signed 64-bit integer`);
    return { key: target, name: undefined, label: `key ${target}` };
  }
  const k = keyOf(target);
  return { key: k, name: target, label: `${target} (key ${k})` };
}

const SQL_TRY = ["SELECT pg_try_advisory_lock($1::bigint) AS ok", "SELECT pg_try_advisory_lock_shared($1::bigint) AS ok"];
const SQL_WAIT = ["SELECT pg_advisory_lock($1::bigint)", "SELECT pg_advisory_lock_shared($1::bigint)"];
const SQL_UNLOCK = ["SELECT pg_advisory_unlock($1::bigint) AS ok", "SELECT pg_advisory_unlock_shared($1::bigint) AS ok"];
const SQL_XACT_TRY = [
  "SELECT pg_try_advisory_xact_lock($1::bigint) AS ok",
  "SELECT pg_try_advisory_xact_lock_shared($1::bigint) AS ok",
];
const SQL_XACT_WAIT = ["SELECT pg_advisory_xact_lock($1::bigint)", "SELECT pg_advisory_xact_lock_shared($1::bigint)"];
const SQL_GRANTED =
  "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory'" +
  " AND pid = pg_backend_pid() AND granted" +
  " AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())" +
  " AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid" +
  " AND objsubid = 1 AND mode = $2) AS ok";
const SQL_SAVE = "SELECT current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt";
const SQL_SET = "SELECT set_config('statement_timeout', $1, $3::boolean), set_config('lock_timeout', $2, $3::boolean)";

function idx(shared: boolean): number {
  return shared ? 1 : 0;
}

/**
 * Runs the waiting lock statement under the caller's bound: `lock_timeout` is the wait,
 * `statement_timeout` is off for it (set and put back around it, at the scope `local` says),
 * a cancel request goes to the server when `signal` aborts, and a server silent past the
 * wait plus a backstop has its session destroyed. Returns null when granted, or the error.
 */
async function waitStatement(
  co: Checkout | pg.ClientBase,
  sql: string,
  key: bigint,
  wait: number,
  local: boolean,
  signal: AbortSignal | undefined,
): Promise<unknown> {
  const saved = await bounded<{ st: string; lt: string }>(co, SQL_SAVE, [], QUICK_MS);
  const row = saved.rows[0];
  if (row === undefined) throw new LostError("no answer to current_setting()");
  const lockTimeout = Number.isFinite(wait) ? String(Math.max(1, Math.ceil(wait))) : "0";
  await bounded(co, SQL_SET, ["0", lockTimeout, local], QUICK_MS);
  let failure: unknown = null;
  try {
    await bounded(co, sql, [key.toString()], Number.isFinite(wait) ? wait + WAIT_BACKSTOP_MS : Infinity, signal);
  } catch (err) {
    failure = err;
  }
  if (failure === null || !isConnectionLoss(failure)) {
    // Put the caller's settings back (a failed transaction block is rolled back by the caller).
    if (failure === null || local === false) await bounded(co, SQL_SET, [row.st, row.lt, local], QUICK_MS);
  }
  return failure;
}

/**
 * A session-level advisory lock, held on one connection checked out of the pool for the lock's
 * whole life. Release it with {@link SessionLock.release} (in `finally`) or `await using`.
 *
 * Events: `'lost'` `(err: LostError)`, once, when the session dies while the lock is held (the
 * server then released the lock: someone else may hold it now). {@link SessionLock.lost} is an
 * AbortSignal that aborts at the same moment, to pass to the work the lock protects.
 */
export class SessionLock extends EventEmitter {
  /** The name the lock was taken by, or undefined when it was taken by key. */
  readonly name: string | undefined;
  /** The advisory key (signed 64-bit). */
  readonly key: bigint;
  /** Whether the lock is shared. */
  readonly shared: boolean;
  /** Aborts when the lock is lost (its reason is the {@link LostError}); never on release. */
  readonly lost: AbortSignal;
  private readonly lostController = new AbortController();
  private readonly label: string;
  private state: "held" | "released" | "lost" = "held";
  private lostError: LostError | undefined;
  private timer: NodeJS.Timeout | undefined;
  private busy: Promise<void> = Promise.resolve();

  /** @internal */
  constructor(
    private readonly co: Checkout,
    target: { key: bigint; name: string | undefined; label: string },
    shared: boolean,
    heartbeatMs: number,
    private readonly heartbeatTimeoutMs: number,
  ) {
    super();
    this.name = target.name;
    this.key = target.key;
    this.label = target.label;
    this.shared = shared;
    this.lost = this.lostController.signal;
    co.onDeath((err) => this.markLost(`its session ended (${err.message})`, err));
    if (this.state === "held" && heartbeatMs > 0) {
      this.timer = setInterval(() => this.heartbeat(), heartbeatMs);
      this.timer.unref();
    }
  }

  /** The server process id of the session that holds the lock. */
  get pid(): number {
    return this.co.pid;
  }

  /** True while the lock is held (not released, not lost). */
  get held(): boolean {
    return this.state === "held";
  }

  /** True once the session holding the lock is known to be gone. */
  get isLost(): boolean {
    return this.state === "lost";
  }

  private markLost(why: string, cause?: unknown): void {
    if (this.state !== "held") return;
    this.state = "lost";
    if (this.timer !== undefined) clearInterval(this.timer);
    this.lostError = new LostError(`lock ${this.label} lost: ${why}`, { cause, sqlstate: sqlstateOf(cause) });
    this.co.done(true);
    this.lostController.abort(this.lostError);
    this.emit("lost", this.lostError);
  }

  private heartbeat(): void {
    this.busy = this.busy.then(async () => {
      if (this.state !== "held") return;
      try {
        await bounded(this.co, "SELECT 1", [], this.heartbeatTimeoutMs);
      } catch (err) {
        this.markLost(
          isConnectionLoss(err) ? `its session ended (${(err as Error).message})` : `a heartbeat failed (${String(err)})`,
          err,
        );
      }
    });
  }

  /**
   * Checks now that the session is alive (one round trip).
   *
   * @throws {@link LostError} when the lock is lost
   */
  async check(): Promise<void> {
    if (this.state === "held") {
      this.heartbeat();
      await this.busy;
    }
    if (this.state === "lost") throw this.lostError as LostError;
    if (this.state === "released") throw new UsageError(`lock ${this.label} was released`);
  }

  /**
   * Releases the lock on the session that took it and gives the connection back to the pool.
   * A second call does nothing.
   *
   * @throws {@link LostError} when the lock had been lost (the work it protected ran, at least
   * for a while, without it), or when the server says the session did not hold it
   */
  async release(): Promise<void> {
    if (this.state === "released") return;
    if (this.state === "lost") {
      this.state = "released";
      throw this.lostError as LostError;
    }
    if (this.timer !== undefined) clearInterval(this.timer);
    await this.busy;
    if (this.state !== "held") return this.release();
    this.state = "released";
    let ok: boolean;
    try {
      const r = await bounded<{ ok: boolean }>(this.co, SQL_UNLOCK[idx(this.shared)] as string, [this.key.toString()], QUICK_MS);
      ok = r.rows[0]?.ok === true;
    } catch (err) {
      // The unlock's outcome is unknown: closing the session is what releases the lock for sure.
      this.co.done(true);
      throw new LostError(`releasing lock ${this.label}: ${(err as Error).message}`, { cause: err, sqlstate: sqlstateOf(err) });
    }
    if (!ok) {
      this.co.done(true);
      throw new LostError(`the server says this session does not hold lock ${this.label} (released behind the client's back?)`);
    }
    this.co.done(false);
  }

  /** `await using lock = await client.lock(...)`: releases the lock at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** Takes a session lock on a fresh checkout. Resolves null when busy (try) or timed out. @internal */
export async function acquireSession(
  co: Checkout,
  target: LockTarget,
  opts: LockOptions,
  mask: (s: string) => string,
): Promise<SessionLock | null> {
  const t = resolveTarget(target);
  const shared = opts.shared === true;
  const wait = checkMs("wait", opts.wait ?? Infinity, true);
  const heartbeatMs = checkMs("heartbeatMs", opts.heartbeatMs ?? 1000);
  const heartbeatTimeoutMs = checkMs("heartbeatTimeoutMs", opts.heartbeatTimeoutMs ?? 5000);
  const signal = opts.signal;
  const make = (): SessionLock => new SessionLock(co, t, shared, heartbeatMs, heartbeatTimeoutMs);
  try {
    if (wait === 0) {
      const r = await bounded<{ ok: boolean }>(co, SQL_TRY[idx(shared)] as string, [t.key.toString()], QUICK_MS);
      if (r.rows[0]?.ok !== true) {
        co.done(false);
        return null;
      }
      return make();
    }
    const failure = await waitStatement(co, SQL_WAIT[idx(shared)] as string, t.key, wait, false, signal);
    if (failure === null) return make();
    if (isConnectionLoss(failure)) throw fromPg(failure, `waiting for lock ${t.label}`, mask);
    // The server can grant the lock in the same instant as the timeout or the cancel fires:
    // the lock then survives the error. Look.
    const g = await bounded<{ ok: boolean }>(co, SQL_GRANTED, [t.key.toString(), shared ? "ShareLock" : "ExclusiveLock"], QUICK_MS);
    const granted = g.rows[0]?.ok === true;
    if (signal?.aborted) {
      if (granted) await bounded(co, SQL_UNLOCK[idx(shared)] as string, [t.key.toString()], QUICK_MS);
      co.done(false);
      throw abortReason(signal);
    }
    if (granted) return make();
    co.done(false);
    if (sqlstateOf(failure) === "55P03") return null;
    throw fromPg(failure, `waiting for lock ${t.label}`, mask);
  } catch (err) {
    co.done(true);
    if (signal?.aborted && !(err instanceof PgcoordError)) throw abortReason(signal);
    throw fromPg(err, `lock ${t.label}`, mask);
  }
}

/**
 * Takes a transaction-scoped lock on `tx`, which must be in a transaction block. True when
 * granted; false when busy (try) or timed out. The wait runs under a savepoint, so a timeout
 * or an abort leaves the caller's transaction usable and holds nothing. @internal
 */
export async function acquireXact(
  tx: pg.ClientBase,
  target: LockTarget,
  opts: XactLockOptions,
  mask: (s: string) => string,
): Promise<boolean> {
  if (tx === null || typeof tx !== "object" || typeof (tx as { query?: unknown }).query !== "function")
    throw new UsageError("xactLock: tx must be a pg client inside a transaction");
  const t = resolveTarget(target);
  const shared = opts.shared === true;
  const wait = checkMs("wait", opts.wait ?? Infinity, true);
  const signal = opts.signal;
  signal?.throwIfAborted();
  try {
    await bounded(tx, "SAVEPOINT pgcoord_xact_lock", [], QUICK_MS);
  } catch (err) {
    if (sqlstateOf(err) === "25P01")
      throw new UsageError(
        `a transaction-scoped lock (${t.label}) needs a transaction: take it inside client.transaction() or after BEGIN`,
        { sqlstate: "25P01", cause: err },
      );
    throw fromPg(err, `lock ${t.label}`, mask);
  }
  let failure: unknown = null;
  let granted = false;
  try {
    if (wait === 0) {
      const r = await bounded<{ ok: boolean }>(tx, SQL_XACT_TRY[idx(shared)] as string, [t.key.toString()], QUICK_MS);
      granted = r.rows[0]?.ok === true;
    } else {
      failure = await waitStatement(tx, SQL_XACT_WAIT[idx(shared)] as string, t.key, wait, true, signal);
      granted = failure === null;
    }
  } catch (err) {
    failure = err;
  }
  if (failure !== null && isConnectionLoss(failure)) throw fromPg(failure, `waiting for lock ${t.label}`, mask);
  try {
    // A rolled-back savepoint releases a transaction lock granted in the race with the error.
    if (failure !== null) await bounded(tx, "ROLLBACK TO SAVEPOINT pgcoord_xact_lock", [], QUICK_MS);
    await bounded(tx, "RELEASE SAVEPOINT pgcoord_xact_lock", [], QUICK_MS);
  } catch (err) {
    throw fromPg(err, `lock ${t.label}`, mask);
  }
  if (failure === null) return granted;
  if (signal?.aborted) throw abortReason(signal);
  if (sqlstateOf(failure) === "55P03") return false;
  throw fromPg(failure, `waiting for lock ${t.label}`, mask);
}

/** The error of a lock not granted: busy (try) or timed out (wait). @internal */
export function notGranted(label: string, wait: number): ConflictError {
  return wait === 0
    ? new ConflictError(`lock ${label} is held by another session`)
    : new ConflictError(`timed out after ${wait} ms waiting for lock ${label}`, { sqlstate: "55P03" });
}
