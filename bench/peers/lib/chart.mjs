// chart.mjs - draws the peers benchmark as a PNG with gnuplot: throughput bars (enqueue, drain,
// end to end) and p99 wake-up latency per system and setting, both on log scales.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { tmpdir } from 'node:os';

const q = (s) => `"${String(s).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

export async function chart(rows, opt, machine, png) {
  const shown = rows.filter((r) => !r.refused);
  const refused = rows.filter((r) => r.refused);
  if (shown.length === 0) return 'chart: nothing to draw (no system finished)';
  const num = (x) => (typeof x === 'number' && x > 0 ? x.toPrecision(6) : 'NaN');
  const data = shown.map((r) => [q(`${r.system}\\n${r.setting === '-' ? '' : r.setting}`),
    num(r.enqueue_per_s), num(r.drain_per_s), num(r.e2e_per_s), num(r.p99_ms)].join(' ')).join('\n');
  const file = join(tmpdir(), `pgc-peers-chart-${process.pid}.dat`);
  writeFileSync(file, data + '\n');
  const title = `${opt.jobs.toLocaleString('en-US')} no-op jobs, concurrency ${opt.concurrency}, ` +
    `PostgreSQL ${machine.postgres.split(' ')[0]} on the same host, ${machine.machine.split(',')[0]}`;
  const foot = refused.length
    ? 'not shown (did not finish): ' + refused.map((r) => `${r.system} ${r.setting}`).join(', ')
    : '';
  const script = `
set terminal pngcairo size 1400,560 font "DejaVu Sans,10"
set output ${q(png)}
set multiplot layout 1,2 title ${q(title + '\\n' + machine.date.slice(0, 10) + (foot ? ' - ' + foot : ''))}
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set grid ytics mytics
set key top right
set xtics nomirror font ",9"
set format y "%.0s%c"
set ylabel "jobs per second (log scale)"
set title "throughput (higher is better)"
plot ${q(file)} using 2:xtic(1) title "enqueue" lc rgb "#4c72b0", \\
     '' using 3 title "drain" lc rgb "#55a868", \\
     '' using 4 title "end to end" lc rgb "#c44e52"
set title "wake-up latency p99, enqueue commit to handler start, ${opt.rate} jobs/s (lower is better)"
set ylabel "milliseconds (log scale)"
set format y "%g"
set key off
plot ${q(file)} using 5:xtic(1) title "p99" lc rgb "#8172b2"
unset multiplot
`;
  mkdirSync(dirname(png), { recursive: true });
  const res = await new Promise((resolve) => {
    const p = spawn('gnuplot', [], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (b) => { err += b; });
    p.on('error', (e) => resolve({ code: 127, err: e.message }));
    p.on('exit', (code) => resolve({ code, err }));
    p.stdin.end(script);
  });
  rmSync(file, { force: true });
  if (res.code === 127) return 'chart: skipped, gnuplot is not installed (Debian package gnuplot-nox)';
  if (res.code !== 0) return `chart: gnuplot failed: ${res.err.trim().split('\n').pop()}`;
  return `chart: ${png}`;
}
