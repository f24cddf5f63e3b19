// The client: the protocol check, application_name, errors and password masking.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { APPLICATION_NAME, Client, LostError, PgcoordError, SchemaError, UsageError, maskDsn } from "../src/index.js";
import { DSN, dropSchema, makeSchema, noServer, pool, unique } from "./helpers.js";

let admin: pg.Pool;
let schema: string;
before(async () => {
  if (noServer) return;
  admin = pool();
  schema = makeSchema();
});
after(async () => {
  if (noServer) return;
  await dropSchema(admin, schema);
  await admin.end();
});

test("maskDsn hides passwords in URIs and keyword strings", () => {
  assert.equal(maskDsn("postgresql://u:s3cret@h:5432/db"), "postgresql://u:***@h:5432/db");
  assert.equal(maskDsn("postgres://h/db?user=u&password=s3cret&x=1"), "postgres://h/db?user=u&password=***&x=1");
  assert.equal(maskDsn("host=h password=s3cret user=u"), "host=h password=*** user=u");
  assert.equal(maskDsn("host=h password='s3 cret' user=u"), "host=h password=*** user=u");
  assert.equal(maskDsn("postgresql://u@h/db"), "postgresql://u@h/db");
});

test("options are checked before anything is sent", () => {
  assert.throws(() => new Client({} as never), UsageError);
  assert.throws(() => new Client({ dsn: "postgresql://x/y", schema: "" }), /schema name is empty/);
  assert.throws(() => new Client({ dsn: "postgresql://x/y", schema: "a$b" }), /'\$'/);
  assert.throws(() => new Client({ dsn: "postgresql://x/y", schema: "x".repeat(64) }), /longer than 63/);
});

test("the schema's protocol version is checked once", { skip: noServer }, async () => {
  const c = await Client.connect({ dsn: DSN, schema });
  assert.equal(await c.ready(), 1);
  await c.end();
});

test("a schema speaking another version is refused, naming both and the fix", { skip: noServer }, async () => {
  const s = makeSchema("pgc_node_v2");
  try {
    await admin.query(`CREATE OR REPLACE FUNCTION ${pg.escapeIdentifier(s)}.protocol_version() RETURNS integer LANGUAGE sql AS 'SELECT 2'`);
    const c = new Client({ pool: admin, schema: s });
    await assert.rejects(c.ready(), (e: unknown) => {
      assert.ok(e instanceof SchemaError, String(e));
      assert.equal(e.code, "schema");
      assert.match(e.message, /version 2/);
      assert.match(e.message, /version 1/);
      assert.match(e.message, new RegExp(`pgcoord init --schema ${s}`));
      return true;
    });
    // Every call waits for the check: enqueue is refused too.
    await assert.rejects(c.enqueue("q", {}), SchemaError);
  } finally {
    await dropSchema(admin, s);
  }
});

test("a missing schema and one from before the protocol are refused with the fix", { skip: noServer }, async () => {
  const missing = unique("pgc_node_missing");
  await assert.rejects(new Client({ pool: admin, schema: missing }).ready(), (e: unknown) => {
    assert.ok(e instanceof SchemaError);
    assert.equal(e.sqlstate, "3F000");
    assert.match(e.message, /does not exist/);
    assert.match(e.message, /pgcoord init --schema/);
    return true;
  });
  const old = unique("pgc_node_old");
  await admin.query(`CREATE SCHEMA ${pg.escapeIdentifier(old)}`);
  try {
    await assert.rejects(new Client({ pool: admin, schema: old }).ready(), /from before the protocol/);
  } finally {
    await dropSchema(admin, old);
  }
});

test("a schema name is an identifier, never SQL", { skip: noServer }, async () => {
  const hostile = `x"; DROP SCHEMA ${schema} CASCADE; --`;
  await assert.rejects(new Client({ pool: admin, schema: hostile }).ready(), SchemaError);
  const r = await admin.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
  assert.equal(r.rowCount, 1);
});

test("a pool made from a DSN names itself pgcoord-node", { skip: noServer }, async () => {
  const c = await Client.connect({ dsn: DSN, schema });
  const r = await c.pool.query<{ a: string }>("SELECT current_setting('application_name') AS a");
  assert.equal(r.rows[0]?.a, APPLICATION_NAME);
  await c.end();
  const d = await Client.connect({ dsn: DSN, schema, applicationName: "billing" });
  const r2 = await d.pool.query<{ a: string }>("SELECT current_setting('application_name') AS a");
  assert.equal(r2.rows[0]?.a, "billing");
  await d.end();
});

test("a password never appears in an error", { skip: noServer }, async () => {
  const u = new URL(DSN);
  u.username = "pgc_node_nobody";
  u.password = "Sup3rSecretPw";
  u.port = "1"; // nothing listens there
  const c = new Client({ dsn: u.toString(), schema });
  await assert.rejects(c.ready(), (e: unknown) => {
    assert.ok(e instanceof PgcoordError);
    assert.ok(e instanceof LostError, `${e.constructor.name}: ${e.message}`);
    const all = `${e.message} ${e.detail ?? ""} ${String(e.stack)}`;
    assert.ok(!all.includes("Sup3rSecretPw"), all);
    return true;
  });
  await c.end();
});
