// chart.mjs - draws the peers benchmark as a PNG with gnuplot: throughput bars (enqueue, drain,
// end to end) and p99 wake-up latency per system and setting, both on log scales.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { tmpdir } from 'node:os';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// A gnuplot double-quoted string (in which \n is a line break).
const q = (s) => `"${String(s).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;

export async function chart(rows, png) {
  const r0 = rows[0] ?? {};
  const opt = { jobs: r0.jobs ?? 0, concurrency: r0.concurrency ?? 0, rate: r0.latency_rate ?? 0 };
  const machine = { machine: r0.machine ?? '', postgres: r0.postgres ?? '', date: r0.date ?? '' };
  const shown = rows.filter((r) => !r.refused);
  const refused = rows.filter((r) => r.refused);
  if (shown.length === 0) return 'chart: nothing to draw (no system finished)';
  const num = (x) => (typeof x === 'number' && x > 0 ? x.toPrecision(6) : 'NaN');
  const label = (r) => q(r.system) + ' ' + q(r.setting === '-' ? '' : r.setting);
  const tput = shown.map((r) => [label(r), num(r.enqueue_per_s), num(r.drain_per_s), num(r.e2e_per_s)].join(' '));
  const lat = shown.filter((r) => typeof r.p99_ms === 'number').map((r) => [label(r), num(Math.max(r.p99_ms, 0.01))].join(' '));
  const file = join(tmpdir(), `pgc-peers-chart-${process.pid}.dat`);
  const file2 = join(tmpdir(), `pgc-peers-chart-${process.pid}-lat.dat`);
  writeFileSync(file, tput.join('\n') + '\n');
  writeFileSync(file2, (lat.length ? lat.join('\n') : '"none" "" NaN') + '\n');
  // Log-scale ranges from a power of ten below the smallest bar to well above the tallest, so
  // that the value labels fit.
  const range = (vals) => {
    const v = vals.filter((x) => typeof x === 'number' && x > 0);
    if (v.length === 0) return '[*:*]';
    const lo = 10 ** Math.floor(Math.log10(Math.min(...v)));
    return `[${lo}:${Math.max(...v) * 2.5}]`;
  };
  const yT = range(shown.flatMap((r) => [r.enqueue_per_s, r.drain_per_s, r.e2e_per_s]));
  const yL = range(shown.map((r) => (typeof r.p99_ms === 'number' ? Math.max(r.p99_ms, 0.01) : null)));
  const title = `${opt.jobs.toLocaleString('en-US')} no-op jobs, concurrency ${opt.concurrency}, ` +
    `PostgreSQL ${machine.postgres.split(' ')[0]} on the same host, ${machine.machine.split(',')[0]}`;
  const missing = [];
  if (!rows.some((r) => r.system === 'pgcoord')) missing.push('pgcoord not in this run');
  if (refused.length) missing.push('did not finish: ' + refused.map((r) => `${r.system} ${r.setting}`).join(', '));
  const foot = missing.join('; ');
  const script = `
set terminal pngcairo size 1400,560 font "DejaVu Sans,10"
set output ${q(png)}
set multiplot layout 1,2 title ${q(title + '\n' + machine.date.slice(0, 10) + (foot ? '; ' + foot : ''))}
tic(x) = sprintf("%s\\n%s", strcol(1), strcol(2))
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set bmargin 4
set logscale y
set grid ytics mytics
set key below horizontal
set xtics nomirror font ",9"
set format y "%.0s%c"
set ylabel "jobs per second (log scale)"
set title "throughput (higher is better)"
set yrange ${yT}
kfmt(v) = v >= 10000 ? sprintf("%.0fk", v / 1000) : v >= 1000 ? sprintf("%.1fk", v / 1000) : sprintf("%.0f", v)
plot ${q(file)} using 3:xtic(tic(0)) title "enqueue" lc rgb "#4c72b0", \\
     '' using 4 title "drain" lc rgb "#55a868", \\
     '' using 5 title "end to end" lc rgb "#c44e52", \\
     '' using ($0 - 0.25):3:(kfmt($3)) with labels offset 0,0.7 font ",8" notitle, \\
     '' using ($0):4:(kfmt($4)) with labels offset 0,0.7 font ",8" notitle, \\
     '' using ($0 + 0.25):5:(kfmt($5)) with labels offset 0,0.7 font ",8" notitle
set title "wake-up latency p99, enqueue commit to handler start, ${opt.rate} jobs/s (lower is better)"
set ylabel "milliseconds (log scale)"
set yrange ${yL}
set format y "%g"
set key off
plot ${q(file2)} using 3:xtic(tic(0)) title "p99" lc rgb "#8172b2", \\
     '' using ($0):3:(sprintf("%.1f ms", $3)) with labels offset 0,0.7 font ",8" notitle
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
  rmSync(file2, { force: true });
  if (res.code === 127) return 'chart: skipped, gnuplot is not installed (Debian package gnuplot-nox)';
  if (res.code !== 0) return `chart: gnuplot failed: ${res.err.trim().split('\n').pop()}`;
  return `chart: ${png}`;
}

// node chart.mjs RESULTS.json OUT.png: redraws the chart of a saved run.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.length !== 4) {
    process.stderr.write('usage: node bench/peers/lib/chart.mjs RESULTS.json OUT.png\n');
    process.exit(64);
  }
  const msg = await chart(JSON.parse(readFileSync(process.argv[2], 'utf8')), process.argv[3]);
  process.stderr.write(msg + '\n');
  process.exit(msg.startsWith('chart: /') || msg.startsWith(`chart: ${process.argv[3]}`) ? 0 : 1);
}
