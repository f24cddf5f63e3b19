// pgcoord.mjs - the pgcoord row of the peers benchmark: runs the queue benchmark binary,
// build/bench/bench_queue (or $PGCOORD_BENCH_QUEUE), in a freshly created database.
//
// It is run once, with $PGCOORD_TEST_DSN naming that database, as
//   bench_queue --only enqueue,drain,e2e,latency,rss --jobs N --workers P --concurrency K/P
//               --rate R --seconds S --json
// and the JSON lines it prints ({"bench":"queue","case":...}) give the row:
//   enqueue_bulk    jobs, jobs_per_s                 -> enqueue_per_s
//   drain           workers, k, jobs, jobs_per_s     -> drain_per_s (the P x K/P line)
//   end_to_end      jobs, jobs_per_s                 -> e2e_per_s
//   wakeup_latency  jobs, p50_ms, p99_ms             -> p50_ms, p99_ms
//   worker_rss      rss_kb                           -> rss_idle_worker_kb
// rss_kb is the peak RSS (VmHWM) of the bench_queue process, sampled while it runs: it runs the
// workers (and its producers), as the peers' worker processes do.
// A case that is missing, or that finished fewer jobs than asked, makes the row refused with
// the reason. The measurements follow the peers' definitions: the same N, the same total
// concurrency (P workers of K/P handlers), no-op handlers, and latency from the enqueue commit
// to the handler start on CLOCK_MONOTONIC at a steady R jobs/s.
// When the binary is missing, the row is left out and the run goes on with the others.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { peakRssKb } from '../common.mjs';

// Runs a command; also samples its peak RSS (VmHWM) every 50 ms while it runs.
function exec(cmd, args, env, seconds) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '', hwm = null;
    const t = setTimeout(() => p.kill('SIGKILL'), seconds * 1000);
    const sample = setInterval(() => {
      const kb = peakRssKb(p.pid);
      if (kb !== null) hwm = Math.max(hwm ?? 0, kb);
    }, 50);
    const end = (r) => { clearTimeout(t); clearInterval(sample); resolve({ ...r, out, err, hwm }); };
    p.stdout.on('data', (b) => { out += b; });
    p.stderr.on('data', (b) => { err += b; });
    p.on('error', (e) => { err = e.message; end({ code: 127 }); });
    p.on('exit', (code, sig) => end({ code: sig ? `killed by ${sig}` : code }));
  });
}

// The JSON lines of a benchmark (bench: queue, queue_keys) among the rest of its output.
function cases(out, bench) {
  const list = [];
  for (const line of out.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const j = JSON.parse(line);
      if (j && j.bench === bench && typeof j.case === 'string') list.push(j);
    } catch { /* a table line */ }
  }
  return list;
}

// The benchmark binary build/bench/NAME (or $VAR), the workers and handlers per worker that
// make the run's concurrency, and pgcoord's version; { missing } when the binary is not built.
async function prepare(ctx, name, variable) {
  const { top, opt } = ctx;
  const bin = process.env[variable] || join(top, 'build/bench', name);
  if (!existsSync(bin)) return { missing: `pgcoord: not built (${name} missing)` };
  const procs = Math.min(opt.procs, opt.concurrency);
  const k = Math.max(1, Math.round(opt.concurrency / procs));
  const cli = join(top, 'build/pgcoord');
  const v = existsSync(cli) ? await exec(cli, ['--version'], process.env, 10) : { code: 1 };
  return { bin, procs, k, version: v.code === 0 ? v.out.trim().split(/\s+/).pop() : null };
}

// Why a benchmark run that did not exit with 0 is refused: its status and last line.
function failure(name, r) {
  const why = (r.err || r.out).trim().split('\n').filter(Boolean).pop() ?? '';
  return `${name} ${typeof r.code === 'number' ? 'exited with status ' + r.code : r.code}${why ? `: ${why}` : ''}`;
}

