// main.mjs - the peers benchmark: pgcoord's queue beside graphile-worker, pg-boss and the
// lightest possible SKIP LOCKED queue (pgbench), on one PostgreSQL server, in one run.
//
// Started by bench/peers/run, which installs the peers and provides the server in
// $PGCOORD_TEST_DSN. Every system runs in its own database and goes through the same phases:
//   enqueue  one producer enqueues N jobs in batches of --batch (its bulk API), timed
//   drain    worker processes start on the full queue and run the N jobs: from the start of the
//            workers' start-up to the moment the database shows every job completed
//   latency  the idle workers get --rate jobs/s, one job per enqueue call, for --latency-seconds;
//            latency = handler start - enqueue commit, both on CLOCK_MONOTONIC
//   e2e      --producers producers enqueue N jobs in batches of --batch while the workers run them:
//            from the producers' start to the moment the database shows every job completed
//   rss      the peak RSS (VmHWM) of the worker processes, summed, over all phases
// The total concurrency (--concurrency) is split over --procs worker processes.
//
// With --keys K the run compares the systems' per-key concurrency limits instead: each system
// drains N plain jobs, then N jobs spread over K keys with at most one job of a key running at
// a time (pgcoord: --key with a key limit of 1; graphile-worker: a named queue per key, whose
// jobs run one at a time; pg-boss: a queue with the singleton policy and a singletonKey per
// job), and the table gives both drains and their ratio. Job s has key s mod K, so that the
// jobs of a key are spread over the queue, which is what the peers' fetch queries handle best;
// --key-layout grouped enqueues each key's jobs together instead. With --hold MS every handler
// takes MS ms and the most jobs of one key that ran at once is counted.
import { spawn, fork } from 'node:child_process';
import { mkdirSync, writeFileSync, appendFileSync, rmSync } from 'node:fs';
import { cpus, totalmem, release, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  nowMs, sleep, split, spread, percentile, peakRssKb, b64ToF64, b64ToU8, keyOf,
} from './common.mjs';
import * as pgcoord from './systems/pgcoord.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const top = resolve(here, '../../..');
const PEERS = ['graphile-worker', 'pg-boss'];
// pgcoord's clients in other languages that run here as systems of their own (a Node.js worker
// process, measured as the peers are): pgcoord-node is clients/node.
const CLIENTS = ['pgcoord-node'];
const ALL = ['pgcoord', ...PEERS, ...CLIENTS, 'ceiling'];

const usage = `Usage: bench/peers/run [OPTION]...
Run pgcoord's queue, graphile-worker, pg-boss and the pgbench ceiling side by
side on one PostgreSQL server; print a table (or JSON) with ratios to pgcoord.

  --jobs N             jobs per phase (default 100000)
  --concurrency K      total handler concurrency of every system (default 16)
  --procs P            worker processes per system (default 2)
  --producers Q        producer processes in the end-to-end phase (default 1)
  --batch B            jobs per enqueue call, bulk and end to end (default 1000)
  --rate R             jobs/s in the latency phase (default 200)
  --latency-seconds S  length of the latency phase (default 10)
  --deadline D         seconds a phase may take before the system is refused
                       (default 300)
  --systems LIST       comma-separated, from pgcoord, graphile-worker, pg-boss,
                       pgcoord-node (the Node.js client), ceiling (default all)
  --settings LIST      peer and client settings: defaults,tuned (default both)
  --keys K             compare keyed drains instead: N jobs over K keys, one
                       job of a key running at a time, beside N plain jobs
  --key-layout L       spread (job s has key s mod K, the default) or grouped
                       (each key's jobs enqueued together)
  --hold MS            with --keys: every handler takes MS ms, and the most
                       jobs of one key seen running at once is shown (default
                       0: no-op handlers, not checked)
  --json               print the results as a JSON list instead of the table
  --out FILE           save the JSON there
                       (default bench/results/peers-DATE.json)
  --chart FILE         draw the PNG chart there (default docs/img/peers.png)
  --no-chart           do not draw the chart
  -h, --help           show this help

The server is $PGCOORD_TEST_DSN's (bench/peers/run starts a throwaway one when
it is unset). A system that does not finish all N jobs of a phase within the
deadline is not reported: its row says why.
Exit status: 0 done, 64 bad usage, 69 server or tools unavailable, 70 internal
error.`;

function die(code, msg) {
  process.stderr.write(`bench/peers: ${msg}\n`);
  process.exit(code);
}

