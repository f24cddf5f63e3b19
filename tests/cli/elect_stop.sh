# elect_stop.sh - a leader frozen past its TTL (SIGSTOP) loses to another candidate; its
# command, still running, has every write guarded by fence_check refused with SQLSTATE PCF01
# once the newer token exists; resumed (SIGCONT), the stale pgcoord stops its command and
# exits 75. No write with the old token lands after the first write with the new one.
. "$(dirname "$0")/elect_lib.sh"

q="\"$SCHEMA\""
psql_q "CREATE TABLE $q.writes (token bigint, at timestamptz DEFAULT clock_timestamp())" ||
	fail "cannot create the table"
# The command writes every 100 ms in a transaction guarded by the fencing token, and logs
# each outcome: "ok TOKEN" or "fail TOKEN SQLSTATE".
cat >"$TMP/writer.sh" <<SH
#!/bin/sh
echo "start \$\$ \$PGCOORD_FENCE_TOKEN \$(date +%s.%N)" >>"$LOG"
trap 'echo "stop \$\$ \$PGCOORD_FENCE_TOKEN \$(date +%s.%N) term" >>"$LOG"; exit 0' TERM
while :; do
	if out=\$(psql -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=sqlstate "$PGCOORD_TEST_DSN" \
		-c "BEGIN" \
		-c "SELECT $q.fence_check('\$PGCOORD_LEASE_NAME', \$PGCOORD_FENCE_TOKEN)" \
		-c "INSERT INTO $q.writes (token) VALUES (\$PGCOORD_FENCE_TOKEN)" \
		-c "COMMIT" 2>&1 >/dev/null); then
		echo "ok \$PGCOORD_FENCE_TOKEN" >>"$TMP/writes"
	else
		echo "fail \$PGCOORD_FENCE_TOKEN \$(echo "\$out" | grep -o 'PCF0[0-9]' | head -n 1)" >>"$TMP/writes"
	fi
	sleep 0.1
done
SH
chmod +x "$TMP/writer.sh"
: >"$TMP/writes"

timeout 60 "$PG" elect --schema "$SCHEMA" --ttl 2s stop -- "$TMP/writer.sh" 2>"$TMP/err1" &
a_job=$!
wait_until 10 has_starts 1 || { cat "$TMP/err1"; fail "the first candidate was not elected"; }
a=$(holder_pid stop)
a_child=$(last_child_pid)
wait_until 10 grep -q "^ok 1" "$TMP/writes" || { cat "$TMP/writes"; fail "the leader's command cannot write"; }

timeout 60 "$PG" elect --schema "$SCHEMA" --ttl 2s stop -- "$TMP/writer.sh" 2>"$TMP/err2" &
sleep 0.3
kill -STOP "$a"
# B takes over after A's TTL; A's command, still running, is fenced off.
wait_until 15 has_starts 2 || { kill -CONT "$a"; cat "$LOG"; fail "no new leader while the old one is frozen"; }
[ "$(last_token)" -eq 2 ] || fail "the new leader's token is $(last_token), expected 2"
wait_until 10 grep -q "^ok 2" "$TMP/writes" || { kill -CONT "$a"; fail "the new leader cannot write"; }
wait_until 10 grep -q "^fail 1 PCF01" "$TMP/writes" ||
	{ kill -CONT "$a"; cat "$TMP/writes"; fail "the stale leader's write was not refused with PCF01"; }
alive "$a_child" || fail "the frozen leader's command died while pgcoord was frozen (nothing stopped it)"

kill -CONT "$a"
wait "$a_job"
rc=$?
[ "$rc" -eq 75 ] || { cat "$TMP/err1"; fail "the stale pgcoord exited $rc, expected 75"; }
grep -q "lost" "$TMP/err1" || { cat "$TMP/err1"; fail "no message about the lost lease"; }
wait_until 5 dead "$a_child" || fail "the stale leader's command still runs"
# The database saw no write with token 1 after the first write with token 2.
r=$(psql_q "SELECT (SELECT max(at) FROM $q.writes WHERE token = 1) < (SELECT min(at) FROM $q.writes WHERE token = 2)")
[ "$r" = t ] || { psql_q "SELECT token, at FROM $q.writes ORDER BY at"; fail "a stale write landed after a newer one"; }
[ "$(psql_q "SELECT count(*) FROM $q.writes WHERE token = 1")" -gt 0 ] || fail "no write with token 1"
for p in $(jobs -p); do kill -TERM "$p" 2>/dev/null; done
wait
