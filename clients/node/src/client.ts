/**
 * The pgcoord client: one schema, reached through a node-postgres pool.
 *
 * @module
 */
import * as os from "node:os";
import pg from "pg";
import {
  CommitUnknownError,
  ConflictError,
  LostError,
  NotFoundError,
  StaleError,
  RetryLaterError,
  SchemaError,
  UsageError,
  fromPg,
  isConnectionLoss,
  sqlstateOf,
} from "./errors.js";
import { type BlockingForest, type LockHolder, FOREST_COLUMNS, HOLDER_COLUMNS, forestOf, holdersOf } from "./diag.js";
import { abortReason, bounded, checkMs, checkout, dsnPassword, masker, sleep } from "./internal.js";
import {
  type ClaimOptions,
  type ClaimRow,
  type Completion,
  type FailOptions,
  type FailOutcome,
  type FlowSettings,
  type Job,
  type JobInfo,
  type JobResult,
  type JobResultOptions,
  type JobStatus,
  type KeySettings,
  type ReapResult,
  type Renewal,
  FINISHED,
  jobOf,
  rateArgs,
  resultText,
  settingArg,
} from "./queue.js";
import { type PoolerInfo, probePooler, sessionLockRefusal } from "./pooler.js";
import { Worker, type WorkerOptions } from "./worker.js";
import {
  Lease,
  type LeaseHost,
  type LeaseGrant,
  type LeaseOptions,
  type LeaseRenewal,
  type LeaseRow,
  type LeaseStatus,
  checkLeaseArgs,
  leaseInfo,
} from "./lease.js";
import {
  type LockOptions,
  type LockTarget,
  type SessionLock,
  type XactLockOptions,
  acquireSession,
  acquireXact,
  notGranted,
  resolveTarget,
} from "./lock.js";

/** The protocol version this client speaks (docs/PROTOCOL.md). */
export const PROTOCOL_VERSION = 1;

/** The client's version. */
export const CLIENT_VERSION = "0.1.0";

/** The default `application_name` of the pools this client creates. */
export const APPLICATION_NAME = "pgcoord-node";

/** Options of {@link Client}: a pool or a DSN, and the schema. */
export interface ClientOptions {
  /**
   * The pool to use. Session locks check a connection out of it for their whole life, so size
   * it for the locks held at once plus the rest. The client never ends a pool it was given.
   */
  pool?: pg.Pool;
  /**
   * A connection string (URI or keywords), when no pool is given: the client creates a pool
   * named `application_name=pgcoord-node` (unless the DSN names one) and ends it in {@link Client.end}.
   */
  dsn?: string;
  /** More settings for the pool created from `dsn` (`max`, `ssl`, ...). */
  poolConfig?: pg.PoolConfig;
  /** The application_name of the pool created from `dsn` (default `pgcoord-node`). */
  applicationName?: string;
  /** The pgcoord schema (default `pgcoord`, as `pgcoord init --schema` named it). */
  schema?: string;
  /**
   * What sits between the client and PostgreSQL, taken as it is instead of
   * {@link Client.pooler}'s probe: `none`, `session`, `transaction` or `statement`.
   */
  pooler?: "none" | "session" | "transaction" | "statement";
}

/** Isolation levels of {@link Client.transaction}. */
export type Isolation = "read committed" | "repeatable read" | "serializable";

/** Options of {@link Client.transaction}. */
export interface TransactionOptions {
  /** Default `read committed`. */
  isolation?: Isolation;
  /** A READ ONLY transaction. */
  readOnly?: boolean;
  /** How many times the body may run in all (default 10). */
  maxAttempts?: number;
  /** The first backoff ceiling in ms (default 10); it doubles per retry. */
  backoffBaseMs?: number;
  /** The cap of the backoff ceiling in ms (default 1000). The pause before retry k is uniform in [0, min(cap, base * 2^(k-1))]. */
  backoffMaxMs?: number;
  /** Aborts between attempts (and the checkout); a running body sees it if it passes it on. */
  signal?: AbortSignal;
  /** Called before each retry with the error that caused it, the attempt that failed and the pause. */
  onRetry?: (err: unknown, attempt: number, pauseMs: number) => void;
}

/** Options of {@link Client.enqueue} and {@link Client.enqueueMany}. */
export interface EnqueueOptions {
  /** Higher runs first (-32768..32767, default 0). */
  priority?: number;
  /** Not before this instant. */
  runAt?: Date;
  /** Not before this many milliseconds from now, by the database's clock (not with `runAt`). */
  delayMs?: number;
  /** A job of the queue with this key, pending or running, makes this one a no-op (its id comes back null). */
  uniqueKey?: string;
  /** {@link Client.enqueueMany}: one unique key (or null) per payload. */
  uniqueKeys?: Array<string | null>;
  /** The concurrency key (flow control: at most the queue's limit of jobs of a key run at once). */
  key?: string;
  /** Runs at most this many times (default 25). */
  maxAttempts?: number;
  /** How many times a worker may defer it (default 100). */
  maxDeferrals?: number;
  /** Job ids this job waits for: it runs when the last one succeeds. */
  after?: Array<bigint | number>;
  /** When a job of `after` fails or is cancelled: `cancel` this one (default) or `run` it anyway. */
  onDependencyFailure?: "cancel" | "run";
  /** Adds the jobs to this open group. */
  group?: string;
}

/** Where a call runs: on the caller's connection (inside its transaction), or on the pool. */
export interface On {
  /** A connection of the caller, typically inside its transaction: the call commits or rolls back with it. */
  client?: pg.ClientBase;
}

const SCHEMA_NAME_MAX = 63;

function checkSchema(schema: unknown): string {
  if (typeof schema !== "string" || schema === "") throw new UsageError("schema name is empty");
  if (Buffer.byteLength(schema) > SCHEMA_NAME_MAX) throw new UsageError(`schema name is longer than ${SCHEMA_NAME_MAX} bytes`);
  if (schema.includes("$")) throw new UsageError("schema name must not contain '$'");
  if (/[\u0000-\u001f\u007f]/.test(schema)) throw new UsageError("schema name must not contain control characters");
  return schema;
}

