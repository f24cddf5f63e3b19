#!/usr/bin/python3
"""bench_worker.py - the Python client's program for the shared client benchmark
(bench/clients/run): PGCOORD_BENCH_MODE=work runs a pgcoord.Worker (or AsyncWorker with
PGCOORD_BENCH_ASYNC=1) of PGCOORD_BENCH_CONCURRENCY handlers until PGCOORD_BENCH_STOP_AFTER
jobs are completed; PGCOORD_BENCH_MODE=enqueue enqueues PGCOORD_BENCH_JOBS jobs in one call of
enqueue_many and says how long that call took. See README.md here."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "clients" / "python"))

import pgcoord  # noqa: E402


def env(name: str, default: str | None = None) -> str:
    v = os.environ.get(name, default)
    if v is None:
        print(f"bench_worker.py: {name} is not set", file=sys.stderr)
        sys.exit(64)
    return v


def main() -> int:
    dsn, schema, queue = env("PGCOORD_BENCH_DSN"), env("PGCOORD_BENCH_SCHEMA", "pgcoord"), env("PGCOORD_BENCH_QUEUE")
    mode = env("PGCOORD_BENCH_MODE")
    if mode == "enqueue":
        n = int(env("PGCOORD_BENCH_JOBS"))
        payloads = [{"i": k} for k in range(n)]
        with pgcoord.Client(dsn, schema=schema, pool_size=1) as c:
            t0 = time.perf_counter()
            c.enqueue_many(queue, payloads)
            took = time.perf_counter() - t0
        print(json.dumps({"enqueued": n, "seconds": took}), flush=True)
        return 0
    if mode != "work":
        print(f"bench_worker.py: PGCOORD_BENCH_MODE must be work or enqueue, not {mode!r}", file=sys.stderr)
        return 64
    stop_after = int(env("PGCOORD_BENCH_STOP_AFTER", "0"))
    kind = env("PGCOORD_BENCH_HANDLER", "noop")
    use_async = env("PGCOORD_BENCH_ASYNC", "0") == "1"
    listen = env("PGCOORD_BENCH_LISTEN", "1") != "0"
    kw: dict[str, Any] = dict(schema=schema, concurrency=int(env("PGCOORD_BENCH_CONCURRENCY", "16")), listen=listen,
              lease=int(env("PGCOORD_BENCH_LEASE_MS", "30000")) / 1000)
    worker: Any = pgcoord.AsyncWorker(dsn, **kw) if use_async else pgcoord.Worker(dsn, **kw)
    counter = itertools.count(1)  # next() is atomic under the GIL

    def handled() -> None:
        if next(counter) == stop_after:
            worker.stop(30)

    if kind.startswith("sleep:"):
        secs = int(kind[6:]) / 1000
        if use_async:

            async def handle_async(job: pgcoord.Job) -> None:
                await asyncio.sleep(secs)
                handled()

            worker.add_handler(queue, handle_async)
        else:

            def handle_sleep(job: pgcoord.Job) -> None:
                time.sleep(secs)
                handled()

            worker.add_handler(queue, handle_sleep)
    elif kind in ("noop", "latency"):
        lat = kind == "latency"

        def handle(job: pgcoord.Job) -> None:
            if lat:
                sys.stdout.write(f"lat_us {time.time_ns() // 1000 - int(job.payload['t_us'])}\n")
            handled()

        async def handle_a(job: pgcoord.Job) -> None:
            handle(job)

        worker.add_handler(queue, handle_a if use_async else handle)
    else:
        print(f"bench_worker.py: unknown PGCOORD_BENCH_HANDLER {kind!r}", file=sys.stderr)
        return 64
    # Connected and the protocol version checked, just before the worker starts.
    pgcoord.Client(dsn, schema=schema, pool_size=1).open().close()
    print("ready", flush=True)
    # SIGTERM stops it gracefully (0 as PGCOORD_BENCH_STOP_AFTER: only SIGTERM does).
    signal.signal(signal.SIGTERM, lambda signum, frame: worker.stop(30))
    st = asyncio.run(worker.run()) if use_async else worker.run()
    sys.stdout.flush()
    print(json.dumps({"handled": st.completed}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