function parseArgs(argv) {
  const o = {
    jobs: 100000, concurrency: 16, procs: 2, producers: 1, batch: 1000, rate: 200, latencySeconds: 10,
    deadline: 300, systems: ALL, settings: ['defaults', 'tuned'], json: false, out: null, keys: 0,
    layout: 'spread', hold: 0,
    chart: join(top, 'docs/img/peers.png'),
  };
  const ints = { '--jobs': 'jobs', '--concurrency': 'concurrency', '--procs': 'procs', '--producers': 'producers', '--batch': 'batch',
    '--rate': 'rate', '--latency-seconds': 'latencySeconds', '--deadline': 'deadline', '--keys': 'keys' };
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    let v = null;
    const eq = a.indexOf('=');
    if (a.startsWith('--') && eq > 0) { v = a.slice(eq + 1); a = a.slice(0, eq); }
    const value = () => {
      if (v !== null) return v;
      if (i + 1 >= argv.length) die(64, `${a} needs a value (see --help)`);
      return argv[++i];
    };
    if (a === '-h' || a === '--help') { process.stdout.write(usage + '\n'); process.exit(0); }
    else if (ints[a]) {
      const s = value();
      if (!/^[0-9]+$/.test(s) || Number(s) < 1) die(64, `${a} must be a positive integer, not '${s}'`);
      o[ints[a]] = Number(s);
    } else if (a === '--systems' || a === '--settings') {
      const list = value().split(',').filter(Boolean);
      const allowed = a === '--systems' ? ALL : ['defaults', 'tuned'];
      for (const x of list) if (!allowed.includes(x)) die(64, `${a}: unknown '${x}' (one of ${allowed.join(', ')})`);
      if (list.length === 0) die(64, `${a} is empty`);
      o[a.slice(2)] = list;
    } else if (a === '--json') o.json = true;
    else if (a === '--out') o.out = resolve(value());
    else if (a === '--chart') o.chart = resolve(value());
    else if (a === '--key-layout') {
      o.layout = value();
      if (!['spread', 'grouped'].includes(o.layout)) die(64, `--key-layout: unknown '${o.layout}' (spread or grouped)`);
    } else if (a === '--hold') {
      const s = value();
      if (!/^[0-9]+$/.test(s) || Number(s) > 10000) die(64, `--hold must be 0 to 10000 ms, not '${s}'`);
      o.hold = Number(s);
    }
    else if (a === '--no-chart') o.chart = null;
    else die(64, `unknown option '${a}' (see --help)`);
  }
  if (o.procs > o.concurrency) die(64, `--procs (${o.procs}) must not exceed --concurrency (${o.concurrency})`);
  if (o.rate * o.latencySeconds > 1e6) die(64, '--rate x --latency-seconds must stay under 1,000,000 jobs');
  if (o.keys > o.jobs) die(64, `--keys (${o.keys}) must not exceed --jobs (${o.jobs})`);
  if ((o.hold || o.layout !== 'spread') && !o.keys) die(64, '--hold and --key-layout go with --keys');
  return o;
}

const parseOnly = process.argv[2] === '--parse-only';
const opt = parseArgs(process.argv.slice(parseOnly ? 3 : 2));
if (parseOnly) process.exit(0);
const pg = (await import('pg')).default;
const log = (msg) => process.stderr.write(`${msg}\n`);

// The DSN of database db on the same server (the peers' drivers need a URI).
function dsnFor(base, db) {
  if (!/^postgres(ql)?:\/\//.test(base)) die(64, 'PGCOORD_TEST_DSN must be a postgresql:// URI for the peers benchmark');
  const u = new URL(base);
  u.pathname = `/${db}`;
  return u.toString();
}

const baseDsn = process.env.PGCOORD_TEST_DSN;
if (!baseDsn) die(64, 'PGCOORD_TEST_DSN is not set (run bench/peers/run, which starts a server)');
const admin = new pg.Client({ connectionString: dsnFor(baseDsn, new URL(baseDsn).pathname.slice(1) || 'postgres') });
try {
  await admin.connect();
} catch (e) {
  die(69, `cannot connect to the server: ${e.message}`);
}

async function recreate(db) {
  await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(db)} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(db)}`);
  return dsnFor(baseDsn, db);
}

async function drop(db) {
  await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(db)} WITH (FORCE)`);
}

// Children we started, so that an interrupted run leaves none behind.
const children = new Set();
function track(child) {
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}
function killChildren() {
  for (const c of children) c.kill('SIGKILL');
}
process.on('SIGINT', () => { killChildren(); process.exit(130); });
for (const ev of ['uncaughtException', 'unhandledRejection']) {
  process.on(ev, (e) => {
    killChildren();
    process.stderr.write(`bench/peers: ${e?.message ?? e}\n`);
    process.exit(70);
  });
}
process.on('SIGTERM', () => { killChildren(); process.exit(143); });

class Refused extends Error {}

// A forked child with a message queue: next(ev) waits for the next message of that kind.
function child(script, args, dsn, env = {}) {
  const c = track(fork(join(here, script), args, {
    // Anything a child prints goes to stderr, so that --json output stays clean.
    env: { ...process.env, ...env, PEERS_DSN: dsn }, stdio: ['ignore', 2, 2, 'ipc'],
  }));
  const box = { c, progress: 0, errors: [], exited: null, waiters: [] };
  c.on('message', (m) => {
    if (m.ev === 'progress') { if (m.phase === box.phase) box.progress = m.count; return; }
    if (m.ev === 'error') {
      box.errors.push(m.message);
      log(`   ${script}: ${m.message}`);
      return;
    }
    const w = box.waiters.findIndex((x) => x.ev === m.ev);
    if (w >= 0) box.waiters.splice(w, 1)[0].resolve(m);
  });
  c.on('exit', (code, sig) => {
    box.exited = sig ? `killed by ${sig}` : `exited with status ${code}`;
    for (const w of box.waiters.splice(0)) w.resolve({ ev: 'exit' });
  });
  box.next = (ev, ms = 120000) => new Promise((resolve, reject) => {
    if (box.exited) { reject(new Refused(`${script} ${box.exited}${box.errors.length ? ': ' + box.errors.at(-1) : ''}`)); return; }
    const waiter = { ev };
    const t = setTimeout(() => {
      box.waiters.splice(box.waiters.indexOf(waiter), 1);
      reject(new Refused(`${script}: no '${ev}' within ${ms / 1000} s`));
    }, ms);
    box.waiters.push(Object.assign(waiter, { resolve: (m) => {
      clearTimeout(t);
      if (m.ev === 'exit') reject(new Refused(`${script} ${box.exited}${box.errors.length ? ': ' + box.errors.at(-1) : ''}`));
      else resolve(m);
    } }));
  });
  return box;
}