/** The pause before retry `retry` (1-based): full jitter under a doubling, capped ceiling. */
function backoffMs(retry: number, base: number, cap: number): number {
  const ceiling = Math.min(cap, base * 2 ** Math.min(retry - 1, 30));
  return Math.floor(Math.random() * (ceiling + 1));
}

const RETRYABLE = new Set(["40001", "40P01"]);

function checkQueue(queue: unknown): void {
  if (typeof queue !== "string" || queue === "") throw new UsageError("queue name must be a non-empty string");
}

/** A job id or claim token as the text of a bigint parameter. */
function idText(v: unknown, what: string, anySign = false): string {
  let b: bigint;
  try {
    b = typeof v === "bigint" ? v : typeof v === "number" && Number.isSafeInteger(v) ? BigInt(v) : (undefined as never);
  } catch {
    throw new UsageError(`${what} must be a bigint`);
  }
  if (typeof b !== "bigint" || BigInt.asIntN(64, b) !== b || (!anySign && b < 1n))
    throw new UsageError(`${what} must be a ${anySign ? "" : "positive "}64-bit integer, not ${String(v)}`);
  return b.toString();
}

/** fail()'s and retry_later()'s outcome, or a StaleError. */
function outcome(o: string | undefined, id: bigint, token: bigint): FailOutcome {
  if (o === "retried" || o === "dead") return o;
  throw new StaleError(id, token);
}

/** A renewal from renew()'s rows. @internal */
export function renewalOf(rows: Array<{ id: string; status: string }>): Renewal {
  const out: Renewal = { held: [], lost: [], cancelled: [] };
  for (const r of rows) {
    const id = BigInt(r.id);
    if (r.status === "held") out.held.push(id);
    else {
      out.lost.push(id);
      if (r.status === "cancelled") out.cancelled.push(id);
    }
  }
  return out;
}

/** The default worker name recorded on claimed jobs: `node-PID@HOST`. */
export function defaultWorkerName(): string {
  return `node-${process.pid}@${os.hostname()}`;
}

/**
 * A pgcoord client: the protocol's SQL functions in one schema, through a node-postgres pool.
 *
 * @example
 * ```ts
 * import pg from "pg";
 * import { Client } from "pgcoord";
 * const client = await Client.connect({ pool: new pg.Pool({ connectionString }), schema: "pgcoord" });
 * await using lock = await client.lock("nightly-report", { wait: 5000 });
 * ```
 */
export class Client {
  /** The pool every call uses. */
  readonly pool: pg.Pool;
  /** The schema's name, as given. */
  readonly schema: string;
  private readonly schemaQ: string;
  private readonly ownsPool: boolean;
  private readonly mask: (s: string) => string;
  private checked: Promise<number> | undefined;
  private channel: string | undefined;
  private readonly poolerGiven: PoolerInfo | undefined;
  private poolerFound: Promise<PoolerInfo> | undefined;

  /**
   * Makes a client; nothing is sent until the first call (or {@link Client.ready}).
   *
   * @throws {@link UsageError} for a bad schema name, or neither/both of `pool` and `dsn`
   */
  constructor(options: ClientOptions) {
    if (options === null || typeof options !== "object") throw new UsageError("Client: options must be an object");
    this.schema = checkSchema(options.schema ?? "pgcoord");
    this.schemaQ = pg.escapeIdentifier(this.schema);
    if (options.pooler !== undefined) {
      if (!["none", "session", "transaction", "statement"].includes(options.pooler))
        throw new UsageError(
          `Client: pooler must be "none", "session", "transaction" or "statement", not ${JSON.stringify(options.pooler)}`,
        );
      this.poolerGiven = {
        mode: options.pooler, why: "as the option pooler says", clientPid: 0, serverPid: 0,
        sessionKept: options.pooler === "none" || options.pooler === "session",
      };
    }
    if ((options.pool === undefined) === (options.dsn === undefined))
      throw new UsageError("Client: give either pool or dsn");
    if (options.pool !== undefined) {
      this.pool = options.pool;
      this.ownsPool = false;
      this.mask = masker(undefined);
    } else {
      const dsn = options.dsn as string;
      if (typeof dsn !== "string" || dsn === "") throw new UsageError("Client: dsn must be a non-empty string");
      this.mask = masker(dsnPassword(dsn));
      const cfg: pg.PoolConfig = { ...options.poolConfig, connectionString: dsn };
      if (options.applicationName !== undefined) cfg.application_name = options.applicationName;
      else (cfg as { fallback_application_name?: string }).fallback_application_name = APPLICATION_NAME;
      this.pool = new pg.Pool(cfg);
      // An idle connection whose server went away is dropped by the pool; without a listener
      // its error would end the process.
      this.pool.on("error", () => undefined);
      this.ownsPool = true;
    }
  }

  /**
   * Makes a client and checks the schema's protocol version.
   *
   * @throws {@link SchemaError} when the schema is missing or speaks another version
   */
  static async connect(options: ClientOptions): Promise<Client> {
    const c = new Client(options);
    await c.ready();
    return c;
  }

  /** `schema.fn` with the schema quoted. @internal */
  private fn(name: string): string {
    return `${this.schemaQ}.${name}`;
  }

  /**
   * Checks once that the schema speaks {@link PROTOCOL_VERSION} (every call waits for it).
   *
   * @returns the schema's protocol version
   * @throws {@link SchemaError} naming both versions and the fix (`pgcoord init`)
   */
  async ready(): Promise<number> {
    if (this.checked === undefined) {
      this.checked = this.checkProtocol();
      this.checked.catch(() => {
        this.checked = undefined;
      });
    }
    return await this.checked;
  }

  private async checkProtocol(): Promise<number> {
    let v: number;
    try {
      const r = await this.pool.query<{ v: number }>(`SELECT ${this.fn("protocol_version")}()::int AS v`);
      v = Number(r.rows[0]?.v);
    } catch (err) {
      const st = sqlstateOf(err);
      if (st === "3F000")
        throw new SchemaError(
          `schema "${this.schema}" does not exist: create it with \`pgcoord init --schema ${this.schema}\``,
          { sqlstate: st, cause: err, hint: `pgcoord init --schema ${this.schema}` },
        );
      if (st === "42883")
        throw new SchemaError(
          `schema "${this.schema}" has no protocol_version(): it is from before the protocol;` +
            ` upgrade it with \`pgcoord init --schema ${this.schema}\``,
          { sqlstate: st, cause: err, hint: `pgcoord init --schema ${this.schema}` },
        );
      throw fromPg(err, `checking schema "${this.schema}"`, this.mask);
    }
    if (v !== PROTOCOL_VERSION)
      throw new SchemaError(
        `schema "${this.schema}" speaks pgcoord protocol version ${v}, this client speaks version ${PROTOCOL_VERSION}:` +
          ` run \`pgcoord init --schema ${this.schema}\` of a pgcoord release that speaks version ${PROTOCOL_VERSION},` +
          ` or use a client that speaks version ${v}`,
        { hint: `pgcoord init --schema ${this.schema}` },
      );
    return v;
  }

