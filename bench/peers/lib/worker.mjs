// worker.mjs - one worker process of the peers benchmark: runs a system's worker with a no-op
// handler and tells the parent (over the fork IPC channel) which jobs started, and when.
//
//   node worker.mjs SYSTEM SETTING CONCURRENCY PHASE JOBS     (the DSN is in $PEERS_DSN)
//
// With $PEERS_HOLD_MS set (keyed comparisons), a handler holds each job that long before it
// returns, and the job's end is recorded too, so that the parent can see how many jobs of one
// key ran at once.
// Messages from the parent: {cmd:'phase', phase, n} starts counting a new phase of n jobs,
// {cmd:'report'} asks for the phase's record, {cmd:'stop'} stops the worker gracefully.
import { nowMs, peakRssKb, sleep, f64ToB64, u8ToB64 } from './common.mjs';

const [system, setting, concurrencyArg, phase0, n0] = process.argv.slice(2);
const concurrency = Number(concurrencyArg);
const holdMs = Number(process.env.PEERS_HOLD_MS || 0);
const sys = await import(`./systems/${system}.mjs`);

let st;
function begin(phase, n) {
  st = { phase, n, count: 0, dups: 0, stray: 0, first: null, last: null,
    seen: new Uint8Array(n), starts: new Float64Array(n).fill(NaN), ends: new Float64Array(n).fill(NaN) };
}
begin(phase0, Number(n0));

function onJob(p) {
  const t = nowMs();
  if (p == null || p.p !== st.phase || !(p.s >= 0 && p.s < st.n)) {
    st.stray++;
    return;
  }
  if (st.seen[p.s]) st.dups++;
  else {
    st.seen[p.s] = 1;
    st.starts[p.s] = t;
  }
  st.count++;
  if (st.first === null) st.first = t;
  st.last = t;
  if (holdMs > 0) {
    const mine = st;
    return sleep(holdMs).then(() => { mine.ends[p.s] = nowMs(); });
  }
  return undefined;
}

let reported = -1;
const tick = setInterval(() => {
  if (st.count !== reported) {
    reported = st.count;
    process.send({ ev: 'progress', phase: st.phase, count: st.count });
  }
}, 25);

process.on('message', async (m) => {
  if (m.cmd === 'phase') {
    begin(m.phase, m.n);
    reported = -1;
    process.send({ ev: 'phase', phase: m.phase });
  } else if (m.cmd === 'report') {
    process.send({ ev: 'report', phase: st.phase, count: st.count, dups: st.dups, stray: st.stray,
      first: st.first, last: st.last, seen: u8ToB64(st.seen),
      starts: m.starts ? f64ToB64(st.starts) : null, ends: m.starts && holdMs > 0 ? f64ToB64(st.ends) : null });
  } else if (m.cmd === 'stop') {
    clearInterval(tick);
    try {
      await running.stop();
    } catch (e) {
      process.send({ ev: 'error', message: `stop: ${e.message}` });
    }
    process.send({ ev: 'stopped', rss_kb: peakRssKb() }, () => process.exit(0));
  }
});
process.on('disconnect', () => process.exit(1));
// A system that fails inside its own loop (an error no handler of ours sees) ends the process:
// the parent is told why first, so that the row says it.
for (const ev of ['uncaughtException', 'unhandledRejection']) {
  process.on(ev, (e) => {
    process.send({ ev: 'error', message: `${system} failed: ${e?.message ?? e}${e?.code ? ` (${e.code})` : ''}` },
      () => process.exit(1));
  });
}

let running;
try {
  // The drain is timed from here: the worker's own start-up (connections, schema checks) counts,
  // as it does for pgcoord's bench_queue.
  const t0 = nowMs();
  running = await sys.worker(process.env.PEERS_DSN, setting, concurrency, onJob);
  process.send({ ev: 'ready', t0 });
} catch (e) {
  process.send({ ev: 'error', message: `${system} worker did not start: ${e.message}` }, () => process.exit(1));
}
