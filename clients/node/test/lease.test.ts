// Leases with fencing tokens on lease_acquire/lease_renew/lease_release/fence_check.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { Client, ConflictError, FencedError, NotFoundError, type LeaseLossReason } from "../src/index.js";
import { dropSchema, makeSchema, noServer, pool, unique, waitFor } from "./helpers.js";

let admin: pg.Pool;
let schema: string;
let client: Client;
before(async () => {
  if (noServer) return;
  admin = pool();
  schema = makeSchema();
  client = await Client.connect({ pool: pool({ max: 4 }), schema });
});
after(async () => {
  if (noServer) return;
  await client.pool.end();
  await dropSchema(admin, schema);
  await admin.end();
});

const opts = { skip: noServer };

test("one holder at a time; renewed every third of the TTL; released for the next", opts, async () => {
  const name = unique("lease");
  const a = await client.leaseAcquire(name, { holder: "a", ttlMs: 600 });
  assert.ok(a !== null);
  assert.equal(typeof a.token, "bigint");
  assert.equal(await client.leaseAcquire(name, { holder: "b", ttlMs: 600 }), null);
  // Well past the TTL, it is still held: it renewed itself.
  await new Promise((r) => setTimeout(r, 1500));
  assert.ok(a.held);
  assert.equal(await client.leaseAcquire(name, { holder: "b", ttlMs: 600 }), null);
  const ac = new AbortController();
  const b = client.campaign(name, { holder: "b", ttlMs: 600, pollMs: 50, signal: ac.signal });
  await a.release();
  const lb = await b;
  assert.ok(lb.token > a.token);
  assert.equal(lb.holder, "b");
  await lb.release();
  await assert.rejects(client.campaign(name, { ttlMs: 0 }), /positive/);
});

test("a lease superseded behind its back is lost; fence_check refuses its token in a writer's transaction", opts, async () => {
  const name = unique("fenced");
  const a = await client.leaseAcquire(name, { holder: "a", ttlMs: 3000 });
  assert.ok(a !== null);
  let reason: LeaseLossReason | undefined;
  a.on("lost", (_e, r: LeaseLossReason) => {
    reason = r;
  });
  // The writer checks its token in its own transaction.
  await client.transaction(async (tx) => {
    await client.fenceCheck(tx, name, a.token);
  });
  // The lease lapses (a paused process) and another holder takes it.
  await admin.query(`UPDATE ${pg.escapeIdentifier(schema)}.leases SET expires_at = clock_timestamp() - interval '1 s' WHERE name = $1`, [name]);
  const b = await client.leaseAcquire(name, { holder: "b", ttlMs: 3000 });
  assert.ok(b !== null && b.token > a.token);
  await waitFor("'lost' on the first holder", 10000, () => reason !== undefined);
  assert.equal(reason, "superseded");
  assert.ok(a.lost.aborted);
  await assert.rejects(
    client.transaction(async (tx) => client.fenceCheck(tx, name, a.token)),
    (e: unknown) => e instanceof FencedError && e.code === "fenced" && e.sqlstate === "PCF01",
  );
  await assert.rejects(
    client.transaction(async (tx) => client.fenceCheck(tx, name, b.token + 100n)),
    (e: unknown) => e instanceof NotFoundError && e.sqlstate === "PCF02",
  );
  // A lock holder's token comes from the same counter, refused while the lease is held.
  await assert.rejects(client.fenceNext(name, "c"), (e: unknown) => e instanceof ConflictError && e.sqlstate === "PCF03");
  await b.release();
  const t = await client.fenceNext(name, "c");
  assert.ok(t > b.token);
});

test("one-call leaseAcquireToken, leaseRenew and leaseRelease: no handle, renewed by hand, stale tokens are statuses", opts, async () => {
  const name = unique("bytoken");
  const a = await client.leaseAcquireToken(name, { holder: "a", ttlMs: 300 });
  assert.equal(a.granted, true);
  assert.equal(typeof a.token, "bigint");
  assert.equal(a.holder, "a");
  assert.ok(a.expiresAt instanceof Date);
  const refused = await client.leaseAcquireToken(name, { holder: "b", ttlMs: 10000 });
  assert.equal(refused.granted, false);
  assert.equal(refused.token, a.token);
  assert.equal(refused.holder, "a");
  const renewed = await client.leaseRenew(name, a.token, { ttlMs: 300 });
  assert.equal(renewed.status, "ok");
  // Nothing renews it now: it runs out, and the next candidate gets a newer token.
  let b = refused;
  await waitFor("the unrenewed lease to run out", 10000, async () => {
    b = await client.leaseAcquireToken(name, { holder: "b", ttlMs: 10000 });
    return b.granted;
  });
  assert.ok(b.token > a.token);
  assert.equal((await client.leaseRenew(name, a.token, { ttlMs: 10000 })).status, "superseded");
  assert.equal(await client.leaseRelease(name, a.token), "superseded");
  assert.equal((await client.leaseRenew(name, b.token, { ttlMs: 10000 })).status, "ok");
  assert.equal(await client.leaseRelease(name, b.token), "ok");
  assert.equal(await client.leaseRelease(name, b.token), "released");
  assert.equal((await client.leaseRenew(name, b.token, { ttlMs: 10000 })).status, "released");
  assert.equal(await client.leaseRelease(unique("never"), 1n), "unknown");
  assert.equal((await client.leaseRenew(unique("never"), 1n, { ttlMs: 1000 })).status, "unknown");
  await assert.rejects(client.leaseRenew(name, 1 as unknown as bigint, { ttlMs: 1000 }), /bigint/);
  await assert.rejects(client.leaseRenew(name, b.token, { ttlMs: 0 }), /positive/);
});