  /** One statement on a pooled connection under a deadline. @internal */
  private async poolQuery<R extends pg.QueryResultRow>(text: string, values: unknown[], deadlineMs: number): Promise<pg.QueryResult<R>> {
    const co = await checkout(this.pool, undefined, this.mask);
    try {
      const r = await bounded<R>(co, text, values, deadlineMs);
      co.done(false);
      return r;
    } catch (err) {
      co.done(isConnectionLoss(err));
      throw err;
    }
  }

  // ---- the pooler in between -------------------------------------------------------------

  /**
   * What sits between the client and PostgreSQL, found once and kept (`thorough` tests
   * again): with pg's startup pid against `pg_backend_pid()`, then a setting of its own on one
   * pooled connection and a transaction on a second (a transaction-mode pooler moves the first
   * to another server session, makes it wait, or gives the second its session; a pooler that
   * refuses the BEGIN is in statement mode), then a NOTIFY that must reach a LISTEN. Behind a pooler that does not keep the session, session
   * locks are refused, the worker does not LISTEN and {@link Client.jobResult} polls. The
   * probe takes two connections of the pool at once; the option `pooler` says it instead.
   */
  async pooler(opts: { thorough?: boolean } = {}): Promise<PoolerInfo> {
    if (this.poolerGiven !== undefined) return this.poolerGiven;
    if (this.poolerFound === undefined || opts.thorough === true) {
      const p = probePooler(this.pool, this.mask);
      this.poolerFound = p;
      p.catch(() => {
        if (this.poolerFound === p) this.poolerFound = undefined;
      });
    }
    return await this.poolerFound;
  }

  // ---- locks ------------------------------------------------------------------------------

  /**
   * Takes a session-level advisory lock on a connection of its own, checked out of the pool
   * until the lock is released; waits at most `opts.wait` ms.
   *
   * @example
   * ```ts
   * await using lock = await client.lock("nightly-report", { wait: 5000, signal });
   * lock.on("lost", (err) => controller.abort(err));
   * ```
   * @param target - a lock name (hashed with {@link key}) or a signed 64-bit key
   * @throws {@link ConflictError} when busy (`wait: 0`) or timed out; the signal's reason when aborted
   */
  async lock(target: LockTarget, opts: LockOptions = {}): Promise<SessionLock> {
    const wait = opts.wait ?? Infinity;
    const l = await this.tryLock(target, { ...opts, wait });
    if (l === null) throw notGranted(resolveTarget(target).label, wait);
    return l;
  }

  /**
   * As {@link Client.lock}, but resolves null when the lock is busy (`wait: 0`) or the wait
   * timed out. By default it tries once (`wait: 0`).
   */
  async tryLock(target: LockTarget, opts: LockOptions = {}): Promise<SessionLock | null> {
    resolveTarget(target);
    checkMs("wait", opts.wait ?? 0, true);
    await this.ready();
    // Behind a transaction-mode pooler the lock would be taken on a server session this
    // client does not keep (a statement-mode one refuses transactions too): refused, as the C
    // library and the other clients refuse it.
    const refused = sessionLockRefusal(await this.pooler(), resolveTarget(target).label);
    if (refused !== undefined) throw refused;
    const co = await checkout(this.pool, opts.signal, this.mask);
    return await acquireSession(co, target, { ...opts, wait: opts.wait ?? 0 }, this.mask);
  }

  /**
   * Takes a transaction-scoped advisory lock on `tx`, which must be inside a transaction (from
   * {@link Client.transaction}, or after `BEGIN`): the lock is released when that transaction
   * ends, and nowhere else.
   *
   * @throws {@link UsageError} outside a transaction; {@link ConflictError} when busy or timed out
   */
  async xactLock(tx: pg.ClientBase, target: LockTarget, opts: XactLockOptions = {}): Promise<void> {
    const wait = opts.wait ?? Infinity;
    const got = await acquireXact(tx, target, { ...opts, wait }, this.mask);
    if (!got) throw notGranted(resolveTarget(target).label, wait);
  }

  /** As {@link Client.xactLock}, but resolves false when busy or timed out; tries once by default. */
  async tryXactLock(tx: pg.ClientBase, target: LockTarget, opts: XactLockOptions = {}): Promise<boolean> {
    return await acquireXact(tx, target, { ...opts, wait: opts.wait ?? 0 }, this.mask);
  }

  // ---- transactions -----------------------------------------------------------------------

