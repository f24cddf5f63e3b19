/**
 * The Node client's adapter for pgcoord's conformance suite (tests/conformance/README.md): one
 * JSON request a line on stdin, one JSON answer a line on stdout, in order, each written at
 * once. Every op runs on this client's own API, except `sql`, the runner's look at the
 * adapter's session (a `pg` connection of its own), and `init`, which runs
 * `pgcoord init --schema` as the README says to. `work` runs the client's {@link Worker} with
 * the README's handler kinds, writing `job_started`, `job_ended` and `done` events.
 *
 * Run it as `node dist/esm/conformance-adapter.js` (built with the package, not exported from
 * it). PGCOORD_BIN names the pgcoord tool for `init` (default: build/pgcoord of the source
 * tree, then pgcoord on PATH). End of input exits, releasing everything with the sessions.
 *
 * Keys, tokens and ids are 64-bit: requests are parsed, and answers written, with exact
 * integers (bigint), which JSON.parse and JSON.stringify cannot do.
 *
 * @module
 * @internal
 */
import { execFile } from "node:child_process";
import { accessSync, constants } from "node:fs";
import * as path from "node:path";
import * as readline from "node:readline";
import pg from "pg";
import { CLIENT_VERSION, Client, PROTOCOL_VERSION, type EnqueueOptions, type Isolation } from "./client.js";
import { PgcoordError, SchemaError, fromPg, sqlstateOf } from "./errors.js";
import { key } from "./key.js";
import type { SessionLock } from "./lock.js";
import type { Job, Rate } from "./queue.js";
import type { Handler, JobLostError, Worker } from "./worker.js";

const FEATURES = ["queue", "keys", "results", "locks", "leases", "tx", "diag"];
const HANDLERS = new Set(["ok", "fail", "sleep", "hang", "result", "check_cancel"]);
const ISOLATIONS = new Set(["read committed", "repeatable read", "serializable"]);
const APPLICATION = "pgcoord/conformance";

// ---- JSON with exact 64-bit integers ----------------------------------------------------------

type Json = null | boolean | number | bigint | string | Json[] | { [k: string]: Json };

/** JSON.parse, except that an integer beyond 2^53 comes back as an exact bigint. */
function parseJson(text: string): Json {
  let i = 0;
  const ws = (): void => {
    while (i < text.length && " \t\r\n".includes(text[i] as string)) i++;
  };
  const fail = (what: string): never => {
    throw new SyntaxError(`${what} at offset ${i}`);
  };
  const value = (): Json => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const o: { [k: string]: Json } = {};
      ws();
      if (text[i] === "}") {
        i++;
        return o;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a key");
        const k = str();
        ws();
        if (text[i++] !== ":") fail("expected ':'");
        o[k] = value();
        ws();
        const d = text[i++];
        if (d === "}") return o;
        if (d !== ",") fail("expected ',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      const a: Json[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return a;
      }
      for (;;) {
        a.push(value());
        ws();
        const d = text[i++];
        if (d === "]") return a;
        if (d !== ",") fail("expected ',' or ']'");
      }
    }
    if (c === '"') return str();
    for (const [word, v] of [["true", true], ["false", false], ["null", null]] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    const m = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i));
    if (m === null) return fail("unexpected character");
    i += m[0].length;
    if (m[1] === undefined && m[2] === undefined) {
      const n = Number(m[0]);
      return Number.isSafeInteger(n) ? n : BigInt(m[0]);
    }
    return Number(m[0]);
  };
  const str = (): string => {
    const m = /^"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/.exec(text.slice(i));
    if (m === null) return fail("bad string");
    i += m[0].length;
    return JSON.parse(m[0]) as string;
  };
  const v = value();
  ws();
  if (i !== text.length) fail("trailing text");
  return v;
}

/** JSON.stringify, except that a bigint is written as an exact integer; undefined fields are left out. */
function toJson(v: unknown): string {
  if (v === null || v === undefined) return "null";
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number") return Number.isFinite(v) ? String(v) : "null";
  if (typeof v === "boolean" || typeof v === "string") return JSON.stringify(v);
  if (v instanceof Date) return JSON.stringify(v.toISOString());
  if (Array.isArray(v)) return `[${v.map(toJson).join(",")}]`;
  const parts: string[] = [];
  for (const [k, x] of Object.entries(v as object)) if (x !== undefined) parts.push(`${JSON.stringify(k)}:${toJson(x)}`);
  return `{${parts.join(",")}}`;
}

