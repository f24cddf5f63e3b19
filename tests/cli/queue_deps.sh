# queue_deps.sh - dependencies and groups with real workers: a chain runs in order; a group of
# 50 jobs worked by two workers, one of them SIGKILLed mid-run (its leases expire, its jobs
# run again), gets its on-complete job exactly once with the counts; queue show says what a
# waiting job waits for; the new options' refusals and exit statuses
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema deps
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	own_schema_cleanup
}
trap cleanup EXIT
q() { local sub=$1; shift; "$PG" queue "$sub" --schema "$S" "$@"; }
stop_workers() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do
		timeout 20 tail --pid="$p" -f /dev/null || { tail -n 20 "$TMP"/*.err >&2; fail "worker $p did not stop"; }
	done
	pids=()
}
id_of() { sed -n 's/.*"id":\([0-9]*\).*/\1/p' "$TMP/out"; }

# The job: a line when it starts and one when it ends, with the time in nanoseconds.
cat >"$TMP/job.sh" <<'SH'
#!/bin/sh
echo "S $PGCOORD_JOB_ID $(date +%s%N)" >>"$LOG"
sleep 0.$(( (PGCOORD_JOB_ID % 3) + 1 ))
echo "E $PGCOORD_JOB_ID $(date +%s%N)" >>"$LOG"
SH
chmod +x "$TMP/job.sh"

# ---- a chain: D after C after B after A, enqueued before any worker runs ----------------------
run 0 q enqueue chain --json
a=$(id_of)
run 0 q enqueue chain --after "$a" --json
b=$(id_of)
run 0 q enqueue chain --after "$b,$a" --json
c=$(id_of)
run 0 q enqueue chain --after "$c" --on-dep-failure run --json
d=$(id_of)
run 0 q show "$b"
out_has "status: *waiting"
out_has "waiting for job $a"
run 0 q show "$c"
out_has "waiting for job $a, and 1 more"
run 0 q list chain --status waiting
[ "$(grep -c waiting "$TMP/out")" = 3 ] || { cat "$TMP/out"; fail "3 waiting jobs expected"; }
run 0 q stats chain --json
out_has '"pending":1,'
out_has '"waiting":3}'
run 0 q stats chain --prometheus
out_has 'pgcoord_queue_jobs{queue="chain",status="waiting"} 3'
export LOG=$TMP/chain.log
: >"$LOG"
"$PG" worker --schema "$S" --queue chain -c 4 --poll 200ms -- "$TMP/job.sh" 2>"$TMP/chain.err" &
pids+=($!)
wait_query 30 "SELECT count(*) FROM $S.job_history WHERE queue = 'chain' AND status = 'succeeded'" 4
stop_workers
python3 - "$LOG" "$a" "$b" "$c" "$d" <<'PY' || fail "the chain did not run in order: $(cat "$LOG")"
import sys
start, end = {}, {}
for line in open(sys.argv[1]):
    kind, job, ts = line.split()
    (start if kind == 'S' else end)[job] = int(ts)
chain = sys.argv[2:]
for before, after in zip(chain, chain[1:]):
    assert end[before] <= start[after], (before, after)
PY

# ---- a group of 50, two workers, one SIGKILLed while it runs jobs -----------------------------
run 0 q group add g50 --on-complete-queue g50done --payload '{"report": "nightly"}'
out_has "added group g50"
run 1 q group add g50 --on-complete-queue g50done
for i in $(seq 50); do echo "{\"n\": $i}"; done >"$TMP/g.jsonl"
run 0 q enqueue grp --group g50 --file "$TMP/g.jsonl"
run 0 q group close g50
out_has "its on-complete job follows its last member"
run 1 q enqueue grp --group g50
err_has 'job group "g50" is closed'
run 1 q group remove g50
err_has "cannot be removed"
export LOG=$TMP/grp.log
: >"$LOG"
for w in 1 2; do
	"$PG" worker --schema "$S" --queue grp -c 4 --lease 2s --poll 200ms -- "$TMP/job.sh" 2>"$TMP/g$w.err" &
	pids+=($!)
done
end=$((SECONDS + 20))
victim=
while [ -z "$victim" ] && [ $SECONDS -lt $end ]; do
	victim=$(psql_q "SELECT split_part(worker, ':', 2) FROM $S.jobs WHERE status = 'running' ORDER BY started_at LIMIT 1")
	[ -n "$victim" ] || sleep 0.05
done
[ -n "$victim" ] || fail "no worker ran a job"
kept=()
for p in "${pids[@]}"; do [ "$p" = "$victim" ] || kept+=("$p"); done
[ ${#kept[@]} -eq 1 ] || fail "the job's worker $victim is not one of ${pids[*]}"
kill -KILL "$victim"
pids=("${kept[@]}")
wait_query 90 "SELECT count(*) FROM $S.jobs WHERE queue = 'g50done'" 1
# The killed worker's jobs came back after their leases and ran again.
[ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE queue = 'grp' AND attempts > 1")" -gt 0 ] ||
	fail "no job of the killed worker ran again"
sleep 1
[ "$(psql_q "SELECT count(*) FROM $S.jobs WHERE queue = 'g50done'")" = 1 ] || fail "more than one on-complete job"
[ "$(psql_q "SELECT payload::text FROM $S.jobs WHERE queue = 'g50done'")" = \
  '{"group": {"name": "g50", "failed": 0, "cancelled": 0, "succeeded": 50}, "report": "nightly"}' ] ||
	fail "on-complete payload: $(psql_q "SELECT payload::text FROM $S.jobs WHERE queue = 'g50done'")"
stop_workers
run 0 q group show g50 --json
out_has '"members":50,"succeeded":50,"failed":0,"cancelled":0,"sealed":true,"done":true'
run 0 q group list
out_has "g50 .* 50 .* 50 .* done"
run 0 q group remove g50
run 65 q group show g50

# ---- refusals -----------------------------------------------------------------------------
run 65 q enqueue chain --after 999999999
err_has "no job with id 999999999 to wait for"
run 65 q enqueue chain --group nosuch
err_has 'no job group named "nosuch"'
[ "$(psql_q "SELECT count(*) FROM $S.jobs WHERE queue = 'chain'")" = 0 ] || fail "a refused job was enqueued"
run 64 q enqueue chain --after 1,,2
err_has "--after must be job ids separated by commas"
run 64 q enqueue chain --on-dep-failure cancel
err_has "needs --after"
run 64 q group add g
err_has "needs --on-complete-queue"
run 0 q group add closed --on-complete-queue x
run 0 q group close closed
out_has "every member has ended, on-complete job"
echo "ok"