  /**
   * Runs `fn` in a transaction on a pooled connection and commits; runs it again, whole, after
   * a serialization failure (40001) or a deadlock (40P01), or when the session died before
   * COMMIT was sent, with jittered, capped backoff. Any other error rolls back and is thrown
   * as it is.
   *
   * @param fn - the body; it gets the transaction's connection and the attempt number (from 1)
   * @returns what `fn` returned
   * @throws {@link CommitUnknownError} when the session died after COMMIT was sent;
   *   {@link RetryLaterError} when every attempt failed with a retryable error
   */
  async transaction<T>(fn: (tx: pg.PoolClient, attempt: number) => Promise<T>, opts: TransactionOptions = {}): Promise<T> {
    const maxAttempts = opts.maxAttempts ?? 10;
    if (!Number.isInteger(maxAttempts) || maxAttempts < 1) throw new UsageError("maxAttempts must be an integer >= 1");
    const base = checkMs("backoffBaseMs", opts.backoffBaseMs ?? 10);
    const cap = checkMs("backoffMaxMs", opts.backoffMaxMs ?? 1000);
    const iso = opts.isolation ?? "read committed";
    if (!["read committed", "repeatable read", "serializable"].includes(iso))
      throw new UsageError(`isolation must be read committed, repeatable read or serializable, not ${String(iso)}`);
    const begin = `BEGIN ISOLATION LEVEL ${iso.toUpperCase()}${opts.readOnly ? " READ ONLY" : ""}`;
    for (let attempt = 1; ; attempt++) {
      const co = await checkout(this.pool, opts.signal, this.mask);
      let retryable: unknown;
      let commitSent = false;
      try {
        await co.pc.query(begin);
        const result = await fn(co.pc, attempt);
        if (co.dead !== undefined) throw co.dead;
        commitSent = true;
        const r = await co.pc.query("COMMIT");
        co.done(false);
        if (r.command !== "COMMIT")
          throw new UsageError("COMMIT rolled back: the transaction had failed (an error inside it was caught and ignored)");
        return result;
      } catch (err) {
        const lost = co.dead !== undefined || isConnectionLoss(err);
        if (commitSent && lost) {
          co.done(true);
          throw new CommitUnknownError(
            `the session was lost after COMMIT was sent; the transaction may or may not have committed: ${this.mask(String((err as Error).message))}`,
            { cause: err, sqlstate: sqlstateOf(err) },
          );
        }
        if (lost) {
          co.done(true);
          retryable = err;
        } else {
          try {
            if (!commitSent) await co.pc.query("ROLLBACK");
            co.done(false);
          } catch {
            co.done(true);
          }
          const st = sqlstateOf(err);
          if (st === undefined || !RETRYABLE.has(st)) throw err;
          retryable = err;
        }
      }
      if (attempt >= maxAttempts) {
        const st = sqlstateOf(retryable);
        const msg = this.mask(String((retryable as Error).message));
        if (isConnectionLoss(retryable) && st !== undefined && !RETRYABLE.has(st))
          throw new LostError(`transaction failed ${attempt} time(s), giving up; last: ${msg}`, { cause: retryable, sqlstate: st });
        throw new RetryLaterError(`transaction failed ${attempt} time(s), giving up; last: ${msg}`, { cause: retryable, sqlstate: st });
      }
      const pause = backoffMs(attempt, base, cap);
      opts.onRetry?.(retryable, attempt, pause);
      await sleep(pause, opts.signal);
    }
  }

  // ---- enqueue ----------------------------------------------------------------------------

  /**
   * Enqueues one job with the schema's `enqueue()`. With `on.client`, it runs on that connection
   * and inside its transaction: a job enqueued in a transaction that rolls back never exists.
   *
   * @param payload - any JSON value
   * @returns the job id, or null when `uniqueKey` is taken by a pending or running job
   */
  async enqueue(queue: string, payload: unknown, opts: EnqueueOptions = {}, on: On = {}): Promise<bigint | null> {
    if (opts.uniqueKeys !== undefined) throw new UsageError("enqueue: uniqueKeys is for enqueueMany; give uniqueKey");
    const ids = await this.enqueueMany(queue, [payload], { ...opts, uniqueKeys: opts.uniqueKey === undefined ? undefined : [opts.uniqueKey] }, on);
    return ids[0] ?? null;
  }

  /**
   * Enqueues one job per payload, all or nothing, in one statement.
   *
   * @returns the ids in the order of `payloads`, null for a job skipped for its unique key
   */
  async enqueueMany(queue: string, payloads: unknown[], opts: EnqueueOptions = {}, on: On = {}): Promise<Array<bigint | null>> {
    if (typeof queue !== "string" || queue === "") throw new UsageError("queue name must be a non-empty string");
    if (!Array.isArray(payloads)) throw new UsageError("payloads must be an array");
    const texts = payloads.map((p, i) => {
      let s: string | undefined;
      try {
        s = JSON.stringify(p);
      } catch (err) {
        throw new UsageError(`payload ${i + 1} is not JSON: ${(err as Error).message}`, { cause: err });
      }
      if (s === undefined) throw new UsageError(`payload ${i + 1} is not JSON (${typeof p})`);
      return s;
    });
    if (opts.uniqueKey !== undefined && opts.uniqueKeys === undefined && payloads.length !== 1)
      throw new UsageError("enqueueMany: give uniqueKeys (one per payload), not uniqueKey");
    const ukeys = opts.uniqueKeys ?? (opts.uniqueKey !== undefined ? [opts.uniqueKey] : null);
    if (opts.runAt !== undefined && opts.delayMs !== undefined) throw new UsageError("give runAt or delayMs, not both");
    if (opts.runAt !== undefined && !(opts.runAt instanceof Date && !Number.isNaN(opts.runAt.getTime())))
      throw new UsageError("runAt must be a valid Date");
    const delay = opts.delayMs === undefined ? null : checkMs("delayMs", opts.delayMs);
    if (opts.onDependencyFailure !== undefined && opts.onDependencyFailure !== "cancel" && opts.onDependencyFailure !== "run")
      throw new UsageError(`onDependencyFailure must be cancel or run, not ${String(opts.onDependencyFailure)}`);
    const after = opts.after?.map((x) => BigInt(x).toString()) ?? null;
    if (payloads.length === 0) return [];
    await this.ready();
    const sql =
      `SELECT ord, id FROM ${this.fn("enqueue")}($1::text, $2::text[], $3::text[], $4::int,` +
      ` coalesce($5::timestamptz, clock_timestamp() + $12::bigint * interval '1 millisecond'),` +
      ` $6::int, $7::int, $8::text, $9::bigint[], $10::boolean, $11::text) ORDER BY ord`;
    const values = [
      queue,
      texts,
      ukeys,
      opts.priority ?? null,
      opts.runAt ?? null,
      opts.maxAttempts ?? null,
      opts.maxDeferrals ?? null,
      opts.key ?? null,
      after,
      opts.onDependencyFailure === undefined ? null : opts.onDependencyFailure === "run",
      opts.group ?? null,
      delay,
    ];
    let r: pg.QueryResult<{ ord: string; id: string | null }>;
    try {
      r = on.client !== undefined ? await on.client.query(sql, values) : await this.pool.query(sql, values);
    } catch (err) {
      throw fromPg(err, `enqueue to queue "${queue}"`, this.mask);
    }
    return r.rows.map((row) => (row.id === null ? null : BigInt(row.id)));
  }

