"""``python -m pgcoord worker MODULE:HANDLER --queue Q ...``: run a Python handler as a worker.

The exit codes are the pgcoord tool's: 0 after a graceful stop (SIGTERM or SIGINT), 64 a usage
error (bad options, a handler that cannot be imported), 69 the database is unavailable (or the
schema missing), 77 credentials refused, 78 a connection setting that cannot work, 70 anything
else.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
from typing import Any, NoReturn, Optional, Sequence

from . import errors as E
from .worker import Worker

EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_SOFTWARE, EXIT_NOPERM, EXIT_CONFIG = 64, 69, 70, 77, 78

USAGE_EPILOG = """\
The handler is called with each claimed pgcoord.Job; a plain function runs in a thread (it
sees job.cancelled and job.lost), an async one on the worker's loop. What it returns is stored
as the job's result; an exception fails the attempt; pgcoord.RetryLater defers the job.
SIGTERM or SIGINT stops gracefully: no new claims, --grace for running handlers, then their
jobs go back to pending.

Exit codes: 0 stopped, 64 usage, 69 database unavailable, 70 internal error,
77 credentials refused, 78 configuration.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _seconds(v: str) -> float:
    try:
        f = float(v[:-2]) / 1000 if v.endswith("ms") else float(v[:-1]) if v.endswith("s") else float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a duration (seconds, or 500ms, 30s)") from None
    if f < 0:
        raise argparse.ArgumentTypeError(f"{v!r} is negative")
    return f


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m pgcoord", description="pgcoord for Python: run a worker from the shell.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    w = sub.add_parser(
        "worker",
        help="work jobs of queues with a Python handler",
        description="Work the jobs of the queues with a Python handler (MODULE:FUNCTION).",
        epilog=USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    w.add_argument("handler", metavar="MODULE:HANDLER", help="the handler, e.g. myapp.jobs:send_email")
    w.add_argument("-q", "--queue", action="append", required=True, metavar="Q", help="queue to take jobs from (repeat for more)")
    w.add_argument("-c", "--concurrency", type=int, default=4, metavar="N", help="handlers at once (default 4)")
    w.add_argument("-d", "--dsn", default=os.environ.get("PGCOORD_DSN", ""), help="the database (default $PGCOORD_DSN, then libpq's environment)")
    w.add_argument("--schema", default=os.environ.get("PGCOORD_SCHEMA", "pgcoord"), help="the pgcoord schema (default pgcoord)")
    w.add_argument("--lease", type=_seconds, default=30.0, metavar="D", help="job lease, renewed every D/3 (default 30s)")
    w.add_argument("--grace", type=_seconds, default=30.0, metavar="D", help="on stop, wait D for running handlers (default 30s)")
    w.add_argument("--no-listen", action="store_true", help="poll instead of LISTEN (the worker does so by itself behind a transaction-mode pooler)")
    w.add_argument("-v", "--verbose", action="store_true", help="log every step, not only warnings")
    return p


def _load(spec: str) -> Any:
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise E.UsageError(f"the handler must be MODULE:FUNCTION, not {spec!r}")
    sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(mod)
    except Exception as e:
        raise E.UsageError(f"cannot import {mod}: {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise E.UsageError(f"{mod} has no {attr}") from None
    if not callable(obj):
        raise E.UsageError(f"{spec} is not callable")
    return obj


def exit_code(e: BaseException) -> int:
    """The tool's exit code for an error that ended the worker."""
    if isinstance(e, E.UsageError):
        return EXIT_USAGE
    if isinstance(e, E.ConfigError):
        return EXIT_NOPERM if (e.sqlstate or "").startswith("28") else EXIT_CONFIG
    if isinstance(e, (E.SchemaError, E.LostError, E.RetryLaterError)):
        return EXIT_UNAVAILABLE
    return EXIT_SOFTWARE


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; returns the exit code."""
    p = _parser()
    a = p.parse_args(argv)
    if a.command != "worker":
        p.print_help(sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="pgcoord worker: %(message)s")
    try:
        fn = _load(a.handler)
        worker = Worker(a.dsn, schema=a.schema, concurrency=a.concurrency, lease=max(a.lease, 0.1), listen=False if a.no_listen else None)
        for q in a.queue:
            worker.add_handler(q, fn)
    except E.PgcoordError as e:
        print(f"python -m pgcoord worker: {e}", file=sys.stderr)
        return exit_code(e)

    def on_signal(signo: int, frame: Any) -> None:
        worker.stop(a.grace)

    # Installed here, by the command, never on import of the package.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        st = worker.run()
    except E.PgcoordError as e:
        print(f"python -m pgcoord worker: {e}", file=sys.stderr)
        return exit_code(e)
    print(
        f"pgcoord worker: {st.completed} completed, {st.failed} failed, {st.retried} retried, "
        f"{st.released} released, {st.stale} stale, {st.cancelled} cancelled",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Handler threads still running past the grace hold jobs released already: do not wait.
    if any(t.name.startswith("pgcoord-handler") and t.is_alive() for t in threading.enumerate()):
        os._exit(code)
    sys.exit(code)
