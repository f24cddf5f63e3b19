/**
 * The worker: handlers per queue, `concurrency` jobs at once, on one dedicated connection that
 * LISTENs for wake-ups, claims for idle handler slots only, sends the completions of a round in
 * the same statement as the next claim, renews every held job's lease every third of the lease
 * in one call, and learns of cancellations from the renewal.
 *
 * @module
 */
import { EventEmitter } from "node:events";
import * as crypto from "node:crypto";
import * as os from "node:os";
import pg from "pg";
import type { Client } from "./client.js";
import { LostError, PgcoordError, UsageError, fromPg, isConnectionLoss, sqlstateOf } from "./errors.js";
import { poolerWhat } from "./pooler.js";
import { type ClaimRow, type Job, jobOf, resultText } from "./queue.js";

/** What a handler gets besides its job. */
export interface HandlerContext {
  /**
   * Aborts when the job is no longer this worker's: cancelled (`reason.why === "cancelled"`),
   * its lease lost (`"lost"`), or the worker stopping past its grace (`"stopped"`). Pass it to
   * every wait of the handler; the reason is a {@link JobLostError}.
   */
  signal: AbortSignal;
  /** The worker running the handler. */
  worker: Worker;
}

/**
 * A handler: resolves to the job's result (any JSON value of at most 64 kB, stored with the
 * job; undefined: none), or throws to fail the attempt (retried with the protocol's backoff
 * while attempts are left; an error with a numeric `retryInMs` retries after exactly that;
 * a {@link Defer} defers the job without counting an attempt).
 */
export type Handler<P = any, R = unknown> = (job: Job<P>, ctx: HandlerContext) => R | Promise<R>;

/** Thrown by a handler: run the job again after `delayMs`, the attempt given back ("not now"). */
export class Defer extends Error {
  /** @param delayMs - when to run it again; @param message - why (for the logs) */
  constructor(
    readonly delayMs: number,
    message = `deferred for ${delayMs} ms`,
  ) {
    super(message);
    this.name = "Defer";
  }
}

/** Why a handler's signal aborted: the job was cancelled, its lease lost, or the worker stopped. */
export class JobLostError extends LostError {
  /** `cancelled`, `lost` (lease ran out or claimed again) or `stopped` (past the stop's grace). */
  readonly why: "cancelled" | "lost" | "stopped";
  /** The job. */
  readonly jobId: bigint;

  /** @param jobId - the job; @param why - what happened */
  constructor(jobId: bigint, why: "cancelled" | "lost" | "stopped") {
    super(
      why === "cancelled"
        ? `job ${jobId} was cancelled`
        : why === "lost"
          ? `job ${jobId} is no longer held by this worker: its lease ran out or it was claimed again`
          : `job ${jobId}: the worker stopped before its handler finished; it was released`,
    );
    this.why = why;
    this.jobId = jobId;
  }
}

/** Options of {@link Client.worker}. */
export interface WorkerOptions {
  /** Jobs running at once (default 4). */
  concurrency?: number;
  /** Jobs claimed beyond the idle slots, held ready (default 0: claim only for idle slots). Short jobs gain from more. */
  prefetch?: number;
  /** The lease of each claim in ms (default 30000), renewed every third. */
  leaseMs?: number;
  /**
   * LISTEN for wake-ups. Left out, the worker decides by {@link Client.pooler}: it listens
   * unless a pooler that does not keep the session is in between (a transaction- or
   * statement-mode one, or one whose kind did not show), where it polls (10 ms doubling to
   * `pollMs` while idle) and emits `polling` with the reason. True or false decide instead.
   */
  listen?: boolean;
  /** The fallback poll with LISTEN, the longest idle poll without (default 2000 ms). */
  pollMs?: number;
  /** The reaper's period in ms (default 1000; 0: never reap here). */
  reapMs?: number;
  /** The failures' backoff base in ms (default 1000). */
  backoffBaseMs?: number;
  /** The failures' backoff cap in ms (default 3600000). */
  backoffMaxMs?: number;
  /** Recorded on claimed jobs (default `node-PID@HOST`). */
  workerId?: string;
  /** The dedicated connection's settings (default: the pool's, with application_name `pgcoord-node/worker`). */
  connection?: pg.ClientConfig;
}

/** Counters of a worker. */
export interface WorkerStats {
  /** Jobs claimed. */
  claimed: number;
  /** Jobs completed (their completion committed). */
  completed: number;
  /** Failed attempts recorded. */
  failed: number;
  /** Jobs deferred ({@link Defer}). */
  deferred: number;
  /** Outcomes not recorded: the job was lost or cancelled first. */
  stale: number;
  /** Running or claimed jobs cancelled. */
  cancelled: number;
  /** Jobs given back to the queue (at a stop). */
  released: number;
  /** Sessions opened again after a loss. */
  reconnects: number;
  /** Notifications that named one of the worker's queues. */
  wakeups: number;
}

