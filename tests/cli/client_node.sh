# client_node.sh - the Node.js client (clients/node): installs its locked packages the first
# time (npm ci), type-checks it strictly and runs its tests against the test server (its tests
# behind a real PgBouncer, test/pooler, are client_node_pgbouncer.sh's).
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/node_lib.sh"
cd "$node_dir" || fail "no $node_dir"
node_packages
# The strict type check of src/ and test/ is npm test's own compile of tsconfig.json (pretest),
# which fails on any error that tsc --noEmit -p tsconfig.json reports: one compile, not two.
PGCOORD_BIN="$PG" npm test --silent >"$TMP/out" 2>&1
rc=$?
grep -E '^(not ok|# (tests|pass|fail|skipped))' "$TMP/out"
if [ $rc -ne 0 ]; then
	cat "$TMP/out"
	fail "npm test failed in $node_dir"
fi
grep -q '^# skipped 0$' "$TMP/out" || { cat "$TMP/out"; fail "tests were skipped"; }

echo ok
