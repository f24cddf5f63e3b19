# go_lib.sh - what the Go client's tests share (sourced after lib.sh): the toolchain and the
# drivers Debian packages, checked (a skip, saying why, except in CI, where it fails), and a
# GOPATH of the test's own in which the client sits at its import path beside
# /usr/share/gocode, for offline builds in GOPATH mode (see tests/cli/client_go.sh), and
# go_locked.
go_skip_or_fail() {
	[ "${PGCOORD_CI:-}" = 1 ] && fail "$1"
	echo "skipped: $1" >&2
	exit 77
}
command -v go >/dev/null 2>&1 || go_skip_or_fail "no go toolchain (install golang-go)"
gocode=${PGCOORD_GOCODE:-/usr/share/gocode}
for d in github.com/jackc/pgx/v4 github.com/lib/pq; do
	[ -d "$gocode/src/$d" ] || go_skip_or_fail "no $d under $gocode (install golang-github-jackc-pgx-v4-dev golang-github-lib-pq-dev)"
done
export GOCACHE=${GOCACHE:-${PGCOORD_BUILD:-$TMP}/go-cache} GOPROXY=off GOTOOLCHAIN=local
# The GOPATH: $gopath, with the client at $gopath/src/github.com/pgcoord/pgcoord/clients/go.
gopath=$TMP/gopath
mkdir -p "$gopath/src/github.com/pgcoord/pgcoord/clients"
ln -s "$SRC/clients/go" "$gopath/src/github.com/pgcoord/pgcoord/clients/go"
# go_locked CMD...: CMD under an exclusive lock on the build cache, which every Go build of the
# tests takes (tests/conformance/run_go.sh and bench/clients/go/cmd too): tests that run at
# once would each compile the same packages, where one after the other the second finds them
# in the cache. Only builds go under it, never a test's run.
go_locked() {
	mkdir -p "$GOCACHE" || return 1
	(
		flock -w 600 8 || { echo "waited 600 s for the lock on $GOCACHE" >&2; exit 1; }
		"$@"
	) 8<"$GOCACHE"
}