// Runs producers over the given ranges of sequence numbers; resolves when all have connected
// (go() then starts them together and resolves with their {t0, t1, commits...}).
async function producers(system, dsn, mode, ranges, batch, rate = 0, layout = 'spread') {
  const ps = ranges.map(([a, b]) => child('producer.mjs', [system, mode, a, b, batch, rate, layout], dsn));
  await Promise.all(ps.map((p) => p.next('ready')));
  return {
    boxes: ps,
    go: async () => {
      const done = ps.map((p) => p.next('done', (opt.deadline + 60) * 1000));
      for (const p of ps) p.c.send({ cmd: 'go' });
      return Promise.all(done);
    },
  };
}

// Waits until the workers have started n jobs of the phase and the database shows none left;
// refuses when the deadline passes or the rate so far cannot make it.
async function waitDone(system, workers, phase, n, sys, client, since, label, prods = []) {
  let checkedAt = 0;
  for (;;) {
    const now = nowMs();
    for (const w of workers) {
      if (w.exited) throw new Refused(`a worker process ${w.exited}${w.errors.length ? ': ' + w.errors.at(-1) : ''}`);
    }
    for (const p of prods) {
      if (p.exited && p.exited !== 'exited with status 0') {
        throw new Refused(`a producer process ${p.exited}${p.errors.length ? ': ' + p.errors.at(-1) : ''}`);
      }
    }
    const started = workers.reduce((s, w) => s + w.progress, 0);
    if (started >= n && now - checkedAt >= 10) {
      checkedAt = now;
      const c = await sys.counts(client);
      if (c.remaining === 0) return { t1: nowMs(), failed: c.failed };
    }
    const elapsed = (now - since) / 1000;
    if (elapsed > opt.deadline) {
      throw new Refused(`${label}: ${started} of ${n} jobs started in the ${opt.deadline} s deadline`);
    }
    if (elapsed > 10 && started < n) {
      if (started === 0 && elapsed > 30) throw new Refused(`${label}: no job started in ${elapsed.toFixed(0)} s`);
      const need = (elapsed * n) / Math.max(started, 1);
      if (need > opt.deadline * 1.2) {
        throw new Refused(`${label}: ${started} of ${n} jobs in ${elapsed.toFixed(0)} s ` +
          `(${(started / elapsed).toFixed(1)} jobs/s); all of them would take ~${need.toFixed(0)} s, ` +
          `over the --deadline of ${opt.deadline} s`);
      }
    }
    await sleep(started >= n ? 5 : 20);
  }
}

// Collects the workers' records of a phase and checks that every job ran (once is expected;
// a job run twice is counted and reported, since these queues promise at-least-once).
async function collect(workers, phase, n, starts) {
  const reps = await Promise.all(workers.map((w) => {
    const r = w.next('report');
    w.c.send({ cmd: 'report', starts });
    return r;
  }));
  const seen = new Uint8Array(n);
  let dups = 0, stray = 0, first = Infinity;
  const startAt = starts ? new Float64Array(n).fill(NaN) : null;
  const endAt = starts ? new Float64Array(n).fill(NaN) : null;
  for (const r of reps) {
    if (r.phase !== phase) throw new Refused(`internal: a worker reported phase ${r.phase} for ${phase}`);
    const s = b64ToU8(r.seen);
    const t = starts ? b64ToF64(r.starts) : null;
    const e = starts && r.ends ? b64ToF64(r.ends) : null;
    for (let i = 0; i < n; i++) {
      if (!s[i]) continue;
      if (seen[i]) dups++;
      seen[i] = 1;
      if (t && !(t[i] >= startAt[i])) startAt[i] = t[i];
      if (e && e[i] === e[i] && !(e[i] <= endAt[i])) endAt[i] = e[i];
    }
    dups += r.dups;
    stray += r.stray;
    if (r.first !== null) first = Math.min(first, r.first);
  }
  let distinct = 0;
  for (let i = 0; i < n; i++) distinct += seen[i];
  if (distinct !== n) throw new Refused(`${phase}: ${distinct} of ${n} distinct jobs ran`);
  return { dups, stray, first, startAt, endAt };
}

async function setPhase(workers, phase, n) {
  await Promise.all(workers.map((w) => {
    const r = w.next('phase');
    w.phase = phase;
    w.progress = 0;
    w.c.send({ cmd: 'phase', phase, n });
    return r;
  }));
}

async function stopWorkers(workers) {
  let total = 0;
  for (const w of workers) {
    const before = peakRssKb(w.c.pid);
    let rss = before;
    if (!w.exited) {
      try {
        const r = w.next('stopped', 60000);
        w.c.send({ cmd: 'stop' });
        rss = (await r).rss_kb ?? before;
      } catch {
        w.c.kill('SIGKILL');
      }
    }
    total += rss ?? 0;
  }
  return total;
}

