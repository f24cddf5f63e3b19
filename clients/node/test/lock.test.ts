// Session and transaction locks against a real server: no leak through the pool, bounded waits
// whatever the session's timeouts, aborts, and a lost session seen by the handle.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { Client, ConflictError, LostError, UsageError, key } from "../src/index.js";
import { DSN, advisory, dropSchema, makeSchema, noServer, pool, unique, waitFor } from "./helpers.js";

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

test("a session lock is taken and released on one session, and its connection goes back to the pool", opts, async () => {
  const name = unique("lock");
  const lock = await client.lock(name, { wait: 2000 });
  assert.equal(lock.key, key(name));
  assert.deepEqual(await advisory(admin, key(name)), { granted: 1, waiting: 0 });
  // The pool serves other work meanwhile; none of it can unlock the lock.
  for (let i = 0; i < 10; i++) await client.pool.query("SELECT pg_advisory_unlock_all()");
  assert.deepEqual(await advisory(admin, key(name)), { granted: 1, waiting: 0 });
  assert.equal(await client.tryLock(name), null);
  const r = await admin.query<{ pid: number }>(
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = ($1::bigint & 4294967295)::oid",
    [key(name).toString()],
  );
  assert.equal(r.rows[0]?.pid, lock.pid);
  const total = client.pool.totalCount;
  await lock.release();
  await lock.release(); // a second release does nothing
  assert.deepEqual(await advisory(admin, key(name)), { granted: 0, waiting: 0 });
  assert.equal(client.pool.totalCount, total);
  assert.equal(client.pool.idleCount, total);
});

test("await using releases on every exit path", opts, async () => {
  const name = unique("using");
  await assert.rejects(async () => {
    await using lock = await client.lock(name, { wait: 2000 });
    assert.ok(lock.held);
    throw new Error("the work failed");
  }, /the work failed/);
  assert.deepEqual(await advisory(admin, key(name)), { granted: 0, waiting: 0 });
  {
    await using _l = await client.lock(name, { wait: 0 });
    assert.deepEqual(await advisory(admin, key(name)), { granted: 1, waiting: 0 });
  }
  assert.deepEqual(await advisory(admin, key(name)), { granted: 0, waiting: 0 });
});

test("try and wait forms: busy, timed out, then granted when released", opts, async () => {
  const name = unique("wait");
  const holder = await client.lock(name);
  await assert.rejects(client.lock(name, { wait: 0 }), (e: unknown) => e instanceof ConflictError && /held by another/.test(e.message));
  const t0 = performance.now();
  await assert.rejects(client.lock(name, { wait: 300 }), (e: unknown) => e instanceof ConflictError && /timed out after 300 ms/.test(e.message));
  const took = performance.now() - t0;
  assert.ok(took >= 280 && took < 5000, `timed out after ${took} ms`);
  assert.deepEqual(await advisory(admin, key(name)), { granted: 1, waiting: 0 }, "nothing left queued");
  const waiting = client.lock(name, { wait: 10000 });
  await waitFor("the waiter queued", 10000, async () => (await advisory(admin, key(name))).waiting === 1);
  await holder.release();
  const second = await waiting;
  assert.ok(second.held);
  await second.release();
  // Shared locks coexist.
  const s1 = await client.lock(name, { shared: true, wait: 0 });
  const s2 = await client.lock(name, { shared: true, wait: 0 });
  assert.equal(await client.tryLock(name), null);
  await s1.release();
  await s2.release();
  // A key given as a bigint.
  const k = await client.lock(-42n, { wait: 0 });
  await k.release();
  await assert.rejects(client.lock(1n << 63n), UsageError);
  await assert.rejects(client.lock(name, { wait: -1 }), UsageError);
});

