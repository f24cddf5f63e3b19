# worker_once.sh - pgcoord worker --once: drains the runnable jobs, finishes the running ones,
# exits 0; jobs scheduled later, a paused queue and a retry's backoff do not keep it going;
# a command that always exits 75 is bounded by max_deferrals
. "$(dirname "$0")/lib.sh"

skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_wonce
q() { "$PG" queue "$@" --schema "$S" >/dev/null || fail "queue $*"; }

seq 1 30 | sed 's/.*/{"n":&}/' >"$TMP/jobs.jsonl"
q enqueue batch --file "$TMP/jobs.jsonl"
q enqueue batch --payload '{"n":"later"}' --delay 1h
q enqueue batch --payload '{"n":"fail"}' --max-attempts 3
q enqueue held --payload '{"n":"paused"}'
q pause held
export OUT=$TMP/runs
# The jobs take a moment, so several are in flight when the queue runs dry.
timeout 60 "$PG" worker --once --schema "$S" --queue batch --queue held -c 4 --backoff 1h -- \
	sh -c 'p=$(cat); sleep 0.2; echo "$p" >>"$OUT"; case "$p" in *fail*) exit 3 ;; esac; exit 0' \
	>"$TMP/wout" 2>"$TMP/werr" &
wpid=$!
wait "$wpid"
rc=$?
wpid=
[ "$rc" -eq 0 ] || { cat "$TMP/werr"; fail "worker --once exited $rc"; }
grep -q "no runnable job left" "$TMP/werr" || { cat "$TMP/werr"; fail "no stop message"; }
grep -q "stopped: 30 completed, 1 failed" "$TMP/werr" || { cat "$TMP/werr"; fail "summary"; }
# Every runnable job ran exactly once, and nothing was left running or released.
[ "$(grep -c '"n": [0-9]' "$OUT")" -eq 30 ] && [ "$(grep '"n": [0-9]' "$OUT" | sort -u | wc -l)" -eq 30 ] ||
	fail "not every job ran once: $(sort "$OUT" | uniq -c | head)"
[ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE status = 'succeeded'")" = 30 ] || fail "succeeded count"
[ "$(psql_q "SELECT count(*) FROM $S.jobs WHERE status = 'running'")" = 0 ] || fail "a job is left running"
# Scheduled for later, paused, or backing off after a failure: still there, not run.
[ "$(psql_q "SELECT string_agg(payload->>'n' || ':' || status || ':' || attempts, ',' ORDER BY id) FROM $S.jobs")" = \
  "later:scheduled:0,fail:scheduled:1,paused:pending:0" ] ||
	fail "left: $(psql_q "SELECT string_agg(payload->>'n' || ':' || status || ':' || attempts, ',' ORDER BY id) FROM $S.jobs")"

# Nothing to do at all: it exits at once.
run 0 timeout 20 "$PG" worker --once --schema "$S" --queue empty -- true
err_has "no runnable job left"
err_has "stopped: 0 completed"

# A command that always says "not now" (exit 75) is bounded by the job's max_deferrals: the
# deferral past it fails the job, and --once then ends.
q enqueue later --max-deferrals 3
def_id=$(psql_q "SELECT id FROM $S.jobs WHERE queue = 'later'")
run 0 timeout 60 "$PG" worker --once --schema "$S" --queue later --retry-delay 0 -- sh -c 'exit 75'
err_has "failed for good: deferred as often as its max_deferrals allows"
run 0 "$PG" queue show "$def_id" --schema "$S"
out_has "^status: *failed"
out_has "^deferrals: *3 of 3$"
out_has "^attempts: *1 of 25$"
out_has "deferred 3 times, the most its max_deferrals allows"
run 0 "$PG" --json queue show "$def_id" --schema "$S"
out_has '"deferrals":3,"max_deferrals":3'
# The default is 100.
q enqueue later2
run 0 "$PG" --json queue list later2 --schema "$S"
out_has '"deferrals":0,"max_deferrals":100'

# A signal still stops it gracefully.
q enqueue slow --payload '{}'
timeout 60 "$PG" worker --once --schema "$S" --queue slow --grace 200ms -- sh -c 'sleep 30' 2>"$TMP/werr2" &
wpid=$!
end=$((SECONDS + 10))
while [ "$(psql_q "SELECT count(*) FROM $S.jobs WHERE queue = 'slow' AND status = 'running'")" != 1 ] &&
	[ $SECONDS -lt $end ]; do sleep 0.1; done
kill -TERM "$wpid"
wait "$wpid"
rc=$?
wpid=
[ "$rc" -eq 0 ] || { cat "$TMP/werr2"; fail "worker --once after SIGTERM exited $rc"; }
grep -q "released 1 unfinished" "$TMP/werr2" || { cat "$TMP/werr2"; fail "no release on SIGTERM"; }
exit 0