async function runPeer(system, setting, machine) {
  const sys = await import(`./systems/${system}.mjs`);
  const per = spread(opt.concurrency, opt.procs);
  const row = {
    system, setting, version: sys.version, settings: sys.settings(per[0])[setting].describe,
    jobs: opt.jobs, concurrency: opt.concurrency, procs: per.length,
    enqueue_per_s: null, drain_per_s: null, e2e_per_s: null, p50_ms: null, p99_ms: null,
    rss_kb: null, latency_jobs: opt.rate * opt.latencySeconds, latency_rate: opt.rate, notes: [], refused: null,
    ...machine,
  };
  const db = `peers_${system.replace(/-/g, '_')}_${setting}`;
  const dsn = await recreate(db);
  const client = new pg.Client({ connectionString: dsn });
  let workers = [];
  try {
    await sys.install(dsn);
    await client.connect();
    const N = opt.jobs;

    // (a) bulk enqueue from one client
    log(`   enqueue ${N} jobs in batches of ${opt.batch}`);
    const enq = await producers(system, dsn, 'bulk', [[0, N]], opt.batch);
    const [e] = await enq.go();
    row.enqueue_per_s = N / ((e.t1 - e.t0) / 1000);
    const c0 = await sys.counts(client);
    if (c0.remaining !== N) throw new Refused(`enqueue: ${c0.remaining} of ${N} jobs are in the queue`);

    // (b) drain: the workers start on the full queue
    log(`   drain with ${per.join('+')} handlers`);
    const since = nowMs();
    workers = per.map((k) => child('worker.mjs', [system, setting, k, 'drain', N], dsn));
    for (const w of workers) w.phase = 'drain';
    const ready = await Promise.all(workers.map((w) => w.next('ready')));
    const d = await waitDone(system, workers, 'drain', N, sys, client, since, 'drain');
    const dr = await collect(workers, 'drain', N, false);
    row.drain_per_s = N / ((d.t1 - Math.min(...ready.map((m) => m.t0))) / 1000);
    if (d.failed || dr.dups) row.notes.push(`drain: ${d.failed} failed, ${dr.dups} run twice`);

    // (d) wake-up latency at a steady rate
    const L = row.latency_jobs;
    log(`   latency: ${opt.rate} jobs/s for ${opt.latencySeconds} s`);
    await setPhase(workers, 'lat', L);
    const lp = await producers(system, dsn, 'lat', [[0, L]], 1, opt.rate);
    const t0 = nowMs();
    const [lr] = await lp.go();
    await waitDone(system, workers, 'lat', L, sys, client, t0, 'latency');
    const lc = await collect(workers, 'lat', L, true);
    const commits = b64ToF64(lr.commits);
    const sends = b64ToF64(lr.sends);
    const lat = [];
    const fromCall = [];
    for (let i = 0; i < L; i++) {
      lat.push(lc.startAt[i] - commits[i]);
      fromCall.push(lc.startAt[i] - sends[i]);
    }
    lat.sort((a, b) => a - b);
    fromCall.sort((a, b) => a - b);
    row.p50_ms = percentile(lat, 50);
    row.p99_ms = percentile(lat, 99);
    row.max_ms = lat[lat.length - 1];
    // The same jobs timed from the enqueue call instead of its return: an upper bound that
    // includes the enqueue's own round trip.
    row.p50_from_call_ms = percentile(fromCall, 50);
    row.p99_from_call_ms = percentile(fromCall, 99);
    // A handler can start before its producer sees the commit (the notification and the reply
    // race, and a loaded machine may run the producer late); many such jobs mean a busy machine.
    const calls = [];
    for (let i = 0; i < L; i++) calls.push(commits[i] - sends[i]);
    calls.sort((a, b) => a - b);
    const callMs = percentile(calls, 50);
    if (callMs > 1000 / opt.rate) {
      row.notes.push(`latency: enqueue calls took a median ${callMs.toFixed(0)} ms, so they overlapped and ` +
        `reached the server less evenly than ${opt.rate}/s`);
    }
    const early = lat.filter((x) => x < 0).length;
    if (early > L / 100) {
      row.notes.push(`latency: ${early} of ${L} handlers started before their producer saw the commit ` +
        '(the producer ran late: a busy machine)');
    }
    if (lr.behind > L / 100) row.notes.push(`latency: the producer fell behind the ${opt.rate}/s schedule for ${lr.behind} jobs`);

    // (c) end to end: producers and workers together
    log(`   end to end: ${opt.producers} producer(s), batches of ${opt.batch}`);
    await setPhase(workers, 'e2e', N);
    const ep = await producers(system, dsn, 'e2e', split(N, opt.producers), opt.batch);
    const tE = nowMs();
    const prodDone = ep.go();
    prodDone.catch(() => {});
    const e2 = await waitDone(system, workers, 'e2e', N, sys, client, tE, 'end to end', ep.boxes);
    const pr = await prodDone;
    const ec = await collect(workers, 'e2e', N, false);
    row.e2e_per_s = N / ((e2.t1 - Math.min(...pr.map((p) => p.t0))) / 1000);
    if (e2.failed || ec.dups) row.notes.push(`e2e: ${e2.failed} failed, ${ec.dups} run twice`);

    // (e) peak RSS of the worker processes
    row.rss_kb = await stopWorkers(workers);
    workers = [];
  } catch (err) {
    if (!(err instanceof Refused)) throw err;
    row.refused = err.message;
    for (const k of ['enqueue_per_s', 'drain_per_s', 'e2e_per_s', 'p50_ms', 'p99_ms', 'rss_kb']) row[k] = null;
  } finally {
    if (workers.length) await stopWorkers(workers).catch(() => {});
    await client.end().catch(() => {});
    killChildren();
    await drop(db);
  }
  return row;
}

