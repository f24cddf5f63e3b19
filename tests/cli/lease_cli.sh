# lease_cli.sh - pgcoord lease show and lease release: output, JSON keys, exit codes.
. "$(dirname "$0")/elect_lib.sh"

run 0 "$PG" lease --help
out_has "^Usage: pgcoord \[-d DSN\] \[--json\] lease show"
awk 'length($0) > 80 { print; bad = 1 } END { exit bad }' "$TMP/out" || fail "help wider than 80 columns"
l() { run 64 "$PG" lease "$@"; err_has 'Try "pgcoord lease --help"'; }
l
err_has "missing subcommand"
l frob
err_has 'unknown subcommand "frob"'
l release --schema "$SCHEMA" x
err_has "needs --token"
l release --schema "$SCHEMA" x --token 0
err_has "positive integer"
l release --schema "$SCHEMA" x --token abc
l release --schema "$SCHEMA" --token 3
err_has "missing lease name"
l show --schema "$SCHEMA" a b
err_has 'unexpected argument "b"'
l show --token 3
l show ""
l --schema "" show

run 0 "$PG" lease show --schema "$SCHEMA"
out_has "no leases"
run 65 "$PG" lease show --schema "$SCHEMA" nosuch
err_has 'no lease or token named "nosuch"'

timeout 30 "$PG" elect --schema "$SCHEMA" --ttl 5s --holder "the-leader" job -- "$CHILD" "$LOG" 0 2>/dev/null &
job=$!
wait_until 10 has_starts 1 || fail "not elected"
psql_q "SELECT \"$SCHEMA\".fence_next('lock-name', 'a-lock-holder')" >/dev/null
run 0 "$PG" lease show --schema "$SCHEMA"
out_has "^NAME "
out_has "^job  *1  held, "
out_has "the-leader"
out_has "^lock-name  *1  lock token"
run 0 "$PG" --json lease show --schema "$SCHEMA" job
for k in name token kind holder held ttl_ms granted_at renewed_at expires_at released_at expires_in_ms; do
	out_has "\"$k\":"
done
out_has '"name":"job","token":1,"kind":"lease","holder":"the-leader","held":true,"ttl_ms":5000'
out_has '"expires_at":"20[0-9-]*T[0-9:.]*Z"'
run 0 "$PG" --json lease show --schema "$SCHEMA"
[ "$(wc -l <"$TMP/out")" -eq 2 ] || { cat "$TMP/out"; fail "expected one JSON line per name"; }
out_has '"kind":"lock"'

# Releasing needs the current token: one never granted is not found (65).
run 65 "$PG" lease release --schema "$SCHEMA" job --token 9
err_has "has no token 9"
run 0 "$PG" lease release --schema "$SCHEMA" job --token 1
out_has 'released "job" (token 1)'
wait "$job"
rc=$?
[ "$rc" -eq 75 ] || fail "the leader exited $rc after the operator released its lease, expected 75"
run 0 "$PG" --json lease release --schema "$SCHEMA" job --token 1
out_has '"released":true'
run 0 "$PG" -q elect --schema "$SCHEMA" --ttl 5s job -- true
run 1 "$PG" lease release --schema "$SCHEMA" job --token 1
err_has "stale"
# A schema without the tables.
run 69 "$PG" lease show --schema "pgc_no_such_schema_$$"
err_has "pgcoord init"
# An unreachable database: 69, password masked.
run 69 "$PG" -d "postgresql://u:secret@127.0.0.1:1/x?connect_timeout=3" lease show
grep -q secret "$TMP/err" && fail "password printed"
run 69 "$PG" -d "postgresql://u:secret@127.0.0.1:1/x?connect_timeout=3" elect n -- true
grep -q secret "$TMP/err" && fail "password printed"
true
