#!/usr/bin/env bash
# The Python client (clients/python): mypy --strict on the package, then its pytest suite
# against the test server, both with Debian's interpreter (/usr/bin/python3), which is the
# one that sees python3-psycopg and friends. Skips, saying why, when a part is missing;
# in CI (PGCOORD_CI=1) a missing part is a failure.
. "$(dirname "$0")/lib.sh"
skip_without_pg
PY=${PGCOORD_PYTHON:-/usr/bin/python3}
missing=()
[ -x "$PY" ] || missing+=("$PY (Debian package python3)")
if [ -x "$PY" ]; then
	for m in psycopg:python3-psycopg psycopg_pool:python3-psycopg-pool pytest:python3-pytest \
		pytest_asyncio:python3-pytest-asyncio mypy:mypy; do
		"$PY" -c "import ${m%%:*}" 2>/dev/null || missing+=("${m#*:}")
	done
fi
if [ ${#missing[@]} -gt 0 ]; then
	[ "${PGCOORD_CI:-}" = 1 ] && fail "the Python client's toolchain is missing: ${missing[*]}"
	echo "skipped: the Python client needs ${missing[*]}" >&2
	exit 77
fi
cd "$SRC/clients/python" || fail "no clients/python in $SRC"
"$PY" -m mypy --strict --cache-dir "$TMP/mypy" pgcoord || fail "mypy --strict found errors in clients/python/pgcoord"
PGCOORD_BIN=$PG PYTHONDONTWRITEBYTECODE=1 "$PY" -m pytest -q -p no:cacheprovider tests ||
	fail "the Python client's tests failed"
