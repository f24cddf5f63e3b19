// bench_worker.mjs - the Node.js client's program for the shared client benchmark
// (bench/clients/run): PGCOORD_BENCH_MODE=work runs one Worker of PGCOORD_BENCH_CONCURRENCY
// handlers until PGCOORD_BENCH_STOP_AFTER jobs are completed; PGCOORD_BENCH_MODE=enqueue
// enqueues PGCOORD_BENCH_JOBS jobs in one enqueueMany call and says how long that call took.
// It runs the compiled package (clients/node/dist), which ./cmd builds, or the ESM build in
// $PGCOORD_NODE_CLIENT_ESM (a directory with index.js). See README.md here.
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const top = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const esm = process.env.PGCOORD_NODE_CLIENT_ESM || join(top, 'clients/node/dist/esm');
const { Client } = await import(join(esm, 'index.js'));

function env(name, dflt) {
  const v = process.env[name] ?? dflt;
  if (v === undefined) {
    process.stderr.write(`bench_worker.mjs: ${name} is not set\n`);
    process.exit(64);
  }
  return v;
}

const dsn = env('PGCOORD_BENCH_DSN');
const schema = env('PGCOORD_BENCH_SCHEMA', 'pgcoord');
const queue = env('PGCOORD_BENCH_QUEUE');
const mode = env('PGCOORD_BENCH_MODE');
// Unix time in microseconds, finer than Date.now().
const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);

if (mode === 'enqueue') {
  const n = Number(env('PGCOORD_BENCH_JOBS'));
  const payloads = Array.from({ length: n }, (_, i) => ({ i }));
  const c = await Client.connect({ dsn, schema, poolConfig: { max: 1 } });
  // The connection is open before the timed call.
  await c.pool.query('SELECT 1');
  const t0 = performance.now();
  await c.enqueueMany(queue, payloads);
  const seconds = (performance.now() - t0) / 1000;
  await c.end();
  process.stdout.write(`${JSON.stringify({ enqueued: n, seconds })}\n`);
  process.exit(0);
}
if (mode !== 'work') {
  process.stderr.write(`bench_worker.mjs: PGCOORD_BENCH_MODE must be work or enqueue, not '${mode}'\n`);
  process.exit(64);
}

const stopAfter = Number(env('PGCOORD_BENCH_STOP_AFTER', '0'));
const kind = env('PGCOORD_BENCH_HANDLER', 'noop');
const listen = env('PGCOORD_BENCH_LISTEN', '1') !== '0';
const c = await Client.connect({ dsn, schema, poolConfig: { max: 2 } });
const w = c.worker({ concurrency: Number(env('PGCOORD_BENCH_CONCURRENCY', '16')), listen,
  leaseMs: Number(env('PGCOORD_BENCH_LEASE_MS', '30000')) });
w.on('error', (e) => process.stderr.write(`bench_worker.mjs: ${e.message}\n`));
let handled = 0;
let stopping;
const done = () => {
  if (++handled === stopAfter) stopping = w.stop({ graceMs: 30000 });
};
let handler;
if (kind.startsWith('sleep:')) {
  const ms = Number(kind.slice(6));
  handler = () => new Promise((r) => setTimeout(r, ms)).then(done);
} else if (kind === 'latency') {
  handler = (job) => {
    process.stdout.write(`lat_us ${nowUs() - Number(job.payload.t_us)}\n`);
    done();
  };
} else if (kind === 'noop') {
  handler = () => done();
} else {
  process.stderr.write(`bench_worker.mjs: PGCOORD_BENCH_HANDLER must be noop, sleep:MS or latency, not '${kind}'\n`);
  process.exit(64);
}
w.handle(queue, handler);
process.stdout.write('ready\n');
// SIGTERM stops it gracefully (0 as PGCOORD_BENCH_STOP_AFTER: only SIGTERM does).
process.once('SIGTERM', () => { stopping ??= w.stop({ graceMs: 30000 }); });
await w.start();
await new Promise((resolve) => w.once('stopped', resolve));
await stopping;
await c.end();
process.stdout.write(`${JSON.stringify({ handled })}\n`);
process.exit(0);
