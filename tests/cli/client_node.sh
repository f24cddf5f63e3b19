# client_node.sh - the Node.js client (clients/node): installs its locked packages the first
# time (npm ci), type-checks it strictly and runs its tests against the test server (its tests
# behind a real PgBouncer, test/pooler, are client_node_pgbouncer.sh's).
. "$(dirname "$0")/lib.sh"
skip_without_pg
missing() {
	# A part that is missing skips here, and fails in CI, which installs every toolchain.
	[ -n "${PGCOORD_CI:-}" ] && fail "$1 (CI must install it)"
	echo "skipped: $1" >&2
	exit 77
}
command -v node >/dev/null 2>&1 || missing "node is not installed (Node.js 20 or newer and npm)"
command -v npm >/dev/null 2>&1 || missing "npm is not installed"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || missing "node $(node --version) is too old: the client needs Node.js 20 or newer"
dir="$SRC/clients/node"
cd "$dir" || fail "no $dir"
# The packages exactly as locked, into clients/node/node_modules (ignored by git), under a lock
# on this directory that tests/conformance/run_node.sh takes too: two installs never overlap.
exec 9<"$dir"
flock -w 600 9 || fail "waited 600 s for the lock on $dir"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error >"$TMP/npm" 2>&1 || { cat "$TMP/npm"; fail "npm ci failed in $dir"; }
fi
exec 9<&-
# The strict type check of src/ and test/ is npm test's own compile of tsconfig.json (pretest),
# which fails on any error that tsc --noEmit -p tsconfig.json reports: one compile, not two.
PGCOORD_BIN="$PG" npm test --silent >"$TMP/out" 2>&1
rc=$?
grep -E '^(not ok|# (tests|pass|fail|skipped))' "$TMP/out"
if [ $rc -ne 0 ]; then
	cat "$TMP/out"
	fail "npm test failed in $dir"
fi
grep -q '^# skipped 0$' "$TMP/out" || { cat "$TMP/out"; fail "tests were skipped"; }

echo ok
