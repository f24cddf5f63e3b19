# run_failover.sh - pgcoord run holds an advisory lock on the primary when the primary fails:
# advisory locks are not WAL-logged, so the new primary holds none; run must kill its command
# and exit 75 within its heartbeat bound of the fault, and afterwards a new run -n through the
# same DSN gets the lock, on the new primary. Twice: a crash (SIGKILL: the sockets close), then
# a primary that stops answering with its sockets open (SIGSTOP, as behind a partition: only
# the heartbeat's deadline can tell).
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
# The bound: check interval (1 s) + heartbeat timeout (5 s), the command dying at SIGTERM,
# and a margin for a loaded machine.
bound=15

# lose_lock HOW [pg-ha failover option]
lose_lock() {
	local how=$1 opt=${2:-} old new child t_exit st killed_at took end
	old=$(ha_leader) || fail "no leader"
	rm -f "$TMP/child"
	"$PG" -d "$HA_DSN" run -v --check-interval 1s --heartbeat-timeout 5s --kill-after 2s "$name" -- \
		sh -c "echo \$\$ >'$TMP/child'; exec sleep 120" >"$TMP/h.out" 2>"$TMP/h.err" &
	hpid=$!
	end=$((SECONDS + 20))
	until [ "$(advisory "$old")" = 1 ] && [ -s "$TMP/child" ]; do
		[ $SECONDS -lt $end ] || { cat "$TMP/h.err"; fail "run did not take the lock on the primary $old"; }
		sleep 0.1
	done
	child=$(cat "$TMP/child")
	note "pg-ha failover $opt ($how) under pgcoord run holding $name on $old"
	rm -f "$HA_DIR/killed-at"
	"$HA" failover "$HA_DIR" $opt >"$TMP/fo.out" 2>&1 &
	fpid=$!
	end=$((SECONDS + 60))
	while alive "$hpid"; do
		[ $SECONDS -lt $end ] || { cat "$TMP/h.err"; fail "pgcoord run still holds on 60 s after the primary was $how"; }
		sleep 0.05
	done
	t_exit=$(now_s)
	wait "$hpid"
	st=$?
	hpid=""
	killed_at=$(cat "$HA_DIR/killed-at") || fail "pg-ha failover did not record the time of the fault"
	took=$(python3 -c 'import sys; print("%.1f" % (float(sys.argv[1]) - float(sys.argv[2])))' "$t_exit" "$killed_at")
	note "pgcoord run exited $st $took s after the primary was $how"
	cat "$TMP/h.err"
	[ "$st" -eq 75 ] || fail "pgcoord run exited $st after the primary was $how, expected 75 (lock lost)"
	python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$took" "$bound" ||
		fail "pgcoord run took $took s to give up the lost lock (bound $bound s)"
	grep -q "lock $name .* lost" "$TMP/h.err" || fail "run did not say that the lock was lost"
	end=$((SECONDS + 5))
	while alive "$child"; do
		[ $SECONDS -lt $end ] || fail "the command (pid $child) survived the lost lock"
		sleep 0.05
	done

	wait "$fpid" || { cat "$TMP/fo.out"; fail "pg-ha failover $opt"; }
	fpid=""
	cat "$TMP/fo.out"
	new=$(ha_leader) || fail "no leader after the failover"
	[ "$new" != "$old" ] || fail "the failover left $old the primary"
	[ "$(advisory "$new")" = 0 ] || fail "the new primary $new holds advisory locks after the promotion"
	# A new run -n takes the lock on the new primary at once (past the frozen node, if any,
	# by connect_timeout).
	run 0 "$PG" -d "$HA_DSN" run -n "$name" -- sh -c \
		"[ \"\$(psql -X -A -t -q 'postgresql://postgres@$new/postgres' -c \"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted\")\" = 1 ]"
	# And holds it against a second one.
	"$PG" -d "$HA_DSN" run "$name" -- sleep 3 &
	hpid=$!
	end=$((SECONDS + 30))
	until [ "$(advisory "$new")" = 1 ]; do
		[ $SECONDS -lt $end ] || fail "the second run did not take the lock on $new"
		sleep 0.1
	done
	run 1 "$PG" -d "$HA_DSN" run -n "$name" -- true
	wait "$hpid" || fail "the holder on the new primary exited $?"
	hpid=""
	note "pg-ha rejoin"
	"$HA" rejoin "$HA_DIR" || fail "pg-ha rejoin"
}
lose_lock killed
lose_lock frozen --freeze
echo ok
