/* pgcoord web: the dashboard, plain JavaScript, no framework, no build step.
 *
 * Rule: every string that comes from the server is put into the page as text (createTextNode,
 * textContent) or as the value of a safe attribute (setAttribute on class, title, value, ...);
 * never through innerHTML. Links built from data always start with "#" (this page's own
 * routes), so a value such as "javascript:..." can never become a link that runs. */
'use strict';

const state = {
  config: null,
  token: sessionStorage.getItem('pgcoord-token') || '',
  history: new Map(), /* queue -> [{t, pending, running, done}] over the last hour */
  timer: null,
  jobsCursor: [],     /* cursors of the pages before this one, for "previous" */
};

/* ---- building the page safely ---- */

const SAFE_ATTRS = new Set(['class', 'title', 'type', 'value', 'placeholder', 'name', 'for', 'id',
  'autocomplete', 'min', 'max', 'size', 'colspan', 'selected', 'role', 'aria-label']);

function h(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'on') {
      for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    } else if (k === 'href') {
      e.setAttribute('href', route(v));
    } else if (SAFE_ATTRS.has(k)) {
      e.setAttribute(k, v === true ? '' : String(v));
    } else {
      throw new Error('attribute not allowed: ' + k);
    }
  }
  add(e, children);
  return e;
}

