// The worker against a real server, with real faults: many jobs each once with their results,
// a failure retried, a cancelled running job seen by its handler, pg_terminate_backend of the
// worker's session, a SIGKILLed worker's job rescued by another, a graceful stop with a grace,
// polling without LISTEN.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import pg from "pg";
import { Client, Defer, JobLostError, type Job } from "../src/index.js";
import { dropSchema, makeSchema, noServer, pool, waitFor } from "./helpers.js";

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

async function history(queue: string): Promise<Array<{ status: string; n: number }>> {
  const r = await admin.query(`SELECT status, count(*)::int AS n FROM ${S}.job_history WHERE queue = $1 GROUP BY 1 ORDER BY 1`, [queue]);
  return r.rows;
}

async function live(queue: string): Promise<number> {
  const r = await admin.query(`SELECT count(*)::int AS n FROM ${S}.jobs WHERE queue = $1`, [queue]);
  return r.rows[0].n;
}

test("every job once, results kept, a failure retried, a deferral", opts, async () => {
  await admin.query(`SELECT ${S}.queue_config_set(-1, 3600000, -1, -1)`);
  const ids = (await client.enqueueMany("w1", Array.from({ length: 200 }, (_, i) => ({ i })))) as bigint[];
  const failing = (await client.enqueue("w1", { fail: true })) as bigint;
  const deferred = (await client.enqueue("w1", { defer: true })) as bigint;
  const seen = new Map<bigint, number>();
  let failedOnce = false;
  let deferredOnce = false;
  const w = client.worker({ concurrency: 8, backoffBaseMs: 1, backoffMaxMs: 1 });
  w.handle("w1", async (job: Job<{ i?: number; fail?: boolean; defer?: boolean }>) => {
    seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
    if (job.payload.fail && !failedOnce) {
      failedOnce = true;
      throw new Error("first attempt fails");
    }
    if (job.payload.defer && !deferredOnce) {
      deferredOnce = true;
      throw new Defer(0);
    }
    await new Promise((r) => setTimeout(r, Math.random() * 3));
    return { double: (job.payload.i ?? -1) * 2 };
  });
  await w.start();
  await waitFor("every job done", 20000, async () => (await live("w1")) === 0);
  await w.stop();
  assert.deepEqual(await history("w1"), [{ status: "succeeded", n: 202 }]);
  for (const id of ids) assert.equal(seen.get(id), 1, `job ${id} ran once`);
  assert.equal(seen.get(failing), 2);
  assert.equal(seen.get(deferred), 2);
  assert.deepEqual(await client.jobResult(ids[7]!), { status: "succeeded", result: { double: 14 } });
  const f = await admin.query(`SELECT attempts, errors::text LIKE '%first attempt fails%' AS e FROM ${S}.job_history WHERE id = $1`, [failing.toString()]);
  assert.deepEqual(f.rows[0], { attempts: 2, e: true });
  assert.equal(w.stats.completed, 202);
  assert.equal(w.stats.failed, 1);
  assert.equal(w.stats.deferred, 1);
});

test("a cancelled running job: its handler's signal aborts, the job stays cancelled", opts, async () => {
  const id = (await client.enqueue("w2", {})) as bigint;
  let reason: unknown;
  const lost: unknown[] = [];
  // A two-minute lease: the renewal is 40 s away, so only the worker's own channel can tell
  // the handler within the bounds below.
  const w = client.worker({ concurrency: 1, leaseMs: 120000 });
  w.on("lost", (e) => lost.push(e));
  w.handle("w2", (_job, { signal }) => new Promise((_resolve, reject) => {
    signal.addEventListener("abort", () => {
      reason = signal.reason;
      reject(signal.reason);
    });
  }));
  await w.start();
  await waitFor("the job running", 10000, async () => (await client.job(id)).status === "running");
  const t0 = performance.now();
  assert.equal(await client.cancel(id), true);
  // Told at once on the worker's own channel, not at the renewal 40 seconds later.
  await waitFor("the handler to see the cancel", 30000, () => reason !== undefined);
  assert.ok(performance.now() - t0 < 30000);
  assert.ok(reason instanceof JobLostError && reason.why === "cancelled");
  assert.equal(lost.length, 1);
  await w.stop({ graceMs: 1000 });
  assert.equal((await client.job(id)).status, "cancelled");
});

test("the worker's session terminated: it reconnects, no job lost or run twice", opts, async () => {
  const seen = new Map<bigint, number>();
  const w = client.worker({ concurrency: 4, leaseMs: 6000 });
  const errors: unknown[] = [];
  w.on("error", (e) => errors.push(e));
  let reconnected = 0;
  w.on("reconnected", () => reconnected++);
  w.handle("w3", async (job) => {
    seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
    await new Promise((r) => setTimeout(r, 20));
  });
  await w.start();
  await client.enqueueMany("w3", Array.from({ length: 100 }, (_, i) => ({ i })));
  await waitFor("some jobs done", 10000, async () => (await live("w3")) < 90);
  const k = await admin.query("SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity WHERE application_name = 'pgcoord-node/worker' AND datname = current_database()");
  assert.ok(k.rows.length >= 1);
  await client.enqueueMany("w3", Array.from({ length: 50 }, (_, i) => ({ j: i })));
  await waitFor("every job done", 30000, async () => (await live("w3")) === 0);
  await w.stop();
  assert.ok(reconnected >= 1, "reconnected");
  assert.ok(errors.length >= 1, "the loss was reported");
  assert.equal(seen.size, 150);
  // A job whose completion was lost with the session may have been run again after its lease:
  // at most those of one round; none ran twice otherwise, and every one succeeded.
  const twice = [...seen.values()].filter((n) => n > 1).length;
  assert.ok(twice <= 4, `${twice} jobs ran twice`);
  const h = await history("w3");
  assert.deepEqual(h, [{ status: "succeeded", n: 150 }]);
});