// ---- answers ------------------------------------------------------------------------------

type Req = { [k: string]: Json };
type Ans = { [k: string]: unknown };

/** An error answer: kind, message, sqlstate. */
class Answer extends Error {
  constructor(
    readonly kind: string,
    message: string,
    readonly sqlstate: string | null = null,
  ) {
    super(message);
  }
}

/** The protocol's error kind of a client error (README: the kinds every client shares). */
function kindOf(e: unknown): string {
  if (e instanceof PgcoordError) {
    switch (e.code) {
      case "notFound":
        return "not_found";
      case "retryLater":
        return "retry_later";
      default:
        return e.code;
    }
  }
  return "internal";
}

function out(obj: Ans): void {
  // One write per answer; a pipe's writes are synchronous on Linux, so it is out before kill.
  process.stdout.write(`${toJson(obj)}\n`);
}

function argStr(req: Req, name: string): string;
function argStr(req: Req, name: string, required: false): string | undefined;
function argStr(req: Req, name: string, required = true): string | undefined {
  const v = req[name];
  if ((v === null || v === undefined) && !required) return undefined;
  if (typeof v !== "string") throw new Answer("usage", `${name} must be a string`);
  return v;
}

function argInt(req: Req, name: string, dflt?: number): number {
  const v = req[name];
  if ((v === null || v === undefined) && dflt !== undefined) return dflt;
  if (typeof v !== "number" || !Number.isSafeInteger(v)) throw new Answer("usage", `${name} must be an integer`);
  return v;
}

function argBig(req: Req, name: string): bigint {
  const v = req[name];
  const b = typeof v === "bigint" ? v : typeof v === "number" && Number.isSafeInteger(v) ? BigInt(v) : undefined;
  if (b === undefined || BigInt.asIntN(64, b) !== b) throw new Answer("usage", `${name} must be a signed 64-bit integer`);
  return b;
}

/** A list of signed 64-bit integers. */
function bigList(req: Req, name: string): bigint[] {
  const v = req[name];
  if (!Array.isArray(v)) throw new Answer("usage", `${name} must be a list of integers`);
  return v.map((_, i) => argBig({ x: v[i] as Json }, "x"));
}

