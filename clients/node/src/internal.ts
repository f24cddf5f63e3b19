/**
 * What the public classes share: password masking, pool checkouts that survive a dying
 * session, bounded calls, the server's cancel request, abortable sleeps.
 *
 * @internal
 * @module
 */
import * as net from "node:net";
import type pg from "pg";
import { LostError, UsageError, fromPg } from "./errors.js";

/**
 * A DSN with its password replaced by `***`, in either form: a URI
 * (`postgresql://user:secret@host/db`, `?password=secret`) or keywords (`password=secret`).
 *
 * @param dsn - a connection string
 */
export function maskDsn(dsn: string): string {
  return dsn
    .replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@?#\s]*:)[^@/?#\s]*@/i, "$1***@")
    .replace(/([?&]password=)[^&#\s]*/gi, "$1***")
    .replace(/(^|\s)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']*)/gi, "$1$2***");
}

/** The password a DSN carries, if any (to hide it wherever it could appear). */
export function dsnPassword(dsn: string): string | undefined {
  let m = /^[a-z][a-z0-9+.-]*:\/\/[^:/@?#\s]*:([^@/?#\s]*)@/i.exec(dsn);
  if (m?.[1]) {
    try {
      return decodeURIComponent(m[1]);
    } catch {
      return m[1];
    }
  }
  m = /[?&]password=([^&#\s]*)/i.exec(dsn);
  if (m?.[1]) return decodeURIComponent(m[1]);
  m = /(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)/i.exec(dsn);
  if (m?.[1]) return m[1].startsWith("'") ? m[1].slice(1, -1).replace(/\\(.)/g, "$1") : m[1];
  return undefined;
}

/** A function that hides `password` (and any DSN's password) in a text. */
export function masker(password: string | undefined): (s: string) => string {
  return (s: string) => {
    let out = maskDsn(s);
    if (password !== undefined && password.length >= 4) out = out.split(password).join("***");
    return out;
  };
}

/** pg's Client as this client uses it: the fields the typings leave out. */
export interface RawClient {
  processID?: number | null;
  secretKey?: number | null;
  host?: string;
  port?: number;
}

/**
 * One connection checked out of a pool, with its death watched: pg emits `error` on a
 * checked-out client whose backend died while idle, and an unhandled one would crash the
 * process. `done()` gives it back (or destroys it when it is dead or its state is unknown).
 */
export class Checkout {
  /** Set when the session is known gone (an `error` or `end` event). */
  dead: Error | undefined;
  private returned = false;
  private readonly listeners: Array<(err: Error) => void> = [];

  constructor(readonly pc: pg.PoolClient) {
    pc.on("error", this.onError);
    pc.on("end", this.onEnd);
  }

  private readonly onError = (err: Error): void => {
    this.markDead(err);
  };

  private readonly onEnd = (): void => {
    this.markDead(new Error("Connection terminated"));
  };

  private markDead(err: Error): void {
    if (this.dead !== undefined) return;
    this.dead = err;
    for (const l of this.listeners) l(err);
  }

  /** Calls `fn` once when the session dies (at once if it is already dead). */
  onDeath(fn: (err: Error) => void): void {
    if (this.dead !== undefined) fn(this.dead);
    else this.listeners.push(fn);
  }

  /** The backend's process id. */
  get pid(): number {
    return (this.pc as unknown as RawClient).processID ?? 0;
  }

  /**
   * Gives the connection back to the pool; `destroy` (or a dead session) closes it instead.
   * Idempotent.
   */
  done(destroy = false): void {
    if (this.returned) return;
    this.returned = true;
    this.listeners.length = 0;
    this.pc.removeListener("end", this.onEnd);
    const broken = destroy || this.dead !== undefined;
    this.pc.release(broken ? (this.dead ?? new Error("pgcoord: session closed")) : undefined);
    // pg may still emit an error for a destroyed socket: keep a listener so it is not thrown.
    if (!broken) this.pc.removeListener("error", this.onError);
  }
}

/** The reason an aborted signal carries, as an Error. */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

/**
 * Checks a connection out of the pool, giving up when `signal` aborts (a connection that
 * arrives afterwards goes back at once).
 */
export async function checkout(pool: pg.Pool, signal: AbortSignal | undefined, mask: (s: string) => string): Promise<Checkout> {
  signal?.throwIfAborted();
  const p = pool.connect();
  if (signal === undefined) {
    try {
      return new Checkout(await p);
    } catch (err) {
      throw fromPg(err, "connecting", mask);
    }
  }
  return await new Promise<Checkout>((resolve, reject) => {
    let settled = false;
    const onAbort = (): void => {
      if (settled) return;
      settled = true;
      reject(abortReason(signal));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (pc) => {
        signal.removeEventListener("abort", onAbort);
        if (settled) {
          pc.release();
          return;
        }
        settled = true;
        resolve(new Checkout(pc));
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        if (settled) return;
        settled = true;
        reject(fromPg(err, "connecting", mask));
      },
    );
  });
}

/**
 * Sends the server a cancel request for what the session of `client` is running (the
 * protocol's CancelRequest on a connection of its own). Resolves when sent or failed; a cancel
 * is a best effort, and every caller has a backstop.
 */
export async function sendCancel(client: pg.ClientBase): Promise<void> {
  const raw = client as unknown as RawClient;
  if (!raw.processID || raw.secretKey == null) return;
  const buf = Buffer.alloc(16);
  buf.writeInt32BE(16, 0);
  buf.writeInt32BE(80877102, 4);
  buf.writeInt32BE(raw.processID, 8);
  buf.writeInt32BE(raw.secretKey, 12);
  const host = raw.host ?? "localhost";
  const port = raw.port ?? 5432;
  await new Promise<void>((resolve) => {
    const sock = host.startsWith("/") ? net.connect(`${host}/.s.PGSQL.${port}`) : net.connect(port, host);
    const finish = (): void => {
      sock.destroy();
      resolve();
    };
    sock.setTimeout(5000, finish);
    sock.on("error", finish);
    sock.on("close", finish);
    sock.on("connect", () => sock.end(buf));
  });
}

/**
 * Runs one statement on `co` with a client-side deadline and an AbortSignal. At the signal, a
 * cancel request goes to the server; at the deadline (a server that does not answer), the
 * session is destroyed, since what it did is unknown. Errors come back as thrown by pg.
 */
export async function bounded<R extends pg.QueryResultRow = pg.QueryResultRow>(
  co: Checkout | pg.ClientBase,
  text: string,
  values: unknown[],
  deadlineMs: number,
  signal?: AbortSignal,
): Promise<pg.QueryResult<R>> {
  const client = co instanceof Checkout ? co.pc : co;
  const q = client.query<R>(text, values);
  if (!Number.isFinite(deadlineMs) && signal === undefined) return await q;
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  try {
    return await new Promise<pg.QueryResult<R>>((resolve, reject) => {
      q.then(resolve, reject);
      if (Number.isFinite(deadlineMs)) {
        timer = setTimeout(() => {
          const err = new LostError(`no answer from the server within ${deadlineMs} ms: the session was closed`);
          if (co instanceof Checkout) co.done(true);
          else (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
          reject(err);
        }, deadlineMs);
      }
      if (signal !== undefined) {
        onAbort = () => void sendCancel(client);
        if (signal.aborted) onAbort();
        else signal.addEventListener("abort", onAbort, { once: true });
      }
    });
  } finally {
    if (timer !== undefined) clearTimeout(timer);
    if (onAbort !== undefined) signal?.removeEventListener("abort", onAbort);
    q.catch(() => undefined);
  }
}

/** Sleeps `ms`, or rejects with the signal's reason when it aborts first. */
export async function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  signal?.throwIfAborted();
  await new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(t);
      reject(abortReason(signal as AbortSignal));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Checks a duration in milliseconds: a finite number >= 0 (or Infinity where `infinite`). */
export function checkMs(what: string, v: unknown, infinite = false): number {
  if (typeof v !== "number" || Number.isNaN(v) || v < 0 || (!infinite && !Number.isFinite(v)))
    throw new UsageError(`${what} must be a number of milliseconds >= 0${infinite ? " (or Infinity)" : ""}, not ${String(v)}`);
  return v;
}

