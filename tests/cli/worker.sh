# worker.sh - pgcoord worker: runs a command per job; exit codes, environment, stderr as the
# error, timeouts kill the process group, SIGKILL of a worker mid-job, graceful stop
. "$(dirname "$0")/lib.sh"

run 0 "$PG" worker --help
out_has "^Usage: pgcoord \[-d DSN\] worker"
run 64 "$PG" worker -- true
err_has "at least one --queue is required"
run 64 "$PG" worker --queue q
err_has "no COMMAND given"
run 64 "$PG" worker --queue "" -- true
run 64 "$PG" worker --queue q --timeout forever -- true
err_has "\-\-timeout: invalid duration"
run 64 "$PG" worker --queue q --concurrency 0 -- true
run 127 "$PG" worker --queue q -- pgcoord-no-such-command-xyz
err_has "command not found"
printf 'echo hi\n' >"$TMP/noexec.sh"
chmod 644 "$TMP/noexec.sh"
run 126 "$PG" worker --queue q -- "$TMP/noexec.sh"

skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_wcli_$$
cleanup() {
	# A failed assertion must not leave a worker behind.
	for p in ${wpid:-} ${w1:-} ${w2:-} ${w3:-} ${wc_pid:-}; do kill -KILL "$p" 2>/dev/null; done
	[ -f "$TMP/orphan.pid" ] && kill -KILL "$(cat "$TMP/orphan.pid")" 2>/dev/null
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
run 0 "$PG" init --schema "$S"
q() { "$PG" queue "$@" --schema "$S" >/dev/null || fail "queue $*"; }
status_of() { psql_q "SELECT status FROM (SELECT id, status FROM $S.jobs UNION ALL SELECT id, status FROM $S.job_history) x WHERE id = $1"; }

cat >"$TMP/job.sh" <<'SH'
#!/bin/sh
p=$(cat)
echo "$PGCOORD_JOB_ID $PGCOORD_JOB_QUEUE $PGCOORD_JOB_ATTEMPT $p" >>"$OUT"
case "$p" in
*fail*) echo "first line" >&2; echo "the real reason" >&2; exit 3 ;;
*later*) exit 75 ;;
*junk*) printf 'junk \377\376 end\n' >&2; exit 1 ;;
*hang*) sh -c 'echo $$ >"$OUT.sleeper"; exec sleep "$SLEEP_FOR"' & wait ;;
esac
exit 0
SH
chmod +x "$TMP/job.sh"
export OUT=$TMP/ran
# The hanging job's child sleeps for a time of this test's own, so that it is known by its
# command line (on a busy machine a pid is soon reused).
export SLEEP_FOR=30.$$
q enqueue w --payload '{"k":"ok"}'
q enqueue w --payload '{"k":"fail"}' --max-attempts 2
q enqueue w --payload '{"k":"later"}'
q enqueue w --payload '{"k":"hang"}' --max-attempts 1
q enqueue w --payload '{"k":"junk"}' --max-attempts 1
"$PG" worker --schema "$S" --queue w -c 4 --backoff 100ms --retry-delay 1h --timeout 1s \
	-- "$TMP/job.sh" >"$TMP/wout" 2>"$TMP/werr" &