/** A request's JSON value for the client: exact big integers become numbers again (a payload is JSON). */
function plain(v: Json): unknown {
  if (typeof v === "bigint") return Number(v);
  if (Array.isArray(v)) return v.map(plain);
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

/** CLOCK_MONOTONIC in ms, the clock every adapter on the machine shares (libuv's hrtime). */
function monoMs(): number {
  return Number(process.hrtime.bigint() / 1000000n);
}

/** Waits `ms` or until `signal` aborts; resolves whether it aborted. */
function abortableWait(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = Number.isFinite(ms)
      ? setTimeout(() => {
          signal.removeEventListener("abort", onAbort);
          resolve(false);
        }, ms)
      : undefined;
    const onAbort = (): void => {
      clearTimeout(t);
      resolve(true);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** A lock held in a transaction of its own, on a session of its own, until unlock. */
class XactLock {
  constructor(readonly conn: pg.Client) {}

  async release(): Promise<void> {
    try {
      await this.conn.query("ROLLBACK");
    } catch (err) {
      throw fromPg(err, "ending the transaction that held the lock");
    } finally {
      await this.conn.end().catch(() => undefined);
    }
  }
}

/**
 * A session lock the adapter holds, and how many times it took it. The client takes each
 * session lock on a connection of its own (two tasks of one process exclude each other), so a
 * second lock of a name this adapter holds would wait for the first; the protocol's adapter is
 * one session, on which the server counts a lock taken twice. The adapter counts likewise.
 */
interface Held {
  lock: SessionLock;
  count: number;
}

function spawn(exe: string, args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(exe, args, { timeout: 120000 }, (err, _stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === "number" ? err.code : 1;
      resolve({ code, stderr: String(stderr) });
    });
  });
}

function executable(p: string | undefined): boolean {
  if (p === undefined || p === "") return false;
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

class Adapter {
  private dsn: string | undefined;
  private schema: string | undefined;
  private client: Client | undefined;
  private conn: pg.Client | undefined;
  private session = new Map<string, Held>();
  private xact = new Map<string, XactLock[]>();
  private work_: { worker: Worker; handled: number; finished: boolean } | undefined;

  private need(): Client {
    if (this.client === undefined) throw new Answer("usage", "not connected: send connect first");
    return this.client;
  }

  /** A connection of the adapter's own (errors of an idle one are seen at its next query). */
  private async open(): Promise<pg.Client> {
    const c = new pg.Client({ connectionString: this.dsn, application_name: APPLICATION });
    c.on("error", () => undefined);
    try {
      await c.connect();
    } catch (err) {
      throw fromPg(err, "connecting");
    }
    return c;
  }

  async close(): Promise<void> {
    if (this.work_ !== undefined) await this.work_.worker.stop({ graceMs: 0 }).catch(() => undefined);
    this.work_ = undefined;
    const ends: Array<Promise<unknown>> = [];
    for (const h of this.session.values()) ends.push(h.lock.release());
    for (const held of this.xact.values()) for (const x of held) ends.push(x.conn.end());
    if (this.conn !== undefined) ends.push(this.conn.end());
    this.session.clear();
    this.xact.clear();
    this.conn = undefined;
    await Promise.allSettled(ends);
    if (this.client !== undefined) await this.client.end().catch(() => undefined);
    this.client = undefined;
  }

  async hello(): Promise<Ans> {
    return { language: "node", client_version: CLIENT_VERSION, protocol: PROTOCOL_VERSION, features: FEATURES };
  }

  async connect(req: Req): Promise<Ans> {
    const dsn = argStr(req, "dsn");
    const schema = argStr(req, "schema");
    await this.close();
    this.dsn = dsn;
    this.schema = schema;
    this.conn = await this.open();
    this.client = new Client({ dsn, schema, applicationName: APPLICATION });
    // The protocol version is checked here when the schema exists; a schema not created yet
    // (init follows) is checked at the client's first call instead.
    try {
      await this.client.ready();
    } catch (err) {
      if (!(err instanceof SchemaError && err.sqlstate !== undefined)) throw err;
    }
    return {};
  }

  async init(): Promise<Ans> {
    this.need();
    const here = path.dirname(process.argv[1] ?? ".");
    const pathExe = (process.env.PATH ?? "").split(path.delimiter).map((d) => path.join(d, "pgcoord"));
    const exe = [process.env.PGCOORD_BIN, path.resolve(here, "../../../../build/pgcoord"), ...pathExe].find(executable);
    if (exe === undefined) throw new Answer("internal", "no pgcoord tool for init: set PGCOORD_BIN");
    const r = await spawn(exe, ["-d", this.dsn as string, "init", "--schema", this.schema as string]);
    if (r.code !== 0) throw new Answer("schema", `pgcoord init exited ${r.code}: ${r.stderr.trim()}`);
    return {};
  }

  // ---- diagnostics ------------------------------------------------------------------------

  async lock_holders(req: Req): Promise<Ans> {
    const holders = await this.need().lockHolders(argStr(req, "name"));
    return { holders: holders.map((h) => ({ pid: h.pid, mode: h.mode, granted: h.granted, is_self: h.isSelf })) };
  }

  async blocking_forest(req: Req): Promise<Ans> {
    const pid = argInt(req, "pid");
    if (pid < 0 || pid > 2147483647) throw new Answer("usage", "pid must be a process id");
    const s = (await this.need().blockingForest()).session(pid);
    if (s === undefined) return { found: false };
    return {
      found: true, blocked_by: s.blockedBy, blocks: s.blocks, root: s.root, depth: s.depth,
      in_cycle: s.inCycle, blocks_total: s.blocksTotal,
    };
  }

  // ---- locks ------------------------------------------------------------------------------

  async lock_key(req: Req): Promise<Ans> {
    return { key: key(argStr(req, "name")) };
  }

  async lock(req: Req): Promise<Ans> {
    const client = this.need();
    const name = argStr(req, "name");
    const mode = argStr(req, "mode", false) ?? "session";
    const wait = argInt(req, "wait_ms", 0);
    if ((mode !== "session" && mode !== "xact") || wait < 0) throw new Answer("usage", "mode must be session or xact, wait_ms >= 0");
    key(name); // an empty or bad name is usage, whatever the mode
    if (mode === "session") {
      const held = this.session.get(name);
      if (held !== undefined) {
        held.count++;
        return { acquired: true };
      }
      const lock = await client.tryLock(name, { wait });
      if (lock !== null) this.session.set(name, { lock, count: 1 });
      return { acquired: lock !== null };
    }
    const conn = await this.open();
    let got = false;
    try {
      await conn.query("BEGIN");
      got = await client.tryXactLock(conn, name, { wait });
    } finally {
      if (!got) await conn.end().catch(() => undefined);
    }
    if (got) {
      const list = this.xact.get(name) ?? [];
      list.push(new XactLock(conn));
      this.xact.set(name, list);
    }
    return { acquired: got };
  }

  async unlock(req: Req): Promise<Ans> {
    const name = argStr(req, "name");
    // The newest first: a transaction lock, then the session lock's count.
    const list = this.xact.get(name);
    const x = list?.pop();
    if (x !== undefined) {
      if (list?.length === 0) this.xact.delete(name);
      await x.release();
      return { released: true };
    }
    const held = this.session.get(name);
    if (held === undefined) return { released: false };
    if (--held.count === 0) {
      this.session.delete(name);
      await held.lock.release();
    }
    return { released: true };
  }

  // ---- leases and fencing -----------------------------------------------------------------

  async lease_acquire(req: Req): Promise<Ans> {
    const g = await this.need().leaseAcquireToken(argStr(req, "name"), {
      holder: argStr(req, "holder", false) ?? "",
      ttlMs: argInt(req, "ttl_ms"),
    });
    return { acquired: g.granted, token: g.granted ? g.token : null };
  }

  async lease_renew(req: Req): Promise<Ans> {
    const name = argStr(req, "name");
    const token = argBig(req, "token");
    const r = await this.need().leaseRenew(name, token, { ttlMs: argInt(req, "ttl_ms") });
    if (r.status !== "ok") throw new Answer("stale", `lease "${name}": token ${token} was not renewed: ${r.status}`);
    return {};
  }

  async lease_release(req: Req): Promise<Ans> {
    const name = argStr(req, "name");
    const token = argBig(req, "token");
    const status = await this.need().leaseRelease(name, token);
    // As the C library: released (now or before) is done; a newer token is stale.
    if (status === "superseded") throw new Answer("stale", `lease "${name}": token ${token} is stale, a newer token was granted`);
    if (status !== "ok" && status !== "released") throw new Answer("not_found", `lease "${name}" has no token ${token}`);
    return {};
  }

  async fence_check(req: Req): Promise<Ans> {
    const client = this.need();
    const name = argStr(req, "name");
    const token = argBig(req, "token");
    await client.transaction(async (tx) => client.fenceCheck(tx, name, token), { maxAttempts: 1 });
    return {};
  }

  // ---- the queue --------------------------------------------------------------------------

  async enqueue(req: Req): Promise<Ans> {
    const client = this.need();
    const queue = argStr(req, "queue");
    const opts: EnqueueOptions = {};
    if (req.priority != null) opts.priority = argInt(req, "priority");
    if (req.delay_ms != null) opts.delayMs = argInt(req, "delay_ms");
    if (req.run_at != null) {
      const d = new Date(argStr(req, "run_at"));
      if (Number.isNaN(d.getTime())) throw new Answer("usage", "run_at must be an ISO 8601 time");
      opts.runAt = d;
    }
    if (req.unique_key != null) opts.uniqueKey = argStr(req, "unique_key");
    if (req.key != null) opts.key = argStr(req, "key");
    if (req.max_attempts != null) opts.maxAttempts = argInt(req, "max_attempts");
    if (req.group != null) opts.group = argStr(req, "group");
    if (req.after != null) opts.after = bigList(req, "after");
    const pol = argStr(req, "on_dep_failure", false);
    if (pol !== undefined) {
      if (pol !== "cancel" && pol !== "run") throw new Answer("usage", "on_dep_failure must be cancel or run");
      opts.onDependencyFailure = pol;
    }
    const tx = argStr(req, "tx", false) ?? "commit";
    if (tx !== "commit" && tx !== "rollback") throw new Answer("usage", "tx must be commit or rollback");
    const payload = plain(req.payload ?? null);
    if (tx === "commit") {
      const id = await client.enqueue(queue, payload, opts);
      if (id === null) throw new Answer("conflict", `unique key ${String(opts.uniqueKey)} is taken by a pending or running job`);
      return { job_id: id };
    }
    const pc = await client.pool.connect();
    try {
      await pc.query("BEGIN");
      await client.enqueue(queue, payload, opts, { client: pc });
      await pc.query("ROLLBACK");
    } finally {
      pc.release();
    }
    return { job_id: 0 };
  }

  async enqueue_many(req: Req): Promise<Ans> {
    const payloads = req.payloads;
    if (!Array.isArray(payloads)) throw new Answer("usage", "payloads must be a list");
    const uk = req.unique_keys;
    if (uk != null && (!Array.isArray(uk) || !uk.every((k) => k === null || typeof k === "string")))
      throw new Answer("usage", "unique_keys must be a list of strings or nulls");
    const ids = await this.need().enqueueMany(argStr(req, "queue"), payloads.map(plain), uk == null ? {} : { uniqueKeys: uk as Array<string | null> });
    return { job_ids: ids.map((id) => id ?? 0) };
  }

  async claim(req: Req): Promise<Ans> {
    const jobs = await this.need().claim(argStr(req, "queue"), { max: argInt(req, "max", 1), leaseMs: argInt(req, "lease_ms", 30000) });
    return { jobs: jobs.map((j) => ({ job_id: j.id, token: j.token, attempt: j.attempt, payload: j.payload, key: j.key })) };
  }

  async complete(req: Req): Promise<Ans> {
    await this.need().complete(argBig(req, "job_id"), argBig(req, "token"), { result: req.result == null ? undefined : plain(req.result) });
    return {};
  }

  async fail(req: Req): Promise<Ans> {
    const retry = req.retry_in_ms == null ? undefined : argInt(req, "retry_in_ms");
    const o = await this.need().fail(argBig(req, "job_id"), argBig(req, "token"), argStr(req, "error", false) ?? "", retry === undefined ? {} : { retryInMs: retry });
    return { dead: o === "dead" };
  }

  async release(req: Req): Promise<Ans> {
    await this.need().release([{ id: argBig(req, "job_id"), token: argBig(req, "token") }], { started: true });
    return {};
  }

  async renew(req: Req): Promise<Ans> {
    const ids = bigList(req, "job_ids");
    const tokens = bigList(req, "tokens");
    if (ids.length !== tokens.length || ids.length === 0) throw new Answer("usage", "job_ids and tokens must be lists of the same length");
    const r = await this.need().renew(ids.map((id, i) => ({ id, token: tokens[i] as bigint })), argInt(req, "lease_ms", 30000));
    return { lost: r.lost, cancelled: r.cancelled };
  }

  async cancel(req: Req): Promise<Ans> {
    return { was_running: await this.need().cancel(argBig(req, "job_id")) };
  }

  async reap(): Promise<Ans> {
    const r = await this.need().reap();
    return { returned: r.returned, failed: r.failed };
  }

  async job(req: Req): Promise<Ans> {
    const j = await this.need().job(argBig(req, "job_id"));
    return { status: j.status, attempts: j.attempts };
  }

  async job_result(req: Req): Promise<Ans> {
    const r = await this.need().jobResult(argBig(req, "job_id"), { waitMs: argInt(req, "wait_ms", 0) });
    return { status: r.status, result: r.result };
  }

  async flow_set(req: Req): Promise<Ans> {
    const client = this.need();
    const queue = argStr(req, "queue");
    const key = argStr(req, "key", false);
    const rate = (name: string): Rate | undefined => {
      const v = req[name];
      if (v == null) return undefined;
      if (typeof v !== "object" || Array.isArray(v)) throw new Answer("usage", `${name} must be {"n", "per_ms"}`);
      return { n: argInt(v as Req, "n"), perMs: argInt(v as Req, "per_ms") };
    };
    const limit = req.key_limit == null ? undefined : argInt(req, "key_limit");
    if (key !== undefined) await client.keySet(queue, key, { limit: limit === 0 ? null : limit, rate: rate("rate") });
    else await client.flowSet(queue, { keyLimit: limit === 0 ? null : limit, rate: rate("rate"), keyRate: rate("key_rate") });
    return {};
  }

  // ---- the worker -------------------------------------------------------------------------

  async work(req: Req): Promise<Ans> {
    const client = this.need();
    if (this.work_ !== undefined && !this.work_.finished) throw new Answer("usage", "work is already running: stop it first");
    const queues: string[] = [];
    if (req.queue != null) queues.push(argStr(req, "queue"));
    if (req.queues != null) {
      if (!Array.isArray(req.queues) || !req.queues.every((q) => typeof q === "string")) throw new Answer("usage", "queues must be a list of names");
      queues.push(...(req.queues as string[]));
    }
    if (queues.length === 0) throw new Answer("usage", "work needs a queue");
    const h = (req.handler ?? {}) as Req;
    const kind = h.do ?? "ok";
    if (typeof kind !== "string" || !HANDLERS.has(kind)) throw new Answer("usage", `unknown handler ${String(kind)}`);
    const ms = argInt(h, "ms", 0);
    const errorText = argStr(h, "error", false) ?? "failed";
    const result = h.result == null ? undefined : plain(h.result);
    const stopAfter = argInt(req, "stop_after", 0);
    const w = client.worker({ concurrency: argInt(req, "concurrency", 1), leaseMs: argInt(req, "lease_ms", 30000) });
    const run = { worker: w, handled: 0, finished: false };
    w.on("error", (e: Error) => {
      if (process.env.PGCOORD_ADAPTER_LOG === "debug") process.stderr.write(`adapter node worker ${process.pid}: ${e.message}\n`);
    });
    const ended = (job: Job, outcome: string): void => {
      out({ event: "job_ended", job_id: job.id, outcome, t_ms: monoMs() });
      run.handled++;
      if (stopAfter > 0 && run.handled === stopAfter) void w.stop({ graceMs: 30000 });
    };
    const handler: Handler = async (job, { signal }) => {
      out({ event: "job_started", job_id: job.id, attempt: job.attempt, key: job.key, t_ms: monoMs() });
      const why = (): string => ((signal.reason as JobLostError)?.why === "cancelled" ? "cancelled" : "lost");
      if (kind === "fail") {
        ended(job, "failed");
        throw new Error(errorText);
      }
      if (kind === "sleep" || kind === "hang" || kind === "check_cancel") {
        const bound = kind === "hang" ? Infinity : kind === "sleep" ? ms : ms > 0 ? ms : 30000;
        const aborted = await abortableWait(bound, signal);
        if (aborted) {
          const o = kind === "check_cancel" ? why() : "lost";
          ended(job, o);
          throw signal.reason;
        }
      }
      ended(job, "succeeded");
      return kind === "result" ? result : undefined;
    };
    for (const q of queues) w.handle(q, handler);
    w.on("stopped", () => {
      run.finished = true;
      out({ event: "done", handled: run.handled });
    });
    await w.start();
    this.work_ = run;
    return { started: true };
  }

  async stop(req: Req): Promise<Ans> {
    const grace = argInt(req, "grace_ms", 5000);
    const run = this.work_;
    if (run === undefined) return { stopped: false, handled: 0 };
    await run.worker.stop({ graceMs: grace });
    this.work_ = undefined;
    return { stopped: true, handled: run.handled };
  }

  // ---- transactions and SQL ---------------------------------------------------------------

  async tx(req: Req): Promise<Ans> {
    const client = this.need();
    const given = req.statements;
    if (!Array.isArray(given) || !given.every((s) => typeof s === "string")) throw new Answer("usage", "statements must be a list of strings");
    const stmts = given as string[];
    const iso = argStr(req, "isolation", false);
    if (iso !== undefined && !ISOLATIONS.has(iso)) throw new Answer("usage", `isolation must be one of ${[...ISOLATIONS].join(", ")}`);
    let runs = 0;
    await client.transaction(
      async (tx) => {
        runs++;
        for (const s of stmts) await tx.query(s);
      },
      { maxAttempts: argInt(req, "max_attempts", 10), isolation: (iso ?? "read committed") as Isolation },
    );
    return { attempts: runs };
  }

  async sql(req: Req): Promise<Ans> {
    this.need();
    const stmt = argStr(req, "statement");
    // The runner's check on this session, rows as the server's text (every type parsed as
    // text), on the simple protocol: the statement may be several; the last one's rows count.
    let res: pg.QueryResult | pg.QueryResult[];
    try {
      res = await (this.conn as pg.Client).query({ text: stmt, rowMode: "array", types: { getTypeParser: () => (v: string) => v } });
    } catch (err) {
      const st = sqlstateOf(err);
      throw new Answer(st === undefined ? "lost" : "sql", String((err as Error).message), st ?? null);
    }
    const last = Array.isArray(res) ? res[res.length - 1] : res;
    return { rows: (last?.rows ?? []) as unknown[] };
  }

  // ---- the loop ---------------------------------------------------------------------------

  async dispatch(req: Req): Promise<void> {
    const id = req.id ?? null;
    const op = req.op;
    let ans: Ans;
    try {
      if (typeof op !== "string") throw new Answer("usage", "a request needs an op");
      if (op === "kill") process.kill(process.pid, "SIGKILL");
      if (op === "quit") {
        out({ id, ok: true });
        await this.close();
        process.exit(0);
      }
      const fn = OPS.get(op);
      if (fn === undefined) throw new Answer("usage", `unknown op ${op}`);
      ans = await fn.call(this, req);
    } catch (e) {
      const a =
        e instanceof Answer
          ? e
          : new Answer(kindOf(e), String((e as Error)?.message ?? e).trim() || "error", (e as PgcoordError)?.sqlstate ?? null);
      out({ id, ok: false, error: { kind: a.kind, sqlstate: a.sqlstate, message: a.message } });
      return;
    }
    out({ id, ok: true, ...ans });
  }
}

const OPS = new Map<string, (this: Adapter, req: Req) => Promise<Ans>>(
  (
    [
      "hello", "connect", "init", "lock_key", "lock", "unlock", "lease_acquire", "lease_renew",
      "lease_release", "fence_check", "tx", "sql", "enqueue", "enqueue_many", "claim", "complete",
      "fail", "release", "renew", "cancel", "reap", "job", "job_result", "flow_set", "work", "stop",
      "lock_holders", "blocking_forest",
    ] as const
  ).map((name) => [name, Adapter.prototype[name] as (this: Adapter, req: Req) => Promise<Ans>]),
); // prettier-ignore

async function main(): Promise<void> {
  const ad = new Adapter();
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  // One request at a time, in order: the iterator holds the lines that come meanwhile.
  for await (const raw of rl) {
    const line = raw.trim();
    if (line === "") continue;
    let req: Json;
    try {
      req = parseJson(line);
    } catch (e) {
      out({ id: null, ok: false, error: { kind: "usage", sqlstate: null, message: `bad JSON: ${(e as Error).message}` } });
      continue;
    }
    if (req === null || typeof req !== "object" || Array.isArray(req)) {
      out({ id: null, ok: false, error: { kind: "usage", sqlstate: null, message: "a request is an object" } });
      continue;
    }
    await ad.dispatch(req);
  }
  // The runner is gone: close the sessions, which releases whatever they held.
  await ad.close();
  process.exit(0);
}

void main().catch((err: unknown) => {
  process.stderr.write(`conformance-adapter: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exit(70);
});
