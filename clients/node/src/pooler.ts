// What sits between the client and PostgreSQL, found by itself as the C library's
// pgc_conn_pooler() and the other clients do: a session whose pid, as pg was told it at
// connect (BackendKeyData), is pg_backend_pid() is direct; otherwise a setting of the probe's
// own on one pooled connection and a transaction on a second one show a pooler that moves a
// client between server sessions; when nothing shows, a NOTIFY from the second that never
// reaches a LISTEN of the first decides.
import * as crypto from "node:crypto";
import pg from "pg";

import { fromPg } from "./errors.js";
import { checkout, Checkout } from "./internal.js";

/** What sits between the client and PostgreSQL ({@link Client.pooler}). */
export interface PoolerInfo {
  /**
   * `none` (a direct session), `session` (a pooler that keeps a client on one server session),
   * `transaction` (one that may move it between transactions: PgBouncer's transaction or
   * statement mode), or `unknown` (something is in between and its kind did not show; treated
   * as `transaction`).
   */
  mode: "none" | "session" | "transaction" | "unknown";
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
      if (/statement pooling mode/i.test(String((err as Error).message)))
        return info("transaction", `the pooler refused BEGIN: statement mode (${(err as Error).message})`, clientPid, serverPid);
      throw fromPg(err, op, mask);
    }
    const pid2 = Number((await q<{ pid: number }>(c2, "SELECT pg_catalog.pg_backend_pid() AS pid"))[0]?.pid);
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