/** Options of {@link Worker.stop}. */
export interface StopOptions {
  /** How long running handlers may go on (default 30000 ms); then their signals abort and their jobs are released. */
  graceMs?: number;
}

interface Held {
  job: Job;
  /** The id and token as the server sent them (the text the next statements take). */
  idText: string;
  tokenText: string;
  /** Made when the handler first reads its signal (most never do, and it costs). */
  ac: AbortController | undefined;
  /** Why the job was lost, once it was. */
  reason: JobLostError | undefined;
  started: boolean;
  /** Its handler returned or threw (its outcome waits to be recorded). */
  finished: boolean;
  lost: boolean;
}

/** A completion waiting for the next trip. */
interface Completion {
  h: Held;
  result: string | null;
}

/** A failure or deferral, recorded one by one (rare). */
type Outcome =
  | { h: Held; kind: "fail"; error: string; retryInMs: number | null }
  | { h: Held; kind: "defer"; delayMs: number };

const MAX_BACKOFF_MS = 5000;

const INT8_OID = 20;
const asText = (v: string): string => v;
/** The type parsers of the worker's session: pg's, but int8 as the text the server sent. */
const WORKER_TYPES = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === INT8_OID && format !== "binary" ? asText : pg.types.getTypeParser(oid, format as "text")) as typeof pg.types.getTypeParser,
};

/**
 * A worker. Events: `error` (an error the worker goes on after: a lost session, a failed call;
 * printed as a warning when nobody listens), `lost` (`{ job, why }`: a job cancelled or whose
 * lease was lost, its handler's signal aborted), `reconnected`, `polling` (a string: why it
 * polls instead of LISTEN, behind a pooler that does not keep the session), `stopped`.
 *
 * @example
 * ```ts
 * const w = client.worker({ concurrency: 8 });
 * w.handle("emails", async (job, { signal }) => send(job.payload, { signal }));
 * w.on("error", (err) => console.error(err));
 * await w.start();
 * process.once("SIGTERM", () => void w.stop({ graceMs: 10000 }));
 * ```
 */
export class Worker extends EventEmitter {
  /** The counters. */
  readonly stats: WorkerStats = {
    claimed: 0, completed: 0, failed: 0, deferred: 0, stale: 0, cancelled: 0, released: 0, reconnects: 0, wakeups: 0,
  }; // prettier-ignore
  private readonly handlers = new Map<string, Handler>();
  private readonly concurrency: number;
  private readonly prefetch: number;
  private readonly leaseMs: number;
  private listen: boolean;
  private readonly listenOpt: boolean | undefined;
  private readonly pollMs: number;
  private readonly reapMs: number;
  private readonly backoffBase: number;
  private readonly backoffMax: number;
  private readonly workerId: string;
  private readonly connConfig: pg.ClientConfig;
  private readonly ownChannel: string;
  private readonly callMs: number;

  private queues: string[] = [];
  private conn: pg.Client | undefined;
  private connDead = false;
  private lossReported = false;
  private channel = "";
  private readonly held = new Map<bigint, Held>();
  private ready: Held[] = [];
  private running = 0;
  /** Completions for the next trip, taken whole by it. */
  private done: Completion[] = [];
  /** Failures and deferrals. */
  private others: Outcome[] = [];
  private readonly more = new Set<string>();
  private rr = 0;
  private hbNow = false;
  private nextHb = 0;
  private nextReap = 0;
  private nextRegister = 0;
  private nextPoll = 0;
  private idlePoll = 10;
  private nextRunAt = Infinity;
  private kicked = false;
  private wake: (() => void) | undefined;
  private loopDone: Promise<void> | undefined;
  private started = false;
  private stopping = false;
  private stopDeadline = Infinity;
  private graceOver = false;
  private readonly side = new Map<string, Promise<void>>();
  private sql!: { claim: string; claimDone: string; complete: string; renew: string };

