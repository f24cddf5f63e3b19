#!/usr/bin/env bash
# client_go.sh - the Go client (clients/go): go vet and go test -race of its module, then its
# tests against the test server through both drivers Debian packages (pgx v4's stdlib adapter
# and lib/pq). Skips without go (a failure in CI, which installs it). About 40 s with a warm
# build cache, most of it the race-instrumented build, which the other Go tests' builds wait for
# (go_locked) and then find in the cache.
#
# The driver tests build offline in GOPATH mode: the client is linked into a GOPATH of the
# run's own at its import path, beside /usr/share/gocode where Debian's golang-*-dev packages
# put their sources. (Module mode with replace directives cannot work offline: pgx v4's go.mod
# requires modules Debian does not package, and Go reads their go.mod files.)
source "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN="$PGCOORD_TEST_DSN"

. "$(dirname "$0")/go_lib.sh"

client=$SRC/clients/go
export GOFLAGS=-mod=mod

# Formatted as gofmt formats it, every file of the module and of the driver tests.
unformatted=$(cd "$client" && gofmt -l .)
[ -z "$unformatted" ] || fail "gofmt would change: $unformatted"

# The module: no dependency, unit tests. Vet and the race-instrumented build of every package's
# tests (run with no test selected) under the build cache's lock (go_locked); the tests then
# run outside it, from the cache.
go_locked sh -c 'cd "$1" && go vet ./... && go test -race -count=1 -run "^$" ./... >/dev/null' - "$client" ||
	fail "vet or build of the client module's tests"
(cd "$client" && go test -race -count=1 ./...) || fail "the client module's unit tests"

# The driver tests, in GOPATH mode.
pkg=github.com/pgcoord/pgcoord/clients/go/drivertest
export GO111MODULE=off GOPATH=$gopath:$gocode GOFLAGS=
run 0 "$PG" init --schema "goclient_$$"
trap 'psql_q "DROP SCHEMA IF EXISTS goclient_$$ CASCADE" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
go_locked sh -c 'cd "$1" && go vet . && go test -race -c -o "$2" .' - "$gopath/src/$pkg" "$TMP/drivertest.test" ||
	fail "vet or build of the driver tests"
(cd "$gopath/src/$pkg" && PGCOORD_TEST_SCHEMA=goclient_$$ "$TMP/drivertest.test" -test.count=1 -test.timeout=10m -test.v 2>&1) >"$TMP/test.log"
status=$?
grep -E '^(=== RUN|--- |[1-5]\. |ok|FAIL|PASS|panic)|_test.go' "$TMP/test.log" | grep -v '^=== RUN' | tail -80
[ $status -eq 0 ] || { tail -40 "$TMP/test.log"; fail "go test of the driver tests (exit $status)"; }
for drv in pgx postgres; do
	grep -q -- "--- PASS: TestSeedLab/$drv" "$TMP/test.log" || fail "the seed's lab did not pass with driver $drv"
done
echo "ok: the Go client with pgx v4 and lib/pq"
