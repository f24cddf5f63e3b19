# init_concurrent.sh - 8 processes run init at once: each migration is applied exactly once
. "$(dirname "$0")/lib.sh"
skip_without_pg
schema="pgc_init_$$"
psql_q "DROP SCHEMA IF EXISTS $schema CASCADE" || fail "cannot reach the test server"

pids=()
for i in 1 2 3 4 5 6 7 8; do
	timeout 60 "$PG" -d "$PGCOORD_TEST_DSN" --json init --schema "$schema" >"$TMP/init.$i" 2>&1 &
	pids+=($!)
done
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || { cat "$TMP/init.$((i + 1))"; fail "init process $((i + 1)) failed"; }
done
applied=$(cat "$TMP"/init.* | python3 -c 'import json,sys; print(sum(json.loads(l)["applied"] for l in sys.stdin))')
latest=$(psql_q "SELECT count(*) FROM $schema.migrations")
[ "$latest" -ge 1 ] || fail "no migrations recorded"
[ "$applied" -eq "$latest" ] || fail "8 processes applied $applied migrations in all, expected $latest"
dups=$(psql_q "SELECT count(*) - count(DISTINCT version) FROM $schema.migrations")
[ "$dups" -eq 0 ] || fail "a migration was recorded twice"

# Again: a no-op.
run 0 "$PG" -d "$PGCOORD_TEST_DSN" init --schema "$schema"
out_has "up to date at version $latest"
# The default schema too.
run 0 "$PG" -d "$PGCOORD_TEST_DSN" init
run 0 "$PG" -d "$PGCOORD_TEST_DSN" info
out_has "schema:   pgcoord at version"
# A schema name that needs quoting.
run 0 "$PG" -d "$PGCOORD_TEST_DSN" init --schema "odd \"name\"; drop"
[ "$(psql_q "SELECT count(*) FROM \"odd \"\"name\"\"; drop\".migrations")" -eq "$latest" ] || fail "quoted schema not created"
psql_q "DROP SCHEMA $schema CASCADE; DROP SCHEMA \"odd \"\"name\"\"; drop\" CASCADE" >/dev/null
echo ok