// One drain of a keyed comparison: enqueues N jobs of the phase (keyed: spread over --keys
// keys), starts fresh workers on the full queue, and stops them once every job has run; returns
// jobs per second, timed as the drain phase above.
async function keyedDrain(system, setting, dsn, sys, client, phase) {
  const N = opt.jobs;
  const per = spread(opt.concurrency, opt.procs);
  const keyed = phase === 'keyed';
  log(`   ${phase}: enqueue ${N} jobs${keyed ? ` over ${opt.keys} keys` : ''}, drain with ${per.join('+')} handlers`);
  const enq = await producers(system, dsn, keyed ? 'keyed' : 'bulk', [[0, N]], opt.batch, keyed ? opt.keys : 0,
    opt.layout);
  await enq.go();
  const c0 = await sys.counts(client);
  if (c0.remaining !== N) throw new Refused(`${phase}: ${c0.remaining} of ${N} jobs are in the queue`);
  const since = nowMs();
  const hold = keyed && opt.hold > 0;
  const workers = per.map((k) => child('worker.mjs', [system, setting, k, phase, N], dsn,
    { PEERS_HOLD_MS: String(opt.hold), ...(keyed ? { PEERS_KEYED: '1' } : {}) }));
  try {
    for (const w of workers) w.phase = phase;
    const ready = await Promise.all(workers.map((w) => w.next('ready')));
    const d = await waitDone(system, workers, phase, N, sys, client, since, `${phase} drain`);
    const dr = await collect(workers, phase, N, hold);
    const notes = d.failed || dr.dups ? [`${phase}: ${d.failed} failed, ${dr.dups} run twice`] : [];
    return { per_s: N / ((d.t1 - Math.min(...ready.map((m) => m.t0))) / 1000), notes,
      most: hold ? mostAtOnce(dr.startAt, dr.endAt, N) : null };
  } finally {
    await stopWorkers(workers).catch(() => {});
  }
}

// The most jobs of one key that ran at once, from every job's start and end on the shared
// monotonic clock (keys as the producer gave them), and how many keys ever had more than one.
function mostAtOnce(startAt, endAt, n) {
  const byKey = new Map();
  for (let i = 0; i < n; i++) {
    const k = keyOf(i, opt.keys, n, opt.layout);
    if (!byKey.has(k)) byKey.set(k, []);
    byKey.get(k).push([startAt[i], 1], [endAt[i], -1]);
  }
  let most = 0, over = 0;
  for (const ev of byKey.values()) {
    // An end at the same instant as a start comes first: the key was free again.
    ev.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let now = 0, top = 0;
    for (const [, d] of ev) top = Math.max(top, (now += d));
    most = Math.max(most, top);
    if (top > 1) over++;
  }
  return { most, over };
}

async function runKeyedPeer(system, setting, machine) {
  const sys = await import(`./systems/${system}.mjs`);
  const per = spread(opt.concurrency, opt.procs);
  const row = {
    system, setting, version: sys.version, settings: sys.settings(per[0])[setting].describe,
    jobs: opt.jobs, keys: opt.keys, concurrency: opt.concurrency, procs: per.length,
    plain_drain_per_s: null, keyed_drain_per_s: null, keyed_of_plain: null, layout: opt.layout,
    hold_ms: opt.hold, most_per_key: null, keys_over_one: null, notes: [], refused: null,
    ...machine,
  };
  const db = `peers_${system.replace(/-/g, '_')}_${setting}`;
  const dsn = await recreate(db);
  const client = new pg.Client({ connectionString: dsn });
  try {
    await sys.install(dsn);
    await client.connect();
    const plain = await keyedDrain(system, setting, dsn, sys, client, 'drain');
    row.plain_drain_per_s = plain.per_s;
    const keyed = await keyedDrain(system, setting, dsn, sys, client, 'keyed');
    row.keyed_drain_per_s = keyed.per_s;
    row.keyed_of_plain = keyed.per_s / plain.per_s;
    if (keyed.most) {
      row.most_per_key = keyed.most.most;
      row.keys_over_one = keyed.most.over;
    }
    row.notes.push(...plain.notes, ...keyed.notes);
  } catch (err) {
    if (!(err instanceof Refused)) throw err;
    row.refused = err.message;
  } finally {
    await client.end().catch(() => {});
    killChildren();
    await drop(db);
  }
  return row;
}

// Runs pgbench with a script; returns the seconds it took, without its connection setup.
function pgbench(dsn, script, clients, txPerClient) {
  return new Promise((resolveP, reject) => {
    const file = join(tmpdir(), `pgc-peers-${process.pid}-${Math.random().toString(36).slice(2)}.sql`);
    writeFileSync(file, script);
    const args = ['-n', '-M', 'prepared', '-f', file, '-c', String(clients), '-j', String(Math.min(clients, 2)),
      '-t', String(txPerClient), dsn];
    const t0 = nowMs();
    const p = track(spawn('pgbench', args, { stdio: ['ignore', 'pipe', 'pipe'] }));
    let out = '';
    p.stdout.on('data', (b) => { out += b; });
    p.stderr.on('data', (b) => { out += b; });
    p.on('error', (e) => reject(new Refused(`pgbench: ${e.message}`)));
    p.on('exit', (code) => {
      const t1 = nowMs();
      rmSync(file, { force: true });
      if (code !== 0) { reject(new Refused(`pgbench failed: ${out.trim().split('\n').at(-1)}`)); return; }
      const m = /initial connection time = ([0-9.]+) ms/.exec(out);
      resolveP((t1 - t0 - (m ? Number(m[1]) : 0)) / 1000);
    });
  });
}

