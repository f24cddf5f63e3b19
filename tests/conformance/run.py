#!/usr/bin/env python3
"""run.py - the pgcoord conformance runner (tests/conformance/README.md is the contract).

Starts one adapter process per actor of a scenario, sends it the scenario's steps, records the
answers and events, and checks them and the database. The database is reached only through
psql subprocesses: values travel as psql variables (:'v_name'), the schema as an identifier
(:"pgc_schema"), never pasted into SQL. Python 3 standard library only.

Exit status: 0 when every run passed, 1 on a failure (or a skip that is not allowed under
PGCOORD_CI=1), 2 on bad usage, 77 when there is no database to run against (1 in CI).
"""
import argparse
import csv
import glob
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOL = 1
DEFAULT_WAIT_S = 30.0
# Every adapter process this runner started, so that none outlives it.
STARTED = []
VAR_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


class StepFail(Exception):
    pass


# ---- the database, through psql -------------------------------------------------------------

def quote_ident(name):
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value):
    return "'" + str(value).replace("'", "''") + "'"


def text_of(value):
    """A saved value as the text a psql variable carries (JSON for lists and objects)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def psql(dsn, sql, schema, saved, timeout_s=60.0):
    """Runs sql (with @S@ and $name) on a psql session of its own; returns rows of text."""
    missing = [m for m in VAR_RE.findall(sql) if m not in saved]
    if missing:
        raise StepFail("SQL names unknown variable $%s" % missing[0])
    text = sql.replace("@S@", ':"pgc_schema"')
    text = VAR_RE.sub(lambda m: ":'v_%s'" % m.group(1), text)
    args = ["psql", "-X", "-A", "-t", "-q", "--csv", "-v", "ON_ERROR_STOP=1",
            "-v", "pgc_schema=" + schema]
    for name, value in saved.items():
        args += ["-v", "v_%s=%s" % (name, text_of(value))]
    args += ["-d", dsn, "-f", "-"]
    try:
        p = subprocess.run(args, input=text, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise StepFail("psql took more than %.0f s" % timeout_s)
    if p.returncode != 0:
        raise StepFail("psql: %s" % p.stderr.strip().replace("\n", " | "))
    return [row for row in csv.reader(io.StringIO(p.stdout))]


def sql_rows_match(expected, rows):
    if not isinstance(expected, list) or len(expected) != len(rows):
        return False
    for e, r in zip(expected, rows):
        if not isinstance(e, list) or len(e) != len(r):
            return False
        for ev, rv in zip(e, r):
            want = "" if ev is None else ("t" if ev is True else "f" if ev is False else str(ev))
            if want != rv:
                return False
    return True


# ---- adapters -------------------------------------------------------------------------------

class Adapter:
    """One adapter process: requests in, answers and events out (read by a thread)."""

    def __init__(self, lang, command, actor, cond, events):
        self.lang, self.actor = lang, actor
        self.cond, self.events = cond, events
        self.answers, self.next_id, self.eof, self.killed = {}, 1, False, False
        self.pending = []  # ids of requests sent with no_wait, oldest first
        self.proc = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        STARTED.append(self.proc)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                msg = {"event": "_garbage", "line": line}
            with self.cond:
                if "event" in msg and "id" not in msg:
                    msg["_actor"], msg["_lang"] = self.actor, self.lang
                    msg["_rt"] = time.monotonic()
                    self.events.append(msg)
                else:
                    self.answers[msg.get("id")] = msg
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def send(self, op, args):
        rid = self.next_id
        self.next_id += 1
        req = dict(args)
        req["id"], req["op"] = rid, op
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise StepFail("%s (%s) is gone: cannot send %s" % (self.actor, self.lang, op))
        return rid

    def wait_answer(self, rid, timeout_s):
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while rid not in self.answers:
                left = deadline - time.monotonic()
                if self.eof:
                    raise StepFail("%s (%s) exited (status %s) before answering request %d"
                                   % (self.actor, self.lang, self.proc.poll(), rid))
                if left <= 0:
                    raise StepFail("%s (%s): no answer to request %d within %.0f s"
                                   % (self.actor, self.lang, rid, timeout_s))
                self.cond.wait(left)
            return self.answers.pop(rid)

    def call(self, op, args=None, timeout_s=DEFAULT_WAIT_S):
        return self.wait_answer(self.send(op, args or {}), timeout_s)

    def wait_exit(self, timeout_s):
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def close(self):
        """Quits politely when alive, else kills; always reaps."""
        if self.proc.poll() is None and not self.eof:
            try:
                self.send("quit", {})
                self.proc.stdin.close()
            except (StepFail, OSError):
                pass
            if self.wait_exit(5) is None:
                self.proc.kill()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.reader.join(5)
        try:
            self.proc.stdout.close()
        except OSError:
            pass


def reap_all():
    for p in STARTED:
        if p.poll() is None:
            try:
                p.kill()
            except OSError:
                pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def probe(lang, command):
    """The adapter's hello: its features, once per language."""
    cond = threading.Condition()
    a = Adapter(lang, command, "probe", cond, [])
    try:
        h = a.call("hello", timeout_s=10)
    finally:
        a.close()
    if not h.get("ok"):
        raise StepFail("%s: hello failed: %s" % (lang, h))
    if h.get("protocol") != PROTOCOL:
        raise StepFail("%s speaks protocol %s, the runner %d" % (lang, h.get("protocol"), PROTOCOL))
    return h


