#!/usr/bin/env bash
# client_go_pgbouncer.sh - the Go client behind a real PgBouncer in transaction mode, with pgx
# v4 and lib/pq: it finds the pooler by itself, refuses session locks (nothing left held),
# takes transaction locks, and its worker polls instead of LISTEN and works its jobs; behind
# one in statement mode it says so and refuses session locks naming it
# (clients/go/drivertest/pooler_test.go). Skips without go, the drivers or pgbouncer, except
# in CI (PGCOORD_CI=1).
source "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN="$PGCOORD_TEST_DSN"
. "$(dirname "$0")/go_lib.sh"
. "$(dirname "$0")/pgbouncer_lib.sh"
schema=gopooler_$$
cleanup() {
	stop_bouncers
	psql_q "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
start_bouncer transaction 4
tx_dsn=$bouncer_dsn
start_bouncer statement 4
stmt_dsn=$bouncer_dsn
run 0 "$PG" init --schema "$schema"

# In GOPATH mode beside Debian's driver sources (go_lib.sh), as tests/cli/client_go.sh builds them.
cd "$gopath/src/github.com/pgcoord/pgcoord/clients/go/drivertest" || fail "no drivertest"
GO111MODULE=off GOPATH=$gopath:$gocode GOFLAGS= go_locked go test -race -c -o "$TMP/drivertest.test" . ||
	fail "build of the driver tests"
PGCOORD_TEST_SCHEMA=$schema PGCOORD_TEST_POOLER_DSN=$tx_dsn PGCOORD_TEST_POOLER_STATEMENT_DSN=$stmt_dsn \
	"$TMP/drivertest.test" -test.count=1 -test.timeout=10m -test.v \
	-test.run '^TestBehindPgBouncer(StatementMode)?$' >"$TMP/test.log" 2>&1
status=$?
grep -E '^(\s*--- |ok|FAIL|panic)|pooler_test.go' "$TMP/test.log"
[ $status -eq 0 ] || { tail -40 "$TMP/test.log"; fail "go test behind PgBouncer (exit $status)"; }
for t in TestBehindPgBouncer TestBehindPgBouncerStatementMode; do
	for drv in pgx postgres; do
		grep -q -- "--- PASS: $t/$drv" "$TMP/test.log" || fail "$t did not pass with driver $drv"
	done
done
echo "ok: the Go client behind PgBouncer in transaction mode"
