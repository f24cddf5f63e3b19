// pg-boss.mjs - the pg-boss side of the peers benchmark, through its public API (start,
// createQueue, insert, send, work). One queue, "noop", whose handler only reports its starts.
import { createRequire } from 'node:module';
import PgBoss from 'pg-boss';

const require = createRequire(import.meta.url);
export const name = 'pg-boss';
export const version = require('pg-boss/package.json').version;

// pg-boss 10 has no per-worker concurrency option (teamSize went away in 10.0): every work()
// call is one polling loop, so a process running `concurrency` jobs at a time calls work() that
// many times. Each loop fetches batchSize jobs, runs the handler once for the batch, completes
// the batch in one statement and then waits out the rest of the polling interval.
export function settings(concurrency) {
  return {
    defaults: {
      describe: `${concurrency} work() loops/process, everything else default ` +
        '(batchSize 1, pollingIntervalSeconds 2, pool max 10)',
      boss: {},
      work: {},
    },
    tuned: {
      describe: `${concurrency} work() loops/process, batchSize=100, pollingIntervalSeconds=0.5 ` +
        `(the minimum), pool max=${concurrency + 2}`,
      boss: { max: concurrency + 2 },
      work: { batchSize: 100, pollingIntervalSeconds: 0.5 },
    },
  };
}

async function open(dsn, extra = {}) {
  const boss = new PgBoss({ connectionString: dsn, ...extra });
  boss.on('error', (e) => process.send?.({ ev: 'error', message: `pg-boss: ${e.message}` }));
  await boss.start();
  return boss;
}

// Keyed jobs (a payload with k) go to a second queue with the singleton policy, which lets one
// job of a singletonKey be active at a time; the workers of a keyed drain ($PEERS_KEYED) work it.
const KEYED = 'noop_keyed';

export async function install(dsn) {
  const boss = await open(dsn);
  await boss.createQueue('noop');
  await boss.createQueue(KEYED, { policy: 'singleton' });
  await boss.stop({ graceful: false, wait: true });
}

export async function producer(dsn) {
  const boss = await open(dsn);
  return {
    add: (payloads) => boss.insert(payloads.map((p) => (p.k === undefined
      ? { name: 'noop', data: p } : { name: KEYED, data: p, singletonKey: p.k }))),
    addOne: (p) => boss.send('noop', p),
    close: () => boss.stop({ graceful: false, wait: true }),
  };
}

export async function worker(dsn, setting, concurrency, onJob) {
  const s = settings(concurrency)[setting];
  const boss = await open(dsn, s.boss);
  const queue = process.env.PEERS_KEYED ? KEYED : 'noop';
  for (let i = 0; i < concurrency; i++) {
    await boss.work(queue, s.work, async (jobs) => {
      for (const j of jobs) await onJob(j.data);
    });
  }
  return { stop: () => boss.stop({ graceful: true, wait: true, timeout: 30000 }) };
}

// Jobs not yet completed, and jobs that failed or are waiting for a retry.
export async function counts(client) {
  const r = await client.query(
    "SELECT count(*) FILTER (WHERE state <> 'completed')::int AS remaining, " +
      "count(*) FILTER (WHERE state IN ('retry', 'failed'))::int AS failed " +
      `FROM pgboss.job WHERE name IN ('noop', '${KEYED}')`);
  return r.rows[0];
}
