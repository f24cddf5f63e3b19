// The queue's calls on a real server: claim, complete with a result, fail, retry later,
// release, renew (lost and cancelled), cancel, reap, job, job result awaited, flow settings.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { Client, ConflictError, NotFoundError, StaleError, UsageError } from "../src/index.js";
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

test("claim, complete with a result, and the result read back", opts, async () => {
  const id = (await client.enqueue("q1", { n: 1 }, { key: "k1" })) as bigint;
  const jobs = await client.claim<{ n: number }>("q1", { max: 5, leaseMs: 30000 });
  assert.equal(jobs.length, 1);
  const j = jobs[0]!;
  assert.equal(j.id, id);
  assert.deepEqual(j.payload, { n: 1 });
  assert.equal(j.attempt, 1);
  assert.equal(j.key, "k1");
  assert.equal((await client.job(id)).status, "running");
  await assert.rejects(client.jobResult(id), ConflictError);
  await client.complete(j.id, j.token, { result: { answer: 42, text: "é\"\n" } });
  assert.deepEqual(await client.jobResult(id), { status: "succeeded", result: { answer: 42, text: "é\"\n" } });
  // The same token again is stale: nothing recorded.
  await assert.rejects(client.complete(j.id, j.token), StaleError);
  await assert.rejects(client.jobResult(999999999n), NotFoundError);
  assert.deepEqual(await client.claim("q1"), []);
});

test("a result over 64 kB is refused, the bound is taken", opts, async () => {
  const id = (await client.enqueue("big", {})) as bigint;
  const [j] = await client.claim("big");
  await assert.rejects(client.complete(id, j!.token, { result: "x".repeat(65535) }), UsageError);
  assert.equal((await client.job(id)).status, "running");
  await client.complete(id, j!.token, { result: "y".repeat(65534) });
  assert.equal((await client.jobResult<string>(id)).result?.length, 65534);
});

test("a result is awaited: LISTEN wakes the waiter before the slow look", opts, async () => {
  const id = (await client.enqueue("wait", {})) as bigint;
  const [j] = await client.claim("wait");
  const t0 = performance.now();
  // The second look a minute away: only the notification can end the wait within the bound.
  const waiting = client.jobResult(id, { waitMs: 90000, recheckMs: 60000 });
  setTimeout(() => void client.complete(id, j!.token, { result: [1, 2] }), 200);
  assert.deepEqual(await waiting, { status: "succeeded", result: [1, 2] });
  assert.ok(performance.now() - t0 < 30000, "woken by the notification, not the look a minute later");
  // A bounded wait that runs out is a conflict; an abort is the signal's reason.
  const id2 = (await client.enqueue("wait", {})) as bigint;
  await assert.rejects(client.jobResult(id2, { waitMs: 100 }), ConflictError);
  const ac = new AbortController();
  setTimeout(() => ac.abort(new Error("enough")), 50);
  await assert.rejects(client.jobResult(id2, { waitMs: 10000, signal: ac.signal }), /enough/);
});

test("fail retries with backoff, then dead; retry later; release gives the attempt back", opts, async () => {
  const id = (await client.enqueue("f", {}, { maxAttempts: 2 })) as bigint;
  let [j] = await client.claim("f");
  assert.equal(await client.fail(id, j!.token, "boom", { retryInMs: 0 }), "retried");
  await assert.rejects(client.fail(id, j!.token, "again"), StaleError);
  [j] = await client.claim("f");
  assert.equal(j!.attempt, 2);
  assert.equal(await client.release([{ id, token: j!.token }]), 1);
  [j] = await client.claim("f");
  assert.equal(j!.attempt, 2);
  assert.equal(await client.retryLater(id, j!.token, 0), "retried");
  [j] = await client.claim("f");
  assert.equal(await client.fail(id, j!.token, "last"), "dead");
  const info = await client.job(id);
  assert.equal(info.status, "failed");
  assert.equal(info.lastError, "last");
});

test("renew says held, lost and cancelled; cancel and reap", opts, async () => {
  const a = (await client.enqueue("r", { a: 1 })) as bigint;
  const b = (await client.enqueue("r", { b: 1 })) as bigint;
  const c = (await client.enqueue("r", { c: 1 })) as bigint;
  const jobs = await client.claim("r", { max: 3, leaseMs: 60000 });
  const tok = new Map(jobs.map((j) => [j.id, j.token]));
  assert.equal(await client.cancel(b), true);
  await assert.rejects(client.cancel(b), ConflictError);
  // c's lease runs out and the reaper returns it.
  await admin.query(`UPDATE ${S}.jobs SET lease_until = now() - interval '1 second' WHERE id = $1`, [c.toString()]);
  const reaped = await client.reap();
  assert.equal(reaped.returned, 1);
  const r = await client.renew(
    [a, b, c].map((id) => ({ id, token: tok.get(id)! })),
    30000,
  );
  assert.deepEqual(r, { held: [a], lost: [b, c].sort(), cancelled: [b] });
  assert.equal((await client.job(b)).status, "cancelled");
  assert.equal((await client.job(c)).status, "pending");
  await assert.rejects(client.job(123456789n), NotFoundError);
});

test("flow settings: a key limit of 1 holds in claims", opts, async () => {
  await client.flowSet("fl", { keyLimit: 1 });
  await client.enqueueMany("fl", [{}, {}, {}], { key: "k" });
  const jobs = await client.claim("fl", { max: 3 });
  assert.equal(jobs.length, 1);
  await client.keySet("fl", "k", { limit: 2 });
  assert.equal((await client.claim("fl", { max: 3 })).length, 1);
  await assert.rejects(client.flowSet("fl", { rate: { n: 0, perMs: 10 } }), UsageError);
  assert.equal(await client.nextRunMs(["fl"]), null);
});