// The lightest possible queue: INSERT 1,000 rows, DELETE 1,000 with SKIP LOCKED ... RETURNING.
// No claim token, no lease, no acknowledgement: the ceiling for any SKIP LOCKED queue.
async function runCeiling(machine) {
  const per = Math.min(1000, opt.jobs);
  const tx = Math.ceil(opt.jobs / per);
  const N = tx * per;
  const K = opt.concurrency;
  const row = {
    system: 'pgbench ceiling', setting: '-', version: null,
    settings: `INSERT ${per} rows per transaction (1 client); DELETE ... WHERE id IN (SELECT id ... ` +
      `ORDER BY id LIMIT ${per} FOR UPDATE SKIP LOCKED) RETURNING id (${K} clients)`,
    jobs: N, concurrency: K, procs: K, enqueue_per_s: null, drain_per_s: null, e2e_per_s: null,
    p50_ms: null, p99_ms: null, rss_kb: null, latency_jobs: 0, latency_rate: opt.rate, notes: [], refused: null,
    ...machine,
  };
  const db = 'peers_ceiling';
  const dsn = await recreate(db);
  const client = new pg.Client({ connectionString: dsn });
  try {
    await client.connect();
    await client.query('CREATE TABLE q (id bigserial PRIMARY KEY, payload jsonb NOT NULL)');
    const ins = `INSERT INTO q (payload) SELECT '{}'::jsonb FROM generate_series(1, ${per});\n`;
    const del = `DELETE FROM q WHERE id IN (SELECT id FROM q ORDER BY id LIMIT ${per} FOR UPDATE SKIP LOCKED) RETURNING id;\n`;
    const count = async () => Number((await client.query('SELECT count(*) FROM q')).rows[0].count);

    log(`   enqueue ${N} rows, 1 client`);
    const te = await pgbench(dsn, ins, 1, tx);
    if ((await count()) !== N) throw new Refused(`enqueue: ${await count()} of ${N} rows`);
    row.enqueue_per_s = N / te;

    log(`   drain with ${K} clients`);
    const td = await pgbench(dsn, del, K, Math.ceil(tx / K));
    const left = await count();
    if (left !== 0) throw new Refused(`drain: ${left} of ${N} rows left`);
    row.drain_per_s = N / td;

    log(`   end to end with ${K} clients`);
    const txE = Math.ceil(tx / K);
    const NE = txE * K * per;
    const t1 = await pgbench(dsn, ins + del, K, txE);
    const t0 = nowMs();
    const rest = (await client.query('DELETE FROM q')).rowCount;
    const t2 = nowMs();
    row.e2e_per_s = NE / (t1 + (t2 - t0) / 1000);
    row.e2e_jobs = NE;
    if (rest) row.notes.push(`e2e: ${rest} rows left behind by short DELETEs, deleted within the timing`);
    row.jobs = N;
  } catch (err) {
    if (!(err instanceof Refused)) throw err;
    row.refused = err.message;
  } finally {
    await client.end().catch(() => {});
    await drop(db);
  }
  return row;
}

async function machineInfo() {
  const v = (await admin.query('SHOW server_version')).rows[0].server_version;
  const s = (await admin.query("SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS sc")).rows[0];
  const c = cpus();
  return {
    machine: `${c.length} x ${c[0]?.model?.replace(/\s+/g, ' ').trim() ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, ` +
      `Linux ${release()}`,
    postgres: `${v} (fsync=${s.fsync}, synchronous_commit=${s.sc}, same host)`,
    node: process.version,
    date: new Date().toISOString(),
  };
}

// ---------------------------------------------------------------------------------------------

const machine = await machineInfo();
const rows = [];
log(`bench/peers: ${opt.jobs} jobs, concurrency ${opt.concurrency} over ${spread(opt.concurrency, opt.procs).length} ` +
  (opt.keys ? `processes, keyed drains over ${opt.keys} keys` : `processes, latency at ${opt.rate}/s for ${opt.latencySeconds} s`) +
  `; ${machine.machine}; PostgreSQL ${machine.postgres}`);

for (const system of opt.systems) {
  if (system === 'pgcoord') {
    log('== pgcoord');
    const ctx = { top, opt, machine, log, fresh: () => recreate('peers_pgcoord') };
    const r = await (opt.keys ? pgcoord.runKeyed(ctx) : pgcoord.run(ctx));
    await drop('peers_pgcoord');
    if (r.missing) log(r.missing);
    else {
      rows.push(r);
      if (r.refused) log(`   refused: ${r.refused}`);
    }
  } else if (system === 'ceiling') {
    if (opt.keys) { log('== pgbench ceiling: not in a keyed comparison (it has no keys)'); continue; }
    log('== pgbench ceiling');
    rows.push(await runCeiling(machine));
  } else {
    for (const setting of opt.settings) {
      log(`== ${system} ${setting}`);
      rows.push(await (opt.keys ? runKeyedPeer : runPeer)(system, setting, machine));
      const r = rows.at(-1);
      if (r.refused) log(`   refused: ${r.refused}`);
    }
  }
}
await admin.end();

const fmt = (x, d = 0) => (x === null || x === undefined ? '-' : x.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }));
const ratio = (x) => (x === null ? '-' : `${x.toFixed(2)}x`);
const stamp = new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);

// Saves the rows as JSON in bench/results (or --out), and as lines of $BENCH_JSON; returns the
// file's path.
function saveRows(list, prefix, bench) {
  const out = opt.out ?? join(top, 'bench/results', `${prefix}-${stamp}.json`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(list, null, 2) + '\n');
  if (process.env.BENCH_JSON) {
    for (const r of list) appendFileSync(process.env.BENCH_JSON, JSON.stringify({ bench, ...r }) + '\n');
  }
  return out;
}

if (opt.keys) {
  reportKeyed(rows);
  process.exit(0);
}

