# elect_usage.sh - pgcoord elect: help, bad input (exit 64 with a message, nothing held),
# the command's status, 126/127, --wait, signals while campaigning, and --follow.
. "$(dirname "$0")/elect_lib.sh"

run 0 "$PG" elect --help
out_has "^Usage: pgcoord \[-d DSN\] elect"
out_has "--renew-every"
out_has "--kill-after"
out_has "--follow"
awk 'length($0) > 80 { print; bad = 1 } END { exit bad }' "$TMP/out" || fail "help wider than 80 columns"
run 0 "$PG" help elect
out_has "PGCOORD_FENCE_TOKEN"
run 0 "$PG" --help
out_has "  elect "
out_has "  lease "

e() { run 64 "$PG" elect --schema "$SCHEMA" "$@"; err_has 'Try "pgcoord elect --help"'; }
e --ttl 0 n -- true
err_has "ttl must be greater than zero"
e --ttl 0s n -- true
e --ttl -1s n -- true
err_has 'invalid duration "-1s"'
e --ttl 3s --renew-every 3s n -- true
err_has "renew-every (3s) must be shorter than --ttl (3s)"
e --ttl 3s --renew-every 5s n -- true
e --ttl 3s --renew-every 0 n -- true
err_has "renew-every must be greater than zero"
e --ttl 3s --renew-every 1s --kill-after 2s n -- true
err_has "kill-after"
e "" -- true
err_has "NAME must not be empty"
e --ttl 3s
err_has "missing lease NAME"
e n
err_has "missing COMMAND"
e n --
err_has "missing COMMAND"
e n extra -- true
err_has 'unexpected argument "extra"'
e --bogus n -- true
err_has "unknown option --bogus"
e --ttl n -- true
e --ttl 5 --wait=x n -- true
err_has "--wait"
e --holder "$(printf 'h%.0s' $(seq 1 201))" n -- true
err_has "holder is longer"
e --holder "" n -- true
err_has "holder must not be empty"
e "$(printf 'n%.0s' $(seq 1 201))" -- true
err_has "longer than 200"
run 64 "$PG" elect --schema "" n -- true
# None of it touched the database.
[ "$(psql_q "SELECT count(*) FROM \"$SCHEMA\".leases")" = 0 ] || fail "bad input created a lease"

# The command's own status comes back; the lease is released after it.
run 7 "$PG" elect --schema "$SCHEMA" --ttl 5s st -- sh -c 'exit 7'
run 0 "$PG" -q elect --schema "$SCHEMA" --ttl 5s st -- sh -c 'test "$PGCOORD_LEASE_NAME" = st && test "$PGCOORD_FENCE_TOKEN" = 2 && test -n "$PGCOORD_LEASE_EXPIRES" && test "$PGCOORD_LEASE_SCHEMA" = "'"$SCHEMA"'"'
[ ! -s "$TMP/err" ] || { cat "$TMP/err"; fail "-q printed something"; }
run 143 "$PG" elect --schema "$SCHEMA" --ttl 5s st -- sh -c 'kill -TERM $$'
run 127 "$PG" elect --schema "$SCHEMA" --ttl 5s st -- /nonexistent/command
err_has "/nonexistent/command"
run 126 "$PG" elect --schema "$SCHEMA" --ttl 5s st -- "$TMP"
run 0 "$PG" --json lease show --schema "$SCHEMA" st
out_has '"held":false'
# 126 and 127 are found before campaigning: they took no token.
out_has '"token":3'

# A held lease: --wait gives up with 1; SIGTERM while campaigning ends with 143.
timeout 30 "$PG" elect --schema "$SCHEMA" --ttl 5s held -- "$CHILD" "$LOG" 0 2>/dev/null &
holder_job=$!
wait_until 10 has_starts 1 || fail "not elected"
run 1 timeout 20 "$PG" elect --schema "$SCHEMA" --ttl 5s --wait 300ms held -- true
err_has "not elected"
timeout 20 "$PG" elect --schema "$SCHEMA" --ttl 5s held -- true 2>/dev/null &
c_job=$!
sleep 0.5
kill -TERM "$(pgrep -P "$c_job" pgcoord || echo "$c_job")"
wait "$c_job"
rc=$?
[ "$rc" -eq 143 ] || fail "a campaigning pgcoord killed by SIGTERM exited $rc, expected 143"
# A SIGTERM to the whole process group (timeout(1) and service managers send one) reaches the
# watchdog too; pgcoord must still end with 143, not die of SIGPIPE telling it goodbye.
for i in 1 2 3; do
	setsid "$PG" elect --schema "$SCHEMA" --ttl 5s held -- true 2>/dev/null &
	g=$!
	sleep 1
	kill -TERM -- "-$g"
	wait "$g"
	rc=$?
	[ "$rc" -eq 143 ] || fail "pgcoord campaigning in a process group killed by SIGTERM exited $rc, expected 143"
done

# The operator takes the lease away: without --follow the leader stops its command and
# exits 75; with --follow it stops it and campaigns again, winning with a greater token.
held_token=$(last_token)
run 0 "$PG" lease release --schema "$SCHEMA" held --token "$held_token"
wait "$holder_job"
rc=$?
[ "$rc" -eq 75 ] || fail "the leader whose lease was released exited $rc, expected 75"
wait_until 5 dead "$(last_child_pid)" || fail "its command still runs"

check_log 0
mv "$LOG" "$TMP/log.held"
: >"$LOG"
timeout 30 "$PG" elect --schema "$SCHEMA" --ttl 2s --follow fol -- "$CHILD" "$LOG" 0 2>"$TMP/ferr" &
f_job=$!
wait_until 10 has_starts 1 || fail "not elected (follow)"
t1=$(last_token)
c1=$(last_child_pid)
run 0 "$PG" lease release --schema "$SCHEMA" fol --token "$t1"
wait_until 10 has_starts 2 || { cat "$TMP/ferr"; fail "--follow did not run the command again"; }
dead "$c1" || fail "the first command still runs"
[ "$(last_token)" -gt "$t1" ] || fail "no greater token after --follow"
alive "$f_job" || fail "pgcoord --follow exited"
grep -q "campaigning again" "$TMP/ferr" || { cat "$TMP/ferr"; fail "no message about campaigning again"; }
kill -TERM "$(pgrep -P "$f_job" pgcoord)"
wait "$f_job"
check_log 0
