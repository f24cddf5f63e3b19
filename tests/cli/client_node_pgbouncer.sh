#!/usr/bin/env bash
# client_node_pgbouncer.sh - the Node.js client (clients/node) behind a real PgBouncer in
# transaction mode: it finds the pooler by itself, refuses session locks (nothing left held),
# takes transaction locks, its worker polls instead of LISTEN and works its jobs, and jobResult
# returns; behind one in statement mode it says so and refuses session locks naming it
# (clients/node/test/pooler). Skips, saying why, without node, npm or pgbouncer, except in CI
# (PGCOORD_CI=1).
. "$(dirname "$0")/lib.sh"
skip_without_pg
missing() {
	[ -n "${PGCOORD_CI:-}" ] && fail "$1 (CI must install it)"
	echo "skipped: $1" >&2
	exit 77
}
command -v node >/dev/null 2>&1 || missing "node is not installed (Node.js 20 or newer and npm)"
command -v npm >/dev/null 2>&1 || missing "npm is not installed"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || missing "node $(node --version) is too old: the client needs Node.js 20 or newer"
. "$(dirname "$0")/pgbouncer_lib.sh"
cleanup() {
	stop_bouncers
	rm -rf "$TMP"
}
trap cleanup EXIT

dir="$SRC/clients/node"
cd "$dir" || fail "no $dir"
# The locked packages, under the lock on this directory that client_node.sh and node_esm.sh
# take too; the strict compile of src/ and test/ goes to a directory of this test's own, since
# client__node rebuilds build/ here meanwhile.
exec 9<"$dir"
flock -w 600 9 || fail "waited 600 s for the lock on $dir"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error >"$TMP/npm" 2>&1 || { cat "$TMP/npm"; fail "npm ci failed in $dir"; }
fi
exec 9<&-
out=$TMP/build
npx --no-install tsc -p tsconfig.json --outDir "$out" || fail "tsc failed in $dir"
ln -s "$dir/node_modules" "$out/node_modules"
printf '{"type": "module"}\n' >"$out/package.json"

start_bouncer transaction 4
tx_dsn=$bouncer_dsn
start_bouncer statement 4
stmt_dsn=$bouncer_dsn
# Each test has a minute; a run that hangs past its tests (a pool that cannot end) fails here,
# before meson's bound, with what it printed.
PGCOORD_BIN="$PG" PGCOORD_TEST_POOLER_DSN=$tx_dsn PGCOORD_TEST_POOLER_STATEMENT_DSN=$stmt_dsn \
	timeout 150 node --test "$out"/test/pooler/*.test.js >"$TMP/pooler" 2>&1
rc=$?
[ $rc -eq 124 ] && echo "node --test did not end within 150 s"
grep -E '^(not ok|# (tests|pass|fail|skipped))' "$TMP/pooler"
[ $rc -eq 0 ] || { cat "$TMP/pooler"; fail "the Node.js client's tests behind PgBouncer failed"; }
grep -q '^# skipped 0$' "$TMP/pooler" || { cat "$TMP/pooler"; fail "tests behind PgBouncer were skipped"; }
echo "ok: the Node.js client behind PgBouncer in transaction and statement mode"
