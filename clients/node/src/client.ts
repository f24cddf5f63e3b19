/**
 * The pgcoord client: one schema, reached through a node-postgres pool.
 *
 * @module
 */
import * as os from "node:os";
import pg from "pg";
import {
  CommitUnknownError,
  LostError,
  RetryLaterError,
  SchemaError,
  UsageError,
  fromPg,
  isConnectionLoss,
  sqlstateOf,
} from "./errors.js";
import { bounded, checkMs, checkout, dsnPassword, masker, sleep } from "./internal.js";
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

  /**
   * Makes a client; nothing is sent until the first call (or {@link Client.ready}).
   *
   * @throws {@link UsageError} for a bad schema name, or neither/both of `pool` and `dsn`
   */
  constructor(options: ClientOptions) {
    if (options === null || typeof options !== "object") throw new UsageError("Client: options must be an object");
    this.schema = checkSchema(options.schema ?? "pgcoord");
    this.schemaQ = pg.escapeIdentifier(this.schema);
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
}


