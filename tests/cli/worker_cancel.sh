# worker_cancel.sh - pgcoord queue cancel of a running job: the command's whole process group
# (a grandchild that ignores SIGTERM too) is gone within --grace and a margin, the job stays
# cancelled although the command then exits 0, the worker goes on; a polling worker finds
# out at its next lease renewal; a finished job is refused with exit 1
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_wcancel
cleanup() {
	for p in ${wpid:-}; do kill -KILL "$p" 2>/dev/null; done
	for f in "$TMP"/*.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
enq() { "$PG" queue enqueue "$@" --schema "$S" | sed -n 's/^enqueued job \([0-9]*\) .*/\1/p'; }
# alive PID: that process exists and is not a zombie.
alive() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# The command ignores SIGTERM and so does its grandchild (the shell passes the ignored
# disposition on): only the SIGKILL after --grace ends them. The grandchild sleeps for a
# time of this test's own, so that it is known by its command line.
cat >"$TMP/stubborn.sh" <<'SH'
#!/bin/sh
# {"polite":...}: exits 0 on SIGTERM, as if its work were done.
case "$(cat)" in
*polite*) trap 'echo "$PGCOORD_JOB_ID" >>"$TMP/exited0"; exit 0' TERM ;;
*) trap '' TERM ;;
esac
sleep "$SLEEP_FOR" &
echo $! >"$TMP/grandchild.$PGCOORD_JOB_ID.pid"
echo $$ >"$TMP/child.$PGCOORD_JOB_ID.pid"
while :; do sleep 0.1; done
SH
chmod +x "$TMP/stubborn.sh"
export TMP SLEEP_FOR=40.$$
start_worker() {
	"$PG" worker --schema "$S" --queue c -c 2 --grace 1s "$@" -- "$TMP/stubborn.sh" 2>"$TMP/werr" &
	wpid=$!
}
# cancel_and_check ID LIMIT: cancels running job ID and waits up to LIMIT s for its command
# and grandchild to be gone.
cancel_and_check() {
	local id=$1 limit=$2 end
	end=$((SECONDS + 15))
	while [ ! -s "$TMP/grandchild.$id.pid" ] && [ $SECONDS -lt $end ]; do sleep 0.05; done
	[ -s "$TMP/grandchild.$id.pid" ] || { cat "$TMP/werr"; fail "job $id did not start"; }
	local child gc
	child=$(cat "$TMP/child.$id.pid")
	gc=$(cat "$TMP/grandchild.$id.pid")
	[ "$(tr '\0' ' ' <"/proc/$gc/cmdline")" = "sleep $SLEEP_FOR " ] || fail "pid $gc is not the grandchild"
	run 0 "$PG" queue cancel "$id" --schema "$S"
	out_has "job $id cancelled while running: its worker has been told to stop it"
	[ "$(psql_q "SELECT status FROM $S.job_history WHERE id = $id")" = cancelled ] || fail "job $id is not cancelled"
	end=$((SECONDS + limit))
	while { alive "$child" || alive "$gc"; } && [ $SECONDS -lt $end ]; do sleep 0.1; done
	! alive "$child" || { cat "$TMP/werr"; fail "the command of cancelled job $id is still running after $limit s"; }
	! alive "$gc" || { cat "$TMP/werr"; fail "the grandchild of cancelled job $id is still running after $limit s"; }
	rm -f "$TMP/child.$id.pid" "$TMP/grandchild.$id.pid"
}

# A listening worker is told at once: --grace (1 s) and a margin.
start_worker
id1=$(enq c --payload '{}')
cancel_and_check "$id1" 6
grep -q "job $id1 was cancelled: telling its handler to stop" "$TMP/werr" || { cat "$TMP/werr"; fail "no log line"; }
[ "$(psql_q "SELECT last_error FROM $S.job_history WHERE id = $id1")" = "cancelled while running on $(hostname):$wpid" ] ||
	fail "last_error: $(psql_q "SELECT last_error FROM $S.job_history WHERE id = $id1")"
# The worker goes on: the next job runs (and is cancelled the same way, in JSON this time).
id2=$(enq c --payload '{}')
end=$((SECONDS + 15))
while [ ! -s "$TMP/child.$id2.pid" ] && [ $SECONDS -lt $end ]; do sleep 0.05; done
run 0 "$PG" --json queue cancel "$id2" --schema "$S"
out_has "^{\"id\":$id2,\"status\":\"cancelled\",\"was_running\":true}\$"
end=$((SECONDS + 6))
while alive "$(cat "$TMP/child.$id2.pid")" && [ $SECONDS -lt $end ]; do sleep 0.1; done
! alive "$(cat "$TMP/child.$id2.pid")" || fail "the second cancelled command still runs"
rm -f "$TMP/child.$id2.pid" "$TMP/grandchild.$id2.pid"
# A cancelled command that exits 0 afterwards leaves its job cancelled.
id3=$(enq c --payload '{"polite":true}' --max-attempts 1)
end=$((SECONDS + 15))
while [ ! -s "$TMP/child.$id3.pid" ] && [ $SECONDS -lt $end ]; do sleep 0.05; done
run 0 "$PG" queue cancel "$id3" --schema "$S"
end=$((SECONDS + 10))
while ! grep -q "^$id3\$" "$TMP/exited0" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.05; done
grep -q "^$id3\$" "$TMP/exited0" 2>/dev/null || fail "the polite command did not exit 0 on SIGTERM"
# Its handler has returned once the worker counts it.
end=$((SECONDS + 10))
while ! grep -q "job $id3 was cancelled" "$TMP/werr" && [ $SECONDS -lt $end ]; do sleep 0.05; done
sleep 0.5
[ "$(psql_q "SELECT status FROM $S.job_history WHERE id = $id3")" = cancelled ] || fail "job $id3 is no longer cancelled"
kill -TERM "$wpid"
wait "$wpid" || { cat "$TMP/werr"; fail "worker exit status"; }
wpid=
grep -q "stopped: 0 completed, 0 failed, 0 retried later, 0 released, 0 stale, 3 cancelled" "$TMP/werr" ||
	{ cat "$TMP/werr"; fail "summary"; }
[ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE status = 'cancelled'")" = 3 ] || fail "not 3 cancelled"

# A worker that does not listen (so misses the notification) finds out when it renews its
# leases, every third of --lease: 1 s here, then --grace.
start_worker --no-listen --lease 3s --poll 200ms
id4=$(enq c --payload '{}')
cancel_and_check "$id4" 8
kill -TERM "$wpid"
wait "$wpid" || { cat "$TMP/werr"; fail "polling worker exit status"; }
wpid=
grep -q "1 cancelled" "$TMP/werr" || { cat "$TMP/werr"; fail "polling worker summary"; }

# Finished jobs: exit 1 and what became of them; an unknown id: exit 65.
id5=$(enq ok --payload '{}')
"$PG" worker --schema "$S" --queue ok --once -- true 2>/dev/null &
wpid=$!
wait_query 15 "SELECT count(*) FROM $S.job_history WHERE id = $id5 AND status = 'succeeded'" 1
wait "$wpid"
wpid=
run 1 "$PG" queue cancel "$id5" --schema "$S"
err_has "job $id5 has already finished (succeeded): nothing to cancel"
run 1 "$PG" --json queue cancel "$id5" --schema "$S"
out_has '"message":"job [0-9]* has already finished (succeeded): nothing to cancel"'
run 65 "$PG" queue cancel 987654321 --schema "$S"
err_has "no job with id 987654321"
exit 0