  // ---- the queue --------------------------------------------------------------------------

  /** `schema.name` with the schema quoted, for the worker's statements. @internal */
  qualified(name: string): string {
    return this.fn(name);
  }

  /** Hides passwords in a text. @internal */
  masked(s: string): string {
    return this.mask(s);
  }

  /** One statement on the caller's connection, or on the pool. @internal */
  private async run<R extends pg.QueryResultRow>(sql: string, values: unknown[], on: On, what: string): Promise<pg.QueryResult<R>> {
    await this.ready();
    try {
      return on.client !== undefined ? await on.client.query<R>(sql, values) : await this.pool.query<R>(sql, values);
    } catch (err) {
      throw fromPg(err, what, this.mask);
    }
  }

  /**
   * The schema's notification channel of the queues (`queue_settings.channel`): enqueues wake
   * its listeners with the queue's name; completions with a result notify `CHANNEL.result`.
   */
  async queueChannel(): Promise<string> {
    if (this.channel === undefined) {
      const r = await this.run<{ channel: string }>(`SELECT channel FROM ${this.fn("queue_settings")}`, [], {}, "reading the queue channel");
      this.channel = r.rows[0]?.channel ?? "pgcoord.queue";
    }
    return this.channel;
  }

  /**
   * Claims up to `opts.max` runnable jobs of `queue` (a flow queue by its limits and rates, as
   * the server's `claim()` decides), each with a fresh claim token and a lease of
   * `opts.leaseMs`. Run it outside a transaction: a claim must be seen at once.
   *
   * @returns the jobs, none when the queue has nothing runnable (not an error)
   */
  async claim<P = unknown>(queue: string, opts: ClaimOptions = {}, on: On = {}): Promise<Array<Job<P>>> {
    checkQueue(queue);
    const max = opts.max ?? 1;
    if (!Number.isInteger(max) || max < 1) throw new UsageError(`claim: max must be an integer >= 1, not ${String(max)}`);
    const lease = opts.leaseMs ?? 30000;
    if (!Number.isInteger(lease) || lease < 1) throw new UsageError(`claim: leaseMs must be an integer >= 1, not ${String(lease)}`);
    const r = await this.run<ClaimRow>(
      `SELECT id, token, attempts, max_attempts, priority, payload, key FROM ${this.fn("claim")}($1, $2::int, $3::bigint, $4)`,
      [queue, max, lease, opts.worker ?? defaultWorkerName()],
      on,
      `claim from queue "${queue}"`,
    );
    return r.rows.map((row) => jobOf<P>(queue, row));
  }

  /**
   * Completes a running job with its claim token, keeping `opts.result` (JSON, at most 64 kB)
   * for {@link Client.jobResult}.
   *
   * @throws {@link StaleError} when the token is no longer the job's (nothing recorded);
   *   {@link UsageError} for a result that is not JSON or over {@link RESULT_MAX_BYTES}
   */
  async complete(id: bigint, token: bigint, opts: { result?: unknown } = {}, on: On = {}): Promise<void> {
    const done = await this.completeMany([{ id, token, result: opts.result }], on);
    if (done.length === 0) throw new StaleError(id, token);
  }

  /**
   * Completes many running jobs in one statement (all or nothing on an error).
   *
   * @returns the ids completed; a job left out had a stale token
   */
  async completeMany(jobs: Completion[], on: On = {}): Promise<bigint[]> {
    if (!Array.isArray(jobs)) throw new UsageError("completeMany: jobs must be an array");
    if (jobs.length === 0) return [];
    const ids = jobs.map((j) => idText(j.id, "job id"));
    const tokens = jobs.map((j) => idText(j.token, "claim token", true));
    const results = jobs.map((j) => resultText(j.result, j.id));
    const r = await this.run<{ id: string }>(
      `SELECT id FROM ${this.fn("complete")}($1::bigint[], $2::bigint[], NULL, NULL, $3::jsonb[])`,
      [ids, tokens, results.some((x) => x !== null) ? results : null],
      on,
      "complete",
    );
    return r.rows.map((row) => BigInt(row.id));
  }

  /**
   * Records a failed run: the job goes back to the queue after the backoff (or
   * `opts.retryInMs`), or to the history as `failed` when it is out of attempts.
   *
   * @returns `retried` or `dead`
   * @throws {@link StaleError} when the token is no longer the job's
   */
  async fail(id: bigint, token: bigint, error: string, opts: FailOptions = {}, on: On = {}): Promise<FailOutcome> {
    const base = checkMs("backoffBaseMs", opts.backoffBaseMs ?? 1000);
    const cap = checkMs("backoffMaxMs", opts.backoffMaxMs ?? 3600000);
    const retry = opts.retryInMs === undefined ? null : checkMs("retryInMs", opts.retryInMs);
    const r = await this.run<{ o: string }>(
      `SELECT ${this.fn("fail")}($1::bigint, $2::bigint, $3, $4::bigint, $5::bigint, NULL, NULL, $6::bigint) AS o`,
      [idText(id, "job id"), idText(token, "claim token", true), String(error ?? ""), Math.floor(base), Math.floor(cap), retry === null ? null : Math.floor(retry)],
      on,
      `fail job ${id}`,
    );
    return outcome(r.rows[0]?.o, id, token);
  }

  /**
   * Defers a running job ("not now"): it runs again after `delayMs`, the attempt given back; past
   * its `maxDeferrals` it fails for good instead.
   *
   * @returns `retried` or `dead`
   * @throws {@link StaleError} when the token is no longer the job's
   */
  async retryLater(id: bigint, token: bigint, delayMs: number, on: On = {}): Promise<FailOutcome> {
    const d = checkMs("delayMs", delayMs);
    const r = await this.run<{ o: string }>(
      `SELECT ${this.fn("retry_later")}($1::bigint, $2::bigint, $3::bigint) AS o`,
      [idText(id, "job id"), idText(token, "claim token", true), Math.floor(d)],
      on,
      `retry later job ${id}`,
    );
    return outcome(r.rows[0]?.o, id, token);
  }