// ctx: { top, opt, machine, log, fresh() -> DSN of a new empty database }.
// Returns a row, or { missing: message } when there is nothing to run.
export async function run(ctx) {
  const { top, opt, machine, log } = ctx;
  const p = await prepare(ctx, 'bench_queue', 'PGCOORD_BENCH_QUEUE');
  if (p.missing) return p;
  const { bin, procs, k } = p;
  const L = opt.rate * opt.latencySeconds;
  const row = {
    system: 'pgcoord', setting: 'defaults', version: p.version,
    settings: `bench_queue: ${procs} workers x ${k} handler threads, no-op C handlers`,
    jobs: opt.jobs, concurrency: procs * k, procs,
    enqueue_per_s: null, drain_per_s: null, e2e_per_s: null, p50_ms: null, p99_ms: null,
    rss_kb: null, latency_jobs: L, latency_rate: opt.rate, notes: [], refused: null,
    ...machine,
  };

  const args = ['--only', 'enqueue,drain,e2e,latency,rss', '--jobs', String(opt.jobs),
    '--workers', String(procs), '--concurrency', String(k), '--rate', String(opt.rate),
    '--seconds', String(opt.latencySeconds), '--json'];
  log(`   ${bin.startsWith(top) ? bin.slice(top.length + 1) : bin} ${args.join(' ')}`);
  const env = { ...process.env, PGCOORD_TEST_DSN: await ctx.fresh() };
  delete env.BENCH_JSON; // the peers run writes its own rows
  const r = await exec(bin, args, env, 5 * (opt.deadline + 60));
  const fail = (why) => {
    row.refused = why;
    for (const x of ['enqueue_per_s', 'drain_per_s', 'e2e_per_s', 'p50_ms', 'p99_ms', 'rss_kb']) row[x] = null;
    return row;
  };
  if (r.code !== 0) return fail(failure('bench_queue', r));
  const got = cases(r.out, 'queue');
  const one = (name, pred = () => true) => got.filter((j) => j.case === name && pred(j)).at(-1);
  const need = (name, j, jobs) => {
    if (!j) throw new Error(`bench_queue printed no ${name} result`);
    if (typeof j.jobs === 'number' && j.jobs !== jobs) throw new Error(`${name}: ${j.jobs} of ${jobs} jobs finished`);
    return j;
  };
  try {
    const enq = need('enqueue_bulk', one('enqueue_bulk'), opt.jobs);
    const drain = need('drain', one('drain', (j) => j.workers === procs && j.k === k), opt.jobs);
    const e2e = need('end_to_end', one('end_to_end'), opt.jobs);
    const lat = need('wakeup_latency', one('wakeup_latency'), L);
    const rss = one('worker_rss');
    row.enqueue_per_s = enq.jobs_per_s;
    row.drain_per_s = drain.jobs_per_s;
    row.e2e_per_s = e2e.jobs_per_s;
    row.p50_ms = lat.p50_ms;
    row.p99_ms = lat.p99_ms;
    row.max_ms = lat.max_ms ?? null;
    // The peers' figure is the peak RSS of the processes that run their workers; here that is
    // bench_queue itself (its producer threads included, so an upper bound).
    row.rss_kb = r.hwm;
    if (rss && rss.rss_kb > 0) row.rss_idle_worker_kb = rss.rss_kb;
    const bits = [];
    if (enq.chunk) bits.push(`enqueue ${enq.chunk} per call`);
    if (drain.prefetch !== undefined) bits.push(`prefetch ${drain.prefetch}`);
    if (e2e.producers) bits.push(`${e2e.producers} producer${e2e.producers > 1 ? 's' : ''} end to end`);
    if (lat.listening !== undefined) bits.push(lat.listening ? 'LISTEN/NOTIFY' : 'polling');
    bits.push('RSS: peak of the bench_queue process' +
      (rss ? `; an idle \`pgcoord worker -c ${rss.k ?? '?'}\` after its jobs: ${(rss.rss_kb / 1024).toFixed(1)} MB` : ''));
    if (bits.length) row.settings += `; ${bits.join(', ')}`;
    for (const x of ['enqueue_per_s', 'drain_per_s', 'e2e_per_s', 'p50_ms', 'p99_ms', 'rss_kb']) {
      if (!(typeof row[x] === 'number' && row[x] >= 0)) throw new Error(`bench_queue gave no usable ${x}`);
    }
  } catch (e) {
    return fail(e.message);
  }
  return row;
}

// The pgcoord row of a keyed comparison (--keys): build/bench/bench_queue_keys (or
// $PGCOORD_BENCH_QUEUE_KEYS) in a fresh database, as
//   bench_queue_keys SECONDS --drain-only --jobs N --keys K --workers P --concurrency K/P
//                    --hold MS [--spread] --json
// whose "drain" line gives both drains: plain_jobs_per_s (no keys, the plain claim) and
// keyed_jobs_per_s (K keys limited to 1 each, the flow claim).
export async function runKeyed(ctx) {
  const { top, opt, machine, log } = ctx;
  const p = await prepare(ctx, 'bench_queue_keys', 'PGCOORD_BENCH_QUEUE_KEYS');
  if (p.missing) return p;
  const { bin, procs, k } = p;
  const row = {
    system: 'pgcoord', setting: 'defaults', version: p.version,
    settings: `bench_queue_keys: ${procs} workers x ${k} handler threads, prefetch 64, ` +
      (opt.hold ? `C handlers taking ${opt.hold} ms; ` : 'no-op C handlers; ') +
      'keyed: --key with the queue\'s key limit 1',
    jobs: opt.jobs, keys: opt.keys, concurrency: procs * k, procs,
    plain_drain_per_s: null, keyed_drain_per_s: null, keyed_of_plain: null, layout: opt.layout,
    hold_ms: opt.hold, most_per_key: null, keys_over_one: null, notes: [], refused: null,
    ...machine,
  };
  // Its drains give up after 30 x SECONDS: that is the --deadline.
  const args = [String(Math.max(1, Math.ceil(opt.deadline / 30))), '--drain-only',
    '--jobs', String(opt.jobs), '--keys', String(opt.keys), '--workers', String(procs), '--concurrency', String(k), '--hold', String(opt.hold),
    ...(opt.layout === 'spread' ? ['--spread'] : []), '--json'];
  log(`   ${bin.startsWith(top) ? bin.slice(top.length + 1) : bin} ${args.join(' ')}`);
  const env = { ...process.env, PGCOORD_TEST_DSN: await ctx.fresh() };
  delete env.BENCH_JSON;
  const r = await exec(bin, args, env, 3 * (opt.deadline + 60));
  if (r.code !== 0) {
    row.refused = failure('bench_queue_keys', r);
    return row;
  }
  const d = cases(r.out, 'queue_keys').filter((j) => j.case === 'drain').at(-1);
  if (!d) { row.refused = 'bench_queue_keys printed no drain result'; return row; }
  if (d.plain_done !== d.jobs || d.keyed_done !== d.jobs) {
    row.refused = `bench_queue_keys: ${d.plain_done} plain and ${d.keyed_done} keyed jobs of ${d.jobs} ran in time`;
    return row;
  }
  row.jobs = d.jobs;
  row.plain_drain_per_s = d.plain_jobs_per_s;
  row.keyed_drain_per_s = d.keyed_jobs_per_s;
  row.keyed_of_plain = d.keyed_jobs_per_s / d.plain_jobs_per_s;
  if (opt.hold > 0) row.most_per_key = d.most_per_key;
  return row;
}