# ---- scenarios ------------------------------------------------------------------------------

def lookup(obj, path):
    for part in str(path).split("."):
        if isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            raise StepFail("no field %s in %s" % (path, json.dumps(obj)[:300]))
    return obj


def matches(expected, actual):
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and matches(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(matches(e, a) for e, a in zip(expected, actual)))
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return expected == actual


class Run:
    """One scenario with one assignment of actors to adapter languages."""

    def __init__(self, opts, sc, assignment, schema):
        self.opts, self.sc, self.assignment, self.schema = opts, sc, assignment, schema
        self.cond = threading.Condition()
        self.events = []
        # $run names this run: advisory locks are server-wide, and runs may share a server.
        self.saved = {"run": schema}
        self.adapters = {}

    def subst(self, value, sql_text=False):
        if isinstance(value, str):
            m = VAR_RE.fullmatch(value)
            if m and not sql_text:
                if m.group(1) not in self.saved:
                    raise StepFail("unknown variable %s" % value)
                return self.saved[m.group(1)]
            for name in VAR_RE.findall(value):
                if name not in self.saved:
                    raise StepFail("unknown variable $%s" % name)
            if sql_text:
                value = VAR_RE.sub(lambda m: quote_literal(text_of(self.saved[m.group(1)])), value)
                return value.replace("@S@", quote_ident(self.schema))
            return VAR_RE.sub(lambda m: text_of(self.saved[m.group(1)]), value)
        if isinstance(value, list):
            return [self.subst(v, sql_text) for v in value]
        if isinstance(value, dict):
            return {k: self.subst(v, sql_text or k in ("statement", "statements"))
                    for k, v in value.items()}
        return value

    def adapter(self, actor):
        if actor not in self.adapters:
            raise StepFail("unknown actor %s" % actor)
        return self.adapters[actor]

    def save(self, spec, source):
        for name, path in (spec or {}).items():
            self.saved[name] = lookup(source, path)

    def start(self):
        for actor in self.sc["actors"]:
            lang = self.assignment[actor]
            self.adapters[actor] = Adapter(lang, self.opts.commands[lang], actor, self.cond,
                                           self.events)
        first = True
        for actor in self.sc["actors"]:
            a = self.adapters[actor]
            for op, args in (("hello", {}), ("connect", {"dsn": self.opts.dsn, "schema": self.schema})):
                ans = a.call(op, args)
                if not ans.get("ok"):
                    raise StepFail("%s (%s): %s: %s" % (actor, a.lang, op, ans.get("error")))
            if first:
                ans = a.call("init", timeout_s=60)
                if not ans.get("ok"):
                    raise StepFail("%s (%s): init: %s" % (actor, a.lang, ans.get("error")))
                first = False

    def stop(self):
        t0 = time.monotonic()
        for a in self.adapters.values():
            a.close()
        if os.environ.get("PGCOORD_CONFORMANCE_TRACE") == "1":
            print("  adapters closed (%.3f s)" % (time.monotonic() - t0), file=sys.stderr, flush=True)
        psql(self.opts.dsn, "SET lock_timeout = '20s'; DROP SCHEMA IF EXISTS @S@ CASCADE;",
             self.schema, {})

    def step(self, i, st):
        timeout_s = st.get("timeout_ms", DEFAULT_WAIT_S * 1000) / 1000.0
        if "op" in st:
            a = self.adapter(st["actor"])
            op = st["op"]
            args = self.subst(st.get("args", {}))
            if op == "kill":
                a.send("kill", {})
                status = a.wait_exit(10)
                if status is None:
                    raise StepFail("%s (%s) still runs 10 s after kill" % (a.actor, a.lang))
                if status != -signal.SIGKILL:
                    raise StepFail("%s (%s) exited with %s, not SIGKILL" % (a.actor, a.lang, status))
                a.killed = True
                return
            rid = a.send(op, args)
            if st.get("no_wait"):
                a.pending.append((rid, op))
                return
            ans = a.wait_answer(rid, timeout_s)
            # retry_error: an error kind that means "not now" here (another reaper is running).
            deadline = time.monotonic() + timeout_s
            while (st.get("retry_error") and not ans.get("ok")
                   and (ans.get("error") or {}).get("kind") == st["retry_error"]
                   and time.monotonic() < deadline):
                time.sleep(0.05)
                ans = a.wait_answer(a.send(op, args), timeout_s)
            self.check_answer(st, op, ans)
        elif "answer" in st:
            a = self.adapter(st["answer"])
            if not a.pending:
                raise StepFail("%s has no request sent with no_wait" % a.actor)
            rid, op = a.pending.pop(0)
            self.check_answer(st, op, a.wait_answer(rid, timeout_s))
        elif "wait_event" in st:
            self.wait_event(st["wait_event"], st, timeout_s)
        elif "check_sql" in st or "poll_sql" in st:
            sql = st.get("check_sql", st.get("poll_sql"))
            want = self.subst(st.get("expect", []))
            deadline = time.monotonic() + timeout_s
            while True:
                rows = psql(self.opts.dsn, sql, self.schema, self.saved)
                if sql_rows_match(want, rows):
                    return
                if "check_sql" in st or time.monotonic() >= deadline:
                    raise StepFail("%s gave %s, expected %s%s" % (
                        sql, json.dumps(rows), json.dumps(want),
                        "" if "check_sql" in st else " (for %.0f s)" % timeout_s))
                time.sleep(0.1)
        elif "sleep_ms" in st:
            time.sleep(st["sleep_ms"] / 1000.0)
        elif "check" in st:
            CHECKS[st["check"]](self, st)
        else:
            raise StepFail("unknown step %s" % json.dumps(st))

    def check_answer(self, st, op, ans):
        if "expect_error" in st:
            if ans.get("ok"):
                raise StepFail("%s answered %s, expected error %s" % (op, json.dumps(ans), st["expect_error"]))
            kind = (ans.get("error") or {}).get("kind")
            if kind != st["expect_error"]:
                raise StepFail("%s: error %s, expected %s" % (op, json.dumps(ans.get("error")), st["expect_error"]))
            return
        if not ans.get("ok"):
            raise StepFail("%s failed: %s" % (op, json.dumps(ans.get("error"))))
        if "expect" in st:
            want = self.subst(st["expect"])
            if not matches(want, ans):
                raise StepFail("%s answered %s, expected %s" % (op, json.dumps(ans), json.dumps(want)))
        self.save(st.get("save"), ans)

    def wait_event(self, spec, st, timeout_s):
        actor, name = spec.get("actor"), spec["event"]
        count = spec.get("count", 1)
        match = self.subst(spec.get("match", {}))
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                found = [e for e in self.events if e["event"] == name
                         and (actor is None or e["_actor"] == actor) and matches(match, e)]
                if len(found) >= count:
                    self.save(st.get("save"), found[count - 1])
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StepFail("no %s event #%d from %s within %.0f s (saw %d)"
                                   % (name, count, actor or "any actor", timeout_s, len(found)))
                self.cond.wait(min(left, 0.5))

    def execute(self):
        t0 = time.monotonic()
        self.start()
        if os.environ.get("PGCOORD_CONFORMANCE_TRACE") == "1":
            print("  start (%.3f s)" % (time.monotonic() - t0), file=sys.stderr, flush=True)
        trace = os.environ.get("PGCOORD_CONFORMANCE_TRACE") == "1"
        for i, st in enumerate(self.sc["steps"]):
            t0 = time.monotonic()
            try:
                self.step(i, st)
            except StepFail as e:
                raise StepFail("step %d: %s" % (i + 1, e))
            if trace:
                print("  step %d (%.3f s): %s" % (i + 1, time.monotonic() - t0, json.dumps(st)[:100]),
                      file=sys.stderr, flush=True)


