# worker_failover.sh - two command workers drain 2,000 jobs through a switchover and then a
# crash of the primary (synchronous mode): every job ends succeeded, exactly once in
# job_history, nothing pending or running; each execution is recorded by the command itself,
# so the duplicates (a job run again when its completion was lost with the old primary) are
# counted and printed. Prints how long after the new primary first accepted a write the first
# job completed on it. Meanwhile a loop of `pgcoord tx` runs through both faults: every
# transaction that reported a commit is on the new primary; and a transaction in its body at
# each fault, whose session died before COMMIT was sent, ran again on a new one. Functional bounds only: everything done within 120 s of the last fault.
. "$(dirname "$0")/lib.sh"
JOBS=2000
ha_start --nodes 2 --sync
ha_jobs "$JOBS"
wpids=()
flight_pids=()
ha_on_exit() {
	local p
	for p in "${wpids[@]}" "${flight_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
for w in 1 2; do
	"$PG" -d "$HA_DSN" worker --queue q -c 4 -- "$TMP/job.sh" 2>"$TMP/worker$w.err" &
	wpids+=($!)
done
# Transactions through both faults: a loop of pgcoord tx, each inserting a key of its own and
# then sleeping in its body, so that a fault often finds one before its COMMIT was sent.
hq "CREATE TABLE tx_rows (k int PRIMARY KEY, port int NOT NULL DEFAULT inet_server_port())" >/dev/null ||
	fail "create tx_rows"
tx_loop() {
	local i=0 st
	while [ ! -e "$TMP/tx.stop" ]; do
		i=$((i + 1))
		timeout 120 "$PG" -d "$HA_DSN" tx --retries 40 --max-backoff 1s \
			-c "INSERT INTO tx_rows (k) VALUES ($i); SELECT pg_sleep(0.2)" >/dev/null 2>"$TMP/tx.$i.err"
		st=$?
		echo "$i $st" >>"$TMP/tx.status"
		[ "$st" -eq 0 ] || sleep 0.2
	done
}
tx_loop &
txpid=$!
wpids+=($txpid)
# tx_in_flight K: a transaction of its own that is surely in its body when the fault comes: its
# body waits until the test writes K into flight_go, which the test does only after the fault,
# on the new primary, and the fault waits until the primary shows it waiting. So its session
# dies before COMMIT was sent, and it must run again on the new primary, where it then ends.
hq "CREATE TABLE flight_go (k int PRIMARY KEY)" >/dev/null || fail "create flight_go"
tx_in_flight() {
	timeout 120 "$PG" -d "$HA_DSN" tx --retries 40 --max-backoff 1s --isolation read-committed \
		-c "INSERT INTO tx_rows (k) VALUES ($1); DO \$\$ BEGIN WHILE NOT EXISTS (SELECT 1 FROM flight_go WHERE k = $1)
			LOOP PERFORM pg_sleep(0.1); END LOOP; END \$\$ /* in-flight $1 */" >/dev/null 2>"$TMP/flight.$1.err" &
	flight_pids+=($!)
	local end=$((SECONDS + 30))
	until [ "$(hq "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%in-flight $1 */' AND state = 'active'
		AND pid <> pg_backend_pid()")" = 1 ]; do
		[ $SECONDS -lt $end ] || { cat "$TMP/flight.$1.err"; fail "the in-flight transaction $1 did not start within 30 s"; }
		sleep 0.1
	done
}
done_count() { hq "SELECT count(*) FROM pgcoord.job_history WHERE queue = 'q'" 2>/dev/null; }
# wait_done N SECONDS WHAT: until N jobs are done.
wait_done() {
	local end=$((SECONDS + $2)) got=""
	while [ $SECONDS -lt "$end" ]; do
		got=$(done_count) && [ -n "$got" ] && [ "$got" -ge "$1" ] && return 0
		for p in "${wpids[@]}"; do kill -0 "$p" 2>/dev/null || { cat "$TMP"/worker*.err; fail "a worker exited ($3)"; }; done
		sleep 0.2
	done
	cat "$TMP"/worker*.err | tail -n 20
	fail "waited $2 s for $1 jobs done $3; $got done"
}
wait_done 200 60 "before the switchover"
note "switchover with $(done_count) of $JOBS jobs done"
tx_in_flight 1000001
note "pg-ha switchover"
"$HA" switchover "$HA_DIR" || fail "pg-ha switchover"
hq "INSERT INTO flight_go VALUES (1000001)" >/dev/null || fail "flight_go after the switchover"
wait_done 800 180 "after the switchover"
note "failover once a standby can take over, with $(done_count) of $JOBS jobs done"
tx_in_flight 1000002
note "pg-ha failover"
"$HA" failover "$HA_DIR" || fail "pg-ha failover"
hq "INSERT INTO flight_go VALUES (1000002)" >/dev/null || fail "flight_go after the failover"
fault_end=$SECONDS
read -r fo_ts fo_addr <"$HA_DIR/last-failover"
# Nothing completes while no node accepts writes: what was done before the new primary's first
# write was done at the kill.
left=$(( JOBS - $(hq "SELECT count(*) FROM pgcoord.job_history WHERE queue = 'q' AND finished_at < to_timestamp($fo_ts)") ))
[ "$left" -ge 200 ] || fail "only $left jobs were left at the failover: the test would prove nothing"
note "$left jobs were left at the failover"
wait_done "$JOBS" 180 "within 180 s after the failover"
note "all $JOBS jobs done $((SECONDS - fault_end)) s after the new primary accepted writes"

# The transactions: committed ones are there (synchronous mode), refused ones are not, and
# those whose COMMIT was sent without an answer said so; a session lost before COMMIT was
# sent was replaced and the transaction run again.
touch "$TMP/tx.stop"
for _ in $(seq 1 1300); do kill -0 "$txpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$txpid" 2>/dev/null && fail "the transaction loop did not stop within 130 s"
wpids=("${wpids[@]:0:2}")
txs=$(wc -l <"$TMP/tx.status")
[ "$txs" -ge 20 ] || fail "only $txs transactions ran"
present=" $(hq "SELECT string_agg(k::text, ' ') FROM tx_rows") "
ok_tx=0 unknown=0 refused=0 rerun=0
while read -r i st; do
	case "$st" in
	0)
		ok_tx=$((ok_tx + 1))
		[[ "$present" == *" $i "* ]] || fail "transaction $i committed (exit 0) but its row is not on the new primary"
		grep -q "reconnecting and retrying" "$TMP/tx.$i.err" && rerun=$((rerun + 1)) ;;
	69)
		if grep -q "may or may not have committed" "$TMP/tx.$i.err"; then
			unknown=$((unknown + 1))
		else
			refused=$((refused + 1))
			[[ "$present" != *" $i "* ]] || { cat "$TMP/tx.$i.err"; fail "transaction $i failed (exit 69) but its row is there"; }
		fi ;;
	*) cat "$TMP/tx.$i.err"; fail "transaction $i exited $st: only 0 and 69 are expected across a failover" ;;
	esac
