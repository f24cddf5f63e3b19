// The client behind a real PgBouncer in transaction mode (PGCOORD_TEST_POOLER_DSN, set by
// tests/cli/client_node_pgbouncer.sh, which starts one): the probe finds it, and finds nothing
// on the direct DSN; a session lock is refused and leaves nothing held; a transaction lock
// works; the worker polls instead of LISTEN and works its jobs; jobResult polls. Behind one in
// statement mode (PGCOORD_TEST_POOLER_STATEMENT_DSN) the probe says so and a session lock is
// refused naming it. Not part of `npm test` (build/test/*.test.js): it needs the pooler.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { Client, SessionLock, UsageError, key } from "../../src/index.js";
import { advisory, dropSchema, makeSchema, pool, unique, waitFor } from "../helpers.js";

const BOUNCER = process.env.PGCOORD_TEST_POOLER_DSN ?? "";
const STATEMENT_BOUNCER = process.env.PGCOORD_TEST_POOLER_STATEMENT_DSN ?? "";
// A test that hangs (a lock granted where it must be refused, then waited for) fails in a minute.
const opts = {
  skip: BOUNCER === "" ? "PGCOORD_TEST_POOLER_DSN is not set (tests/cli/client_node_pgbouncer.sh sets it)" : false,
  timeout: 60000,
};
const statementOpts = {
  skip:
    BOUNCER === "" || STATEMENT_BOUNCER === ""
      ? "PGCOORD_TEST_POOLER_STATEMENT_DSN is not set (tests/cli/client_node_pgbouncer.sh sets it)"
      : false,
  timeout: 60000,
};

let admin: pg.Pool;
let schema: string;
let client: Client;
before(async () => {
  if (BOUNCER === "") return;
  admin = pool();
  schema = makeSchema("pgc_node_pooler");
  const bp = new pg.Pool({ connectionString: BOUNCER, max: 6 });
  bp.on("error", () => undefined);
  client = await Client.connect({ pool: bp, schema });
});
after(async () => {
  if (BOUNCER === "") return;
  await client.pool.end();
  await dropSchema(admin, schema);
  await admin.end();
});

test("the probe finds the transaction-mode pooler, and nothing in front of the server itself", opts, async () => {
  const p = await client.pooler();
  assert.equal(p.mode, "transaction", p.why);
  assert.equal(p.sessionKept, false);
  const direct = new Client({ pool: admin, schema });
  const d = await direct.pooler();
  assert.equal(d.mode, "none", d.why);
  assert.equal(d.sessionKept, true);
  // Kept: a second call asks nothing.
  assert.equal(await client.pooler(), p);
});

/**
 * Asserts that `taking` a session lock rejects as `expected` says. A lock granted instead
 * fails the test after it is given back (its release may miss, behind the pooler: the leak
 * the refusal prevents), so that the pool can end.
 */
async function refused(taking: Promise<SessionLock | null>, expected: RegExp): Promise<void> {
  const got = await taking.then(
    (l) => l,
    (err: unknown) => err,
  );
  if (got instanceof SessionLock) {
    await got.release().catch(() => undefined);
    assert.fail("a session lock was granted behind the pooler");
  }
  assert.ok(got instanceof UsageError, `not a UsageError: ${String(got)}`);
  assert.match(got.message, expected);
}

test("a session lock is refused behind the pooler, and nothing is left held; a transaction lock works", opts, async () => {
  const name = unique("pooled");
  const expected =
    /a transaction-mode pooler is in between \(.+\): a session lock would be taken on a server session this client does not keep.*xactLock/;
  for (const wait of [0, 1000]) await refused(client.lock(name, { wait }), expected);
  await refused(client.tryLock(name), expected);
  assert.deepEqual(await advisory(admin, key(name)), { granted: 0, waiting: 0 });
  await client.transaction(async (tx) => {
    await client.xactLock(tx, name, { wait: 1000 });
    assert.deepEqual(await advisory(admin, key(name)), { granted: 1, waiting: 0 });
  });
  await waitFor("the transaction lock to go with its commit", 10000, async () => (await advisory(admin, key(name))).granted === 0);
});

test("the worker polls instead of LISTEN behind the pooler, and works its jobs; jobResult polls", opts, async () => {
  const queue = unique("q");
  const w = client.worker({ concurrency: 4, pollMs: 300, leaseMs: 5000 });
  const said: string[] = [];
  w.on("polling", (why: string) => said.push(why));
  w.handle(queue, async (job) => ({ n: (job.payload as { n: number }).n }));
  await w.start();
  try {
    assert.equal(w.listening, false);
    assert.equal(said.length, 1);
    assert.match(said[0] ?? "", /^a transaction-mode pooler is in between \(.+\): no LISTEN, polling$/);
    // Nor on the server: no session's last statement is a LISTEN on the queue's channel.
    const channel = await client.queueChannel();
    const listens = await admin.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_catalog.pg_stat_activity WHERE datname = current_database()" +
        " AND strpos(query, 'LISTEN ' || quote_ident($1)) > 0",
      [channel],
    );
    assert.equal(listens.rows[0]?.n, 0);
    const ids: bigint[] = [];
    for (let n = 0; n < 20; n++) {
      const id = await client.enqueue(queue, { n });
      assert.ok(id !== null);
      ids.push(id);
    }
    for (const [n, id] of ids.entries()) {
      const r = await client.jobResult(id, { waitMs: 30000 });
      assert.equal(r.status, "succeeded");
      assert.deepEqual(r.result, { n });
    }
  } finally {
    await w.stop({ graceMs: 5000 });
  }
});

test("behind a pooler in statement mode the probe says so, and a session lock is refused naming it", statementOpts, async () => {
  const sp = new pg.Pool({ connectionString: STATEMENT_BOUNCER, max: 4 });
  sp.on("error", () => undefined);
  const c = new Client({ pool: sp, schema });
  try {
    const p = await c.pooler();
    assert.equal(p.mode, "statement", p.why);
    assert.equal(p.sessionKept, false);
    const name = unique("stmtpooled");
    const expected = /a statement-mode pooler is in between \(.+\): no advisory lock can be kept through it/;
    await refused(c.tryLock(name), expected);
    await refused(c.lock(name, { wait: 1000 }), expected);
    assert.deepEqual(await advisory(admin, key(name)), { granted: 0, waiting: 0 });
  } finally {
    await sp.end();
  }
});
