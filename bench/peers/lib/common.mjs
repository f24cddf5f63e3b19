// common.mjs - what every process of the peers benchmark shares: the clock, peak RSS, the
// job payload, and small helpers for the parent/child message protocol.
import { readFileSync } from 'node:fs';

// Milliseconds on CLOCK_MONOTONIC (libuv's hrtime). Every process on the machine reads the same
// clock, so an enqueue commit time taken in a producer and a handler start time taken in a worker
// can be subtracted. The C benchmark's bench_now() reads the same clock.
export function nowMs() {
  return Number(process.hrtime.bigint()) / 1e6;
}

// Peak resident set size of a process in kB (VmHWM), or null when /proc does not have it.
export function peakRssKb(pid = 'self') {
  try {
    const m = /^VmHWM:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

// The key number of job seq of a keyed phase of n jobs over keys keys: spread (seq mod keys)
// or grouped (each key's jobs together). The producer and the overlap count both read it here.
export function keyOf(seq, keys, n, layout) {
  return layout === 'grouped' ? Math.floor((seq * keys) / n) : seq % keys;
}

// Every job carries the phase it belongs to and its sequence number within the phase.
export function payload(phase, seq) {
  return { p: phase, s: seq };
}

export function f64ToB64(arr) {
  return Buffer.from(arr.buffer, arr.byteOffset, arr.byteLength).toString('base64');
}

export function b64ToF64(s) {
  const b = Buffer.from(s, 'base64');
  const out = new Float64Array(b.length / 8);
  Buffer.from(out.buffer).set(b);
  return out;
}

export function u8ToB64(arr) {
  return Buffer.from(arr.buffer, arr.byteOffset, arr.byteLength).toString('base64');
}

export function b64ToU8(s) {
  return new Uint8Array(Buffer.from(s, 'base64'));
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Splits n sequence numbers into k contiguous ranges [from, to).
export function split(n, k) {
  const out = [];
  let from = 0;
  for (let i = 0; i < k; i++) {
    const size = Math.floor(n / k) + (i < n % k ? 1 : 0);
    out.push([from, from + size]);
    from += size;
  }
  return out;
}

// Splits a total concurrency over processes: 16 over 2 -> [8, 8]; 5 over 2 -> [3, 2].
export function spread(total, procs) {
  return split(total, procs).map(([a, b]) => b - a).filter((x) => x > 0);
}

// Nearest-rank percentile of a sorted array.
export function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1];
}
