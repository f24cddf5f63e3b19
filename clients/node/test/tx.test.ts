// The transaction runner: retried on 40001/40P01 only, "commit unknown" after COMMIT was sent.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { Client, CommitUnknownError, ConflictError, RetryLaterError } from "../src/index.js";
import { dropSchema, makeSchema, noServer, pool, unique } from "./helpers.js";

let admin: pg.Pool;
let schema: string;
let client: Client;
let table: string;
before(async () => {
  if (noServer) return;
  admin = pool();
  schema = makeSchema();
  client = await Client.connect({ pool: pool({ max: 4 }), schema });
  table = pg.escapeIdentifier(unique("pgc_node_tx"));
  await admin.query(`CREATE TABLE ${table} (id int PRIMARY KEY, v int NOT NULL)`);
  await admin.query(`INSERT INTO ${table} VALUES (1, 0), (2, 0)`);
});
after(async () => {
  if (noServer) return;
  await admin.query(`DROP TABLE IF EXISTS ${table}`);
  await client.pool.end();
  await dropSchema(admin, schema);
  await admin.end();
});

const opts = { skip: noServer };
const raise = (state: string): string =>
  `DO $$ BEGIN RAISE EXCEPTION 'raised for the test' USING ERRCODE = '${state}'; END $$`;

test("a serialization failure runs the whole body again", opts, async () => {
  const pauses: number[] = [];
  let runs = 0;
  const v = await client.transaction(
    async (tx, attempt) => {
      runs++;
      await tx.query(`UPDATE ${table} SET v = v + 1 WHERE id = 1`);
      if (attempt < 3) await tx.query(raise("40001"));
      return attempt;
    },
    { isolation: "serializable", onRetry: (_e, _a, p) => pauses.push(p), backoffBaseMs: 5, backoffMaxMs: 20 },
  );
  assert.equal(v, 3);
  assert.equal(runs, 3);
  assert.equal(pauses.length, 2);
  assert.ok(pauses.every((p) => p >= 0 && p <= 20), String(pauses));
  const r = await admin.query<{ v: number }>(`SELECT v FROM ${table} WHERE id = 1`);
  assert.equal(r.rows[0]?.v, 1, "only the committed attempt's update stays");
});

test("a real deadlock is retried and both transactions commit", opts, async () => {
  let barrier!: () => void;
  const both = new Promise<void>((r) => {
    let n = 0;
    barrier = () => {
      if (++n === 2) r();
    };
  });
  const attempts: number[] = [];
  const side = (first: number, second: number) =>
    client.transaction(async (tx, attempt) => {
      await tx.query(`UPDATE ${table} SET v = v + 1 WHERE id = $1`, [first]);
      if (attempt === 1) {
        barrier();
        await both;
      }
      await tx.query(`UPDATE ${table} SET v = v + 1 WHERE id = $1`, [second]);
      attempts.push(attempt);
    });
  await Promise.all([side(1, 2), side(2, 1)]);
  assert.ok(attempts.includes(2), `one side ran again: ${attempts}`);
});

test("other errors are never retried", opts, async () => {
  let runs = 0;
  await assert.rejects(
    client.transaction(async (tx) => {
      runs++;
      await tx.query(`INSERT INTO ${table} VALUES (1, 0)`);
    }),
    (e: unknown) => (e as { code?: string }).code === "23505",
  );
  assert.equal(runs, 1);
  runs = 0;
  await assert.rejects(
    client.transaction(async () => {
      runs++;
      throw new Error("the body's own error");
    }),
    /the body's own error/,
  );
  assert.equal(runs, 1);
  // Retries are bounded.
  runs = 0;
  await assert.rejects(
    client.transaction(
      async (tx) => {
        runs++;
        await tx.query(raise("40P01"));
      },
      { maxAttempts: 3, backoffBaseMs: 1 },
    ),
    (e: unknown) => e instanceof RetryLaterError && e.sqlstate === "40P01" && /3 time/.test(e.message),
  );
  assert.equal(runs, 3);
  assert.ok(ConflictError);
});

test("a session that dies after COMMIT was sent is 'commit unknown', never retried", opts, async () => {
  // A deferred trigger ends its own session while COMMIT runs.
  const t = pg.escapeIdentifier(unique("pgc_node_commit"));
  const f = pg.escapeIdentifier(unique("pgc_node_die"));
  await admin.query(`CREATE TABLE ${t} (id int)`);
  await admin.query(
    `CREATE FUNCTION ${f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
       PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5); RETURN NULL; END $$`,
  );
  await admin.query(
    `CREATE CONSTRAINT TRIGGER die AFTER INSERT ON ${t} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${f}()`,
  );
  try {
    let runs = 0;
    await assert.rejects(
      client.transaction(async (tx) => {
        runs++;
        await tx.query(`INSERT INTO ${t} VALUES (1)`);
      }),
      (e: unknown) => e instanceof CommitUnknownError && e.code === "lost" && /may or may not have committed/.test(e.message),
    );
    assert.equal(runs, 1);
    // A session killed before COMMIT is retried on a new one.
    runs = 0;
    const v = await client.transaction(async (tx, attempt) => {
      runs++;
      if (attempt === 1) await tx.query("SELECT pg_terminate_backend(pg_backend_pid())").catch(() => undefined);
      const r = await tx.query<{ one: number }>("SELECT 1 AS one");
      return r.rows[0]?.one;
    });
    assert.equal(v, 1);
    assert.equal(runs, 2);
  } finally {
    await admin.query(`DROP TABLE ${t}`);
    await admin.query(`DROP FUNCTION ${f}()`);
  }
});