test("a SIGKILLed worker's job is rescued by another after its lease", opts, async () => {
  const id = (await client.enqueue("w4", {})) as bigint;
  const fixture = fileURLToPath(new URL("./fixtures/hang-worker.js", import.meta.url));
  const child = spawn(process.execPath, [fixture, schema, "w4", "1500"], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  try {
    await waitFor("the child to start the job", 15000, () => out.includes(`started ${id}`));
  } finally {
    child.kill("SIGKILL");
  }
  await new Promise((r) => child.once("exit", r));
  let attempt = 0;
  const w = client.worker({ concurrency: 1, leaseMs: 1500 });
  w.handle("w4", (job) => {
    attempt = job.attempt;
  });
  await w.start();
  await waitFor("the job rescued", 20000, async () => (await client.job(id)).status === "succeeded");
  await w.stop();
  assert.equal(attempt, 2);
});

test("graceful stop: a short job finishes in the grace, a hanging one is released", opts, async () => {
  const quick = (await client.enqueue("w5", { quick: true }, { priority: 2 })) as bigint;
  const slow = (await client.enqueue("w5", { quick: false }, { priority: 1 })) as bigint;
  const waiting = (await client.enqueue("w5", { never: true })) as bigint;
  let aborted: unknown;
  const started = new Set<bigint>();
  const w = client.worker({ concurrency: 2 });
  w.handle("w5", async (job: Job<{ quick?: boolean }>, { signal }) => {
    started.add(job.id);
    if (job.payload.quick) {
      await new Promise((r) => setTimeout(r, 300));
      return "quick";
    }
    await new Promise((_r, reject) => signal.addEventListener("abort", () => {
      aborted = signal.reason;
      reject(signal.reason);
    }));
  });
  await w.start();
  await waitFor("both running", 10000, () => started.size === 2);
  const t0 = performance.now();
  await w.stop({ graceMs: 800 });
  const took = performance.now() - t0;
  assert.ok(took >= 700 && took < 5000, `stopped after ${took} ms`);
  assert.ok(aborted instanceof JobLostError && aborted.why === "stopped");
  assert.deepEqual(await client.jobResult(quick), { status: "succeeded", result: "quick" });
  const s = await client.job(slow);
  assert.equal(s.status, "pending");
  assert.equal(s.attempts, 0, "a release gives the attempt back");
  assert.equal((await client.job(waiting)).status, "pending");
  assert.equal(started.has(waiting), false);
});

test("without LISTEN the worker polls, and an idle one does not busy-loop", opts, async () => {
  const w = client.worker({ concurrency: 2, listen: false, pollMs: 200 });
  let n = 0;
  w.handle("w6", () => {
    n++;
  });
  await w.start();
  assert.equal(w.listening, false);
  await client.enqueueMany("w6", [{}, {}, {}]);
  await waitFor("polled jobs done", 10000, () => n === 3);
  // Idle: no claim that finds nothing is counted, and the CPU stays near zero (polls at 200 ms).
  const before = w.stats.claimed;
  const cpu0 = process.cpuUsage();
  await new Promise((r) => setTimeout(r, 1000));
  const cpu = process.cpuUsage(cpu0);
  assert.ok(cpu.user + cpu.system < 300000, `idle CPU ${cpu.user + cpu.system} us in 1 s`);
  assert.equal(w.stats.claimed, before);
  await w.stop();
});

test("without LISTEN a trickle of jobs is claimed at the shortest poll", opts, async () => {
  // A claim that finds a job starts the adaptive poll over; it once doubled whenever a claim
  // came back with fewer jobs than free slots, so each job of a trickle waited twice as long
  // as the one before (twelve jobs, one at a time: over a minute with pollMs 20000).
  const w = client.worker({ concurrency: 4, listen: false, pollMs: 20000 });
  let n = 0;
  w.handle("w6t", () => {
    n++;
  });
  await w.start();
  try {
    const t0 = performance.now();
    for (let i = 0; i < 12; i++) {
      await client.enqueue("w6t", { i });
      await waitFor(`job ${i} handled`, 60000, () => n === i + 1);
    }
    const took = performance.now() - t0;
    assert.ok(took < 15000, `twelve jobs one at a time took ${took} ms`);
  } finally {
    await w.stop();
  }
});

test("a scheduled job runs when due, by next_run_ms, not by the poll; an idle listener sleeps", opts, async () => {
  const w = client.worker({ concurrency: 2, pollMs: 60000 });
  let ranAt = 0;
  w.handle("w7", () => {
    ranAt = performance.now();
  });
  await w.start();
  assert.equal(w.listening, true);
  const t0 = performance.now();
  await client.enqueue("w7", {}, { delayMs: 700 });
  await waitFor("the scheduled job run", 10000, () => ranAt > 0);
  const after = ranAt - t0;
  assert.ok(after >= 600 && after < 3000, `ran ${after} ms after its enqueue`);
  const cpu0 = process.cpuUsage();
  await new Promise((r) => setTimeout(r, 1000));
  const cpu = process.cpuUsage(cpu0);
  assert.ok(cpu.user + cpu.system < 300000, `idle CPU ${cpu.user + cpu.system} us in 1 s`);
  await w.stop();
});
