#!/usr/bin/env bash
# The conformance runner with the Go client's adapter (clients/go/drivertest/cmd/
# pgcoord-conformance), built first, offline, against pgx v4's stdlib driver:
#   run_go.sh RUNNER_PYTHON RUN_PY [run.py options: --adapter c=..., --mixed, ...]
# It builds as the Go client's driver tests do (tests/cli/client_go.sh): in GOPATH mode, the
# client linked at its import path in a GOPATH of the run's own beside /usr/share/gocode, where
# Debian's golang-*-dev packages put the drivers. The adapter goes into a temporary directory,
# never the source tree. Skips (77), naming what is missing, without go or pgx v4; in CI
# (PGCOORD_CI=1) that is a failure, as for client__go.
set -u
runner=$1 run_py=$2
shift 2
gocode=${PGCOORD_GOCODE:-/usr/share/gocode}
missing=()
command -v go >/dev/null 2>&1 || missing+=("go (Debian package golang-go)")
[ -d "$gocode/src/github.com/jackc/pgx/v4" ] ||
	missing+=("github.com/jackc/pgx/v4 under $gocode (Debian package golang-github-jackc-pgx-v4-dev)")
if [ ${#missing[@]} -gt 0 ]; then
	if [ "${PGCOORD_CI:-}" = 1 ]; then
		echo "FAIL: the Go client's adapter needs ${missing[*]}" >&2
		exit 1
	fi
	echo "skipped: the Go client's adapter needs ${missing[*]}" >&2
	exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pgcoord-conf-go.XXXXXX") || exit 1
pid=
cleanup() {
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

mkdir -p "$tmp/gopath/src/github.com/pgcoord/pgcoord/clients"
ln -s "${PGCOORD_SRC:?}/clients/go" "$tmp/gopath/src/github.com/pgcoord/pgcoord/clients/go"
# Under the exclusive lock on the build cache that every Go build of the tests takes
# (tests/cli/go_lib.sh's go_locked): the tests that build at once find in the cache what the
# first compiled.
gocache=${GOCACHE:-${PGCOORD_BUILD:-$tmp}/go-cache}
mkdir -p "$gocache" || exit 1
(
	flock -w 600 8 || { echo "FAIL: waited 600 s for the lock on $gocache" >&2; exit 1; }
	cd "$tmp/gopath/src/github.com/pgcoord/pgcoord/clients/go/drivertest" &&
		GO111MODULE=off GOPATH="$tmp/gopath:$gocode" GOFLAGS= GOPROXY=off GOTOOLCHAIN=local GOCACHE="$gocache" \
			sh -c 'go vet ./cmd/pgcoord-conformance && go build -o "$1" ./cmd/pgcoord-conformance' - \
				"$tmp/pgcoord-conformance"
) 8<"$gocache" || { echo "FAIL: vet or build of the Go client's adapter" >&2; exit 1; }

"$runner" "$run_py" --adapter "go=$(printf '%q' "$tmp/pgcoord-conformance")" "$@" &
pid=$!
wait "$pid"
status=$?
pid=
exit $status
