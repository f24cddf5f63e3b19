// producer.mjs - one producer process of the peers benchmark.
//
//   node producer.mjs SYSTEM MODE FROM TO BATCH [RATE|KEYS [LAYOUT]]  (the DSN is in $PEERS_DSN)
//
// MODE bulk: enqueue jobs FROM..TO-1 of phase "drain" in batches of BATCH, one call per batch.
// MODE keyed: the same for phase "keyed", each job carrying a key (k in its payload), which the
// system turns into its own way of running one job of a key at a time. LAYOUT spread: job s has
// key "tenant-(s mod KEYS)"; grouped: each key's jobs are enqueued together, key
// "tenant-floor(s x KEYS / TO)".
// MODE e2e: the same for phase "e2e" (workers are running meanwhile).
// MODE lat: enqueue jobs FROM..TO-1 of phase "lat" one at a time at RATE jobs/s on a fixed
// schedule (a slow call does not delay the next one), and record each job's commit time (the
// moment the enqueue call returned) and send time (the moment it was called), on the clock the
// workers use for their handler starts.
// The process connects, says {ev:'ready'}, waits for {cmd:'go'}, works, and sends {ev:'done'}.
import { nowMs, payload, sleep, f64ToB64, keyOf } from './common.mjs';

const [system, mode, fromArg, toArg, batchArg, rateArg, layout] = process.argv.slice(2);
const from = Number(fromArg), to = Number(toArg), batch = Number(batchArg), rate = Number(rateArg || 0);
const keys = mode === 'keyed' ? rate : 0;
const sys = await import(`./systems/${system}.mjs`);

// Reports the error and exits once the message is out; nothing after it runs.
function fail(message) {
  process.send({ ev: 'error', message }, () => process.exit(1));
  return new Promise(() => {});
}

let p;
try {
  p = await sys.producer(process.env.PEERS_DSN);
} catch (e) {
  await fail(`${system} producer did not connect: ${e.message}`);
}
process.send({ ev: 'ready' });
await new Promise((resolve) => process.once('message', resolve));

try {
  const t0 = nowMs();
  let commits = null;
  let sends = null;
  let behind = 0;
  if (mode === 'lat') {
    commits = new Float64Array(to - from).fill(NaN);
    sends = new Float64Array(to - from).fill(NaN);
    const pending = [];
    for (let s = from; s < to; s++) {
      const due = t0 + ((s - from) * 1000) / rate;
      const wait = due - nowMs();
      if (wait > 1) await sleep(wait);
      else if (wait < -50) behind++;
      sends[s - from] = nowMs();
      pending.push(p.addOne(payload('lat', s)).then(() => { commits[s - from] = nowMs(); }));
    }
    await Promise.all(pending);
  } else {
    const phase = { bulk: 'drain', keyed: 'keyed' }[mode] ?? 'e2e';
    for (let s = from; s < to; s += batch) {
      const list = [];
      for (let i = s; i < Math.min(to, s + batch); i++) {
        const job = payload(phase, i);
        list.push(keys ? { ...job, k: `tenant-${keyOf(i, keys, to, layout)}` } : job);
      }
      await p.add(list);
    }
  }
  const t1 = nowMs();
  await p.close();
  process.send({ ev: 'done', t0, t1, behind, commits: commits ? f64ToB64(commits) : null,
    sends: sends ? f64ToB64(sends) : null },
    () => process.exit(0));
} catch (e) {
  await fail(`${system} producer (${mode}): ${e.message}`);
}
