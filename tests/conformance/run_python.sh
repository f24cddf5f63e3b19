#!/usr/bin/env bash
# The conformance runner with the Python client's adapter (clients/python), which runs on
# Debian's interpreter (/usr/bin/python3, the one that sees python3-psycopg):
#   run_python.sh RUNNER_PYTHON RUN_PY [run.py options: --adapter c=..., --mixed, ...]
# Skips (77), naming the missing Debian packages, when that interpreter lacks them; in CI
# (PGCOORD_CI=1) that is a failure, as for client__python.
set -u
runner=$1 run_py=$2
shift 2
PY=${PGCOORD_PYTHON:-/usr/bin/python3}
adapter=${PGCOORD_SRC:?}/clients/python/pgcoord_conformance_adapter.py
missing=()
if [ -x "$PY" ]; then
	for m in psycopg:python3-psycopg psycopg_pool:python3-psycopg-pool; do
		"$PY" -c "import ${m%%:*}" 2>/dev/null || missing+=("${m#*:}")
	done
else
	missing+=("$PY (Debian package python3)")
fi
if [ ${#missing[@]} -gt 0 ]; then
	if [ "${PGCOORD_CI:-}" = 1 ]; then
		echo "FAIL: the Python client's adapter needs ${missing[*]}" >&2
		exit 1
	fi
	echo "skipped: the Python client's adapter needs ${missing[*]}" >&2
	exit 77
fi
exec "$runner" "$run_py" --adapter "python=$(printf '%q %q' "$PY" "$adapter")" "$@"
