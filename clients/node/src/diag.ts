// Diagnostics as data: who waits for whom (the protocol's blocking_forest()) and who holds a
// lock (lock_holders()), what `pgcoord blockers --json` and `pgcoord locks` show. The queries
// run through Client.blockingForest and Client.lockHolders; this file has their types and the
// conversion of their rows.

/**
 * One session that waits for a lock or blocks one: a row of the server's `blocking_forest()`.
 * A blocker that has no row of its own (a prepared transaction is pid 0) has only `pid`,
 * `blocks` and `state`; its other fields are null or empty.
 */
export interface BlockingSession {
  pid: number;
  /** The sessions it waits for (`pg_blocking_pids` without duplicates); empty when none. */
  blockedBy: number[];
  /** The sessions waiting directly for it. */
  blocks: number[];
  /** It blocks someone and waits for no one: the session to look at first. */
  root: boolean;
  /** The distance from the nearest root (0 for a root); null in a wait cycle no root leads to. */
  depth: number | null;
  /** The sessions waiting for it, directly or through others. */
  blocksTotal: number;
  /** It is part of a wait cycle (a deadlock not broken yet). */
  inCycle: boolean;
  /** The kind of lock it waits for (`advisory`, `relation`, `transactionid`, ...). */
  waitLocktype: string | null;
  /** The mode it waits for (`ExclusiveLock`, ...). */
  waitMode: string | null;
  /** The target in one line: `relation public.orders`, `advisory 4242 "nightly"`, ... */
  waitTarget: string | null;
  /** Milliseconds it has waited for that lock (PostgreSQL 14 and later). */
  waitedMs: bigint | null;
  /** `pg_stat_activity`'s state, or `prepared transaction` for pid 0. */
  state: string | null;
  waitEventType: string | null;
  waitEvent: string | null;
  database: string | null;
  usename: string | null;
  applicationName: string | null;
  /** `host:port`, or `local` for a Unix socket. */
  client: string | null;
  backendType: string | null;
  backendStart: Date | null;
  /** The age of its transaction, in milliseconds by the server's clock; null without one. */
  xactAgeMs: bigint | null;
  /** The age of its current or last query, in milliseconds. */
  queryAgeMs: bigint | null;
  /** The age of its state, in milliseconds. */
  stateAgeMs: bigint | null;
  /** Its current or last query (other roles' need `pg_read_all_stats`). */
  query: string | null;
}

/** A session of the forest with the sessions waiting directly for it below. */
export interface BlockingTree {
  session: BlockingSession;
  children: BlockingTree[];
}

/**
 * Who waits for whom at one moment, as {@link Client.blockingForest} read it: the sessions,
 * roots first, then by depth. Iterable; its methods read it without another query.
 */
export class BlockingForest implements Iterable<BlockingSession> {
  /** The rows, in the server's order. */
  readonly sessions: readonly BlockingSession[];

  constructor(sessions: readonly BlockingSession[]) {
    this.sessions = sessions;
  }

  [Symbol.iterator](): Iterator<BlockingSession> {
    return this.sessions[Symbol.iterator]();
  }

  /** The row of `pid`, or undefined when the forest has none. */
  session(pid: number): BlockingSession | undefined {
    return this.sessions.find((s) => s.pid === pid);
  }

  /** The sessions that block others and wait for no one. */
  roots(): BlockingSession[] {
    return this.sessions.filter((s) => s.root);
  }

  /** The sessions waiting directly for `pid`, in the order of its `blocks`. */
  children(pid: number): BlockingSession[] {
    const s = this.session(pid);
    if (s === undefined) return [];
    return s.blocks.map((w) => this.session(w)).filter((w): w is BlockingSession => w !== undefined);
  }

  /**
   * One tree per root. A session waiting for two sessions appears under both; a wait cycle no
   * root leads to appears in no tree (its sessions have `inCycle` and a null `depth`), and a
   * branch stops where it would enter its own path again.
   */
  trees(): BlockingTree[] {
    const grow = (s: BlockingSession, path: ReadonlySet<number>): BlockingTree => {
      const inner = new Set(path).add(s.pid);
      return { session: s, children: this.children(s.pid).filter((c) => !inner.has(c.pid)).map((c) => grow(c, inner)) };
    };
    return this.roots().map((r) => grow(r, new Set()));
  }
}

