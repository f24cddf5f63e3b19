#!/usr/bin/env bash
# The Python client behind a real PgBouncer in transaction mode, by itself as the C library:
# it finds the pooler, its worker polls instead of LISTEN and sends unprepared statements,
# session locks are refused, job_result waits poll (clients/python/tests/pooler). Skips,
# saying why, without pgbouncer or the Python toolchain, except in CI (PGCOORD_CI=1).
. "$(dirname "$0")/lib.sh"
skip_without_pg
PY=${PGCOORD_PYTHON:-/usr/bin/python3}
missing=()
[ -x "$PY" ] || missing+=("$PY (Debian package python3)")
if [ -x "$PY" ]; then
	for m in psycopg:python3-psycopg psycopg_pool:python3-psycopg-pool pytest:python3-pytest \
		pytest_asyncio:python3-pytest-asyncio; do
		"$PY" -c "import ${m%%:*}" 2>/dev/null || missing+=("${m#*:}")
	done
fi
if [ ${#missing[@]} -gt 0 ]; then
	[ "${PGCOORD_CI:-}" = 1 ] && fail "the Python client's toolchain is missing: ${missing[*]}"
	echo "skipped: the Python client needs ${missing[*]}" >&2
	exit 77
fi
. "$(dirname "$0")/pgbouncer_lib.sh"
cleanup() {
	stop_bouncers
	rm -rf "$TMP"
}
trap cleanup EXIT
start_bouncer transaction 4
cd "$SRC/clients/python" || fail "no clients/python in $SRC"
PGCOORD_TEST_POOLER_DSN=$bouncer_dsn PGCOORD_TEST_POOLER_SIZE=4 PGCOORD_BIN=$PG PYTHONDONTWRITEBYTECODE=1 \
	"$PY" -m pytest -q -p no:cacheprovider tests/pooler ||
	fail "the Python client's tests behind PgBouncer failed"