  /** @internal Use {@link Client.worker}. */
  constructor(
    private readonly client: Client,
    opts: WorkerOptions = {},
  ) {
    super();
    const int = (name: string, v: number | undefined, dflt: number, min: number): number => {
      const x = v ?? dflt;
      if (!Number.isInteger(x) || x < min) throw new UsageError(`worker: ${name} must be an integer >= ${min}, not ${String(x)}`);
      return x;
    };
    this.concurrency = int("concurrency", opts.concurrency, 4, 1);
    this.prefetch = int("prefetch", opts.prefetch, 0, 0);
    this.leaseMs = int("leaseMs", opts.leaseMs, 30000, 3);
    this.pollMs = int("pollMs", opts.pollMs, 2000, 10);
    this.reapMs = int("reapMs", opts.reapMs, 1000, 0);
    this.backoffBase = int("backoffBaseMs", opts.backoffBaseMs, 1000, 0);
    this.backoffMax = int("backoffMaxMs", opts.backoffMaxMs, 3600000, 0);
    this.listenOpt = opts.listen;
    this.listen = opts.listen ?? true;
    this.workerId = opts.workerId ?? `node-${process.pid}@${os.hostname()}`;
    const poolOpts = (client.pool as unknown as { options?: pg.ClientConfig }).options ?? {};
    const conn = opts.connection ?? { ...poolOpts, application_name: "pgcoord-node/worker" };
    // The worker's own session reads bigints as the server's text with no check (ids and tokens
    // go back as they came; pg's default tests each against a regular expression).
    this.connConfig = conn.types === undefined ? { ...conn, types: WORKER_TYPES } : conn;
    this.ownChannel = `${client.schema.slice(0, 30)}.w.${crypto.randomBytes(8).toString("hex")}`;
    // A call that gets no answer in this long is taken for a lost session (as the C worker's bound).
    this.callMs = Math.min(30000, Math.max(2000, Math.floor(this.leaseMs / 10)));
  }

  /**
   * Registers the handler of a queue, or of several (`{ emails: fn, reports: fn }`). Before
   * {@link Worker.start}.
   */
  handle(queue: string, handler: Handler): this;
  handle(handlers: Record<string, Handler>): this;
  handle(a: string | Record<string, Handler>, h?: Handler): this {
    if (this.started) throw new UsageError("worker: handle() before start()");
    const add = (q: string, fn: unknown): void => {
      if (typeof q !== "string" || q === "" || Buffer.byteLength(q) > 128) throw new UsageError("worker: a queue name is 1 to 128 bytes");
      if (typeof fn !== "function") throw new UsageError(`worker: the handler of queue "${q}" must be a function`);
      this.handlers.set(q, fn as Handler);
    };
    if (typeof a === "string") add(a, h);
    else if (a !== null && typeof a === "object") for (const [q, fn] of Object.entries(a)) add(q, fn);
    else throw new UsageError("worker: handle(queue, handler) or handle({ queue: handler })");
    return this;
  }

  /** Jobs held now: claimed and not yet settled (ready, running, or done and not yet recorded). */
  get heldCount(): number {
    return this.held.size;
  }

  /** Jobs whose handlers are running now. */
  get runningCount(): number {
    return this.running;
  }

  /** Whether the worker's session LISTENs now (false while reconnecting, or with `listen: false`). */
  get listening(): boolean {
    return this.listen && this.conn !== undefined && !this.connDead;
  }

  /**
   * Connects its dedicated session (LISTEN, registration), checks the protocol version and
   * starts working. Resolves once working; a failure to connect at first rejects (later losses
   * reconnect with backoff).
   */
  async start(): Promise<void> {
    if (this.started) throw new UsageError("worker: already started");
    if (this.handlers.size === 0) throw new UsageError("worker: no handler: call handle(queue, fn) first");
    this.started = true;
    this.queues = [...this.handlers.keys()];
    const f = (n: string): string => this.client.qualified(n);
    const claimCols = "j.id, j.token, j.attempts, j.max_attempts, j.priority, j.payload, j.key";
    // next_run_ms() only when the claim found nothing (the worker then waits): a claim that
    // found some does not pay for it, and its completion brings the next claim soon anyway.
    const tail = (stale: string): string =>
      ` SELECT ${stale} AS stale, ${claimCols},` +
      ` (SELECT CASE WHEN count(*) = 0 AND $5::int > 0 THEN ${f("next_run_ms")}($8::text[]) END FROM c) AS next_ms` +
      " FROM (SELECT 1) one LEFT JOIN c j ON true";
    // The completions sent that changed nothing (stale tokens): NULL when every one counted,
    // which the count tells without comparing the lists (that costs n x m, with n in hundreds).
    const stale =
      "(SELECT CASE WHEN d.n = cardinality($1::bigint[]) THEN NULL" +
      " ELSE (SELECT array_agg(u)::text[] FROM unnest($1::bigint[]) u WHERE d.ids IS NULL OR u <> ALL (d.ids)) END FROM d)";
    const claimFrom = (): string =>
      ` c AS MATERIALIZED (SELECT x.* FROM d CROSS JOIN LATERAL ${f("claim")}($4, $5::int + 0 * coalesce(cardinality(d.ids), 0), $6::bigint, $7) x)`;
    this.sql = {
      claim:
        `WITH d AS MATERIALIZED (SELECT NULL::bigint[] AS ids WHERE $1::int IS NULL AND $2::int IS NULL AND $3::int IS NULL),` +
        claimFrom() +
        tail("NULL::text[]"),
      claimDone:
        `WITH d AS MATERIALIZED (SELECT array_agg(x.id) AS ids, count(*) AS n FROM ${f("complete")}($1::bigint[], $2::bigint[], NULL, NULL, $3::jsonb[]) x),` +
        claimFrom() +
        tail(stale),
      complete:
        `WITH d AS MATERIALIZED (SELECT array_agg(x.id) AS ids, count(*) AS n FROM ${f("complete")}($1::bigint[], $2::bigint[], NULL, NULL, $3::jsonb[]) x)` +
        ` SELECT ${stale} AS stale`,
      renew: `SELECT id, status FROM ${f("renew")}($1::bigint[], $2::bigint[], $3::bigint)`,
    };
    try {
      if (this.listenOpt === undefined) {
        // A LISTEN behind a transaction-mode pooler stays on a server session the worker does
        // not keep; named statements too: it polls, with unnamed statements.
        const p = await this.client.pooler();
        this.listen = p.sessionKept;
        if (!p.sessionKept)
          this.emit("polling", `${poolerWhat(p)}: no LISTEN, polling`);
      }
      // The session opens while the pool checks the schema and reads the channel.
      await this.connect(
        this.client
          .ready()
          .then(() => this.client.queueChannel())
          .then((ch) => {
            this.channel = ch;
          }),
      );
    } catch (err) {
      this.started = false;
      throw err;
    }
    for (const q of this.queues) this.more.add(q);
    this.loopDone = this.loop();
  }

