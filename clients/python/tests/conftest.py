"""Fixtures: a real server (PGCOORD_TEST_DSN, set by scripts/with-pg) and a pgcoord schema of
the test run's own, created by `pgcoord init` and dropped at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg
import pytest
from psycopg import sql

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def _pgcoord_bin() -> str | None:
    for cand in (os.environ.get("PGCOORD_BIN"), str(ROOT / "build" / "pgcoord"), shutil.which("pgcoord")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def _need_dsn() -> str:
    dsn = os.environ.get("PGCOORD_TEST_DSN")
    if not dsn:
        pytest.skip("PGCOORD_TEST_DSN is not set (run through scripts/with-pg)")
    return dsn


@pytest.fixture(scope="session")
def dsn() -> str:
    return _need_dsn()


@pytest.fixture(scope="session")
def schema(dsn: str) -> Iterator[str]:
    exe = _pgcoord_bin()
    if exe is None:
        pytest.skip("no pgcoord binary to create the schema (set PGCOORD_BIN or build into build/)")
    name = f"pgcpy_{os.getpid()}"
    r = subprocess.run([exe, "-d", dsn, "init", "--schema", name], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    yield name
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def admin(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection for the test's own looks at the server."""
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


def wait_for(pred: Callable[[], bool], bound: float = 15.0, what: str = "condition") -> float:
    """Poll pred until true, failing after bound seconds; returns the seconds it took."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > bound:
            raise AssertionError(f"waited {bound} s for {what}")
        time.sleep(0.02)
    return time.monotonic() - t0


def advisory_holders(admin: psycopg.Connection[Any], key: int) -> list[int]:
    """The pids holding advisory key (bigint form) granted, by pg_locks."""
    u = key & 0xFFFFFFFFFFFFFFFF
    rows = admin.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s::oid"
        " AND objid = %s::oid AND objsubid = 1 ORDER BY pid",
        [u >> 32, u & 0xFFFFFFFF],
    ).fetchall()
    return [r[0] for r in rows]