// The keyed comparison: each system's two drains, the keyed one over its plain one, and how
// many times pgcoord's keyed drain is each row's.
function reportKeyed(list) {
  const pk = list.find((r) => r.system === 'pgcoord' && !r.refused);
  for (const r of list) {
    r.pgcoord_keyed_ratio = pk && r.keyed_drain_per_s > 0 ? pk.keyed_drain_per_s / r.keyed_drain_per_s : null;
  }
  const out = saveRows(list, 'peers-keyed', 'peers_keyed');
  if (opt.json) {
    process.stdout.write(JSON.stringify(list, null, 2) + '\n');
  } else {
    const w = [16, 9, 14, 14, 12, 9, 9];
    const line = (cells) => cells.map((c, i) => (i < 2 ? String(c).padEnd(w[i]) : String(c).padStart(w[i]))).join(' ');
    const lines = [];
    lines.push(`peers, keyed drains: ${opt.jobs.toLocaleString('en-US')} jobs over ${opt.keys.toLocaleString('en-US')} keys ` +
      `(at most one job of a key running at a time) beside ${opt.jobs.toLocaleString('en-US')} plain jobs; ` +
      `concurrency ${opt.concurrency} (${spread(opt.concurrency, opt.procs).length} worker processes)`);
    lines.push(`machine: ${machine.machine}; PostgreSQL ${machine.postgres}; Node ${machine.node}`);
    lines.push(line(['system', 'setting', 'plain drain/s', 'keyed drain/s', 'keyed/plain', 'keyed x', 'most/key']));
    for (const r of list) {
      if (r.refused) { lines.push(line([r.system, r.setting, '']).trimEnd() + `  NOT REPORTED: ${r.refused}`); continue; }
      lines.push(line([r.system, r.setting, fmt(r.plain_drain_per_s), fmt(r.keyed_drain_per_s),
        r.keyed_of_plain === null ? '-' : r.keyed_of_plain.toFixed(2), ratio(r.pgcoord_keyed_ratio),
        r.most_per_key === null ? '-' : String(r.most_per_key)]));
    }
    lines.push('');
    lines.push(pk ? 'keyed x: how many times pgcoord\'s keyed drain is the row\'s (above 1: pgcoord wins)'
      : 'keyed x: none, pgcoord is not in this run');
    lines.push(opt.hold ? `most/key: the most jobs of one key seen running at once (the limit is 1), each handler taking ${opt.hold} ms; ` +
      `key layout ${opt.layout}` : `most/key: not checked (--hold 0: no-op handlers); key layout ${opt.layout}`);
    lines.push('settings:');
    for (const r of list) lines.push(`  ${r.system} ${r.setting}${r.version ? ' (' + r.version + ')' : ''}: ${r.settings}`);
    for (const r of list) for (const n of r.notes) lines.push(`  note: ${r.system} ${r.setting}: ${n}`);
    process.stdout.write(lines.join('\n') + '\n');
  }
  log(`results: ${out}`);
}

// Ratios: how many times better pgcoord is than each row (>1: pgcoord is better).
const pgc = rows.find((r) => r.system === 'pgcoord' && !r.refused);
const ceil = rows.find((r) => r.system === 'pgbench ceiling' && !r.refused);
for (const r of rows) {
  const ok = (x) => typeof x === 'number' && x > 0;
  r.pgcoord_e2e_ratio = pgc && ok(pgc.e2e_per_s) && ok(r.e2e_per_s) ? pgc.e2e_per_s / r.e2e_per_s : null;
  r.pgcoord_drain_ratio = pgc && ok(pgc.drain_per_s) && ok(r.drain_per_s) ? pgc.drain_per_s / r.drain_per_s : null;
  r.pgcoord_p99_ratio = pgc && ok(pgc.p99_ms) && ok(r.p99_ms) ? r.p99_ms / pgc.p99_ms : null;
  r.pgcoord_rss_ratio = pgc && ok(pgc.rss_kb) && ok(r.rss_kb) ? r.rss_kb / pgc.rss_kb : null;
  r.e2e_of_ceiling = ceil && ok(ceil.e2e_per_s) && ok(r.e2e_per_s) ? r.e2e_per_s / ceil.e2e_per_s : null;
}

const out = saveRows(rows, 'peers', 'peers');

