# worker_once.sh - pgcoord worker --once: drains the runnable jobs, finishes the running ones,
# exits 0; jobs scheduled later, a paused queue and a retry's backoff do not keep it going
# unless due within --once-wait; a rate is waited for; what is left is reported by reason;
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

# ---- --once-wait: what is due soon ----------------------------------------------------------
# A job due in 4 s: with --once-wait 0 (the default) it is left, and said to be.
q enqueue soon --payload '{"n":"soon"}' --delay 4s
run 0 timeout 60 "$PG" worker --once --once-wait 0 --schema "$S" --queue soon -- true
err_has "no runnable job left"
err_has "stopped: 0 completed"
err_has "left 1 job: 1 scheduled later than --once-wait (--once-wait 0"
[ "$(psql_q "SELECT status FROM $S.jobs WHERE queue = 'soon'")" = scheduled ] || fail "the job due later was run"
# With --once-wait 10s the worker waits for it (a job of its own, not due yet when it starts).
q enqueue soon2 --payload '{"n":"soon2"}' --delay 4s
run 0 timeout 60 "$PG" worker --once --once-wait 10s --schema "$S" --queue soon2 -- true
err_has "stopped: 1 completed"
err_has "left no job in its queues"
[ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE queue = 'soon2' AND status = 'succeeded'")" = 1 ] ||
	fail "the job due within --once-wait did not run"
# A retry's backoff within the bound plays out: the first attempt fails, the second succeeds.
q enqueue flaky --payload '{"n":"flaky"}'
run 0 timeout 60 "$PG" worker --once --once-wait 10s --backoff 1s --schema "$S" --queue flaky -- \
	sh -c '[ "$PGCOORD_JOB_ATTEMPT" -gt 1 ]'
err_has "stopped: 1 completed, 1 failed"
[ "$(psql_q "SELECT status || ':' || attempts FROM $S.job_history WHERE queue = 'flaky'")" = succeeded:2 ] ||
	fail "flaky: $(psql_q "SELECT status || ':' || attempts FROM $S.job_history WHERE queue = 'flaky'")"
# --once-wait without --once, and a bad duration: usage errors.
run 64 "$PG" worker --once-wait 1s --schema "$S" --queue soon -- true
err_has "--once-wait is for --once"
run 64 "$PG" worker --once --once-wait soon --schema "$S" --queue soon -- true
err_has "--once-wait"

# ---- a rate: drained at its pace ------------------------------------------------------------
# 5 jobs at 2/s: the claims come back empty between starts, and --once waits for each.
q config rated --rate 2/1s
seq 1 5 | sed 's/.*/{"r":&}/' >"$TMP/rated.jsonl"
q enqueue rated --file "$TMP/rated.jsonl"
run 0 timeout 90 "$PG" worker --once --schema "$S" --queue rated -c 4 -- true
err_has "stopped: 5 completed"
err_has "left no job in its queues"
[ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE queue = 'rated' AND status = 'succeeded'")" = 5 ] ||
	fail "rated: $(psql_q "SELECT count(*) FROM $S.jobs WHERE queue = 'rated'") left"

# ---- what is left, and why ------------------------------------------------------------------
# A key at its limit held by another worker, a job waiting for a dependency scheduled an hour
# ahead: none of them can start, and the report counts each reason.
q config keyed --key-limit 1
q enqueue keyed --key k --payload '{"k":1}'
"$PG" worker --schema "$S" --queue keyed --grace 200ms -- sleep 30 2>/dev/null &
opid=$!
wait_query 20 "SELECT count(*) FROM $S.jobs WHERE queue = 'keyed' AND status = 'running'" 1
q enqueue keyed --key k --payload '{"k":2}'
q enqueue keyed --payload '{"dep":1}' --delay 1h
dep=$(psql_q "SELECT id FROM $S.jobs WHERE queue = 'keyed' AND payload->>'dep' = '1'")
q enqueue keyed --payload '{"after":1}' --after "$dep"
run 0 timeout 60 "$PG" worker --once --schema "$S" --queue keyed -- true
kill -TERM "$opid"
wait "$opid"
err_has "stopped: 0 completed"
err_has "left 4 jobs: 1 scheduled later than --once-wait, 1 waiting for dependencies, 1 of keys at their limit, held by other workers, 1 running in other workers"
# -q: no report.
run 0 timeout 60 "$PG" -q worker --once --schema "$S" --queue keyed -- true
[ ! -s "$TMP/err" ] || { cat "$TMP/err"; fail "-q: the worker wrote to stderr"; }

# A signal still stops it gracefully. The signal goes to timeout, which passes it on to its
# whole process group: it is sent once the command runs in a group of its own (its marker file
# written), not while the worker is still starting it, when the command would get it too.
q enqueue slow --payload '{}'
timeout 60 "$PG" worker --once --schema "$S" --queue slow --grace 200ms -- \
	sh -c ': >"$1"; sleep 30' sh "$TMP/slow-started" 2>"$TMP/werr2" &
wpid=$!
end=$((SECONDS + 30))
while [ ! -e "$TMP/slow-started" ] && [ $SECONDS -lt $end ]; do sleep 0.1; done
[ -e "$TMP/slow-started" ] || { cat "$TMP/werr2"; fail "the slow command did not start within 30 s"; }
kill -TERM "$wpid"
wait "$wpid"
rc=$?
wpid=
[ "$rc" -eq 0 ] || { cat "$TMP/werr2"; fail "worker --once after SIGTERM exited $rc"; }
grep -q "released 1 unfinished" "$TMP/werr2" || { cat "$TMP/werr2"; fail "no release on SIGTERM"; }
exit 0