  /**
   * Stops gracefully: no new claims; claimed jobs not started are released at once; running
   * handlers get `graceMs` to finish (their outcomes are recorded); then their signals abort
   * (`why: "stopped"`) and their jobs are released. Resolves when the worker has stopped and
   * its session is closed. Calling it again waits for the same stop.
   */
  async stop(opts: StopOptions = {}): Promise<void> {
    const grace = opts.graceMs ?? 30000;
    if (typeof grace !== "number" || !(grace >= 0)) throw new UsageError("worker: graceMs must be a number >= 0");
    if (!this.started) return;
    if (!this.stopping) {
      this.stopping = true;
      this.stopDeadline = performance.now() + grace;
    } else {
      this.stopDeadline = Math.min(this.stopDeadline, performance.now() + grace);
    }
    this.kick();
    await this.loopDone;
  }

  // ---- the loop ---------------------------------------------------------------------------

  private kick(): void {
    this.kicked = true;
    const w = this.wake;
    if (w !== undefined) {
      this.wake = undefined;
      w();
    }
  }

  private report(err: unknown, what: string): void {
    const e = err instanceof PgcoordError ? err : fromPg(err, what, (s) => this.client.masked(s));
    if (this.listenerCount("error") > 0) this.emit("error", e);
    else process.emitWarning(`pgcoord worker: ${e.message}`);
  }

  private async loop(): Promise<void> {
    let backoff = 100;
    for (;;) {
      if (this.stopping && this.finishedStopping()) break;
      if (this.conn === undefined || this.connDead) {
        // Stopping past the grace without a session: what is held returns after its lease.
        if (this.stopping && performance.now() >= this.stopDeadline) break;
        try {
          await this.reconnect();
          backoff = 100;
        } catch (err) {
          this.report(err, "reconnecting");
          await this.idle(backoff);
          backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
        }
        continue;
      }
      try {
        const again = await this.round();
        if (this.finishedStopping()) continue;
        await this.idle(again ? 0 : this.waitMs());
      } catch (err) {
        if (isConnectionLoss(err) || this.connDead) {
          if (!this.lossReported) this.report(err, "the worker's session was lost; reconnecting");
          this.lossReported = true;
          this.dropConn();
        } else {
          this.report(err, "worker");
          await this.idle(Math.min(1000, backoff));
          backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
        }
      }
    }
    await this.shutdown();
  }

