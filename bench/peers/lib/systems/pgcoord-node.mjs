// pgcoord-node.mjs - pgcoord's Node.js client (clients/node) as a system of the peers
// benchmark, through its public API: Client.enqueueMany for the producers, Client.worker for the
// workers (one dedicated session per process: LISTEN, claims for idle handler slots, the
// completions of a round sent in the statement of the next claim). One queue, "noop", whose
// handler only reports its start; keyed jobs go to "noop_keyed", a flow queue whose key limit
// is 1. The client is the compiled package (clients/node/dist), which bench/peers/run builds.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const top = resolve(here, '../../../..');
const pkg = join(top, 'clients/node');
const { Client } = await import(join(pkg, 'dist/esm/index.js'));

export const name = 'pgcoord-node';
export const version = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')).version;

const KEYED = 'noop_keyed';

// Concurrency is the handler count of every system. The tuned setting holds claimed jobs ready
// beyond the idle handlers (prefetch), as graphile-worker's localQueue and pgcoord's
// bench_queue do: bigger batches per round trip.
export function settings(concurrency) {
  return {
    defaults: {
      describe: `concurrency=${concurrency}/process, everything else default (LISTEN, lease 30 s, ` +
        'no prefetch: claims for idle handlers only)',
      worker: { concurrency },
    },
    tuned: {
      describe: `concurrency=${concurrency}/process, prefetch=512 ` +
        '(claimed jobs held ready beyond the idle handlers), LISTEN, lease 30 s',
      worker: { concurrency, prefetch: 512 },
    },
  };
}

function connect(dsn) {
  return Client.connect({ dsn, poolConfig: { max: 2 } });
}

export async function install(dsn) {
  const bin = process.env.PGCOORD_BIN || join(top, 'build/pgcoord');
  execFileSync(bin, ['-d', dsn, 'init'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const c = await connect(dsn);
  try {
    await c.flowSet(KEYED, { keyLimit: 1 });
  } finally {
    await c.end();
  }
}

export async function producer(dsn) {
  const c = await connect(dsn);
  return {
    add: async (payloads) => {
      const plain = payloads.filter((p) => p.k === undefined);
      if (plain.length) await c.enqueueMany('noop', plain);
      // One call per key: a key is an option of the call.
      const byKey = new Map();
      for (const p of payloads) if (p.k !== undefined) byKey.set(p.k, [...(byKey.get(p.k) ?? []), p]);
      for (const [k, list] of byKey) await c.enqueueMany(KEYED, list, { key: k });
    },
    addOne: (p) => c.enqueue('noop', p),
    close: () => c.end(),
  };
}

export async function worker(dsn, setting, concurrency, onJob) {
  const c = await connect(dsn);
  const w = c.worker(settings(concurrency)[setting].worker);
  w.on('error', (e) => process.send?.({ ev: 'error', message: `pgcoord-node: ${e.message}` }));
  w.handle(process.env.PEERS_KEYED ? KEYED : 'noop', (job) => onJob(job.payload));
  await w.start();
  return {
    stop: async () => {
      await w.stop({ graceMs: 30000 });
      await c.end();
    },
  };
}

// Jobs not yet finished, and jobs that failed (for good, or once and retried).
export async function counts(client) {
  const r = await client.query(
    'SELECT (SELECT count(*) FROM pgcoord.jobs)::int AS remaining, ' +
      "(SELECT count(*) FROM pgcoord.job_history WHERE status <> 'succeeded')::int + " +
      '(SELECT count(*) FROM pgcoord.jobs WHERE attempts > 1)::int AS failed');
  return r.rows[0];
}