# ---- computed checks ------------------------------------------------------------------------

def check_each_job_once(run, st):
    with run.cond:
        events = list(run.events)
    started, succeeded = {}, {}
    for e in events:
        if e["event"] == "job_started":
            started[e["job_id"]] = started.get(e["job_id"], 0) + 1
        elif e["event"] == "job_ended" and e.get("outcome") == "succeeded":
            succeeded[e["job_id"]] = succeeded.get(e["job_id"], 0) + 1
    twice = sorted(j for j, n in succeeded.items() if n > 1)
    if twice:
        raise StepFail("each_job_once: jobs completed twice: %s" % twice[:10])
    again = sorted(j for j, n in started.items() if n > 1)
    if again:
        raise StepFail("each_job_once: jobs started twice: %s" % again[:10])
    rows = psql(run.opts.dsn, "SELECT id, status FROM @S@.jobs UNION ALL "
                "SELECT id, status FROM @S@.job_history ORDER BY 1", run.schema, {})
    in_db = {int(r[0]): r[1] for r in rows}
    not_done = sorted(j for j, s in in_db.items() if s != "succeeded")
    if not_done:
        raise StepFail("each_job_once: jobs not succeeded in the database: %s" % not_done[:10])
    if set(in_db) != set(succeeded):
        raise StepFail("each_job_once: %d jobs in the database, %d completed by handlers"
                       % (len(in_db), len(succeeded)))
    if "jobs" in st and len(in_db) != st["jobs"]:
        raise StepFail("each_job_once: %d jobs, expected %d" % (len(in_db), st["jobs"]))
    per_actor = {}
    for e in events:
        if e["event"] == "job_ended":
            per_actor[e["_actor"]] = per_actor.get(e["_actor"], 0) + 1
    for actor in st.get("workers", []):
        if per_actor.get(actor, 0) == 0:
            raise StepFail("each_job_once: %s worked no job (%s)" % (actor, per_actor))


