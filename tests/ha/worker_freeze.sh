# worker_freeze.sh - the primary stops answering with its sockets open (SIGSTOP of all its
# processes, as behind a partition) while two command workers drain jobs: nothing tells the
# workers that the connection is dead, so they must find out by their own deadlines, move to
# the new primary and finish every job (succeeded, once in job_history, nothing left).
# Functional bounds only: everything done within 180 s of the new primary accepting writes.
. "$(dirname "$0")/lib.sh"
JOBS=400
ha_start --nodes 2 --sync
ha_jobs "$JOBS"
# Each line of the workers' stderr with the epoch time it came.
stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done; }
wpids=()
ha_on_exit() {
	local p
	for p in "${wpids[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
for w in 1 2; do
	# A command whose own psql sent its INSERT to the frozen server would wait for ever:
	# --timeout kills it, and the job is tried again.
	"$PG" -d "$HA_DSN" worker --queue q -c 4 --timeout 20s -- "$TMP/job.sh" 2> >(stamp >"$TMP/worker$w.err") &
	wpids+=($!)
done
done_count() { hq "SELECT count(*) FROM pgcoord.job_history WHERE queue = 'q'" 2>/dev/null; }
wait_done() {
	local end=$((SECONDS + $2)) got="" p
	while [ $SECONDS -lt "$end" ]; do
		got=$(done_count) && [ -n "$got" ] && [ "$got" -ge "$1" ] && return 0
		for p in "${wpids[@]}"; do kill -0 "$p" 2>/dev/null || { cat "$TMP"/worker*.err; fail "a worker exited ($3)"; }; done
		sleep 0.5
	done
	for p in "${wpids[@]}"; do echo "--- worker $p: $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)"; done
	for p in 1 2; do echo "--- worker$p.err (without the jobs' own errors)"; grep ' pgcoord' "$TMP/worker$p.err" | tail -n 20; ps -o pid,stat,etimes,args --ppid "${wpids[$((p - 1))]}" 2>/dev/null; done
	echo "--- jobs left:"
	hq "SELECT status, count(*), min(attempts), max(attempts), min(lease_until - now()), max(lease_until - now()), string_agg(DISTINCT worker, ' ')
	      FROM pgcoord.jobs GROUP BY status"
	echo "--- pgcoord sessions on the primary:"
	hq "SELECT pid, application_name, state, wait_event, now() - state_change, left(query, 60) FROM pg_stat_activity
	     WHERE application_name LIKE 'pgcoord%'"
	fail "waited $2 s for $1 jobs done $3; $got done"
}
wait_done 100 60 "before the fault"
note "pg-ha failover --freeze with $(done_count) of $JOBS jobs done"
"$HA" failover "$HA_DIR" --freeze || fail "pg-ha failover --freeze"
read -r fo_ts fo_addr <"$HA_DIR/last-failover"
left=$(( JOBS - $(hq "SELECT count(*) FROM pgcoord.job_history WHERE queue = 'q' AND finished_at < to_timestamp($fo_ts)") ))
[ "$left" -ge 100 ] || fail "only $left jobs were left at the fault: the test would prove nothing"
note "$left jobs were left at the fault"
fault_end=$SECONDS
wait_done "$JOBS" 180 "within 180 s after the new primary accepted writes"
note "all $JOBS jobs done $((SECONDS - fault_end)) s after the new primary accepted writes"
first=$(hq "SELECT round((extract(epoch FROM min(finished_at)) - $fo_ts)::numeric, 2) FROM pgcoord.job_history
             WHERE queue = 'q' AND finished_at >= to_timestamp($fo_ts)")
note "first job completed on the new primary $fo_addr $first s after it first accepted a write"
[ "$(hq "SELECT count(*) FROM pgcoord.jobs")" = 0 ] || { hq "SELECT id, status, attempts FROM pgcoord.jobs LIMIT 10"; fail "jobs left pending or running"; }
read -r total ok < <(hq "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded') FROM pgcoord.job_history WHERE queue = 'q'" | tr '|' ' ')
[ "$total" = "$JOBS" ] && [ "$ok" = "$JOBS" ] || fail "job_history: $total rows, $ok succeeded; expected $JOBS each"
read -r execs ran dups < <(hq "SELECT count(*), count(DISTINCT job), count(*) - count(DISTINCT job) FROM results" | tr '|' ' ')
[ "$ran" = "$JOBS" ] || fail "$ran of $JOBS jobs recorded an execution"
note "executions: $execs for $JOBS jobs, $dups duplicates"
for p in "${wpids[@]}"; do kill -TERM "$p"; done
for p in "${wpids[@]}"; do
	wait "$p"
	st=$?
	[ "$st" -eq 0 ] || { cat "$TMP"/worker*.err; fail "worker exited $st after SIGTERM"; }
done
wpids=()
killed_at=$(cat "$HA_DIR/killed-at")
note "what the workers said of their own sessions, in seconds after the primary froze:"
for w in 1 2; do
	grep -h ' pgcoord worker' "$TMP/worker$w.err" | while read -r t l; do
		python3 -c 'import sys; print("  worker%s %+7.1f s %s" % (sys.argv[1], float(sys.argv[2]) - float(sys.argv[3]), sys.argv[4]))' \
			"$w" "$t" "$killed_at" "$l"
	done
done
note "pg-ha rejoin"
"$HA" rejoin "$HA_DIR" || fail "pg-ha rejoin"
# A worker that cannot renew its leases must find out before they expire (the lease is 30 s,
# renewed every 10 s): otherwise its commands run on while the new primary hands the same jobs
# to another worker, and its completions are refused ("not running under token").
lease=30
for w in 1 2; do
	t=$(grep -h -m 1 -e ' pgcoord worker: no answer' -e ' pgcoord worker: connection lost' "$TMP/worker$w.err" | cut -d ' ' -f 1)
	[ -n "$t" ] || fail "worker$w never said that its server stopped answering"
	after=$(python3 -c 'import sys; print("%.1f" % (float(sys.argv[1]) - float(sys.argv[2])))' "$t" "$killed_at")
	python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$after" "$((lease + 5))" ||
		fail "worker$w noticed that its server stopped answering $after s after it froze, later than its job lease ($lease s): its jobs' leases expired on the new primary meanwhile ($(cat "$TMP"/worker*.err | grep -c "is not running under token") completions refused, by both workers)"
done
echo ok