  /** Waits for a kick, a notification or `ms`; lets the handlers of this tick finish first. */
  private async idle(ms: number): Promise<void> {
    if (!this.kicked && ms > 0) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          this.wake = undefined;
          resolve();
        }, Math.max(1, Math.ceil(ms)));
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
    this.kicked = false;
    // Completions that come in the same turn of the event loop go together.
    await new Promise<void>((r) => setImmediate(r));
  }

  private waitMs(): number {
    const now = performance.now();
    let t = Math.min(this.nextHb, this.nextPoll, this.nextRunAt);
    if (this.reapMs > 0) t = Math.min(t, this.nextReap);
    if (this.listening) t = Math.min(t, this.nextRegister);
    if (this.stopping) t = Math.min(t, this.stopDeadline);
    return Math.max(0, t - now);
  }

  private free(): number {
    return this.concurrency + this.prefetch - this.ready.length - this.running;
  }

  private wantClaim(): boolean {
    return !this.stopping && this.free() > 0 && this.more.size > 0;
  }

  /** One round: timers, outcomes, the trip. Returns whether there was work. */
  private async round(): Promise<boolean> {
    const now = performance.now();
    if (now >= this.nextPoll) {
      for (const q of this.queues) this.more.add(q);
      this.nextPoll = now + (this.listen ? this.pollMs : this.idlePoll);
    }
    if (now >= this.nextRunAt) {
      this.nextRunAt = Infinity;
      for (const q of this.queues) this.more.add(q);
    }
    if (this.stopping) {
      if (this.ready.length > 0) await this.releaseJobs(this.ready.splice(0), false);
      if (!this.graceOver && now >= this.stopDeadline && this.running > 0) {
        this.graceOver = true;
        const running = [...this.held.values()].filter((h) => h.started && !h.lost && !h.finished);
        for (const h of running) this.loseJob(h, "stopped", false);
        await this.releaseJobs(running, true);
      }
    }
    if (this.hbNow || now >= this.nextHb) {
      await this.renew();
    }
    if (this.others.length > 0) await this.settleOthers();
    if (this.done.length > 0 || this.wantClaim()) {
      await this.trip();
    }
    if (this.listening && now >= this.nextRegister) {
      this.nextRegister = now + 1000;
      this.register();
    }
    if (this.reapMs > 0 && now >= this.nextReap) {
      this.nextReap = now + this.reapMs;
      this.reap();
    }
    return this.done.length > 0 || this.others.length > 0 || this.wantClaim();
  }

  private finishedStopping(): boolean {
    return this.stopping && (this.running === 0 || this.graceOver) && this.done.length === 0 && this.others.length === 0 && this.ready.length === 0;
  }

  // ---- statements on the dedicated session ------------------------------------------------

  private async q<R extends pg.QueryResultRow>(name: string | undefined, text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    const c = this.conn;
    if (c === undefined || this.connDead) throw new LostError("the worker's session is gone");
    const cfg: pg.QueryConfig = this.listen && name !== undefined ? { name, text, values } : { text, values };
    const p = c.query<R>(cfg);
    let timer: NodeJS.Timeout | undefined;
    try {
      return await new Promise<pg.QueryResult<R>>((resolve, reject) => {
        p.then(resolve, reject);
        timer = setTimeout(() => {
          this.connDead = true;
          (c as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
          reject(new LostError(`no answer from the server within ${this.callMs} ms: the session was closed`));
        }, this.callMs);
      });
    } finally {
      clearTimeout(timer);
      p.catch(() => undefined);
    }
  }

  /** Opens the dedicated session; `first` (the channel's lookup) runs meanwhile and must succeed too. */
  private async connect(first?: Promise<void>): Promise<void> {
    const c = new pg.Client(this.connConfig);
    const lost = (err: Error): void => {
      if (this.conn !== c || this.lossReported) return;
      this.connDead = true;
      this.lossReported = true;
      this.report(err, "the worker's session was lost; reconnecting");
      this.kick();
    };
    c.on("error", lost);
    c.on("end", () => lost(new LostError("the worker's session ended")));
    c.on("notification", (n) => this.onNotification(n));
    const [opened, looked] = await Promise.allSettled([c.connect(), first]);
    if (opened.status === "rejected" || looked.status === "rejected") {
      c.end().catch(() => undefined);
      if (looked.status === "rejected") throw looked.reason;
      throw fromPg((opened as PromiseRejectedResult).reason, "the worker connecting", (s) => this.client.masked(s));
    }
    this.conn = c;
    this.connDead = false;
    this.lossReported = false;
    try {
      if (this.listen) {
        // Not behind a transaction-mode pooler (listen: false), where a SET would stay with a
        // server session that others share.
        // One round trip (the simple protocol takes several statements).
        await this.q(
          undefined,
          `SET jit = off; LISTEN ${pg.escapeIdentifier(this.channel)}; LISTEN ${pg.escapeIdentifier(this.ownChannel)}`,
          [],
        );
        this.nextRegister = 0;
      }
    } catch (err) {
      this.dropConn();
      throw err;
    }
  }

  private dropConn(): void {
    const c = this.conn;
    this.conn = undefined;
    this.connDead = true;
    c?.end().catch(() => undefined);
  }

  private async reconnect(): Promise<void> {
    this.dropConn();
    await this.connect();
    this.stats.reconnects++;
    for (const q of this.queues) this.more.add(q);
    this.hbNow = this.held.size > 0;
    this.emit("reconnected");
  }

  private onNotification(n: pg.Notification): void {
    const payload = n.payload ?? "";
    if (n.channel === this.ownChannel && payload.startsWith("cancel ")) {
      try {
        if (this.held.has(BigInt(payload.slice(7)))) {
          this.hbNow = true;
          this.kick();
        }
      } catch {
        /* anyone may notify anything */
      }
      return;
    }
    if (!this.handlers.has(payload)) return;
    this.stats.wakeups++;
    this.more.add(payload);
    if (n.channel === this.ownChannel && this.free() <= 0) {
      // Picked while full: pass it on to everyone, or the job would wait for our slots.
      this.conn?.query("SELECT pg_notify($1, $2)", [this.channel, payload]).catch(() => undefined);
    }
    this.kick();
  }

  // ---- the trip: completions and the next claim -------------------------------------------

  private async trip(): Promise<void> {
    // The trip takes the completions whole; they come back when it fails.
    const outs = this.done;
    this.done = [];
    const claim = this.wantClaim();
    const queue = claim ? this.pickQueue() : undefined;
    const n = outs.length;
    const ids = new Array<string>(n);
    const tokens = new Array<string>(n);
    let results: Array<string | null> | null = null;
    for (let i = 0; i < n; i++) {
      const o = outs[i] as Completion;
      ids[i] = o.h.idText;
      tokens[i] = o.h.tokenText;
      if (o.result !== null) results ??= [];
    }
    if (results !== null) for (const o of outs) results.push(o.result);
    const want = this.free();
    let r: pg.QueryResult<ClaimRow & { stale: string[] | null; next_ms: string | null }>;
    try {
      if (queue === undefined) {
        if (n === 0) return;
        const x = await this.q<{ stale: string[] | null }>("pgcoord_worker_complete", this.sql.complete, [ids, tokens, results]);
        this.settled(outs, x.rows[0]?.stale ?? null);
        return;
      }
      r = await this.q(
        n > 0 ? "pgcoord_worker_claim_done" : "pgcoord_worker_claim",
        n > 0 ? this.sql.claimDone : this.sql.claim,
        [n > 0 ? ids : null, n > 0 ? tokens : null, n > 0 ? results : null, queue, want, this.leaseMs, this.workerId, this.queues],
      );
    } catch (err) {
      const st = sqlstateOf(err);
      if (n > 0 && st !== undefined && (st.startsWith("22") || st === "40P01")) {
        await this.completeOneByOne(outs);
        return;
      }
      this.done = n > 0 ? outs.concat(this.done) : this.done;
      throw err;
    }
    const first = r.rows[0];
    this.settled(outs, first?.stale ?? null);
    let got = 0;
    for (const row of r.rows) {
      if (row.id === null || row.id === undefined) continue;
      got++;
      const job = jobOf(queue, row);
      const h: Held = { job, idText: row.id, tokenText: row.token, ac: undefined, reason: undefined, started: false, finished: false, lost: false };
      this.held.set(job.id, h);
      this.ready.push(h);
    }
    this.stats.claimed += got;
    if (got < want) {
      this.more.delete(queue);
      // The adaptive poll doubles only after a claim that found nothing; one that found jobs
      // (a trickle) starts it over at its shortest.
      if (!this.listen && got === 0) this.idlePoll = Math.min(this.pollMs, this.idlePoll * 2);
      else if (!this.listen) {
        this.idlePoll = 10;
        this.nextPoll = Math.min(this.nextPoll, performance.now() + 10);
      }
      const next = first?.next_ms;
      if (next !== null && next !== undefined) this.nextRunAt = Math.min(this.nextRunAt, performance.now() + Math.max(0, Number(next)));
    } else if (!this.listen) {
      this.idlePoll = 10;
      this.nextPoll = Math.min(this.nextPoll, performance.now() + 10);
    }
    if (got > 0 && this.nextHb === Infinity) this.nextHb = performance.now() + this.leaseMs / 3;
    this.startReady();
  }

  private pickQueue(): string | undefined {
    for (let i = 0; i < this.queues.length; i++) {
      const q = this.queues[(this.rr + i) % this.queues.length] as string;
      if (this.more.has(q)) {
        this.rr = (this.rr + i + 1) % this.queues.length;
        return q;
      }
    }
    return undefined;
  }

  /** The completions sent are recorded, but for those in `staleIds` (their tokens were stale). */
  private settled(outs: Completion[], staleIds: string[] | null): void {
    const stale = staleIds === null ? undefined : new Set(staleIds);
    for (const o of outs) {
      if (stale?.has(o.h.idText)) this.stats.stale++;
      else this.stats.completed++;
      this.forget(o.h);
      // A keyed job's completion frees a slot of its key: worth claiming again (in the same
      // statement). Other queues are claimed again when a claim was full or a wake-up came.
      if (o.h.job.key !== null) this.more.add(o.h.job.queue);
    }
  }

  /** The batch was refused (a result the server would not take, a deadlock): each alone. */
  private async completeOneByOne(outs: Completion[]): Promise<void> {
    for (let i = 0; i < outs.length; i++) {
      const o = outs[i] as Completion;
      if (o.h.lost) {
        this.stats.stale++;
        this.forget(o.h);
        continue;
      }
      const id = o.h.idText;
      const tok = o.h.tokenText;
      try {
        const x = await this.q<{ stale: string[] | null }>("pgcoord_worker_complete", this.sql.complete, [[id], [tok], o.result === null ? null : [o.result]]);
        this.settled([o], x.rows[0]?.stale ?? null);
      } catch (err) {
        const st = sqlstateOf(err);
        if (st === undefined || !st.startsWith("22")) {
          // The rest wait for the next trip.
          this.done = outs.slice(i).concat(this.done);
          throw err;
        }
        this.others.push({ h: o.h, kind: "fail", error: `the handler's result was refused: ${(err as Error).message}`, retryInMs: null });
      }
    }
  }

  /** Failures and deferrals, one by one (rare); outcomes of jobs lost meanwhile are dropped. */
  private async settleOthers(): Promise<void> {
    const list = this.others;
    this.others = [];
    for (let i = 0; i < list.length; i++) {
      const o = list[i] as Outcome;
      if (o.h.lost) {
        this.stats.stale++;
        this.forget(o.h);
        continue;
      }
      const f = this.client.qualified(o.kind === "fail" ? "fail" : "retry_later");
      const id = o.h.idText;
      const tok = o.h.tokenText;
      let r: pg.QueryResult<{ o: string }>;
      try {
        r =
          o.kind === "fail"
            ? await this.q<{ o: string }>(
                "pgcoord_worker_fail",
                `SELECT ${f}($1::bigint, $2::bigint, $3, $4::bigint, $5::bigint, NULL, NULL, $6::bigint) AS o`,
                [id, tok, o.error.replace(/\u0000/g, ""), this.backoffBase, this.backoffMax, o.retryInMs],
              )
            : await this.q<{ o: string }>("pgcoord_worker_defer", `SELECT ${f}($1::bigint, $2::bigint, $3::bigint) AS o`, [id, tok, o.delayMs]);
      } catch (err) {
        // This one and the rest wait for the next round.
        this.others = list.slice(i).concat(this.others);
        throw err;
      }
      const res = r.rows[0]?.o;
      if (res === "retried" || res === "dead") {
        if (o.kind === "fail") this.stats.failed++;
        else this.stats.deferred++;
        // The job may be due again soon.
        this.more.add(o.h.job.queue);
      } else this.stats.stale++;
      this.forget(o.h);
    }
  }

  // ---- handlers ---------------------------------------------------------------------------

  private startReady(): void {
    while (this.running < this.concurrency && this.ready.length > 0 && !this.stopping) {
      const h = this.ready.shift() as Held;
      if (h.lost) continue;
      this.run(h);
    }
  }

  private run(h: Held): void {
    h.started = true;
    this.running++;
    const fn = this.handlers.get(h.job.queue) as Handler;
    let p: unknown;
    try {
      p = fn(h.job, new Context(h, this));
    } catch (err) {
      p = Promise.reject(err);
    }
    if (p instanceof Promise || (p !== null && typeof p === "object" && typeof (p as PromiseLike<unknown>).then === "function"))
      (p as PromiseLike<unknown>).then(
        (v) => this.finish(h, true, v),
        (e: unknown) => this.finish(h, false, e),
      );
    else queueMicrotask(() => this.finish(h, true, p));
  }

  private finish(h: Held, ok: boolean, v: unknown): void {
    this.running--;
    h.finished = true;
    if (h.lost) {
      // Not ours any more (cancelled, lost, released at the stop): nothing to record.
      this.forget(h);
    } else if (ok) {
      let result: string | null = null;
      try {
        result = resultText(v, h.job.id);
        this.done.push({ h, result });
      } catch (err) {
        this.others.push({ h, kind: "fail", error: `the handler's result was refused: ${(err as Error).message}`, retryInMs: null });
      }
    } else if (v instanceof Defer) {
      this.others.push({ h, kind: "defer", delayMs: Math.max(0, Math.floor(v.delayMs)) });
    } else {
      const retry = (v as { retryInMs?: unknown })?.retryInMs;
      this.others.push({
        h,
        kind: "fail",
        error: errorText(v),
        retryInMs: typeof retry === "number" && retry >= 0 ? Math.floor(retry) : null,
      });
    }
    this.startReady();
    this.kick();
  }

  private forget(h: Held): void {
    this.held.delete(h.job.id);
    if (this.held.size === 0) this.nextHb = Infinity;
  }

  private loseJob(h: Held, why: "cancelled" | "lost" | "stopped", tell = true): void {
    if (h.lost) return;
    h.lost = true;
    if (why === "cancelled") this.stats.cancelled++;
    h.reason = new JobLostError(h.job.id, why);
    h.ac?.abort(h.reason);
    if (!h.started) {
      const i = this.ready.indexOf(h);
      if (i >= 0) this.ready.splice(i, 1);
      this.forget(h);
    } else {
      // Finished, its outcome not yet recorded: dropped.
      const i = h.finished ? this.done.findIndex((o) => o.h === h) : -1;
      const j = h.finished && i < 0 ? this.others.findIndex((o) => o.h === h) : -1;
      if (i >= 0) this.done.splice(i, 1);
      if (j >= 0) this.others.splice(j, 1);
      if (i >= 0 || j >= 0) {
        this.stats.stale++;
        this.forget(h);
      }
    }
    if (tell) this.emit("lost", { job: h.job, why });
  }

  // ---- leases, releases, the reaper, the registration -------------------------------------

  private async renew(): Promise<void> {
    this.hbNow = false;
    const list = [...this.held.values()].filter((h) => !h.lost);
    if (list.length === 0) {
      this.nextHb = Infinity;
      return;
    }
    const r = await this.q<{ id: string; status: string }>("pgcoord_worker_renew", this.sql.renew, [
      list.map((h) => h.idText),
      list.map((h) => h.tokenText),
      this.leaseMs,
    ]);
    this.nextHb = performance.now() + this.leaseMs / 3;
    for (const row of r.rows) {
      if (row.status === "held") continue;
      const h = this.held.get(BigInt(row.id));
      if (h !== undefined) this.loseJob(h, row.status === "cancelled" ? "cancelled" : "lost");
    }
  }

  private async releaseJobs(list: Held[], started: boolean): Promise<void> {
    const live = list.filter((h) => started || !h.lost);
    for (const h of list) if (!started) this.forget(h);
    if (live.length === 0) return;
    try {
      const r = await this.q<{ n: number }>("pgcoord_worker_release", `SELECT ${this.client.qualified("release")}($1::bigint[], $2::bigint[], $3::boolean) AS n`, [
        live.map((h) => h.idText),
        live.map((h) => h.tokenText),
        started,
      ]);
      this.stats.released += Number(r.rows[0]?.n ?? 0);
    } catch (err) {
      this.report(err, `releasing ${live.length} job(s) (they return after their lease)`);
    }
  }

  /**
   * The reaper's pass and the registration go through the pool, in the background, one at a
   * time: the worker's own session stays free for the claims a wake-up brings.
   */
  private sideCall(what: string, sql: string, values: unknown[], ignore?: string): void {
    if (this.side.has(what)) return;
    const p = this.client.pool
      .query(sql, values)
      .then(
        () => undefined,
        (err: unknown) => {
          if (sqlstateOf(err) !== ignore) this.report(err, what);
        },
      )
      .finally(() => this.side.delete(what));
    this.side.set(what, p);
  }

  private reap(): void {
    this.sideCall("reaping expired leases", `SELECT failed, returned FROM ${this.client.qualified("reap")}()`, [], "55P03");
  }

  private register(): void {
    this.sideCall("registering for targeted wake-ups", `SELECT ${this.client.qualified("worker_register")}($1, $2::text[], $3::int)`, [
      this.ownChannel,
      this.queues,
      Math.max(0, this.free()),
    ]);
  }

  private async shutdown(): Promise<void> {
    await Promise.all(this.side.values());
    if (this.conn !== undefined && !this.connDead) {
      try {
        if (this.listen) await this.q(undefined, `SELECT ${this.client.qualified("worker_unregister")}($1)`, [this.ownChannel]);
      } catch {
        /* the registration runs out by itself */
      }
    }
    this.dropConn();
    this.emit("stopped");
  }
}


/** A handler's context: its signal is made on first use. */
class Context implements HandlerContext {
  constructor(
    private readonly h: Held,
    readonly worker: Worker,
  ) {}

  get signal(): AbortSignal {
    const h = this.h;
    if (h.ac === undefined) {
      h.ac = new AbortController();
      if (h.reason !== undefined) h.ac.abort(h.reason);
    }
    return h.ac.signal;
  }
}

/** The text a failure records: an Error's message (with its name), or the value. */
function errorText(v: unknown): string {
  if (v instanceof Error) return `${v.name && v.name !== "Error" ? `${v.name}: ` : ""}${v.message}`.slice(0, 8000);
  try {
    return String(typeof v === "object" ? JSON.stringify(v) : v).slice(0, 8000);
  } catch {
    return "the handler failed";
  }
}
