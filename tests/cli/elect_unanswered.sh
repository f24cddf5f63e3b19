# elect_unanswered.sh - renewals that the server does not answer (the lease table is locked
# by another session): the leader stops its command so that it is dead by the time the lease
# expires on the server, SIGTERM first, and exits 75.
. "$(dirname "$0")/elect_lib.sh"

q="\"$SCHEMA\""
timeout 60 "$PG" elect --schema "$SCHEMA" --ttl 3s --renew-every 500ms --kill-after 1s unans -- "$CHILD" "$LOG" 0 \
	2>"$TMP/err1" &
job=$!
wait_until 10 has_starts 1 || { cat "$TMP/err1"; fail "not elected"; }
child=$(last_child_pid)
sleep 0.7
# Hold the table: every renewal now waits, unanswered.
psql -X -q "$PGCOORD_TEST_DSN" -c "BEGIN" -c "LOCK TABLE $q.leases IN ACCESS EXCLUSIVE MODE" \
	-c "SELECT pg_sleep(4)" -c "COMMIT" >/dev/null 2>&1 &
locker=$!
wait "$job"
rc=$?
[ "$rc" -eq 75 ] || { cat "$TMP/err1"; fail "pgcoord exited $rc, expected 75"; }
grep -q "no renewal succeeded in time" "$TMP/err1" || { cat "$TMP/err1"; fail "no message about the missed renewals"; }
dead "$child" || fail "the command still runs"
grep -q "^stop $child .* term$" "$LOG" || { cat "$LOG"; fail "the command did not get SIGTERM first"; }
kill "$locker" 2>/dev/null
wait "$locker" 2>/dev/null
# Dead by the server's expiry (same host, same clock): the stop is logged before it.
stop=$(awk -v p="$child" '$1 == "stop" && $2 == p { print $4 }' "$LOG")
expires=$(psql_q "SELECT extract(epoch FROM expires_at) FROM $q.leases WHERE name = 'unans'")
awk -v s="$stop" -v e="$expires" 'BEGIN { printf "stopped %.3f s before the expiry\n", e - s; exit !(s <= e) }' ||
	fail "the command stopped after the lease expired on the server"