function add(e, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/* A link inside the dashboard: "#page?param=value", values encoded. */
function route(v) {
  const s = String(v);
  return s.startsWith('#') ? s : '#';
}

function link(page, params, ...children) {
  const q = new URLSearchParams(params || {}).toString();
  return h('a', { href: '#' + page + (q ? '?' + q : '') }, ...children);
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

/* A line chart of one or two series (numbers only) over the kept hour. */
function spark(points, key, key2) {
  const w = 140, hgt = 30;
  const s = svg('svg', { class: 'spark', width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}` });
  s.appendChild(svg('line', { x1: 0, y1: hgt - 1, x2: w, y2: hgt - 1 }));
  if (points.length < 2) return s;
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  let max = 1;
  for (const p of points) max = Math.max(max, p[key] || 0, key2 ? p[key2] || 0 : 0);
  const line = (k, cls) => {
    const pts = points.map(p => {
      const x = t1 > t0 ? ((p.t - t0) / (t1 - t0)) * (w - 2) + 1 : 1;
      const y = hgt - 2 - ((p[k] || 0) / max) * (hgt - 4);
      return x.toFixed(1) + ',' + y.toFixed(1);
    }).join(' ');
    s.appendChild(svg('polyline', { points: pts, class: cls }));
  };
  line(key, 'pending');
  if (key2) line(key2, 'done');
  const t = document.createElementNS(SVG, 'title');
  t.textContent = `last ${Math.round((t1 - t0) / 60000)} min, max ${max}`;
  s.appendChild(t);
  return s;
}

function fmtDur(s) {
  if (s === null || s === undefined || s < 0) return '-';
  if (s < 1) return Math.round(s * 1000) + 'ms';
  if (s < 60) return s.toFixed(1) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
  return Math.floor(s / 86400) + 'd' + String(Math.floor((s % 86400) / 3600)).padStart(2, '0') + 'h';
}

function fmtTime(iso) {
  if (!iso) return '-';
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function count(n) {
  const cap = state.config ? state.config.count_cap : 0;
  return cap && n >= cap ? '\u2265' + n : String(n);
}

function plural(n, what) { return n + ' ' + what + (n === 1 ? '' : 's'); }

function badge(text, cls) { return h('span', { class: 'badge ' + (cls || '') }, text); }

function table(headers, rows, empty) {
  const head = h('tr', {}, headers.map(x => h('th', { class: x.endsWith('#') ? 'num' : null }, x.replace(/#$/, ''))));
  const body = rows.length ? rows : [h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, empty || 'none'))];
  return h('table', {}, h('thead', {}, head), h('tbody', {}, body));
}

/* Replaces what el holds with parts (arrays flattened, null and false left out). */
function put(el, ...parts) {
  el.replaceChildren();
  add(el, parts);
}

function td(v, cls) { return h('td', { class: cls || null }, v); }

/* ---- the API ---- */

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || ('HTTP ' + status));
    this.status = status;
    this.needs = body && body.error && body.error.needs;
  }
}

async function api(path, method) {
  const headers = {};
  if (state.token) headers.Authorization = 'Bearer ' + state.token;
  const r = await fetch(path, { method: method || 'GET', headers, credentials: 'omit', cache: 'no-store' });
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (r.status === 401) showAuth();
  if (!r.ok) throw new ApiError(r.status, body);
  return body;
}

function showAuth() {
  const f = document.getElementById('auth');
  f.hidden = false;
}

/* What a panel shows when its call failed: the grant it needs, or the error. */
function failure(e) {
  if (e.needs) return h('div', { class: 'needs' }, 'This panel needs more privileges: ', h('span', { class: 'mono' }, e.needs));
  return h('div', { class: 'msg bad' }, 'Could not load: ', e.message);
}

async function section(title, fn) {
  const box = h('div', {}, title ? h('h3', {}, title) : null);
  try {
    add(box, [await fn()]);
  } catch (e) {
    add(box, [failure(e)]);
  }
  return box;
}

function status(text, bad) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = 'status' + (bad ? ' bad' : '');
}

/* An action: POST, then a message and a refresh. */
async function act(path, what, out) {
  try {
    const r = await api(path, 'POST');
    if (out) out.replaceChildren(h('div', { class: 'msg' }, what + ': ' + (r.message || 'done')));
    tick();
    return r;
  } catch (e) {
    if (out) out.replaceChildren(h('div', { class: 'msg bad' }, what + ': ' + e.message));
    return null;
  }
}

function enc(s) { return encodeURIComponent(s); }

/* ---- data kept across polls ---- */

function remember(queues) {
  const now = Date.now();
  const seen = new Set();
  for (const q of queues) {
    seen.add(q.queue);
    let a = state.history.get(q.queue);
    if (!a) { a = []; state.history.set(q.queue, a); }
    a.push({ t: now, pending: q.pending, running: q.running, done: q.completed_1m });
    while (a.length && now - a[0].t > 3600000) a.shift();
  }
  for (const k of [...state.history.keys()]) if (!seen.has(k)) state.history.delete(k);
}

/* ---- pages ---- */

async function pageOverview(main) {
  const [queues, workers, blockers, schedules, doctor] = await Promise.allSettled([
    api('/api/queues'), api('/api/workers'), api('/api/blockers'), api('/api/schedules'), api('/api/doctor')]);
  /* Each problem has a rank: what cannot be seen first (no token, no database), then a
   * blocked pile-up, jobs that failed for good, overdue schedules, stale queues, the doctor's
   * errors, then the warnings. "No problems seen" only when every source answered. */
  const problems = [];
  const problem = (rank, sev, parts) => problems.push([rank, sev, parts]);
  const calls = { queues, workers, blockers, schedules, doctor };
  const failed = Object.entries(calls).filter(([, r]) => r.status === 'rejected');
  const denied = failed.find(([, r]) => r.reason && r.reason.status === 401);
  const down = failed.find(([, r]) => r.reason && (r.reason.status === 503 || !(r.reason instanceof ApiError)));
  if (denied) problem(0, 'error', ['token needed: this dashboard asks for its token before it shows anything (',
    h('a', { href: '#overview', on: { click: (ev) => { ev.preventDefault(); showAuth(); } } }, 'enter it'), ')']);
  else if (down) problem(0, 'error', [down[1].reason instanceof ApiError ? 'cannot reach the database: ' : 'cannot reach pgcoord web: ',
    down[1].reason.message]);
  for (const [name, r] of failed)
    if (!denied && !down && !(r.reason && r.reason.needs))
      problem(1, 'error', ['could not load ' + name + ': ' + r.reason.message]);
  if (blockers.status === 'fulfilled') {
    const b = blockers.value;
    for (const pid of b.roots) {
      const s = b.sessions.find(x => x.pid === pid);
      problem(2, 'error', [link('blockers', {}, 'pid ' + pid), ' blocks ' + (s ? plural(s.blocks_total, 'session') : '? sessions') + (s && s.application ? ' (' + s.application + ')' : '')]);
    }
  }
  if (queues.status === 'fulfilled') {
    remember(queues.value.queues);
    for (const q of queues.value.queues) {
      if (q.failed_1m > 0) problem(3, 'error', [link('jobs', { queue: q.queue, status: 'failed' }, 'queue ' + q.queue), ': ' + plural(q.failed_1m, 'job') + ' failed for good in the last minute']);
      if (q.oldest_pending_s > 300) problem(5, 'error', [link('jobs', { queue: q.queue, status: 'pending' }, 'queue ' + q.queue), ': its oldest runnable job has waited ' + fmtDur(q.oldest_pending_s)]);
      else if (q.oldest_pending_s > 60) problem(8, 'warning', [link('jobs', { queue: q.queue, status: 'pending' }, 'queue ' + q.queue), ': oldest runnable job waited ' + fmtDur(q.oldest_pending_s)]);
      if (q.paused && q.pending > 0) problem(7, 'warning', [link('jobs', { queue: q.queue, status: 'pending' }, 'queue ' + q.queue), ' is paused with ' + count(q.pending) + ' runnable jobs']);
    }
  }
  if (schedules.status === 'fulfilled') {
    for (const s of schedules.value.schedules) {
      if (s.overdue_s > 60) problem(4, 'error', [link('schedules', {}, 'schedule ' + s.name), ' is ' + fmtDur(s.overdue_s) + ' overdue: is a scheduler running?']);
      else if (s.missed > 0) problem(9, 'warning', [link('schedules', {}, 'schedule ' + s.name), ' missed ' + s.missed + ' ticks']);
    }
  }
  if (doctor.status === 'fulfilled') {
    for (const f of doctor.value.findings)
      if (f.severity === 'error' || f.severity === 'warning') problem(f.severity === 'error' ? 6 : 10, f.severity, [link('doctor', {}, 'doctor'), ': ' + f.message]);
  }
  problems.sort((a, b) => a[0] - b[0]);
  const list = h('ul', { class: 'problems' }, problems.length
    ? problems.map(([, sev, parts]) => h('li', { class: sev }, parts))
    : failed.length
      ? h('li', { class: 'warning' }, 'Some panels could not be loaded: ' + failed.map(([n]) => n).join(', '))
      : h('li', { class: 'none' }, 'No problems seen.'));

  const parts = [h('h2', {}, 'Overview'), h('h3', {}, 'Problems first'), list];
  if (queues.status === 'fulfilled') {
    const qs = queues.value.queues;
    const tot = k => qs.reduce((n, q) => n + q[k], 0);
    const alive = workers.status === 'fulfilled' ? workers.value.workers.filter(w => w.alive).length : '?';
    parts.push(h('div', { class: 'grid' },
      stat('runnable', count(tot('pending'))), stat('running', count(tot('running'))),
      stat('scheduled', count(tot('scheduled'))), stat('done / min', tot('completed_1m')),
      stat('failed / min', tot('failed_1m')), stat('workers alive', alive)));
    parts.push(h('h3', {}, 'Queues'));
    parts.push(table(['queue', 'state', 'runnable#', 'running#', 'scheduled#', 'waiting#', 'failed#', 'done/min#', 'failed/min#', 'oldest runnable#', 'last hour: runnable, done/min'],
      qs.map(q => h('tr', {},
        td(link('jobs', { queue: q.queue }, q.queue), 'wrap'),
        td(q.paused ? badge('paused', 'warning') : badge('active', 'ok')),
        td(count(q.pending), 'num'), td(count(q.running), 'num'), td(count(q.scheduled), 'num'),
        td(link('jobs', { queue: q.queue, status: 'waiting' }, count(q.waiting || 0)), 'num'), td(count(q.failed), 'num'), td(q.completed_1m, 'num'), td(q.failed_1m, 'num'),
        td(fmtDur(q.oldest_pending_s), 'num'),
        td(spark(state.history.get(q.queue) || [], 'pending', 'done'))
      )), 'No queues yet.'));
  } else {
    parts.push(failure(queues.reason));
  }
  if (workers.status === 'fulfilled') {
    parts.push(h('h3', {}, 'Workers'));
    parts.push(table(['channel', 'queues', 'free slots#', 'seen#'],
      workers.value.workers.map(w => h('tr', {}, td(w.channel, 'mono'), td(w.queues, 'wrap'), td(w.free, 'num'),
        td(fmtDur(w.seen_s) + ' ago', 'num'))), 'No listening worker is registered.'));
  }
  put(main, ...parts);
}

function stat(k, v) { return h('div', { class: 'stat' }, h('div', { class: 'v' }, v), h('div', { class: 'k' }, k)); }

function jobRow(j) {
  return h('tr', {},
    td(link('job', { id: j.id }, String(j.id)), 'num'),
    td(j.queue, 'wrap'), td(badge(j.status, j.status === 'failed' ? 'error' : j.status === 'succeeded' ? 'ok' : j.status === 'running' ? 'info' : '')),
    td(j.attempts + '/' + j.max_attempts, 'num'), td(fmtTime(j.run_at)), td(j.key || '', 'mono wrap'),
    td(j.unique_key || '', 'mono wrap'),
    td(j.error_line || '', 'wrap error-text'),
    td(j.payload_hidden ? h('span', { class: 'muted' }, j.payload_bytes + ' bytes, hidden') : (j.payload_preview || ''), 'mono wrap'));
}

async function pageJobs(main, params) {
  const f = {};
  for (const k of ['queue', 'status', 'key', 'key_prefix', 'q', 'after']) if (params.get(k)) f[k] = params.get(k);
  let form = main.querySelector('form.filters');
  if (!form || main.dataset.page !== 'jobs') {
    const inp = (name, ph) => h('label', {}, name, h('input', { name, value: f[name] || '', placeholder: ph, size: 16 }));
    const sel = h('select', { name: 'status' }, ['', 'pending', 'scheduled', 'waiting', 'running', 'succeeded', 'failed', 'cancelled']
      .map(s => h('option', { value: s, selected: (f.status || '') === s }, s || 'any')));
    form = h('form', { class: 'filters', on: { submit: ev => {
      ev.preventDefault();
      const p = {};
      for (const el of form.elements) if (el.name && el.value) p[el.name] = el.value;
      state.jobsCursor = [];
      location.hash = '#jobs?' + new URLSearchParams(p).toString();
    } } }, inp('queue', 'any queue'), h('label', {}, 'status', sel), inp('key', 'concurrency key'), inp('key_prefix', 'unique key prefix'),
    inp('q', state.config && state.config.hide_payloads ? 'text in errors' : 'text in payload or error'),
    h('button', { type: 'submit', class: 'primary' }, 'Filter'));
    const results = h('div', { class: 'results' });
    const bulk = h('div', { class: 'bulk' });
    put(main, h('h2', {}, 'Jobs'), form, results, bulk);
    main.dataset.page = 'jobs';
    if (state.config && state.config.actions) renderBulk(bulk, f);
  }
  const results = main.querySelector('.results');
  const q = new URLSearchParams(f);
  q.set('limit', '50');
  try {
    const r = await api('/api/jobs?' + q.toString());
    const nav = h('div', { class: 'actions' },
      f.after ? h('button', { on: { click: () => { const p = Object.assign({}, f); const prev = state.jobsCursor.pop(); if (prev) p.after = prev; else delete p.after; location.hash = '#jobs?' + new URLSearchParams(p); } } }, 'Previous page') : null,
      r.next ? h('button', { on: { click: () => { state.jobsCursor.push(f.after || ''); const p = Object.assign({}, f, { after: r.next }); location.hash = '#jobs?' + new URLSearchParams(p); } } }, 'Next page') : null,
      h('span', { class: 'note' }, r.jobs.length + ' jobs on this page' + (r.next ? '' : ', the last one') +
        ' (newest first; each page looks at most 10000 jobs, so a narrow filter may show short pages)'));
    results.replaceChildren(table(['id#', 'queue', 'status', 'attempts#', 'run at', 'key', 'unique key', 'last error', 'payload'],
      r.jobs.map(jobRow), 'No job matches on this page.'), nav);
    if (f.queue) results.appendChild(await keysOf(f.queue));
  } catch (e) {
    results.replaceChildren(failure(e));
  }
}

/* The concurrency keys of a queue, with what holds their jobs back; nothing when it has none. */
async function keysOf(queue) {
  const r = await api('/api/keys?queue=' + enc(queue));
  if (!r.keys.length) return h('div', {});
  const rate = x => x ? x.n + ' per ' + x.per_ms + ' ms' : '-';
  return h('div', { class: 'keys' }, h('h3', {}, 'Keys of ' + queue + (r.total > r.keys.length ? ` (first ${r.keys.length} of ${r.total})` : '')),
    table(['key', 'limit#', 'rate', 'weight#', 'running#', 'pending#', 'scheduled#', 'held by limit#', 'held by rate#', 'oldest pending'],
      r.keys.map(k => h('tr', {}, td(link('jobs', { queue: queue, key: k.key }, k.key), 'mono wrap'),
        td(k.limit === null ? '-' : String(k.limit), 'num'), td(rate(k.rate)), td(String(k.weight), 'num'),
        td(String(k.running), 'num'), td(String(k.pending), 'num'), td(String(k.scheduled), 'num'),
        td(String(k.held_by_limit), 'num'), td(String(k.held_by_rate), 'num'), td(fmtDur(k.oldest_pending_s), 'num'))), ''));
}

function renderBulk(box, f) {
  /* A bulk action matches on queue, status and unique-key prefix only: with other filters it
   * would reach jobs this page does not show. */
  if (f.key || f.q) {
    box.replaceChildren(h('h3', {}, 'Bulk action'), h('div', { class: 'note' },
      'Bulk actions match on queue, status and unique key prefix only: clear the concurrency key and text filters to use them.'));
    return;
  }
  const out = h('div', {});
  const op = h('select', { name: 'op' }, h('option', { value: 'cancel' }, 'cancel pending/scheduled'),
    h('option', { value: 'retry' }, 'retry failed/cancelled'), h('option', { value: 'purge' }, 'purge finished'));
  const args = () => {
    const p = new URLSearchParams({ op: op.value });
    for (const k of ['queue', 'status', 'key_prefix']) if (f[k]) p.set(k, f[k]);
    return p;
  };
  const countBtn = h('button', { on: { click: async () => {
    const p = args();
    p.set('dry_run', '1');
    const r = await act('/api/jobs/bulk?' + p, 'count', out);
    if (!r) return;
    const typed = h('input', { size: 8, placeholder: String(r.count), 'aria-label': 'type the count to confirm' });
    out.replaceChildren(h('div', { class: 'msg' }, r.count + ' jobs match. Type ' + r.count + ' to ' + op.value + ' them: ',
      typed, ' ', h('button', { class: 'danger', on: { click: () => {
        if (typed.value.trim() !== String(r.count)) { out.appendChild(h('div', { class: 'msg bad' }, 'not confirmed')); return; }
        const q = args();
        q.set('confirm', String(r.count));
        q.set('upto', String(r.upto));
        act('/api/jobs/bulk?' + q, op.value, out);
      } } }, 'Run')));
  } } }, 'Count matching jobs');
  box.replaceChildren(h('h3', {}, 'Bulk action on this filter (queue, status, unique key prefix)'), h('div', { class: 'actions' }, op, countBtn), out);
}

async function pageJob(main, params) {
  const id = params.get('id') || '';
  const r = await api('/api/jobs/' + enc(id));
  const j = r.job, w = j.wait;
  const out = h('div', {});
  const kv = [['queue', j.queue], ['status', j.status], ['priority', j.priority + (j.aged ? ' (aged)' : '')],
    ['attempts', j.attempts + ' of ' + j.max_attempts], ['deferrals', j.deferrals + ' of ' + j.max_deferrals],
    ['run at', fmtTime(j.run_at)], ['created', fmtTime(j.created_at)], ['started', fmtTime(j.started_at)],
    ['finished', fmtTime(j.finished_at)], ['lease until', fmtTime(j.lease_until)], ['worker', j.worker || '-'],
    ['concurrency key', j.key || '-'], ['unique key', j.unique_key || '-'],
    ['exit status', j.exit_status === null || j.exit_status === undefined ? '-' : String(j.exit_status)],
    ['duration', j.duration_ms === null || j.duration_ms === undefined ? '-' : fmtDur(j.duration_ms / 1000)]];
  if (w.reason) kv.unshift(['why waiting', w.reason]);
  const acts = [];
  if (state.config && state.config.actions) {
    if (j.status === 'failed' || j.status === 'cancelled') acts.push(h('button', { on: { click: () => act('/api/jobs/' + enc(j.id) + '/retry', 'retry', out) } }, 'Retry'));
    if (['pending', 'scheduled', 'waiting', 'running'].includes(j.status)) acts.push(h('button', { class: 'danger', on: { click: () => act('/api/jobs/' + enc(j.id) + '/cancel', 'cancel', out) } }, 'Cancel'));
  }
  put(main, h('h2', {}, 'Job ' + j.id), h('div', { class: 'actions' }, acts), out,
    h('div', { class: 'card' }, h('dl', { class: 'kv' }, kv.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))),
    h('h3', {}, 'Last error'), h('pre', {}, j.last_error || '(none)'),
    h('h3', {}, 'Output (the end of its standard error)'), h('pre', {}, j.output || '(none)'),
    h('h3', {}, 'Error history'), table(['attempt#', 'error'], (j.errors || []).map(e => h('tr', {}, td(e.attempt, 'num'), td(e.error, 'wrap'))), 'no errors'),
    h('h3', {}, 'Payload'), j.payload_hidden ? h('p', { class: 'muted' }, j.payload_bytes + ' bytes, hidden (--hide-payloads)') : h('pre', {}, JSON.stringify(j.payload, null, 2)));
}

async function pageSchedules(main) {
  const r = await api('/api/schedules');
  const out = h('div', {});
  const btn = (s, what, label) => h('button', { on: { click: () => act('/api/schedules/' + enc(s.name) + '/' + what, label + ' ' + s.name, out) } }, label);
  put(main, h('h2', {}, 'Schedules'), out,
    table(['name', 'schedule', 'zone', 'queue', 'state', 'next tick', 'last tick', 'last outcome', 'last success', 'fired#', 'missed#', 'skipped#', 'overdue#', ''],
      r.schedules.map(s => h('tr', {}, td(s.name, 'wrap'), td(s.schedule, 'mono'), td(s.tz), td(s.queue, 'wrap'),
        td(s.paused ? badge('paused', 'warning') : badge('active', 'ok')), td(fmtTime(s.next_tick)), td(fmtTime(s.last_tick)),
        td(s.last_outcome || '-'), td(fmtTime(s.last_success)), td(s.fired, 'num'), td(s.missed, 'num'), td(s.skipped, 'num'),
        td(s.overdue_s > 0 ? fmtDur(s.overdue_s) : '-', 'num'),
        td(state.config && state.config.actions ? h('div', { class: 'actions' }, s.paused ? btn(s, 'resume', 'Resume') : btn(s, 'pause', 'Pause'), btn(s, 'trigger', 'Run now')) : ''))),
      'No schedules.'));
}

async function pageLeaders(main) {
  const leases = await section('Leases and leaders', async () => {
    const r = await api('/api/leases');
    return table(['name', 'holder', 'kind', 'token#', 'state', 'granted', 'renewed', 'expires in#'],
      r.leases.map(l => h('tr', {}, td(l.name, 'wrap'), td(l.holder, 'wrap'), td(l.kind), td(l.token, 'num'),
        td(l.held ? badge('held', 'ok') : badge('free')), td(fmtTime(l.granted_at)), td(fmtTime(l.renewed_at)),
        td(l.held ? fmtDur(Math.max(0, l.expires_in_ms) / 1000) : '-', 'num'))), 'No leases.');
  });
  const locks = await section('Advisory locks', async () => {
    const r = await api('/api/locks');
    return table(['key', 'name', 'mode', 'state', 'pid#', 'application', 'user', 'session state', 'transaction age#'],
      r.locks.map(l => h('tr', {}, td(l.key, 'mono'), td(l.name || '-', 'wrap'), td(l.mode),
        td(l.granted ? badge('held', 'ok') : badge('waiting ' + fmtDur(l.waited_s), 'warning')), td(l.pid, 'num'),
        td(l.application || '-', 'wrap'), td(l.user || '-'), td(l.state || '-'), td(fmtDur(l.xact_age_s), 'num'))), 'No advisory locks.');
  });
  put(main, h('h2', {}, 'Leaders and locks'), leases, locks);
}

function sessionNode(b, s, seen, out) {
  const confirmBox = h('span', { class: 'confirm' });
  const signal = (what) => {
    const typed = h('input', { size: 8, placeholder: String(s.pid), 'aria-label': 'type the pid to confirm' });
    confirmBox.replaceChildren('type the pid (' + s.pid + ') to ' + what + ': ', typed,
      h('button', { class: 'danger', on: { click: () => {
        if (typed.value.trim() !== String(s.pid)) { confirmBox.replaceChildren('not confirmed'); return; }
        act('/api/sessions/' + enc(s.pid) + '/' + what + '?backend_start=' + enc(s.backend_start || ''), what + ' pid ' + s.pid, out);
      } } }, 'Confirm'));
  };
  /* A session a second tree reaches again is a line, not a second card with its buttons. */
  if (seen.has(s.pid))
    return h('li', {}, h('div', { class: 'node' }, h('strong', {}, 'pid ' + s.pid), ' ', h('span', { class: 'muted' }, '(shown above)')));
  const acts = [];
  if (state.config && state.config.actions && s.known) {
    /* Idle in a transaction there is no query to cancel: only ending the session helps. */
    const idleTx = /^idle in transaction/.test(s.state || '');
    if (!idleTx) acts.push(h('button', { on: { click: () => signal('cancel') } }, 'Cancel query'));
    if (state.config.terminate) acts.push(h('button', { class: 'danger', on: { click: () => signal('terminate') } }, idleTx ? 'Terminate (ends its transaction)' : 'Terminate'));
    else if (idleTx) acts.push(h('span', { class: 'muted' }, 'idle in a transaction: only terminating the session ends it (pgcoord web --allow-terminate)'));
  }
  const q = s.query ? (s.query.length > 400 ? s.query.slice(0, 400) + '\u2026' : s.query) : '';
  const node = h('div', { class: 'node' + (s.root ? ' root' : '') },
    h('strong', {}, 'pid ' + s.pid), ' ',
    s.root ? badge('root blocker', 'error') : null, ' ',
    s.queued_ddl ? badge('queued DDL', 'warning') : null, ' ',
    s.cycle ? badge('deadlock cycle ' + s.cycle, 'error') : null, ' ',
    h('span', { class: 'muted' }, [s.state || '?', s.application || '-', s.user || '-',
      'session ' + fmtDur(s.backend_age_s), 'transaction ' + fmtDur(s.xact_age_s),
      s.wants ? 'waiting ' + fmtDur(s.waited_s) + ' for ' + (s.wants.target || s.wants.mode) : null,
      s.blocks_total ? 'blocks ' + s.blocks_total : null].filter(Boolean).join(' \u00b7 ')),
    q ? h('pre', { class: 'q' }, q) : null,
    acts.length ? h('div', { class: 'actions' }, acts, confirmBox) : null);
  const li = h('li', {}, node);
  seen.add(s.pid);
  const kids = (s.blocks || []).map(pid => b.sessions.find(x => x.pid === pid)).filter(Boolean);
  if (kids.length) li.appendChild(h('ul', {}, kids.map(k => sessionNode(b, k, seen, out))));
  return li;
}

async function pageBlockers(main) {
  const b = await api('/api/blockers');
  const out = h('div', {});
  const seen = new Set();
  const roots = b.roots.map(pid => b.sessions.find(x => x.pid === pid)).filter(Boolean);
  const rest = b.sessions.filter(s => !roots.includes(s) && (!s.blocked_by || s.blocked_by.length === 0) && s.blocks && s.blocks.length);
  const trees = [...roots, ...rest].map(s => sessionNode(b, s, seen, out));
  const loose = b.sessions.filter(s => !seen.has(s.pid));
  put(main, h('h2', {}, 'Blocking forest'), h('p', { class: 'note' }, b.summary || ''), out,
    trees.length ? h('ul', { class: 'tree' }, trees) : h('ul', { class: 'problems' }, h('li', { class: 'none' }, 'Nobody waits for a lock.')),
    loose.length ? [h('h3', {}, 'Waiting, blocker not in view'), h('ul', { class: 'tree' }, loose.map(s => sessionNode(b, s, seen, out)))] : null);
}

async function pageDoctor(main) {
  const r = await api('/api/doctor');
  put(main, h('h2', {}, 'Doctor'), h('p', { class: 'note' }, 'checked ' + fmtTime(r.checked_at) + ' (kept 30 s); worst: ' + r.worst),
    table(['check', 'severity', 'value', 'finding', 'fix'], r.findings.map(f => h('tr', {}, td(f.check, 'mono'),
      td(badge(f.severity, f.severity)), td(f.value || '', 'mono'), td(f.message, 'wrap'), td(f.fix || '', 'wrap')))));
}

const pages = { overview: pageOverview, jobs: pageJobs, job: pageJob, schedules: pageSchedules, leaders: pageLeaders,
  blockers: pageBlockers, doctor: pageDoctor };

/* ---- the loop ---- */

function current() {
  const hash = location.hash.replace(/^#/, '');
  const i = hash.indexOf('?');
  const name = i < 0 ? hash : hash.slice(0, i);
  return { name: pages[name] ? name : 'overview', params: new URLSearchParams(i < 0 ? '' : hash.slice(i + 1)) };
}

let running = false;
async function tick() {
  if (running) return;
  running = true;
  clearTimeout(state.timer);
  const { name, params } = current();
  const main = document.getElementById('main');
  for (const a of document.querySelectorAll('#nav a')) a.className = a.dataset.page === name || (name === 'job' && a.dataset.page === 'jobs') ? 'active' : '';
  try {
    if (name !== 'overview') {
      /* The charts keep their hour whichever page is shown. */
      api('/api/queues').then(r => remember(r.queues)).catch(() => {});
    }
    await pages[name](main, params);
    if (name !== 'jobs') main.dataset.page = name;
    status('updated ' + new Date().toLocaleTimeString());
  } catch (e) {
    put(main, h('h2', {}, name), failure(e));
    main.dataset.page = '';
    status('error: ' + e.message, true);
  } finally {
    running = false;
    state.timer = setTimeout(tick, state.config ? state.config.refresh_ms : 2000);
  }
}

/* A link may carry the token in its fragment (#blockers?token=T, as a script that starts the
 * dashboard hands it out): it is kept for the tab, as if typed, and taken out of the address
 * and the history at once. The fragment never reaches the server. */
function tokenFromLink() {
  const { name, params } = current();
  const t = params.get('token');
  if (t === null) return;
  params.delete('token');
  state.token = t.trim();
  sessionStorage.setItem('pgcoord-token', state.token);
  const rest = params.toString();
  history.replaceState(null, '', '#' + name + (rest ? '?' + rest : ''));
}

async function start() {
  tokenFromLink();
  document.getElementById('auth').addEventListener('submit', ev => {
    ev.preventDefault();
    state.token = document.getElementById('token').value.trim();
    sessionStorage.setItem('pgcoord-token', state.token);
    document.getElementById('auth').hidden = true;
    tick();
  });
  try {
    state.config = await api('/api/config');
  } catch (e) {
    status('cannot reach the server: ' + e.message, true);
  }
  if (state.config && state.config.auth && !state.token) showAuth();
  window.addEventListener('hashchange', () => { main().dataset.page = ''; tick(); });
  tick();
}

function main() { return document.getElementById('main'); }

start();
