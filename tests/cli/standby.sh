# standby.sh - pgcoord against a streaming standby: a write is refused with a retry-later error
# (exit 69) that says the server is a standby and how to reach the primary, the session is
# given up rather than kept, nothing is half-done; a DSN naming both hosts with
# target_session_attrs=read-write lands on the primary; blockers, locks and activity work on
# the standby and say that it is one.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/replica_lib.sh"

pair_start
run 0 "$PG" -d "$PRI_DSN" init
run 0 "$PG" -d "$PRI_DSN" queue enqueue q --payload '{"n":0}'
wait_replayed
pport=$(cat "$PAIR/primary/port")
sport=$(cat "$PAIR/standby/port")

# Writes on the standby: exit 69 (retry later), the server's refusal and what to do.
run 69 "$PG" -d "$SBY_DSN" queue enqueue q --payload '{"n":1}'
err_has "is a standby (in recovery)"
err_has "127.0.0.1:$sport"
err_has "SQLSTATE 25006"
err_has "^HINT: .*target_session_attrs=read-write"
printf '{"n":2}\n{"n":3}\n' >"$TMP/batch"
run 69 "$PG" -d "$SBY_DSN" queue enqueue q --file "$TMP/batch"
err_has "is a standby"
run 69 "$PG" -d "$SBY_DSN" tx -c "INSERT INTO pgcoord.jobs (queue, payload) VALUES ('q', '{}')"
err_has "is a standby"
run 1 "$PG" -d "$SBY_DSN" elect --ttl 5s --wait 2s standby-leader -- true
err_has "is a standby"
# Nothing of it reached the primary: still the one job.
[ "$(psql_at "$PRI_DSN" "SELECT count(*) FROM pgcoord.jobs")" = 1 ] || fail "a refused write left jobs behind"
[ "$(psql_at "$PRI_DSN" "SELECT count(*) FROM pgcoord.leases WHERE name = 'standby-leader'")" = 0 ] ||
	fail "a refused grant left a lease behind"

# Both hosts, the standby first: read-write finds the primary.
multi="host=127.0.0.1,127.0.0.1 port=$sport,$pport dbname=postgres user=postgres target_session_attrs=read-write"
run 0 "$PG" -d "$multi" queue enqueue q --payload '{"n":4}'
[ "$(psql_at "$PRI_DSN" "SELECT count(*) FROM pgcoord.jobs")" = 2 ] || fail "the multi-host enqueue did not reach the primary"

# Forensics work on the standby, and say what it is.
for cmd in locks activity blockers; do
	run 0 "$PG" -d "$SBY_DSN" "$cmd"
	err_has "127.0.0.1:$sport is a standby (in recovery)"
	run 0 "$PG" -d "$PRI_DSN" "$cmd"
	[ ! -s "$TMP/err" ] || { cat "$TMP/err"; fail "$cmd on the primary printed a note"; }
	run 0 "$PG" -q -d "$SBY_DSN" "$cmd"
	[ ! -s "$TMP/err" ] || { cat "$TMP/err"; fail "$cmd -q on the standby printed a note"; }
done
echo ok
