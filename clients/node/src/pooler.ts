// What sits between the client and PostgreSQL, found by itself as the C library's
// pgc_conn_pooler() and the other clients do: a session whose pid, as pg was told it at
// connect (BackendKeyData), is pg_backend_pid() is direct; otherwise a setting of the probe's
// own on one pooled connection and a transaction on a second one show a pooler that moves a
// client between server sessions; when nothing shows, a NOTIFY from the second that never
// reaches a LISTEN of the first decides.
import * as crypto from "node:crypto";
import pg from "pg";

import { fromPg, UsageError } from "./errors.js";
import { checkout, Checkout } from "./internal.js";

/** What sits between the client and PostgreSQL ({@link Client.pooler}). */
export interface PoolerInfo {
  /**
   * `none` (a direct session), `session` (a pooler that keeps a client on one server session),
   * `transaction` (one that may move it to another server session between transactions:
   * PgBouncer's `pool_mode = transaction`), `statement` (one that refuses transactions:
   * `pool_mode = statement`), or `unknown` (something is in between and its kind did not show;
   * treated as not keeping the session).
   */
  mode: "none" | "session" | "transaction" | "statement" | "unknown";
  /** What showed it, in one line. */
  why: string;
  /** The backend pid pg was told at connect. */
  clientPid: number;
  /** The backend pid `pg_backend_pid()` gave. */
  serverPid: number;
  /** Whether session state (a session lock, LISTEN) stays on the server session used. */
  sessionKept: boolean;
}

/** How long the probe waits for a second connection, a queued statement, a notification. */
export const POOLER_PROBE_WAIT_MS = 2000;

function info(mode: PoolerInfo["mode"], why: string, clientPid: number, serverPid: number): PoolerInfo {
  return { mode, why, clientPid, serverPid, sessionKept: mode === "none" || mode === "session" };
}

/** Runs `p`, resolving "timeout" when it takes longer than `ms` (`p` is left to settle). */
async function within<T>(p: Promise<T>, ms: number): Promise<T | "timeout"> {
  let t: NodeJS.Timeout | undefined;
  const timer = new Promise<"timeout">((resolve) => {
    t = setTimeout(() => resolve("timeout"), ms);
  });
  try {
    return await Promise.race([p, timer]);
  } finally {
    clearTimeout(t);
  }
}