def intervals(run):
    """(key, start, end) of every handled job, by t_ms, paired per actor process."""
    with run.cond:
        events = list(run.events)
    open_, out = {}, []
    for e in events:
        k = (e["_actor"], e.get("job_id"))
        if e["event"] == "job_started":
            open_[k] = e
        elif e["event"] == "job_ended" and k in open_:
            s = open_.pop(k)
            out.append((s.get("key"), s["t_ms"], e["t_ms"]))
    return out, open_


def check_no_overlap(run, st):
    limit = st.get("limit", 1)
    spans, unfinished = intervals(run)
    if unfinished:
        raise StepFail("no_overlap: jobs started and not ended: %s" % sorted(k[1] for k in unfinished))
    if len(spans) < st.get("min_jobs", 1):
        raise StepFail("no_overlap: %d jobs handled, expected at least %d" % (len(spans), st.get("min_jobs", 1)))
    by_key = {}
    for key, s, e in spans:
        if key is not None:
            by_key.setdefault(key, []).append((s, e))
    for key, ivs in by_key.items():
        points = sorted([(s, 1) for s, _ in ivs] + [(e, -1) for _, e in ivs],
                        key=lambda p: (p[0], p[1]))
        running = 0
        for t, d in points:
            running += d
            if running > limit:
                raise StepFail("no_overlap: key %s ran %d jobs at once at t_ms %d (limit %d)"
                               % (key, running, t, limit))