if (opt.json) {
  process.stdout.write(JSON.stringify(rows, null, 2) + '\n');
} else {
  const head = ['system', 'setting', 'enqueue/s', 'drain/s', 'e2e/s', 'p50 ms', 'p99 ms', 'RSS MB',
    'e2e x', 'drain x', 'p99 x', 'RSS x', 'e2e/ceil'];
  const w = [16, 9, 10, 10, 10, 8, 8, 7, 7, 7, 7, 7, 8];
  const line = (cells) => cells.map((c, i) => (i < 2 ? String(c).padEnd(w[i]) : String(c).padStart(w[i]))).join(' ');
  const lines = [];
  lines.push(`peers: ${opt.jobs.toLocaleString('en-US')} jobs, concurrency ${opt.concurrency} ` +
    `(${spread(opt.concurrency, opt.procs).length} worker processes), batches of ${opt.batch}, ` +
    `${opt.producers} producer(s) end to end, latency at ${opt.rate} jobs/s`);
  lines.push(`machine: ${machine.machine}; PostgreSQL ${machine.postgres}; Node ${machine.node}`);
  lines.push(line(head));
  for (const r of rows) {
    if (r.refused) { lines.push(line([r.system, r.setting, '']) .trimEnd() + `  NOT REPORTED: ${r.refused}`); continue; }
    lines.push(line([r.system, r.setting, fmt(r.enqueue_per_s), fmt(r.drain_per_s), fmt(r.e2e_per_s),
      fmt(r.p50_ms, 1), fmt(r.p99_ms, 1), r.rss_kb === null ? '-' : fmt(r.rss_kb / 1024, 1),
      ratio(r.pgcoord_e2e_ratio), ratio(r.pgcoord_drain_ratio), ratio(r.pgcoord_p99_ratio),
      ratio(r.pgcoord_rss_ratio), r.e2e_of_ceiling === null ? '-' : `${(r.e2e_of_ceiling * 100).toFixed(0)}%`]));
  }
  lines.push('');
  lines.push(pgc ? 'ratios (x): how many times better pgcoord is than the row (above 1: pgcoord wins)'
    : 'ratios: none, pgcoord is not in this run');
  const peers = rows.filter((r) => PEERS.includes(r.system) && !r.refused);
  if (pgc && peers.length) {
    // The goals pgcoord's queue is held to: end to end at least 1.5 times the best peer setting,
    // p99 wake-up below every peer's, worker RSS at most a fifth of the leanest peer's.
    const best = (k, f) => peers.reduce((a, r) => (a === null || f(r[k], a[k]) ? r : a), null);
    const e = best('e2e_per_s', (x, y) => x > y);
    const l = best('p99_ms', (x, y) => x < y);
    const m = best('rss_kb', (x, y) => x < y);
    const verdict = (ok) => (ok ? 'met' : 'NOT met');
    const eR = pgc.e2e_per_s / e.e2e_per_s;
    const mR = pgc.rss_kb / m.rss_kb;
    lines.push(`targets: e2e ${eR.toFixed(2)}x ${e.system} ${e.setting} (goal >= 1.5x: ${verdict(eR >= 1.5)}); ` +
      `p99 ${fmt(pgc.p99_ms, 1)} ms vs ${fmt(l.p99_ms, 1)} ms of ${l.system} ${l.setting} ` +
      `(goal: below every peer: ${verdict(pgc.p99_ms < l.p99_ms)}); ` +
      `RSS ${(mR * 100).toFixed(0)}% of ${m.system} ${m.setting} (goal <= 20%: ${verdict(mR <= 0.2)})`);
  }
  // The goals of the Node.js client: end to end and drain at least 1.5 times graphile-worker
  // tuned and above pg-boss tuned, p99 wake-up below both, RSS at most theirs, and at least 0.4
  // of the C worker (the pgcoord row).
  const gw = rows.find((r) => r.system === 'graphile-worker' && r.setting === 'tuned' && !r.refused);
  const pb = rows.find((r) => r.system === 'pg-boss' && r.setting === 'tuned' && !r.refused);
  for (const nd of rows.filter((r) => r.system === 'pgcoord-node' && !r.refused)) {
    const bits = [];
    const x = (a, b) => `${(a / b).toFixed(2)}x`;
    const v = (ok) => (ok ? 'met' : 'NOT met');
    if (gw) {
      bits.push(`e2e ${x(nd.e2e_per_s, gw.e2e_per_s)} and drain ${x(nd.drain_per_s, gw.drain_per_s)} graphile-worker tuned ` +
        `(goal >= 1.5x: ${v(nd.e2e_per_s >= 1.5 * gw.e2e_per_s && nd.drain_per_s >= 1.5 * gw.drain_per_s)})`);
    }
    if (pb) {
      bits.push(`e2e ${x(nd.e2e_per_s, pb.e2e_per_s)} and drain ${x(nd.drain_per_s, pb.drain_per_s)} pg-boss tuned ` +
        `(goal > 1x: ${v(nd.e2e_per_s > pb.e2e_per_s && nd.drain_per_s > pb.drain_per_s)})`);
    }
    const tuned = [gw, pb].filter(Boolean);
    if (tuned.length) {
      bits.push(`p99 ${fmt(nd.p99_ms, 1)} ms (goal: below ${tuned.map((r) => `${fmt(r.p99_ms, 1)} of ${r.system}`).join(', ')}: ` +
        `${v(tuned.every((r) => nd.p99_ms < r.p99_ms))})`);
      bits.push(`RSS ${fmt(nd.rss_kb / 1024, 1)} MB (goal: at most theirs: ${v(tuned.every((r) => nd.rss_kb <= r.rss_kb))})`);
    }
    if (pgc) {
      bits.push(`of the C worker: e2e ${(nd.e2e_per_s / pgc.e2e_per_s).toFixed(2)}, drain ${(nd.drain_per_s / pgc.drain_per_s).toFixed(2)} ` +
        `(goal >= 0.4: ${v(nd.e2e_per_s >= 0.4 * pgc.e2e_per_s && nd.drain_per_s >= 0.4 * pgc.drain_per_s)})`);
    }
    if (bits.length) lines.push(`targets of pgcoord-node ${nd.setting}: ${bits.join('; ')}`);
  }
  lines.push('settings:');
  for (const r of rows) lines.push(`  ${r.system} ${r.setting}${r.version ? ' (' + r.version + ')' : ''}: ${r.settings}`);
  for (const r of rows) for (const n of r.notes) lines.push(`  note: ${r.system} ${r.setting}: ${n}`);
  process.stdout.write(lines.join('\n') + '\n');
}

if (opt.chart) {
  const { chart } = await import('./chart.mjs');
  const msg = await chart(rows, opt.chart);
  log(msg);
}
log(`results: ${out}`);