wpid=$!
wait_query 20 "SELECT count(*) FROM $S.job_history" 4
wait_query 5 "SELECT count(*) FROM $S.jobs WHERE status = 'scheduled' AND attempts = 0" 1
kill -TERM "$wpid"
timeout 20 tail --pid="$wpid" -f /dev/null || fail "the worker did not stop on SIGTERM"
wait "$wpid"
rc=$?
wpid=
[ "$rc" -eq 0 ] || { cat "$TMP/werr"; fail "worker exited $rc after SIGTERM"; }
grep -q "stopped: 1 completed" "$TMP/werr" || { cat "$TMP/werr"; fail "no summary"; }
# The environment and the payload reached the command.
grep -q '^[0-9]* w 1 {"k": "ok"}$' "$OUT" || { cat "$OUT"; fail "env/payload"; }
grep -q ' w 2 {"k": "fail"}$' "$OUT" || { cat "$OUT"; fail "the failing job was not retried"; }
[ "$(psql_q "SELECT status || ':' || last_error FROM $S.job_history WHERE payload->>'k' = 'fail'")" = \
  "failed:exit status 3: first line
the real reason" ] || fail "stderr tail is not the error: $(psql_q "SELECT last_error FROM $S.job_history WHERE payload->>'k' = 'fail'")"
# Bytes that are not UTF-8 in stderr do not keep the job from failing.
[ "$(psql_q "SELECT last_error FROM $S.job_history WHERE payload->>'k' = 'junk'")" = "exit status 1: junk ?? end" ] ||
	fail "junk stderr: $(psql_q "SELECT last_error FROM $S.job_history WHERE payload->>'k' = 'junk'")"
# Exit 75: pending again, the attempt not counted.
[ "$(psql_q "SELECT attempts FROM $S.jobs WHERE payload->>'k' = 'later'")" = 0 ] || fail "exit 75 counted an attempt"
# The timeout killed the whole process group (the background sleep too).
[ "$(psql_q "SELECT last_error FROM $S.job_history WHERE payload->>'k' = 'hang'")" = \
  "timed out after 1s (process group killed)" ] || fail "timeout: $(psql_q "SELECT last_error FROM $S.job_history WHERE payload->>'k' = 'hang'")"
sleeper=$(cat "$OUT.sleeper")
[ -n "$sleeper" ] || fail "the hanging job did not start its child"
# alive PID: that process, still the job's sleep.
alive() {
	[ "$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline")" = "sleep $SLEEP_FOR " ] &&
		[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}
end=$((SECONDS + 5))
while alive "$sleeper" && [ $SECONDS -lt $end ]; do sleep 0.1; done
! alive "$sleeper" || fail "the timed-out command's child $sleeper survived"

# SIGKILL a worker mid-job: its command gets SIGTERM at once (the kernel's parent-death
# signal, and the worker's guard's to its whole group), and the job comes back after its lease
# and runs again elsewhere. (Its stderr is a pipe to the dead worker: the shell's report of its
# killed sleep there would end it by SIGPIPE before its trap runs.)
cat >"$TMP/slow.sh" <<'SH'
#!/bin/sh
echo run >>"$OUT2"
if [ "$(wc -l <"$OUT2")" -eq 1 ]; then
	exec 2>/dev/null
	trap 'echo TERM >"$PIDF.term"; exit 0' TERM
	echo $$ >"$PIDF"
	i=0
	while [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	exit 0
fi
exit 0
SH
chmod +x "$TMP/slow.sh"
export OUT2=$TMP/slow.runs PIDF=$TMP/orphan.pid
q enqueue crash --payload '{}'
crash_id=$(psql_q "SELECT id FROM $S.jobs WHERE queue = 'crash'")
"$PG" worker --schema "$S" --queue crash --lease 1s -- "$TMP/slow.sh" 2>"$TMP/w1err" &
w1=$!
end=$((SECONDS + 15))
while [ ! -s "$PIDF" ] && [ $SECONDS -lt $end ]; do sleep 0.05; done
[ -s "$PIDF" ] || fail "the first run did not start"
kill -KILL "$w1"
wait "$w1" 2>/dev/null
w1=
end=$((SECONDS + 5))
while [ ! -s "$PIDF.term" ] && [ $SECONDS -lt $end ]; do sleep 0.05; done
[ -s "$PIDF.term" ] || fail "the command of a SIGKILLed worker did not get SIGTERM within 5 s"
[ "$(status_of "$crash_id")" = running ] || fail "the job is not running after the crash"
"$PG" worker --schema "$S" --queue crash --lease 1s --poll 200ms -- "$TMP/slow.sh" 2>"$TMP/w2err" &
w2=$!
wait_query 20 "SELECT status FROM $S.job_history WHERE id = $crash_id" succeeded
kill -TERM "$w2"
wait "$w2" || fail "second worker exit status"
w2=
[ "$(wc -l <"$OUT2")" -eq 2 ] || fail "the crashed job ran $(wc -l <"$OUT2") times"
[ "$(psql_q "SELECT attempts FROM $S.job_history WHERE id = $crash_id")" = 2 ] || fail "attempts after the crash"
psql_q "SELECT errors::text FROM $S.job_history WHERE id = $crash_id" | grep -q "lease expired" || fail "no lease-expired note"

# Several connections share the slots; every job runs once.
seq 1 40 | sed 's/.*/{"c":&}/' >"$TMP/conn.jsonl"
q enqueue conn --file "$TMP/conn.jsonl"
export OUT3=$TMP/conn.runs
"$PG" worker --schema "$S" --queue conn -c 4 --connections 2 -- sh -c 'cat >>"$OUT3"; echo >>"$OUT3"' 2>"$TMP/wcerr" &
wc_pid=$!
wait_query 20 "SELECT count(*) FROM $S.job_history WHERE queue = 'conn' AND status = 'succeeded'" 40
kill -TERM "$wc_pid"
wait "$wc_pid" || fail "--connections worker exit status"
wc_pid=
grep -q "over 2 connections" "$TMP/wcerr" || { cat "$TMP/wcerr"; fail "not 2 connections"; }
[ "$(grep -c '"c"' "$OUT3")" -eq 40 ] && [ "$(grep '"c"' "$OUT3" | sort -u | wc -l)" -eq 40 ] || fail "--connections: jobs not run exactly once"
run 64 "$PG" worker --queue q --connections 17 -- true

# Graceful stop: running commands get --grace, then are killed and their jobs released.
q enqueue stop --payload '{}'
stop_id=$(psql_q "SELECT id FROM $S.jobs WHERE queue = 'stop'")
"$PG" worker --schema "$S" --queue stop --grace 300ms -- sh -c 'sleep 30' 2>"$TMP/w3err" &
w3=$!
wait_query 10 "SELECT status FROM $S.jobs WHERE id = $stop_id" running
kill -TERM "$w3"
timeout 10 tail --pid="$w3" -f /dev/null || fail "the worker did not stop within its grace period"
wait "$w3" || fail "graceful stop exit status"
w3=
grep -q "released 1 unfinished" "$TMP/w3err" || { cat "$TMP/w3err"; fail "no release"; }
[ "$(status_of "$stop_id")" = pending ] || fail "the job was not released"

# A release is not an attempt: a job with one attempt, released at two stops, still runs as
# attempt 1 of 1.
q enqueue rel --payload '{}' --max-attempts 1
rel_id=$(psql_q "SELECT id FROM $S.jobs WHERE queue = 'rel'")
export OUT5=$TMP/rel.runs
for i in 1 2; do
	"$PG" worker --schema "$S" --queue rel --grace 200ms -- \
		sh -c 'echo "$PGCOORD_JOB_ATTEMPT/$PGCOORD_JOB_MAX_ATTEMPTS" >>"$OUT5"; sleep 30' 2>"$TMP/w5err" &
	w3=$!
	wait_query 10 "SELECT status FROM $S.jobs WHERE id = $rel_id" running
	kill -TERM "$w3"
	wait "$w3" || fail "release stop $i exit status"
	w3=
done
run 0 "$PG" queue list rel --schema "$S"
out_has " pending *0 *0/1 "
out_has "released unfinished when worker"
"$PG" worker --schema "$S" --queue rel -- sh -c 'echo "$PGCOORD_JOB_ATTEMPT/$PGCOORD_JOB_MAX_ATTEMPTS" >>"$OUT5"' 2>"$TMP/w5err" &
w3=$!
wait_query 10 "SELECT status FROM $S.job_history WHERE id = $rel_id" succeeded
kill -TERM "$w3"
wait "$w3" || fail "release final exit status"
w3=
[ "$(sort -u "$OUT5")" = "1/1" ] || fail "attempts seen by the command: $(cat "$OUT5")"
exit 0
