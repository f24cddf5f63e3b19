// Diagnostics against a real blocking chain: A holds a lock through the client, B holds a row
// lock and waits for A's lock, C waits for B's row.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { BlockingForest, Client, UsageError, key } from "../src/index.js";
import { DSN, dropSchema, makeSchema, noServer, pool, unique, waitFor } from "./helpers.js";

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

async function waitsForLock(pid: number): Promise<boolean> {
  const r = await admin.query<{ w: string | null }>("SELECT wait_event_type AS w FROM pg_stat_activity WHERE pid = $1", [pid]);
  return r.rows[0]?.w === "Lock";
}

test("the forest shows the chain below the holder, and lock holders the holder then the waiter", opts, async () => {
  const name = unique("diag");
  const table = `${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(unique("diag"))}`;
  await admin.query(`CREATE TABLE ${table} (id int PRIMARY KEY)`);
  await admin.query(`INSERT INTO ${table} VALUES (1)`);
  const sessions: pg.Client[] = [];
  const pending: Array<Promise<unknown>> = [];
  const lock = await client.lock(name, { wait: 5000 });
  try {
    const open = async (): Promise<{ c: pg.Client; pid: number }> => {
      const c = new pg.Client({ connectionString: DSN });
      c.on("error", () => undefined); // terminated at the end
      sessions.push(c);
      await c.connect();
      const r = await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
      return { c, pid: Number(r.rows[0]?.pid) };
    };
    const row = `SELECT id FROM ${table} WHERE id = 1 FOR UPDATE`;
    const b = await open();
    const c = await open();
    await b.c.query("BEGIN");
    await b.c.query(row);
    pending.push(b.c.query("SELECT pg_advisory_lock($1::bigint)", [key(name).toString()]).catch(() => undefined));
    await waitFor("B waiting for A's lock", 30000, () => waitsForLock(b.pid));
    await c.c.query("BEGIN");
    pending.push(c.c.query(row).catch(() => undefined));
    await waitFor("C waiting for B's row", 30000, () => waitsForLock(c.pid));
    const pa = lock.pid;

    const f = await client.blockingForest();
    assert.ok(f instanceof BlockingForest);
    const ra = f.session(pa);
    const rb = f.session(b.pid);
    const rc = f.session(c.pid);
    assert.ok(ra && rb && rc, "A, B and C in the forest");
    assert.equal(ra.root, true);
    assert.equal(ra.depth, 0);
    assert.deepEqual(ra.blockedBy, []);
    assert.deepEqual(ra.blocks, [b.pid]);
    assert.equal(ra.blocksTotal, 2);
    assert.equal(rb.root, false);
    assert.equal(rb.depth, 1);
    assert.deepEqual(rb.blockedBy, [pa]);
    assert.deepEqual(rb.blocks, [c.pid]);
    assert.equal(rb.waitLocktype, "advisory");
    assert.equal(rb.waitMode, "ExclusiveLock");
    assert.equal(rb.state, "active");
    assert.equal(rb.inCycle, false);
    assert.equal(rc.depth, 2);
    assert.deepEqual(rc.blockedBy, [b.pid]);
    assert.deepEqual(rc.blocks, []);
    assert.equal(rc.waitLocktype, "transactionid");
    assert.ok(rc.backendStart instanceof Date);
    assert.equal(typeof rc.xactAgeMs, "bigint");
    assert.ok((rc.xactAgeMs ?? -1n) >= 0n);
    assert.ok(f.roots().some((s) => s.pid === pa));
    assert.ok(!f.roots().some((s) => s.pid === b.pid || s.pid === c.pid));
    assert.deepEqual(f.children(pa).map((s) => s.pid), [b.pid]);
    assert.deepEqual([...f].length, f.sessions.length);
    const tree = f.trees().find((t) => t.session.pid === pa);
    assert.ok(tree);
    assert.deepEqual(tree.children.map((t) => t.session.pid), [b.pid]);
    assert.deepEqual(tree.children[0]?.children.map((t) => t.session.pid), [c.pid]);
    assert.deepEqual(tree.children[0]?.children[0]?.children, []);

    for (const target of [name, key(name)]) {
      const hs = await client.lockHolders(target);
      assert.deepEqual(hs.map((h) => [h.pid, h.granted, h.mode]), [
        [pa, true, "ExclusiveLock"],
        [b.pid, false, "ExclusiveLock"],
      ]);
      assert.equal(hs[0]?.isSelf, false);
      assert.ok(hs[0]?.backendStart instanceof Date);
      assert.equal(hs[1]?.state, "active");
    }
  } finally {
    for (const s of sessions) {
      const pid = (s as unknown as { processID?: number }).processID;
      if (pid !== undefined) await admin.query("SELECT pg_terminate_backend($1)", [pid]);
    }
    await Promise.all(pending);
    await Promise.all(sessions.map((s) => s.end().catch(() => undefined)));
    await lock.release();
    await admin.query(`DROP TABLE IF EXISTS ${table}`);
  }
  assert.deepEqual(await client.lockHolders(name), []);
  await assert.rejects(client.lockHolders(""), UsageError);
});