test("a wait is bounded by its own wait, whatever the session's statement_timeout and lock_timeout", opts, async () => {
  // Session defaults as a role's ALTER ROLE ... SET would give them.
  const short = await Client.connect({
    pool: pool({ max: 3, options: "-c statement_timeout=100 -c lock_timeout=50" }),
    schema,
  });
  try {
    const name = unique("role_timeouts");
    const holder = await client.lock(name);
    // Neither cut short by the 100 ms statement_timeout nor the 50 ms lock_timeout...
    const t0 = performance.now();
    await assert.rejects(short.lock(name, { wait: 1200 }), /timed out after 1200 ms/);
    const took = performance.now() - t0;
    assert.ok(took >= 1150, `gave up after ${took} ms`);
    // ...and a lock released during the wait is granted.
    const waiting = short.lock(name, { wait: 5000 });
    await waitFor("the waiter queued", 10000, async () => (await advisory(admin, key(name))).waiting === 1);
    await new Promise((r) => setTimeout(r, 400)); // well past both of the session's timeouts
    await holder.release();
    const got = await waiting;
    // The session's own settings are back once the wait is over.
    const r = await short.pool.query<{ st: string; lt: string }>(
      "SELECT current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt",
    );
    await got.release();
    assert.deepEqual(r.rows[0], { st: "100ms", lt: "50ms" });
    // A transaction lock's wait too, inside a transaction of that pool.
    const h2 = await client.lock(name);
    const t1 = performance.now();
    await short.transaction(async (tx) => {
      assert.equal(await short.tryXactLock(tx, name, { wait: 600 }), false);
      const s = await tx.query<{ st: string }>("SELECT current_setting('statement_timeout') AS st");
      assert.equal(s.rows[0]?.st, "100ms");
    });
    assert.ok(performance.now() - t1 >= 550);
    await h2.release();
  } finally {
    await short.pool.end();
  }
});

test("an AbortSignal ends a wait at once and leaves nothing held or queued", opts, async () => {
  const name = unique("abort");
  const holder = await client.lock(name);
  const ac = new AbortController();
  const waiting = client.lock(name, { signal: ac.signal });
  await waitFor("the waiter queued", 10000, async () => (await advisory(admin, key(name))).waiting === 1);
  const t0 = performance.now();
  ac.abort(new Error("shutting down"));
  await assert.rejects(waiting, /shutting down/);
  // The wait had no bound of its own: only the abort can have ended it.
  assert.ok(performance.now() - t0 < 30000);
  await waitFor("the wait gone from pg_locks", 10000, async () => (await advisory(admin, key(name))).waiting === 0);
  assert.deepEqual(await advisory(admin, key(name)), { granted: 1, waiting: 0 });
  await holder.release();
  // An already aborted signal sends nothing.
  await assert.rejects(client.lock(name, { signal: AbortSignal.abort(new Error("no")) }), /no/);
  // The pool still works and lends every connection.
  const all = await Promise.all([1, 2, 3, 4].map(() => client.lock(unique("after_abort"), { wait: 0 })));
  for (const l of all) await l.release();
});

test("a session killed under a held lock: the handle says 'lost' within the heartbeat bound", opts, async () => {
  const name = unique("lost");
  const lock = await client.lock(name, { heartbeatMs: 200, heartbeatTimeoutMs: 2000 });
  let lostErr: unknown;
  lock.on("lost", (err) => {
    lostErr = err;
  });
  const pid = lock.pid;
  assert.ok(pid > 0);
  await admin.query("SELECT pg_terminate_backend($1)", [pid]);
  await waitFor("'lost' emitted", 15000, () => lostErr !== undefined);
  assert.ok(lostErr instanceof LostError);
  assert.equal((lostErr as LostError).code, "lost");
  assert.ok(lock.lost.aborted);
  assert.ok(lock.isLost);
  assert.equal(lock.held, false);
  await assert.rejects(lock.release(), LostError);
  // The lock is free for the next holder, and the pool replaced the dead connection.
  const next = await client.lock(name, { wait: 5000 });
  await next.release();
  const r = await client.pool.query<{ one: number }>("SELECT 1 AS one");
  assert.equal(r.rows[0]?.one, 1);
});

test("a transaction lock needs a transaction and ends with it", opts, async () => {
  const name = unique("xact");
  const c = await client.pool.connect();
  try {
    await assert.rejects(client.xactLock(c, name), (e: unknown) => e instanceof UsageError && /needs a transaction/.test(e.message));
  } finally {
    c.release();
  }
  await client.transaction(async (tx) => {
    await client.xactLock(tx, name, { wait: 1000 });
    assert.deepEqual(await advisory(admin, key(name)), { granted: 1, waiting: 0 });
    assert.equal(await client.tryLock(name), null);
  });
  assert.deepEqual(await advisory(admin, key(name)), { granted: 0, waiting: 0 });
  // A timed-out wait leaves the caller's transaction usable.
  const holder = await client.lock(name);
  const v = await client.transaction(async (tx) => {
    await assert.rejects(client.xactLock(tx, name, { wait: 200 }), ConflictError);
    const r = await tx.query<{ v: number }>("SELECT 7 AS v");
    return r.rows[0]?.v;
  });
  assert.equal(v, 7);
  await holder.release();
});

test("a DSN-made client takes locks too", opts, async () => {
  const c = await Client.connect({ dsn: DSN, schema });
  const l = await c.lock(unique("dsn"), { wait: 0 });
  await l.release();
  await c.end();
});
