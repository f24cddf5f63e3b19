# run_failover.sh - pgcoord run holds an advisory lock on the primary when the primary crashes:
# advisory locks are not WAL-logged, so the new primary holds none; run must kill its command
# and exit 75 within its heartbeat bound of the crash, long before the promotion; afterwards a
# new run -n through the same DSN gets the lock, on the new primary.
. "$(dirname "$0")/lib.sh"
ha_start --nodes 2 --sync
run 0 "$PG" -d "$HA_DSN" init
name="ha-lock-$$"
hpid=""
fpid=""
ha_on_exit() {
	[ -z "$hpid" ] || kill -KILL "$hpid" 2>/dev/null
	[ -z "$fpid" ] || wait "$fpid" 2>/dev/null
	[ -f "$TMP/child" ] && kill -KILL "$(cat "$TMP/child")" 2>/dev/null
}
advisory() { nq "$1" "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"; }
alive() { local s; s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ "$s" != Z ]; }
old=$(ha_leader) || fail "no leader"
"$PG" -d "$HA_DSN" run -v --check-interval 1s --heartbeat-timeout 5s --kill-after 2s "$name" -- \
	sh -c "echo \$\$ >'$TMP/child'; exec sleep 60" >"$TMP/h.out" 2>"$TMP/h.err" &
hpid=$!
end=$((SECONDS + 20))
until [ "$(advisory "$old")" = 1 ] && [ -s "$TMP/child" ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/h.err"; fail "run did not take the lock on the primary $old"; }
	sleep 0.1
done
child=$(cat "$TMP/child")
note "pg-ha failover"
"$HA" failover "$HA_DIR" >"$TMP/fo.out" 2>&1 &
fpid=$!
# run must notice before the promotion: check interval + heartbeat timeout + kill-after, with
# a margin for a loaded machine.
bound=15
end=$((SECONDS + 60))
while alive "$hpid"; do
	[ $SECONDS -lt $end ] || { cat "$TMP/h.err"; fail "pgcoord run still holds on 60 s after the crash"; }
	sleep 0.05
done
t_exit=$(now_s)
wait "$hpid"
st=$?
hpid=""
killed_at=$(cat "$HA_DIR/killed-at") || fail "pg-ha failover did not record the kill"
took=$(python3 -c 'import sys; print("%.1f" % (float(sys.argv[1]) - float(sys.argv[2])))' "$t_exit" "$killed_at")
note "pgcoord run exited $st $took s after the primary was killed"
cat "$TMP/h.err"
[ "$st" -eq 75 ] || fail "pgcoord run exited $st after the crash of the primary, expected 75 (lock lost)"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$took" "$bound" ||
	fail "pgcoord run took $took s to give up the lost lock (bound $bound s)"
grep -q "lock $name .* lost" "$TMP/h.err" || fail "run did not say that the lock was lost"
end=$((SECONDS + 5))
while alive "$child"; do
	[ $SECONDS -lt $end ] || fail "the command (pid $child) survived the lost lock"
	sleep 0.05
done

wait "$fpid" || { cat "$TMP/fo.out"; fail "pg-ha failover"; }
fpid=""
cat "$TMP/fo.out"
new=$(ha_leader) || fail "no leader after the failover"
[ "$new" != "$old" ] || fail "the failover left $old the primary"
[ "$(advisory "$new")" = 0 ] || fail "the new primary $new holds advisory locks after the promotion"
# A new run -n takes the lock on the new primary at once.
run 0 "$PG" -d "$HA_DSN" run -n "$name" -- sh -c \
	"[ \"\$(psql -X -A -t -q 'postgresql://postgres@$new/postgres' -c \"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted\")\" = 1 ]"
# And holds it against a second one.
"$PG" -d "$HA_DSN" run "$name" -- sleep 3 &
hpid=$!
end=$((SECONDS + 20))
until [ "$(advisory "$new")" = 1 ]; do
	[ $SECONDS -lt $end ] || fail "the second run did not take the lock on $new"
	sleep 0.1
done
run 1 "$PG" -d "$HA_DSN" run -n "$name" -- true
wait "$hpid" || fail "the holder on the new primary exited $?"
hpid=""
note "pg-ha rejoin"
"$HA" rejoin "$HA_DIR" || fail "pg-ha rejoin"
echo ok
