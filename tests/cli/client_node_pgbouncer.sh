#!/usr/bin/env bash
# client_node_pgbouncer.sh - the Node.js client (clients/node) behind a real PgBouncer in
# transaction mode: it finds the pooler by itself, refuses session locks (nothing left held),
# takes transaction locks, its worker polls instead of LISTEN and works its jobs, and jobResult
# returns; behind one in statement mode it says so and refuses session locks naming it
# (clients/node/test/pooler). Skips, saying why, without node, npm or pgbouncer, except in CI
# (PGCOORD_CI=1).
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/node_lib.sh"
. "$(dirname "$0")/pgbouncer_lib.sh"
cleanup() {
	stop_bouncers
	rm -rf "$TMP"
}
trap cleanup EXIT

cd "$node_dir" || fail "no $node_dir"
node_packages
out=$TMP/build
npx --no-install tsc -p tsconfig.json --outDir "$out" || fail "tsc failed in $node_dir"
ln -s "$node_dir/node_modules" "$out/node_modules"
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
