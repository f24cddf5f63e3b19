"""bench/clients/run.py - the clients' workers side by side with the C worker, in one run.

Run through bench/clients/run (which starts a throwaway server unless $PGCOORD_TEST_DSN is set).
Every system is a program following the bench worker contract (bench/clients/README.md): the C
reference is build/bench/bench_client_c; each client's is named by bench/clients/LANG/cmd. The
systems alternate within each round; each figure is the best of the rounds, and every ratio is
against the C worker of the same run.

Cases:
  drain    N jobs enqueued first, then a worker of K handlers started: jobs/s from its "ready"
           to its exit after the N-th completion.
  e2e      the worker started first, then N jobs enqueued by the harness in batches of 1,000
           (as bench/peers does) as fast as it can: jobs/s from the first enqueue to the worker's
           exit.
  latency  M jobs enqueued one at a time at R per second into an idle worker: p50 and p99 of
           the delay from just before the enqueue to the handler's start (Unix clock, one
           machine), and the same with PGCOORD_BENCH_LISTEN=0 (polling).
  enqueue  N jobs in one call of the system's many-jobs enqueue.
  cmd      the process-per-job path: `pgcoord worker -c K --once -- HANDLER`, the same
           language's handler program, for N/10 jobs; the ratio is the system's drain over it.
  async    (systems whose worker runs async handlers: python) K=64 handlers awaiting 10 ms.
  locks    (systems with a locks mode: go) try-lock + unlock pairs per second of one name for S
           seconds, beside pgbench running the same two statements on one connection.
  rss      the peak RSS (VmHWM) of each worker during drain.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
SCHEMA = "pgc_bench_clients"
QUEUE = "bench"
LANGS = ["go", "python", "node"]
CASES = ["drain", "e2e", "latency", "enqueue", "cmd", "async", "locks"]


@dataclass
class System:
    name: str
    worker: list[str]
    handler: list[str] | None
    missing: str | None = None
    figures: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def add(self, case: str, value: float) -> None:
        self.figures.setdefault(case, []).append(value)


def log(msg: str) -> None:
    print(f"bench/clients: {msg}", file=sys.stderr, flush=True)


def systems(build: str, want: list[str]) -> list[System]:
    out: list[System] = []
    c = os.environ.get("PGCOORD_BENCH_CLIENT_C") or os.path.join(build, "bench", "bench_client_c")
    if "c" in want:
        s = System("c", [c], ["/bin/true"])
        if not os.access(c, os.X_OK):
            s.missing = f"{c} is not built (ninja -C {build})"
        out.append(s)
    for lang in LANGS:
        if lang not in want:
            continue
        cmd = os.path.join(HERE, lang, "cmd")
        if not os.access(cmd, os.X_OK):
            out.append(System(lang, [], None, missing=f"{cmd} does not exist yet"))
            continue
        env = dict(os.environ, PGCOORD_BENCH_BUILD=os.path.join(build, "bench-clients", lang))
        r = subprocess.run([cmd], capture_output=True, text=True, env=env)
        lines = r.stdout.strip().splitlines()
        if r.returncode != 0 or not lines:
            out.append(System(lang, [], None, missing=(r.stderr.strip() or f"{cmd} exited {r.returncode}")))
            continue
        out.append(System(lang, shlex.split(lines[0]), shlex.split(lines[1]) if len(lines) > 1 else None))
    return out


class Bench:
    def __init__(self, dsn: str, pgcoord: str, args: argparse.Namespace) -> None:
        self.dsn = dsn
        self.pgcoord = pgcoord
        self.args = args

    def fresh_schema(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        r = subprocess.run([self.pgcoord, "init", "--schema", SCHEMA],
                           capture_output=True, text=True, env=dict(os.environ, PGCOORD_DSN=self.dsn))
        if r.returncode != 0:
            raise SystemExit(f"bench/clients: pgcoord init failed: {r.stderr.strip()}")
        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute("CHECKPOINT")

    def enqueue(self, conn: psycopg.Connection[Any], payloads: list[str]) -> None:
        conn.execute(sql.SQL("SELECT count(*) FROM {}.enqueue(%s, %s::text[], NULL, NULL, NULL, NULL)")
                     .format(sql.Identifier(SCHEMA)), (QUEUE, payloads))

    def env(self, **extra: str) -> dict[str, str]:
        e = dict(os.environ, PGCOORD_BENCH_DSN=self.dsn, PGCOORD_BENCH_SCHEMA=SCHEMA,
                 PGCOORD_BENCH_QUEUE=QUEUE)
        e.update(extra)
        return e

    def start(self, s: System, **extra: str) -> tuple[subprocess.Popen[str], float]:
        """Starts a worker; returns it and the time it printed "ready"."""
        p = subprocess.Popen(s.worker, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=self.env(PGCOORD_BENCH_MODE="work", **extra))
        assert p.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if line == "":
                err = p.stderr.read() if p.stderr else ""
                raise RuntimeError(f"{s.name}: the worker exited before ready: {err.strip()[-400:]}")
            if line.strip() == "ready":
                return p, time.monotonic()
        p.kill()
        raise RuntimeError(f"{s.name}: no ready within 60 s")

    def finish(self, s: System, p: subprocess.Popen[str], bound: float,
               rss: list[int] | None = None) -> tuple[float, list[str]]:
        """Waits for the worker's exit (sampling its peak RSS); returns the time and its lines."""
        lines: list[str] = []

        def read() -> None:
            assert p.stdout is not None
            for line in p.stdout:
                lines.append(line.strip())

        t = threading.Thread(target=read, daemon=True)
        t.start()
        deadline = time.monotonic() + bound
        while p.poll() is None:
            if rss is not None:
                try:
                    with open(f"/proc/{p.pid}/status") as f:
                        for ln in f:
                            if ln.startswith("VmHWM:"):
                                rss.append(int(ln.split()[1]))
                except OSError:
                    pass
            if time.monotonic() > deadline:
                p.kill()
                p.wait()
                raise RuntimeError(f"{s.name}: the worker did not finish within {bound:.0f} s")
            time.sleep(0.005)
        end = time.monotonic()
        t.join(5)
        if p.returncode != 0:
            err = p.stderr.read() if p.stderr else ""
            raise RuntimeError(f"{s.name}: the worker exited {p.returncode}: {err.strip()[-400:]}")
        return end, lines

    def payloads(self, n: int) -> list[str]:
        return [f'{{"i": {i}}}' for i in range(n)]

    # -- cases --------------------------------------------------------------------------

    def drain(self, s: System, k: int, n: int) -> None:
        self.fresh_schema()
        with psycopg.connect(self.dsn, autocommit=True) as c:
            for i in range(0, n, 5000):
                self.enqueue(c, self.payloads(min(5000, n - i)))
        rss: list[int] = []
        p, t0 = self.start(s, PGCOORD_BENCH_CONCURRENCY=str(k), PGCOORD_BENCH_STOP_AFTER=str(n),
                           PGCOORD_BENCH_HANDLER="noop")
        t1, _ = self.finish(s, p, 300, rss)
        s.add("drain", n / (t1 - t0))
        if rss:
            s.add("rss_kb", max(rss))

    def e2e(self, s: System, k: int, n: int) -> None:
        self.fresh_schema()
        p, _ = self.start(s, PGCOORD_BENCH_CONCURRENCY=str(k), PGCOORD_BENCH_STOP_AFTER=str(n),
                          PGCOORD_BENCH_HANDLER="noop")
        time.sleep(0.3)
        with psycopg.connect(self.dsn, autocommit=True) as c:
            t0 = time.monotonic()
            for i in range(0, n, 1000):
                self.enqueue(c, self.payloads(min(1000, n - i)))
        t1, _ = self.finish(s, p, 300)
        s.add("e2e", n / (t1 - t0))

    def latency(self, s: System, m: int, rate: float, listen: bool) -> None:
        self.fresh_schema()
        p, _ = self.start(s, PGCOORD_BENCH_CONCURRENCY="16", PGCOORD_BENCH_STOP_AFTER=str(m),
                          PGCOORD_BENCH_HANDLER="latency", PGCOORD_BENCH_LISTEN="1" if listen else "0")
        time.sleep(1.0)
        with psycopg.connect(self.dsn, autocommit=True) as c:
            t0 = time.monotonic()
            for i in range(m):
                due = t0 + i / rate
                while time.monotonic() < due:
                    time.sleep(max(0.0, min(0.01, due - time.monotonic())))
                self.enqueue(c, [json.dumps({"i": i, "t_us": time.time_ns() // 1000})])
        _, lines = self.finish(s, p, 120)
        lat = sorted(int(ln.split()[1]) / 1000.0 for ln in lines if ln.startswith("lat_us "))
        if len(lat) < m:
            raise RuntimeError(f"{s.name}: {len(lat)} latency lines of {m}")
        tag = "" if listen else "_poll"
        s.add("p50_ms" + tag, statistics.median(lat))
        s.add("p99_ms" + tag, lat[min(len(lat) - 1, int(0.99 * len(lat)))])

    def enqueue_case(self, s: System, n: int) -> None:
        self.fresh_schema()
        r = subprocess.run(s.worker, capture_output=True, text=True, timeout=300,
                           env=self.env(PGCOORD_BENCH_MODE="enqueue", PGCOORD_BENCH_JOBS=str(n)))
        last = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not last:
            raise RuntimeError(f"{s.name}: enqueue mode exited {r.returncode}: {r.stderr.strip()[-300:]}")
        j = json.loads(last[-1])
        if j.get("enqueued") != n:
            raise RuntimeError(f"{s.name}: enqueued {j.get('enqueued')} of {n}")
        s.add("enqueue", n / j["seconds"])

    def cmd(self, s: System, k: int, n: int) -> None:
        if not s.handler:
            return
        self.fresh_schema()
        with psycopg.connect(self.dsn, autocommit=True) as c:
            self.enqueue(c, self.payloads(n))
        t0 = time.monotonic()
        r = subprocess.run([self.pgcoord, "worker", "--schema", SCHEMA, "-q", QUEUE, "-c", str(k),
                            "--once", "--", *s.handler], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, PGCOORD_DSN=self.dsn))
        t1 = time.monotonic()
        if r.returncode != 0:
            raise RuntimeError(f"{s.name}: pgcoord worker -- handler exited {r.returncode}: {r.stderr.strip()[-300:]}")
        s.add("cmd", n / (t1 - t0))

    def async_case(self, s: System, n: int) -> None:
        self.fresh_schema()
        with psycopg.connect(self.dsn, autocommit=True) as c:
            self.enqueue(c, self.payloads(n))
        p, t0 = self.start(s, PGCOORD_BENCH_CONCURRENCY="64", PGCOORD_BENCH_STOP_AFTER=str(n),
                           PGCOORD_BENCH_HANDLER="sleep:10", PGCOORD_BENCH_ASYNC="1")
        t1, _ = self.finish(s, p, 300)
        s.add("async_10ms_k64", n / (t1 - t0))

    def locks(self, s: System, seconds: int) -> None:
        self.fresh_schema()
        r = subprocess.run(s.worker, capture_output=True, text=True, timeout=seconds + 60,
                           env=self.env(PGCOORD_BENCH_MODE="locks", PGCOORD_BENCH_SECONDS=str(seconds)))
        last = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not last:
            raise RuntimeError(f"{s.name}: locks mode exited {r.returncode}: {r.stderr.strip()[-300:]}")
        j = json.loads(last[-1])
        s.add("locks", j["pairs"] / j["seconds"])


def pgbench_locks(dsn: str, seconds: int) -> float | None:
    if shutil.which("pgbench") is None:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".pgbench", delete=False) as f:
        f.write("SELECT pg_try_advisory_lock(4242424242);\nSELECT pg_advisory_unlock(4242424242);\n")
        path = f.name
    try:
        r = subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", "1", "-T", str(seconds), "-f", path, dsn],
                           capture_output=True, text=True)
        for ln in r.stdout.splitlines():
            if ln.startswith("tps = "):
                return float(ln.split()[2])
        return None
    finally:
        os.unlink(path)


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/clients/run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default="c,go,python,node", help="comma-separated (default: all)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated (default: all)")
    ap.add_argument("--jobs", type=int, default=20000, help="jobs for drain and e2e (20000)")
    ap.add_argument("--concurrency", type=int, default=16, help="handlers per worker (16)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, systems alternating (2)")
    ap.add_argument("--latency-jobs", type=int, default=200)
    ap.add_argument("--latency-rate", type=float, default=50.0)
    ap.add_argument("--enqueue-jobs", type=int, default=10000)
    ap.add_argument("--lock-seconds", type=int, default=5)
    ap.add_argument("--json", metavar="FILE", help="append the figures as JSON lines to FILE")
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    a = ap.parse_args()
    want_s = [x for x in a.systems.split(",") if x]
    want_c = [x for x in a.cases.split(",") if x]
    for x in want_s:
        if x not in ["c"] + LANGS:
            ap.error(f"--systems: unknown system {x!r} (c, go, python, node)")
    for x in want_c:
        if x not in CASES:
            ap.error(f"--cases: unknown case {x!r} ({', '.join(CASES)})")
    if a.jobs < 100 or a.concurrency < 1 or a.rounds < 1:
        ap.error("--jobs must be at least 100, --concurrency and --rounds at least 1")
    dsn = os.environ.get("PGCOORD_TEST_DSN", "")
    if not dsn:
        ap.error("PGCOORD_TEST_DSN is not set: run through bench/clients/run")
    pgcoord = os.path.join(a.build, "pgcoord")
    b = Bench(dsn, pgcoord, a)
    sys_list = systems(a.build, want_s)
    for s in sys_list:
        if s.missing:
            log(f"{s.name}: left out: {s.missing}")
    live = [s for s in sys_list if not s.missing]
    for rnd in range(a.rounds):
        for case in want_c:
            for s in live:
                try:
                    if case == "drain":
                        b.drain(s, a.concurrency, a.jobs)
                    elif case == "e2e":
                        b.e2e(s, a.concurrency, a.jobs)
                    elif case == "latency":
                        b.latency(s, a.latency_jobs, a.latency_rate, True)
                        b.latency(s, a.latency_jobs, a.latency_rate, False)
                    elif case == "enqueue":
                        b.enqueue_case(s, a.enqueue_jobs)
                    elif case == "cmd" and s.name != "c":
                        b.cmd(s, a.concurrency, max(100, a.jobs // 10))
                    elif case == "async" and s.name == "python":
                        b.async_case(s, max(1000, a.jobs // 4))
                    elif case == "locks" and s.name == "go":
                        b.locks(s, a.lock_seconds)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    s.notes[case] = str(e)
                    log(f"round {rnd + 1}, {case}, {s.name}: {e}")
            if case == "locks" and any(s.name == "go" for s in live):
                tps = pgbench_locks(dsn, a.lock_seconds)
                if tps is not None:
                    # pgbench's tps counts one script run: one try-lock and one unlock.
                    ref = next((s for s in sys_list if s.name == "c"), None)
                    if ref is not None:
                        ref.add("locks_pgbench", tps)
            log(f"round {rnd + 1}: {case} done")
    report(sys_list, a)
    return 0


def best(s: System, key: str, low: bool = False) -> float | None:
    v = s.figures.get(key)
    if not v:
        return None
    return min(v) if low else max(v)


def report(sys_list: list[System], a: argparse.Namespace) -> None:
    c = next((s for s in sys_list if s.name == "c" and not s.missing), None)
    rows = [("drain", "drain jobs/s", False), ("e2e", "end-to-end jobs/s", False),
            ("enqueue", f"enqueue {a.enqueue_jobs} in one call, jobs/s", False),
            ("p50_ms", "wake-up p50 ms (LISTEN)", True), ("p99_ms", "wake-up p99 ms (LISTEN)", True),
            ("p50_ms_poll", "wake-up p50 ms (polling)", True), ("p99_ms_poll", "wake-up p99 ms (polling)", True),
            ("rss_kb", "worker peak RSS kB (drain)", True), ("cmd", "process per job (pgcoord worker -- handler), jobs/s", False),
            ("async_10ms_k64", "asyncio, 10 ms handlers, K=64, jobs/s", False),
            ("locks", "try-lock + unlock pairs/s", False)]
    print(f"\nbench/clients: {a.jobs} jobs, {a.concurrency} handlers in one worker process, "
          f"best of {a.rounds} rounds; ratios against the C worker of this run")
    names = [s.name for s in sys_list]
    print(f"{'':52}" + "".join(f"{n:>12}" for n in names))
    out: list[dict[str, Any]] = []
    for key, label, low in rows:
        vals = [best(s, key, low) for s in sys_list]
        if all(v is None for v in vals):
            continue
        print(f"{label:52}" + "".join(f"{v:>12.1f}" if v is not None else f"{'-':>12}" for v in vals))
        for s, v in zip(sys_list, vals):
            if v is not None:
                out.append({"bench": "clients", "case": key, "system": s.name, "value": v})
    if c is not None:
        for key in ("drain", "e2e", "enqueue"):
            ref = best(c, key)
            if not ref:
                continue
            line = "".join(f"{(best(s, key) or 0) / ref:>12.2f}" if best(s, key) else f"{'-':>12}" for s in sys_list)
            print(f"{'ratio to C, ' + key:52}" + line)
    for s in sys_list:
        d, cm = best(s, "drain"), best(s, "cmd")
        if d and cm:
            print(f"{s.name}: drain in process / process per job = {d / cm:.1f}")
    ref = best(c, "locks_pgbench") if c else None
    for s in sys_list:
        v = best(s, "locks")
        if v and ref:
            print(f"{s.name}: try-lock + unlock pairs/s {v:.0f}, pgbench {ref:.0f}: ratio {v / ref:.2f}")
    for s in sys_list:
        if s.missing:
            print(f"{s.name}: left out: {s.missing}")
        for case, why in s.notes.items():
            print(f"{s.name}: {case}: {why}")
    if a.json:
        with open(a.json, "a") as f:
            for j in out:
                f.write(json.dumps(j) + "\n")


if __name__ == "__main__":
    sys.exit(main())
