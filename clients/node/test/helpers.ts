// Test helpers: the server under test (PGCOORD_TEST_DSN), schemas of the test's own made by
// the real `pgcoord init`, and bounded polling.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import pg from "pg";

export const DSN = process.env.PGCOORD_TEST_DSN ?? "";
/** A reason to skip server tests, or false. */
export const noServer: string | false = DSN === "" ? "PGCOORD_TEST_DSN is not set (run through scripts/with-pg)" : false;

const root = fileURLToPath(new URL("../../", import.meta.url));
export const PGCOORD_BIN = process.env.PGCOORD_BIN ?? `${root}../../build/pgcoord`;

let n = 0;
/** A name unique to this process and call. */
export function unique(prefix: string): string {
  return `${prefix}_${process.pid}_${++n}_${Math.floor(Math.random() * 1e6)}`;
}

/** Creates a pgcoord schema with `pgcoord init --schema`; returns its name. */
export function makeSchema(prefix = "pgc_node"): string {
  if (!existsSync(PGCOORD_BIN)) throw new Error(`pgcoord is not built at ${PGCOORD_BIN} (set PGCOORD_BIN)`);
  const s = unique(prefix);
  execFileSync(PGCOORD_BIN, ["init", "--schema", s], {
    env: { ...process.env, PGCOORD_DSN: DSN },
    stdio: ["ignore", "ignore", "inherit"],
  });
  return s;
}

/** A pool on the test server. */
export function pool(extra: pg.PoolConfig = {}): pg.Pool {
  const p = new pg.Pool({ connectionString: DSN, max: 5, ...extra });
  p.on("error", () => undefined);
  return p;
}

/** Polls `fn` until it returns true, failing after `ms`. */
export async function waitFor(what: string, ms: number, fn: () => Promise<boolean> | boolean): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`waited ${ms} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Advisory locks held or awaited on `key` right now, by pg_locks. */
export async function advisory(p: pg.Pool, key: bigint): Promise<{ granted: number; waiting: number }> {
  const r = await p.query<{ granted: string; waiting: string }>(
    `SELECT count(*) FILTER (WHERE granted) AS granted, count(*) FILTER (WHERE NOT granted) AS waiting
       FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
        AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`,
    [key.toString()],
  );
  return { granted: Number(r.rows[0]?.granted), waiting: Number(r.rows[0]?.waiting) };
}

/** Drops a schema made by makeSchema. */
export async function dropSchema(p: pg.Pool, s: string): Promise<void> {
  await p.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(s)} CASCADE`);
}