def check_rate(run, st):
    """No n + 1 claims within per_ms, less 5% (the rate's burst tolerance) and slack_ms. The
    claims' times are the server's (started_at, stamped by the claim): a rate is kept by the
    server, and the handlers' start events add every adapter's wake-up delay, which under load
    bunches starts that the server spaced."""
    n, per_ms = st["n"], st["per_ms"]
    slack = per_ms * 0.05 + st.get("slack_ms", 100)
    conds, saved = "", dict(run.saved)
    for field in ("queue", "key"):
        if field in st:
            conds += " AND %s = $rate_%s" % (field, field)
            saved["rate_" + field] = st[field]
    rows = psql(run.opts.dsn,
                "SELECT (extract(epoch FROM started_at) * 1000)::float8 FROM ("
                " SELECT queue, key, started_at FROM @S@.job_history"
                " UNION ALL SELECT queue, key, started_at FROM @S@.jobs) j"
                " WHERE started_at IS NOT NULL" + conds + " ORDER BY 1",
                run.schema, saved)
    starts = [float(r[0]) for r in rows]
    if len(starts) <= n:
        raise StepFail("rate: only %d claims: too few to tell a rate of %d" % (len(starts), n))
    for i in range(len(starts) - n):
        if starts[i + n] - starts[i] < per_ms - slack:
            raise StepFail("rate: %d claims within %.0f ms (at most %d per %d ms allowed)"
                           % (n + 1, starts[i + n] - starts[i], n, per_ms))


CHECKS = {"each_job_once": check_each_job_once, "no_overlap": check_no_overlap,
          "rate": check_rate}


# ---- main -----------------------------------------------------------------------------------

def load_scenarios(names):
    paths = sorted(glob.glob(os.path.join(HERE, "scenarios", "*.json")))
    if names:
        chosen = []
        for n in names:
            p = n if n.endswith(".json") else os.path.join(HERE, "scenarios", n + ".json")
            if not os.path.exists(p):
                raise SystemExit("run.py: no scenario %s" % n)
            chosen.append(p)
        paths = chosen
    out = []
    for p in paths:
        with open(p) as f:
            sc = json.load(f)
        for field in ("name", "actors", "steps"):
            if field not in sc:
                raise SystemExit("run.py: %s has no %s" % (p, field))
        for st in sc["steps"]:
            if "check" in st and st["check"] not in CHECKS:
                raise SystemExit("run.py: %s: unknown check %s" % (p, st["check"]))
        out.append(sc)
    return out


def assignments(sc, langs, mixed):
    actors = sc["actors"]
    if not mixed:
        return [{a: lang for a in actors} for lang in langs]
    if len(actors) < 2:
        return []
    pairs = [(x, y) for x in langs for y in langs if x != y] or [(langs[0], langs[0])]
    return [{a: pair[i % 2] for i, a in enumerate(actors)} for pair in pairs]


def parse_allowance(text):
    allowed = {}
    for part in filter(None, re.split(r"[\s;]+", text or "")):
        lang, _, feats = part.partition("=")
        allowed.setdefault(lang, set()).update(filter(None, feats.split(",")))
    return allowed