  /**
   * Gives running jobs back to the queue at once, the attempt not counted (a worker that
   * stops). `started` says their handlers had begun.
   *
   * @returns how many were released (stale pairs are ignored)
   */
  async release(jobs: Array<{ id: bigint; token: bigint }>, opts: { started?: boolean } = {}, on: On = {}): Promise<number> {
    if (!Array.isArray(jobs)) throw new UsageError("release: jobs must be an array");
    if (jobs.length === 0) return 0;
    const r = await this.run<{ n: number }>(
      `SELECT ${this.fn("release")}($1::bigint[], $2::bigint[], $3::boolean) AS n`,
      [jobs.map((j) => idText(j.id, "job id")), jobs.map((j) => idText(j.token, "claim token", true)), opts.started ?? true],
      on,
      "release",
    );
    return Number(r.rows[0]?.n ?? 0);
  }

  /**
   * Extends the leases of running jobs to now + `leaseMs`, in one call; says which are no
   * longer held (and which of those were cancelled). Call it every third of the lease.
   */
  async renew(jobs: Array<{ id: bigint; token: bigint }>, leaseMs: number, on: On = {}): Promise<Renewal> {
    if (!Array.isArray(jobs)) throw new UsageError("renew: jobs must be an array");
    if (!Number.isInteger(leaseMs) || leaseMs < 1) throw new UsageError(`renew: leaseMs must be an integer >= 1, not ${String(leaseMs)}`);
    const out: Renewal = { held: [], lost: [], cancelled: [] };
    if (jobs.length === 0) return out;
    const r = await this.run<{ id: string; status: string }>(
      `SELECT id, status FROM ${this.fn("renew")}($1::bigint[], $2::bigint[], $3::bigint)`,
      [jobs.map((j) => idText(j.id, "job id")), jobs.map((j) => idText(j.token, "claim token", true)), leaseMs],
      on,
      "renew",
    );
    return renewalOf(r.rows);
  }

  /**
   * Cancels a live job; a running one's handler learns it at its worker's next renewal.
   *
   * @returns whether it was running
   * @throws {@link ConflictError} when it has finished already; {@link NotFoundError} when no such job
   */
  async cancel(id: bigint, on: On = {}): Promise<boolean> {
    const r = await this.run<{ r: boolean }>(`SELECT ${this.fn("cancel")}($1::bigint) AS r`, [idText(id, "job id")], on, `cancel job ${id}`);
    return r.rows[0]?.r === true;
  }

  /**
   * One pass of the reaper: expired leases back to the queue (or failed), aging, the history's
   * retention. A worker runs it every second; run it yourself where no worker does.
   *
   * @throws {@link ConflictError} (55P03) when another pass is running
   */
  async reap(): Promise<ReapResult> {
    const r = await this.run<{ failed: string; returned: string; aged: string; purged: string }>(
      `SELECT failed, returned, aged, purged FROM ${this.fn("reap")}()`,
      [],
      {},
      "reap",
    );
    const row = r.rows[0];
    return { failed: Number(row?.failed ?? 0), returned: Number(row?.returned ?? 0), aged: Number(row?.aged ?? 0), purged: Number(row?.purged ?? 0) };
  }

  /**
   * A job, live or from the history.
   *
   * @throws {@link NotFoundError} when there is no such job
   */
  async job(id: bigint, on: On = {}): Promise<JobInfo> {
    const cols = "id, queue, status, priority, attempts, max_attempts, payload, key, unique_key, last_error, worker, run_at, created_at, started_at";
    const r = await this.run<Record<string, unknown>>(
      `SELECT ${cols}, NULL::timestamptz AS finished_at FROM ${this.fn("jobs")} WHERE id = $1::bigint` +
        ` UNION ALL SELECT ${cols}, finished_at FROM ${this.fn("job_history")} WHERE id = $1::bigint`,
      [idText(id, "job id")],
      on,
      `job ${id}`,
    );
    const row = r.rows[0];
    if (row === undefined) throw new NotFoundError(`no job with id ${id}`);
    return {
      id: BigInt(row.id as string),
      queue: row.queue as string,
      status: row.status as JobStatus,
      priority: row.priority as number,
      attempts: row.attempts as number,
      maxAttempts: row.max_attempts as number,
      payload: row.payload,
      key: row.key as string | null,
      uniqueKey: row.unique_key as string | null,
      lastError: row.last_error as string | null,
      worker: row.worker as string | null,
      runAt: row.run_at as Date | null,
      createdAt: row.created_at as Date | null,
      startedAt: row.started_at as Date | null,
      finishedAt: row.finished_at as Date | null,
    };
  }

