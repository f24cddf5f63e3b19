// pgcoord.mjs - the pgcoord row of the peers benchmark: runs the queue benchmark binary,
// build/bench/bench_queue, once per phase, each time in a freshly created database.
//
// What is asked of bench_queue (run with $PGCOORD_TEST_DSN naming that database):
//   bench_queue --mode enqueue|drain|e2e|latency --jobs N --concurrency K --json
//               [--batch B] [--producers P] [--rate R] [--seconds S]
// and it prints JSON (one object, or one object per line) with, depending on the mode,
// enqueue_per_s, drain_per_s, e2e_per_s, p50_ms, p99_ms, and with jobs (the jobs that finished)
// and rss_kb (peak RSS of the worker process). The phases must be measured as the peers' are:
// same N, same total concurrency, the same batches, and latency from the enqueue commit to the
// handler start, both read from CLOCK_MONOTONIC, at a steady R jobs/s.
// When the binary is missing, the row is left out and the run goes on with the others.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

const MODES = [
  ['enqueue', ['enqueue_per_s']],
  ['drain', ['drain_per_s']],
  ['latency', ['p50_ms', 'p99_ms']],
  ['e2e', ['e2e_per_s']],
];

function exec(cmd, args, env, seconds) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const t = setTimeout(() => p.kill('SIGKILL'), seconds * 1000);
    p.stdout.on('data', (b) => { out += b; });
    p.stderr.on('data', (b) => { err += b; });
    p.on('error', (e) => { clearTimeout(t); resolve({ code: 127, out, err: e.message }); });
    p.on('exit', (code, sig) => { clearTimeout(t); resolve({ code: sig ? `killed by ${sig}` : code, out, err }); });
  });
}

// Every JSON object in the output, merged (later keys win).
function parse(out) {
  const merged = {};
  const take = (v) => {
    if (Array.isArray(v)) v.forEach(take);
    else if (v && typeof v === 'object') Object.assign(merged, v);
  };
  try {
    take(JSON.parse(out));
  } catch {
    for (const line of out.split('\n')) {
      try { take(JSON.parse(line)); } catch { /* not JSON */ }
    }
  }
  return merged;
}

// ctx: { top, opt, machine, log, fresh() -> DSN of a new empty database }.
// Returns a row, or { missing: message } when there is nothing to run.
export async function run(ctx) {
  const { top, opt, machine, log } = ctx;
  const bin = join(top, 'build/bench/bench_queue');
  if (!existsSync(bin)) return { missing: 'pgcoord: not built (bench_queue missing)' };
  const cli = join(top, 'build/pgcoord');
  const row = {
    system: 'pgcoord', setting: 'defaults', version: null,
    settings: `bench_queue, ${opt.concurrency} handler threads, no-op C handlers`,
    jobs: opt.jobs, concurrency: opt.concurrency, procs: 1,
    enqueue_per_s: null, drain_per_s: null, e2e_per_s: null, p50_ms: null, p99_ms: null,
    rss_kb: null, latency_jobs: opt.rate * opt.latencySeconds, latency_rate: opt.rate, notes: [], refused: null,
    ...machine,
  };
  const v = await exec(cli, ['--version'], process.env, 10);
  if (v.code === 0) row.version = v.out.trim().split(/\s+/).pop();
  for (const [mode, keys] of MODES) {
    const dsn = await ctx.fresh();
    if (existsSync(cli)) {
      const init = await exec(cli, ['-d', dsn, 'init'], process.env, 60);
      if (init.code !== 0) {
        row.refused = `pgcoord init failed: ${(init.err || init.out).trim().split('\n').pop()}`;
        break;
      }
    }
    const args = ['--mode', mode, '--jobs', String(mode === 'latency' ? row.latency_jobs : opt.jobs),
      '--concurrency', String(opt.concurrency), '--batch', String(opt.batch),
      '--producers', String(Math.min(opt.procs, opt.concurrency)), '--rate', String(opt.rate),
      '--seconds', String(opt.latencySeconds), '--json'];
    log(`   bench_queue ${args.join(' ')}`);
    const r = await exec(bin, args, { ...process.env, PGCOORD_TEST_DSN: dsn }, opt.deadline + 60);
    if (r.code !== 0) {
      const why = (r.err || r.out).trim().split('\n').filter(Boolean).pop() ?? '';
      row.refused = `${mode}: bench_queue ${typeof r.code === 'number' ? 'exited with status ' + r.code : r.code}` +
        (why ? `: ${why}` : '');
      break;
    }
    const j = parse(r.out);
    const want = mode === 'latency' ? row.latency_jobs : opt.jobs;
    const done = j.jobs ?? j.done ?? j.completed;
    if (typeof done === 'number' && done !== want) {
      row.refused = `${mode}: ${done} of ${want} jobs finished`;
      break;
    }
    for (const k of keys) {
      if (typeof j[k] !== 'number') {
        row.refused = `${mode}: bench_queue printed no ${k}`;
        break;
      }
      row[k] = j[k];
    }
    if (row.refused) break;
    if (typeof j.rss_kb === 'number' && mode !== 'enqueue') row.rss_kb = Math.max(row.rss_kb ?? 0, j.rss_kb);
  }
  if (row.refused) {
    for (const k of ['enqueue_per_s', 'drain_per_s', 'e2e_per_s', 'p50_ms', 'p99_ms', 'rss_kb']) row[k] = null;
  }
  return row;
}