/** The probe, on two connections of `pool`. */
export async function probePooler(pool: pg.Pool, mask: (s: string) => string): Promise<PoolerInfo> {
  const op = "pooler probe";
  const c1 = await checkout(pool, undefined, mask);
  let healthy = true;
  let c2: Checkout | undefined;
  let inTx = false;
  let setting = false;
  try {
    const q = async <R extends pg.QueryResultRow>(c: Checkout, text: string, values?: unknown[]): Promise<R[]> => {
      try {
        return (await c.pc.query<R>(text, values)).rows;
      } catch (err) {
        throw fromPg(err, op, mask);
      }
    };
    const clientPid = c1.pid;
    const serverPid = Number((await q<{ pid: number }>(c1, "SELECT pg_catalog.pg_backend_pid() AS pid"))[0]?.pid);
    if (clientPid !== 0 && clientPid === serverPid)
      return info("none", `direct session: pg's backend pid (${serverPid}) is the server's`, clientPid, serverPid);
    const between =
      clientPid !== 0 ? `something is in between (pg was told pid ${clientPid}, the server says ${serverPid})` : "";
    const token = crypto.randomBytes(8).toString("hex");
    setting = true;
    await q(c1, "SELECT pg_catalog.set_config('pgcoord.pooler_probe', $1, false)", [token]);

    const asked = pool.connect();
    const second = await within(asked, POOLER_PROBE_WAIT_MS);
    if (second === "timeout") {
      // The connection that comes later goes straight back.
      asked.then(
        (pc) => pc.release(),
        () => undefined,
      );
      const why = `the pool gave no second connection for the probe within ${POOLER_PROBE_WAIT_MS} ms (max 1?); give the option pooler: "none" for a direct connection`;
      return info("unknown", between !== "" ? `${between}; ${why}` : why, clientPid, serverPid);
    }
    c2 = new Checkout(second);
    try {
      await c2.pc.query("BEGIN");
      inTx = true;
    } catch (err) {
      // PgBouncer answers a BEGIN in statement mode with a FATAL and ends the connection.
      if (isStatementMode(err)) {
        c2.dead ??= err as Error;
        return info("statement", `BEGIN was refused: ${firstLine(err)}`, clientPid, serverPid);
      }
      throw fromPg(err, op, mask);
    }
    let pid2: number;
    try {
      pid2 = Number((await c2.pc.query<{ pid: number }>("SELECT pg_catalog.pg_backend_pid() AS pid")).rows[0]?.pid);
    } catch (err) {
      if (isStatementMode(err)) {
        inTx = false;
        c2.dead ??= err as Error;
        return info("statement", `a statement in a transaction was refused: ${firstLine(err)}`, clientPid, serverPid);
      }
      throw fromPg(err, op, mask);
    }
    if (pid2 === serverPid)
      return info(
        "transaction",
        `another client's transaction was given this client's server session (pid ${pid2})`,
        clientPid,
        serverPid,
      );
    const again = await within(
      q<{ pid: number; s: string | null }>(
        c1,
        "SELECT pg_catalog.pg_backend_pid() AS pid, pg_catalog.current_setting('pgcoord.pooler_probe', true) AS s",
      ),
      POOLER_PROBE_WAIT_MS,
    ).catch((err: unknown) => err as Error);
    if (again === "timeout") {
      healthy = false;
      return info(
        "transaction",
        "a statement outside any transaction waited for another client's transaction to end (the pool was exhausted)",
        clientPid,
        serverPid,
      );
    }
    if (again instanceof Error) {
      healthy = false;
      throw again;
    }
    const row = again[0];
    if (Number(row?.pid) !== serverPid)
      return info(
        "transaction",
        `two statements of one connection ran on two server sessions (pid ${serverPid}, then ${String(row?.pid)})`,
        clientPid,
        serverPid,
      );
    if (row?.s !== token)
      return info("transaction", "a session setting was gone at the connection's next statement", clientPid, serverPid);

    // No sign yet: a NOTIFY from the second connection that reaches a LISTEN of the first.
    const channel = `pgcoord_pooler_probe_${token}`;
    let heard: (() => void) | undefined;
    const onNote = (n: pg.Notification): void => {
      if (n.channel === channel) heard?.();
    };
    c1.pc.on("notification", onNote);
    try {
      await q(c1, `LISTEN ${pg.escapeIdentifier(channel)}`);
      const note = new Promise<void>((resolve) => {
        heard = resolve;
      });
      await q(c2, "SELECT pg_catalog.pg_notify($1, '')", [channel]);
      await q(c2, "COMMIT");
      inTx = false;
      // A notification is delivered with the session's next message, or at once when idle.
      const got = await within(note, POOLER_PROBE_WAIT_MS);
      if (got === "timeout") {
        healthy = false;
        return info(
          "transaction",
          "a NOTIFY never reached this client's LISTEN: the LISTEN stayed on a server session the client no longer has",
          clientPid,
          serverPid,
        );
      }
      await q(c1, `UNLISTEN ${pg.escapeIdentifier(channel)}`);
    } finally {
      c1.pc.removeListener("notification", onNote);
    }
    if (between !== "")
      return info("session", `${between}, and it kept this client on one server session (a LISTEN heard a NOTIFY)`, clientPid, serverPid);
    return info("none", "one server session kept the setting and heard a NOTIFY", clientPid, serverPid);
  } catch (err) {
    healthy = false;
    throw err;
  } finally {
    if (c2 !== undefined) {
      if (inTx) {
        try {
          await c2.pc.query("ROLLBACK");
        } catch {
          c2.dead ??= new Error("rollback failed");
        }
      }
      c2.done();
    }
    if (healthy && setting) {
      try {
        await c1.pc.query("SELECT pg_catalog.set_config('pgcoord.pooler_probe', '', false)");
      } catch {
        healthy = false;
      }
    }
    c1.done(!healthy);
  }
}

/** Whether `err` is a pooler's refusal of a transaction (PgBouncer's statement mode). */
function isStatementMode(err: unknown): boolean {
  return err instanceof Error && /statement pooling mode/i.test(err.message);
}

/** The first line of an error's message. */
function firstLine(err: unknown): string {
  return String(err instanceof Error ? err.message : err).split("\n")[0] ?? "";
}

/** What is in between, for a message: "a transaction-mode pooler is in between (why)". */
export function poolerWhat(p: PoolerInfo): string {
  if (p.mode === "unknown") return `cannot tell whether the pooler in between keeps this session (${p.why})`;
  return `a ${p.mode}-mode pooler is in between (${p.why})`;
}

/**
 * The refusal of a session lock on `label` behind a pooler that does not keep the session,
 * or undefined: the C library's (lock.c) and the other clients' refusals, in the same words.
 */
export function sessionLockRefusal(p: PoolerInfo, label: string): UsageError | undefined {
  let fix: string;
  switch (p.mode) {
    case "none":
    case "session":
      return undefined;
    case "statement":
      fix =
        "no advisory lock can be kept through it; connect to PostgreSQL directly, or through a pool in session or " +
        "transaction mode";
      break;
    case "transaction":
      fix =
        "a session lock would be taken on a server session this client does not keep, and could be neither trusted " +
        "nor released; hold it in a transaction with xactLock, or use a lease, or connect to PostgreSQL directly or " +
        "through a session-mode pool";
      break;
    default:
      fix =
        "a session lock could be taken on a server session this client does not keep; hold it in a transaction with " +
        "xactLock, or use a lease, or give the option pooler if you know what is in between";
  }
  return new UsageError(`lock ${label}: ${poolerWhat(p)}: ${fix}`);
}