  /**
   * A job's status and result; with `opts.waitMs`, waits that long for it to finish, woken by
   * the result channel's notification (LISTEN on a pooled connection, given back after
   * UNLISTEN) and looking again every `opts.recheckMs` (default a second: a job that fails or is
   * cancelled notifies nobody).
   *
   * @throws {@link NotFoundError} when no job has the id; {@link ConflictError} when it has not
   *   finished within `waitMs`; the signal's reason when aborted
   */
  async jobResult<R = unknown>(id: bigint, opts: JobResultOptions = {}): Promise<JobResult<R>> {
    const wait = checkMs("waitMs", opts.waitMs ?? 0, true);
    const recheck = checkMs("recheckMs", opts.recheckMs ?? 1000);
    const idt = idText(id, "job id");
    const sql = `SELECT status, result FROM ${this.fn("job_result")}($1::bigint)`;
    const look = async (c: pg.ClientBase): Promise<JobResult<R>> => {
      try {
        const r = await c.query<{ status: JobStatus; result: R | null }>(sql, [idt]);
        const row = r.rows[0];
        return { status: (row?.status ?? "pending") as JobStatus, result: row?.result ?? null };
      } catch (err) {
        throw fromPg(err, `result of job ${id}`, this.mask);
      }
    };
    await this.ready();
    if (wait === 0) {
      const co = await checkout(this.pool, opts.signal, this.mask);
      try {
        const r = await look(co.pc);
        co.done(false);
        if (!FINISHED.has(r.status)) throw new ConflictError(`job ${id} is still ${r.status}`);
        return r;
      } catch (err) {
        co.done(isConnectionLoss(err));
        throw err;
      }
    }
    const chan = `${await this.queueChannel()}.result`;
    // Behind a transaction- or statement-mode pooler a LISTEN would not be heard: it looks every 10 ms,
    // doubling up to recheckMs.
    const listen = (await this.pooler()).sessionKept;
    let pause = listen ? recheck : Math.min(10, recheck);
    const co = await checkout(this.pool, opts.signal, this.mask);
    let heard: (() => void) | undefined;
    const onNote = (n: pg.Notification): void => {
      if (n.channel === chan && n.payload === idt) heard?.();
    };
    co.pc.on("notification", onNote);
    let broken = false;
    const deadline = performance.now() + wait;
    try {
      if (listen) await co.pc.query(`LISTEN ${pg.escapeIdentifier(chan)}`);
      for (;;) {
        const r = await look(co.pc);
        if (FINISHED.has(r.status)) return r;
        const left = deadline - performance.now();
        if (left <= 0) throw new ConflictError(`job ${id} is still ${r.status} after ${wait} ms`);
        await new Promise<void>((resolve, reject) => {
          const done = (): void => {
            clearTimeout(t);
            opts.signal?.removeEventListener("abort", onAbort);
            co.pc.removeListener("error", onErr);
            heard = undefined;
          };
          const onAbort = (): void => {
            done();
            reject(abortReason(opts.signal as AbortSignal));
          };
          const onErr = (err: Error): void => {
            done();
            reject(fromPg(err, `waiting for job ${id}`, this.mask));
          };
          const t = setTimeout(() => {
            done();
            resolve();
          }, Math.min(left, pause));
          pause = Math.min(recheck, pause * 2);
          heard = () => {
            done();
            resolve();
          };
          co.pc.on("error", onErr);
          if (opts.signal?.aborted) onAbort();
          else opts.signal?.addEventListener("abort", onAbort, { once: true });
        });
      }
    } catch (err) {
      broken = isConnectionLoss(err) || co.dead !== undefined;
      throw err;
    } finally {
      co.pc.removeListener("notification", onNote);
      if (!broken && listen) {
        try {
          await co.pc.query(`UNLISTEN ${pg.escapeIdentifier(chan)}`);
        } catch {
          broken = true;
        }
      }
      co.done(broken);
    }
  }

  /**
   * Makes `queue` a flow queue and changes its settings (left out: kept; null: removed).
   *
   * @returns how many keys' limit in force changed
   */
  async flowSet(queue: string, s: FlowSettings, on: On = {}): Promise<number> {
    checkQueue(queue);
    const [rn, rms] = rateArgs(s.rate, "rate");
    const [kn, kms] = rateArgs(s.keyRate, "keyRate");
    const fair = s.fair === undefined ? -1 : s.fair ? 1 : 0;
    const r = await this.run<{ n: string }>(
      `SELECT ${this.fn("queue_flow_set")}($1, $2::int, $3::int, $4::bigint, $5::int, $6::bigint, $7::int) AS n`,
      [queue, settingArg(s.keyLimit, "keyLimit"), rn, rms, kn, kms, fair],
      on,
      `flow settings of queue "${queue}"`,
    );
    return Number(r.rows[0]?.n ?? 0);
  }

  /** A key's own settings in a flow queue (left out: kept; null: the queue's apply). */
  async keySet(queue: string, key: string, s: KeySettings, on: On = {}): Promise<void> {
    checkQueue(queue);
    const [rn, rms] = rateArgs(s.rate, "rate");
    await this.run(
      `SELECT ${this.fn("queue_key_set")}($1, $2, $3::int, $4::int, $5::int, $6::bigint)`,
      [queue, key, settingArg(s.limit, "limit"), settingArg(s.weight, "weight"), rn, rms],
      on,
      `settings of key "${key}" of queue "${queue}"`,
    );
  }

  /**
   * How long until something of `queues` may become claimable (a scheduled job, a rate's next
   * start), in ms; null when nothing is ahead.
   */
  async nextRunMs(queues: string[]): Promise<number | null> {
    const r = await this.run<{ ms: number | null }>(`SELECT ${this.fn("next_run_ms")}($1::text[]) AS ms`, [queues], {}, "next run");
    const ms = r.rows[0]?.ms;
    return ms === null || ms === undefined ? null : Math.max(0, Number(ms));
  }

  /**
   * A worker of this client: handlers per queue, `concurrency` jobs at once. Register handlers
   * with {@link Worker.handle}, then {@link Worker.start}.
   */
  worker(opts: WorkerOptions = {}): Worker {
    return new Worker(this, opts);
  }

  // ---- leases and fencing -----------------------------------------------------------------

  private leaseHost(): LeaseHost {
    return {
      query: (text, values, deadlineMs) => this.poolQuery(text, values, deadlineMs),
      fn: (name) => this.fn(name),
      mask: this.mask,
    };
  }

  /**
   * Tries once to take the lease `name` for `opts.ttlMs`.
   *
   * @returns the held lease (renewing itself), or null when someone else holds it
   */
  async leaseAcquire(name: string, opts: LeaseOptions): Promise<Lease | null> {
    const { row, holder, sentAt } = await this.leaseGrant(name, opts);
    if (row?.granted !== true) return null;
    return new Lease(this.leaseHost(), name, holder, BigInt(row.token as string), opts.ttlMs, sentAt, row.expires_at);
  }

  /** One lease_acquire() call: its row, the holder asked for and when it was sent. @internal */
  private async leaseGrant(name: string, opts: LeaseOptions): Promise<{ row: LeaseRow | undefined; holder: string; sentAt: number }> {
    const holder = opts?.holder ?? `node-${process.pid}@${os.hostname()}`;
    checkLeaseArgs(name, holder, opts?.ttlMs);
    const lockTimeout = opts.lockTimeoutMs ?? 1000;
    await this.ready();
    const sentAt = performance.now();
    let r: pg.QueryResult<LeaseRow>;
    try {
      r = await this.poolQuery<LeaseRow>(
        `SELECT granted, token, holder, expires_at FROM ${this.fn("lease_acquire")}($1, $2, $3::bigint, $4::int)`,
        [name, holder, opts.ttlMs, lockTimeout],
        lockTimeout + 10000,
      );
    } catch (err) {
      throw fromPg(err, `acquiring lease "${name}"`, this.mask);
    }
    return { row: r.rows[0], holder, sentAt };
  }