/** A session that holds or waits for an advisory lock: a row of the server's `lock_holders()`. */
export interface LockHolder {
  pid: number;
  /** `ExclusiveLock` or `ShareLock`. */
  mode: string;
  granted: boolean;
  applicationName: string | null;
  /** The client's address; null for a Unix socket. */
  clientAddr: string | null;
  state: string | null;
  /** Since when a waiter waits (PostgreSQL 14 and later). */
  waitStart: Date | null;
  stateChange: Date | null;
  backendStart: Date | null;
  /**
   * When a holder took the lock, where that is known (pgcoord's lock-holding transactions,
   * and session locks recorded by `pgcoord run`).
   */
  acquiredAt: Date | null;
  /** The session that asked. */
  isSelf: boolean;
}

/** The columns {@link forestOf} reads, in a query of `blocking_forest()`. @internal */
export const FOREST_COLUMNS =
  "pid, blocked_by, blocks, root, depth, blocks_total, in_cycle, wait_locktype, wait_mode, wait_target," +
  " waited_ms::text AS waited_ms, state, wait_event_type, wait_event, database, usename, application_name, client," +
  " backend_type, backend_start, xact_age_ms::text AS xact_age_ms, query_age_ms::text AS query_age_ms," +
  " state_age_ms::text AS state_age_ms, query";

/** The columns {@link holdersOf} reads, in a query of `lock_holders()`. @internal */
export const HOLDER_COLUMNS =
  "pid, mode, granted, application_name, client_addr, state, wait_start, state_change, backend_start, acquired_at, is_self";

type Row = Record<string, unknown>;

const str = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
const big = (v: unknown): bigint | null => (v === null || v === undefined ? null : BigInt(String(v)));
const date = (v: unknown): Date | null => (v instanceof Date ? v : v === null || v === undefined ? null : new Date(String(v)));
const ints = (v: unknown): number[] => (Array.isArray(v) ? v.map(Number) : []);

/** The forest of `blocking_forest()`'s rows, read with {@link FOREST_COLUMNS}. @internal */
export function forestOf(rows: Row[]): BlockingForest {
  return new BlockingForest(
    rows.map((r) => ({
      pid: Number(r.pid),
      blockedBy: ints(r.blocked_by),
      blocks: ints(r.blocks),
      root: r.root === true,
      depth: r.depth === null || r.depth === undefined ? null : Number(r.depth),
      blocksTotal: Number(r.blocks_total ?? 0),
      inCycle: r.in_cycle === true,
      waitLocktype: str(r.wait_locktype),
      waitMode: str(r.wait_mode),
      waitTarget: str(r.wait_target),
      waitedMs: big(r.waited_ms),
      state: str(r.state),
      waitEventType: str(r.wait_event_type),
      waitEvent: str(r.wait_event),
      database: str(r.database),
      usename: str(r.usename),
      applicationName: str(r.application_name),
      client: str(r.client),
      backendType: str(r.backend_type),
      backendStart: date(r.backend_start),
      xactAgeMs: big(r.xact_age_ms),
      queryAgeMs: big(r.query_age_ms),
      stateAgeMs: big(r.state_age_ms),
      query: str(r.query),
    })),
  );
}

/** The holders of `lock_holders()`'s rows, read with {@link HOLDER_COLUMNS}. @internal */
export function holdersOf(rows: Row[]): LockHolder[] {
  return rows.map((r) => ({
    pid: Number(r.pid),
    mode: String(r.mode),
    granted: r.granted === true,
    applicationName: str(r.application_name),
    clientAddr: str(r.client_addr),
    state: str(r.state),
    waitStart: date(r.wait_start),
    stateChange: date(r.state_change),
    backendStart: date(r.backend_start),
    acquiredAt: date(r.acquired_at),
    isSelf: r.is_self === true,
  }));
}