done <"$TMP/tx.status"
note "transactions: $txs run, $ok_tx committed ($rerun of them run again on a new session), $unknown commit unknown, $refused unavailable"
# The two in flight at the faults: each committed once, on a new session, after running again.
for k in 1000001 1000002; do
	[ "${#flight_pids[@]}" -gt 0 ] || fail "the in-flight transactions were not started"
	wait "${flight_pids[0]}"
	st=$?
	flight_pids=("${flight_pids[@]:1}")
	[ "$st" = 0 ] || { cat "$TMP/flight.$k.err"; fail "the transaction in flight at a fault exited $st, expected 0"; }
	grep -q "reconnecting and retrying" "$TMP/flight.$k.err" ||
		{ cat "$TMP/flight.$k.err"; fail "the transaction in flight at a fault was not run again on a new session"; }
	[ "$(hq "SELECT count(*) FROM tx_rows WHERE k = $k")" = 1 ] || fail "the transaction in flight at a fault: its row is not there once"
done
note "the transactions in flight at the switchover and at the crash each ran again and committed once"

# Nothing left, every job succeeded exactly once in the history, every one ran.
[ "$(hq "SELECT count(*) FROM pgcoord.jobs")" = 0 ] || { hq "SELECT id, status, attempts FROM pgcoord.jobs LIMIT 10"; fail "jobs left pending or running"; }
read -r total ok distinct < <(hq "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'), count(DISTINCT id) FROM pgcoord.job_history WHERE queue = 'q'" | tr '|' ' ')
[ "$total" = "$JOBS" ] && [ "$ok" = "$JOBS" ] && [ "$distinct" = "$JOBS" ] ||
	fail "job_history: $total rows, $ok succeeded, $distinct distinct ids; expected $JOBS each"
read -r execs ran dups < <(hq "SELECT count(*), count(DISTINCT job), count(*) - count(DISTINCT job) FROM results" | tr '|' ' ')
[ "$ran" = "$JOBS" ] || fail "$ran of $JOBS jobs recorded an execution"
[ "$execs" -ge "$JOBS" ] || fail "$execs executions for $JOBS jobs"
note "executions: $execs for $JOBS jobs, $dups duplicates"
# Each duplicate: its executions (attempt@port at time) and its history row.
hq "SELECT r.job, string_agg(r.attempt || '@' || r.port || ' at ' || to_char(r.at, 'HH24:MI:SS.MS'), ', ' ORDER BY r.id),
           max(h.attempts), max(to_char(h.started_at, 'HH24:MI:SS.MS')), max(to_char(h.finished_at, 'HH24:MI:SS.MS')),
           max(h.errors::text)
      FROM results r JOIN pgcoord.job_history h ON h.id = r.job
     GROUP BY r.job HAVING count(*) > 1 ORDER BY r.job LIMIT 20" |
	sed 's/^/  duplicate (job|executions|attempts|started|finished|errors): /'
# From the first write on the new primary to the first completion on it.
for f in last-switchover last-failover; do
	read -r ts addr <"$HA_DIR/$f"
	gap=$(hq "SELECT round((extract(epoch FROM min(finished_at)) - $ts)::numeric, 2) FROM pgcoord.job_history
	           WHERE queue = 'q' AND finished_at >= to_timestamp($ts)")
	note "${f#last-}: first job completed on the new primary $addr $gap s after it first accepted a write"
done
# The workers are still there, and stop as asked.
for p in "${wpids[@]}"; do kill -TERM "$p"; done
for p in "${wpids[@]}"; do
	wait "$p"
	st=$?
	[ "$st" -eq 0 ] || { cat "$TMP"/worker*.err; fail "worker exited $st after SIGTERM"; }
done
wpids=()
note "completions per 5 s (seconds since the first completion, count):"
hq "SELECT b * 5, count(*) FROM (SELECT floor(extract(epoch FROM finished_at - min(finished_at) OVER ()) / 5)::int AS b
      FROM pgcoord.job_history WHERE queue = 'q') x GROUP BY b ORDER BY b" | tr '|' ' ' | sed 's/^/  /' | tr '\n' ';'
echo
note "worker messages:"
cat "$TMP"/worker*.err | sed 's/[0-9][0-9]*/N/g' | sort | uniq -c | sort -rn | head -n 10
note "pg-ha rejoin"
"$HA" rejoin "$HA_DIR" || fail "pg-ha rejoin"
echo ok