  /**
   * One attempt to take the lease `name`, with no handle and no renewal: the call
   * {@link Client.leaseAcquire} is built on, for a caller that renews on its own schedule, or
   * whose token travels to another process. Unrenewed, the lease runs out after `opts.ttlMs`.
   *
   * @returns what the server said: `granted`, and `token` (the fencing token when granted,
   *   else the current holder's), `holder`, `expiresAt`
   */
  async leaseAcquireToken(name: string, opts: LeaseOptions): Promise<LeaseGrant> {
    const { row } = await this.leaseGrant(name, opts);
    return { granted: row?.granted === true, ...leaseInfo(row) };
  }

  /**
   * One renewal of the lease `name` granted with `token`, for `opts.ttlMs` from now.
   *
   * @returns `status` `ok` (renewed) or why not: `expired`, `released`, `superseded` (a newer
   *   token was granted) or `unknown`; a stale token is an answer, not an exception
   */
  async leaseRenew(name: string, token: bigint, opts: { ttlMs: number }): Promise<LeaseRenewal> {
    checkLeaseArgs(name, "", opts?.ttlMs);
    if (typeof token !== "bigint") throw new UsageError("lease token must be a bigint");
    await this.ready();
    let r: pg.QueryResult<LeaseRow>;
    try {
      r = await this.poolQuery<LeaseRow>(
        `SELECT status, token, holder, expires_at FROM ${this.fn("lease_renew")}($1, $2::bigint, $3::bigint)`,
        [name, token.toString(), opts.ttlMs],
        10000,
      );
    } catch (err) {
      throw fromPg(err, `renewing lease "${name}"`, this.mask);
    }
    const row = r.rows[0];
    return { status: (row?.status ?? "unknown") as LeaseStatus, ...leaseInfo(row) };
  }

  /**
   * Releases the lease `name` granted with `token`, so that a candidate can take it at once.
   *
   * @returns the server's status: `ok`, `released` (already), `superseded` or `unknown`
   */
  async leaseRelease(name: string, token: bigint): Promise<LeaseStatus> {
    checkLeaseArgs(name, "", 1);
    if (typeof token !== "bigint") throw new UsageError("lease token must be a bigint");
    await this.ready();
    try {
      const r = await this.poolQuery<{ s: LeaseStatus }>(
        `SELECT ${this.fn("lease_release")}($1, $2::bigint) AS s`,
        [name, token.toString()],
        10000,
      );
      return r.rows[0]?.s ?? "unknown";
    } catch (err) {
      throw fromPg(err, `releasing lease "${name}"`, this.mask);
    }
  }

  /**
   * Campaigns for the lease `name`: tries every `pollMs` (default a third of the TTL) until it
   * is granted or `opts.signal` aborts. This is leader election: the holder leads until its
   * lease is lost or released.
   */
  async campaign(name: string, opts: LeaseOptions): Promise<Lease> {
    const poll = checkMs("pollMs", opts.pollMs ?? Math.max(1, Math.floor((opts?.ttlMs ?? 3) / 3)));
    for (;;) {
      opts.signal?.throwIfAborted();
      const l = await this.leaseAcquire(name, opts);
      if (l !== null) return l;
      await sleep(poll, opts.signal);
    }
  }

  /**
   * A fencing token for a holder of `name` by other means (a session lock): the same counter as
   * leases. Call it after the lock is granted.
   *
   * @throws {@link ConflictError} (PCF03) while a lease on the name is held
   */
  async fenceNext(name: string, holder: string = `node-${process.pid}@${os.hostname()}`): Promise<bigint> {
    checkLeaseArgs(name, holder, 1);
    await this.ready();
    try {
      const r = await this.poolQuery<{ t: string }>(`SELECT ${this.fn("fence_next")}($1, $2) AS t`, [name, holder], 11000);
      return BigInt(r.rows[0]?.t ?? "0");
    } catch (err) {
      throw fromPg(err, `fencing token for "${name}"`, this.mask);
    }
  }

  /**
   * Checks `token` inside the writer's transaction `tx`: passes when it is the newest token of
   * `name`, and holds it so that no newer one is granted before `tx` ends.
   *
   * @throws {@link FencedError} (PCF01) when a newer token was granted: roll back and stop;
   *   {@link NotFoundError} (PCF02) for a token never granted
   */
  async fenceCheck(tx: pg.ClientBase, name: string, token: bigint): Promise<void> {
    if (typeof token !== "bigint") throw new UsageError("fencing token must be a bigint");
    try {
      await tx.query(`SELECT ${this.fn("fence_check")}($1, $2::bigint)`, [name, token.toString()]);
    } catch (err) {
      throw fromPg(err, `fence check of "${name}" (token ${token})`, this.mask);
    }
  }

  /** Ends the pool when the client created it (from a DSN); a pool it was given is left alone. */
  async end(): Promise<void> {
    if (this.ownsPool) await this.pool.end();
  }

  // ---- diagnostics --------------------------------------------------------------------------

  /**
   * Who waits for whom now (the protocol's `blocking_forest()`, what `pgcoord blockers --json`
   * shows): the sessions that wait for a lock or block one, roots first. The pool's connection
   * that asks is left out.
   *
   * @example
   * ```ts
   * const forest = await client.blockingForest();
   * for (const t of forest.trees()) console.log(t.session.pid, t.session.query, t.children.length);
   * ```
   */
  async blockingForest(): Promise<BlockingForest> {
    const r = await this.run<Record<string, unknown>>(`SELECT ${FOREST_COLUMNS} FROM ${this.fn("blocking_forest")}()`, [], {}, "blocking forest");
    return forestOf(r.rows);
  }

  /**
   * Who holds or waits for an advisory lock (the protocol's `lock_holders()`): holders first,
   * then waiters in the order they began waiting.
   *
   * @param target - a lock name (hashed with {@link key}, as {@link Client.lock} does) or a signed 64-bit key
   */
  async lockHolders(target: LockTarget): Promise<LockHolder[]> {
    const t = resolveTarget(target);
    const r = await this.run<Record<string, unknown>>(
      `SELECT ${HOLDER_COLUMNS} FROM ${this.fn("lock_holders")}($1::bigint)`,
      [t.key.toString()],
      {},
      `holders of lock ${t.label}`,
    );
    return holdersOf(r.rows);
  }
}