def main():
    ap = argparse.ArgumentParser(description="Runs pgcoord's conformance scenarios.")
    ap.add_argument("--dsn", default=os.environ.get("PGCOORD_TEST_DSN", ""))
    ap.add_argument("--adapter", action="append", default=[], metavar="NAME=COMMAND")
    ap.add_argument("--mixed", action="store_true",
                    help="split each scenario's actors between two adapter processes")
    ap.add_argument("scenarios", nargs="*")
    opts = ap.parse_args()
    ci = os.environ.get("PGCOORD_CI") == "1"
    opts.commands = {}
    for spec in opts.adapter:
        name, sep, cmd = spec.partition("=")
        if not sep or not name or not cmd.strip():
            ap.error("--adapter takes NAME=COMMAND, not %r" % spec)
        opts.commands[name] = cmd
    if not opts.commands:
        ap.error("give at least one --adapter NAME=COMMAND")
    if not opts.dsn:
        print("SKIP conformance: no database (--dsn or PGCOORD_TEST_DSN; run through scripts/with-pg)")
        return 1 if ci else 77
    scenarios = load_scenarios(opts.scenarios)
    allowed = parse_allowance(os.environ.get("PGCOORD_CONFORMANCE_ALLOW_MISSING"))
    langs = list(opts.commands)
    failed = skipped = passed = 0
    bad_skips = []
    hellos = {}
    for lang in langs:
        try:
            hellos[lang] = probe(lang, opts.commands[lang])
        except StepFail as e:
            print("FAIL hello [%s]: %s" % (lang, e))
            return 1
        feats = set(hellos[lang].get("features", []))
        stale = sorted(allowed.get(lang, set()) & feats)
        if stale:
            print("FAIL allowance [%s]: PGCOORD_CONFORMANCE_ALLOW_MISSING lets %s be missing, "
                  "but the adapter has it now: remove it from the allowance" % (lang, ",".join(stale)))
            failed += 1
    not_mixed = 0
    counter = 0
    t_all = time.monotonic()
    for sc in scenarios:
        runs = assignments(sc, langs, opts.mixed)
        if not runs:
            not_mixed += 1
        for asg in runs:
            label = "[%s]" % ",".join("%s=%s" % (a, asg[a]) for a in sc["actors"])
            missing = sorted({(asg[a], f) for a in sc["actors"] for f in sc.get("needs", [])
                              if f not in hellos[asg[a]].get("features", [])})
            if missing:
                skipped += 1
                why = ", ".join("%s has no %s" % m for m in missing)
                print("SKIP %s %s: %s" % (sc["name"], label, why), flush=True)
                bad_skips += [m for m in missing if m[1] not in allowed.get(m[0], set())]
                continue
            counter += 1
            schema = "conf_%s_%d_%d" % (re.sub(r"[^a-z0-9_]", "_", sc["name"].lower())[:32],
                                        os.getpid(), counter)
            run = Run(opts, sc, asg, schema)
            t0 = time.monotonic()
            err = None
            try:
                run.execute()
            except StepFail as e:
                err = str(e)
            finally:
                try:
                    run.stop()
                except StepFail as e:
                    err = err or "cleanup: %s" % e
            took = time.monotonic() - t0
            if err is None:
                passed += 1
                print("ok   %s %s (%.1f s)" % (sc["name"], label, took), flush=True)
            else:
                failed += 1
                print("FAIL %s %s: %s (%.1f s)" % (sc["name"], label, err, took), flush=True)
    summary = "%d passed, %d failed, %d skipped in %.1f s" % (
        passed, failed, skipped, time.monotonic() - t_all)
    if not_mixed:
        summary += "; %d single-actor scenarios have nothing to mix" % not_mixed
    print(summary)
    if bad_skips and ci:
        print("FAIL: skips are failures in CI (PGCOORD_CI=1): %s; only "
              "PGCOORD_CONFORMANCE_ALLOW_MISSING=%s is allowed" % (
                  ", ".join("%s has no %s" % m for m in sorted(set(bad_skips))),
                  " ".join("%s=%s" % (k, ",".join(sorted(v))) for k, v in allowed.items()) or "''"))
        return 1
    return 1 if failed else 0


def on_signal(signum, frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        status = main()
    except KeyboardInterrupt:
        status = 130
    finally:
        reap_all()
    sys.exit(status)
