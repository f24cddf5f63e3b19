# run_fence.sh - pgcoord run --fence: growing tokens shared with leases, checked by fence_check
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN="$PGCOORD_TEST_DSN"
schema="pgc_fence_$$"
name="fenced-job-$$"
trap 'psql_q "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
run 0 "$PG" init --schema "$schema"

tok() { "$PG" run --fence --schema "$schema" "$name" -- sh -c 'echo "$PGCOORD_FENCE_TOKEN"'; }
t1=$(tok) || fail "first run"
t2=$(tok) || fail "second run"
[ "$t1" -ge 1 ] && [ "$t2" -gt "$t1" ] || fail "tokens do not grow: $t1 then $t2"

# The current token passes fence_check; the older one is refused with PCF01 in the writer's
# own transaction.
run 0 psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_DSN" -c "SELECT $schema.fence_check('$name', $t2)"
run 1 psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_DSN" -c "\\set VERBOSITY verbose" -c "SELECT $schema.fence_check('$name', $t1)"
err_has "PCF01"

# A lease on the same name takes the next token from the same counter.
lease_tok=$("$PG" elect --schema "$schema" --ttl 5s "$name" -- sh -c 'echo "$PGCOORD_FENCE_TOKEN"') || fail "elect"
[ "$lease_tok" -gt "$t2" ] || fail "lease token $lease_tok not above lock token $t2"
t3=$(tok) || fail "third run"
[ "$t3" -gt "$lease_tok" ] || fail "lock token $t3 not above lease token $lease_tok"

# --key uses the key as printed for the name.
run 0 "$PG" run --fence --schema "$schema" --key 20,7 -- sh -c 'test -n "$PGCOORD_FENCE_TOKEN"'
[ "$(psql_q "SELECT count(*) FROM $schema.leases WHERE name = '20,7'")" = 1 ] || fail "no token row for key 20,7"

# Without --fence there is no token; bad combinations and a missing schema.
run 0 "$PG" run --schema "$schema" "$name" -- sh -c 'test -z "$PGCOORD_FENCE_TOKEN"'
run 64 "$PG" run --fence -s --schema "$schema" "$name" -- true
err_has "exclusive"
run 69 "$PG" run --fence --schema "pgc_fence_missing_$$" "$name" -- true
err_has "pgcoord init"
# Nothing is left held: status exits 0 when the lock is free.
run 0 "$PG" lock status --schema "$schema" "$name"
echo ok
