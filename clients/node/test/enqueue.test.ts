// Enqueue on the schema's enqueue(): on the pool, or in the caller's transaction.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { Client, UsageError } from "../src/index.js";
import { dropSchema, makeSchema, noServer, pool } from "./helpers.js";

let admin: pg.Pool;
let schema: string;
let client: Client;
let S: string;
before(async () => {
  if (noServer) return;
  admin = pool();
  schema = makeSchema();
  S = pg.escapeIdentifier(schema);
  client = await Client.connect({ pool: pool({ max: 4 }), schema });
});
after(async () => {
  if (noServer) return;
  await client.pool.end();
  await dropSchema(admin, schema);
  await admin.end();
});

const opts = { skip: noServer };

async function job(id: bigint): Promise<{ queue: string; payload: unknown; priority: number; status: string; key: string | null } | undefined> {
  const r = await admin.query(`SELECT queue, payload, priority, status, key FROM ${S}.jobs WHERE id = $1`, [id.toString()]);
  return r.rows[0];
}

test("one job, with options", opts, async () => {
  const id = await client.enqueue("emails", { to: "a@example.com", n: 1 }, { priority: 5, key: "tenant-1", delayMs: 60000 });
  assert.equal(typeof id, "bigint");
  const j = await job(id as bigint);
  assert.deepEqual(j, { queue: "emails", payload: { to: "a@example.com", n: 1 }, priority: 5, status: "scheduled", key: "tenant-1" });
});

test("a job enqueued in a transaction that rolls back never exists", opts, async () => {
  let id: bigint | null = null;
  await assert.rejects(
    client.transaction(async (tx) => {
      id = await client.enqueue("emails", { n: 2 }, {}, { client: tx });
      assert.ok((await tx.query(`SELECT 1 FROM ${S}.jobs WHERE id = $1`, [String(id)])).rowCount === 1);
      throw new Error("roll it back");
    }),
    /roll it back/,
  );
  assert.notEqual(id, null);
  assert.equal(await job(id as unknown as bigint), undefined);
  // And one that commits exists.
  const kept = await client.transaction(async (tx) => client.enqueue("emails", { n: 3 }, {}, { client: tx }));
  assert.equal((await job(kept as bigint))?.status, "pending");
});

test("many at once, in order, with unique keys", opts, async () => {
  const ids = await client.enqueueMany("reports", [{ i: 1 }, { i: 2 }, { i: 3 }], { uniqueKeys: ["r1", null, "r3"] });
  assert.equal(ids.length, 3);
  assert.ok(ids.every((x) => typeof x === "bigint"));
  assert.ok((ids[0] as bigint) < (ids[1] as bigint) && (ids[1] as bigint) < (ids[2] as bigint));
  const again = await client.enqueueMany("reports", [{ i: 4 }, { i: 5 }], { uniqueKeys: ["r1", "r5"] });
  assert.equal(again[0], null, "r1 is still pending");
  assert.equal(typeof again[1], "bigint");
  assert.equal(await client.enqueue("reports", { i: 6 }, { uniqueKey: "r3" }), null);
  assert.deepEqual(await client.enqueueMany("reports", []), []);
});

test("bad input is refused with the server's or the client's reason", opts, async () => {
  await assert.rejects(client.enqueue("", {}), UsageError);
  await assert.rejects(client.enqueue("q", undefined), /not JSON/);
  await assert.rejects(client.enqueue("q", { big: 1n }), /not JSON/);
  await assert.rejects(client.enqueue("q", {}, { priority: 40000 }), (e: unknown) => e instanceof UsageError && e.sqlstate === "22023" && /priority/.test(e.message));
  await assert.rejects(client.enqueue("q".repeat(129), {}), (e: unknown) => e instanceof UsageError && e.sqlstate === "22023");
  await assert.rejects(client.enqueue("q", {}, { after: [999999999] }), (e: unknown) => (e as { code?: string }).code === "notFound");
  await assert.rejects(client.enqueue("q", {}, { runAt: new Date(), delayMs: 1 }), /not both/);
});
