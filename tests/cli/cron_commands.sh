# cron_commands.sh - command schedules: two cron run processes run each tick's command exactly
# once between them; a failing command is retried up to --max-attempts; SIGTERM gives a running
# command the grace period, then kills its process group and returns its job to pending; a
# job that names no command schedule runs nothing
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_cron_cmd
q() { psql_q "$1"; }
pids=()
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; }
trap 'stop_all; own_schema_cleanup' EXIT
# wait_for SECONDS 'SHELL TEXT': evaluates the text every 0.2 s until it is true, at most
# SECONDS.
wait_for() {
	local n=$(($1 * 5))
	shift
	while ! eval "$1"; do
		n=$((n - 1))
		[ "$n" -gt 0 ] || return 1
		sleep 0.2
	done
}

# Usage: a command excludes --queue, "--" needs a command, --max-attempts is a number.
run 64 "$PG" cron add x '* * * * *' --schema "$S" --queue q -- true
err_has "exclude each other"
run 64 "$PG" cron add x '* * * * *' --schema "$S" --
err_has "no COMMAND"
run 64 "$PG" cron add x '* * * * *' --schema "$S" --max-attempts 0 -- true
err_has "max-attempts"
run 64 "$PG" cron add x '* * * * *' --schema "$S" --queue cron:commands
err_has "command schedules only"
run 64 "$PG" cron run --schema "$S" --no-commands -c 2
err_has "no-commands"

# 1. Every second, two schedulers with workers: each tick's command runs once, on one of them.
# The words reach the command as given: no shell splits or expands them.
out=$TMP/ticks
run 0 "$PG" cron add every '* * * * * *' --schema "$S" -- \
	sh -c 'echo "$PGCOORD_CRON_TICK $HOSTMARK $PGCOORD_CRON_SCHEDULE $1" >>"$2"' sh 'a  b*' "$out"
run 0 "$PG" --json cron show every --schema "$S"
out_has '"command":\["sh","-c",'
out_has '"queue":"cron:commands"'
for h in A B; do
	HOSTMARK=$h PGCOORD_TEST_MARK=cron_cmd_$$ "$PG" cron run --schema "$S" -c 2 2>"$TMP/s$h" &
	pids+=($!)
done
sleep 8
run 0 "$PG" cron pause every --schema "$S"
# The ticks fired so far run; then both stop.
wait_for 20 'test "$(q "SELECT count(*) FROM $S.jobs WHERE queue = '\''cron:commands'\''")" = 0' ||
	fail "command jobs left: $(q "SELECT id, status, attempts, last_error FROM $S.jobs")"
stop_all
for i in 0 1; do
	wait "${pids[$i]}" || { cat "$TMP/sA" "$TMP/sB"; fail "cron run $i exited $?"; }
done
pids=()
for h in A B; do
	grep -q "commands: 2 at once" "$TMP/s$h" || { cat "$TMP/s$h"; fail "scheduler $h ran no worker"; }
done
lines=$(wc -l <"$out")
[ "$lines" -ge 5 ] || { cat "$out"; fail "only $lines commands ran in 8 s"; }
dups=$(cut -d' ' -f1 "$out" | sort | uniq -d)
[ -z "$dups" ] || { cat "$out"; fail "ticks whose command ran twice: $dups"; }
ticks=$(q "SELECT count(*) FROM $S.cron_ticks WHERE schedule = 'every' AND outcome = 'enqueued'")
[ "$ticks" = "$lines" ] || { cat "$out"; fail "$ticks ticks enqueued, $lines commands ran"; }
[ "$(q "SELECT count(*) FROM $S.job_history WHERE queue = 'cron:commands' AND status = 'succeeded'")" = "$lines" ] ||
	fail "not every command's job succeeded"
grep -qv ' every a  b\*$' "$out" && { cat "$out"; fail "the command's words were changed"; }
# Each line's tick is a tick the scheduler recorded.
while read -r tick mark _; do
	[ "$(q "SELECT count(*) FROM $S.cron_ticks WHERE schedule = 'every' AND tick_at = '$tick'")" = 1 ] ||
		fail "tick $tick ($mark) was not recorded"
done <"$out"
run 0 "$PG" cron remove every --schema "$S"
done_so_far=$(q "SELECT count(*) FROM $S.job_history")
last_id=$(q "SELECT coalesce(max(id), 0) FROM $S.job_history")

# 2. A failing command is retried: attempt 1 fails, attempt 2 succeeds; one that always fails
# runs --max-attempts times and its job fails for good.
run 0 "$PG" cron add flaky '@yearly' --schema "$S" --max-attempts 3 -- \
	sh -c 'echo "$PGCOORD_JOB_ATTEMPT" >>"$1"; [ "$PGCOORD_JOB_ATTEMPT" -ge 2 ] || { echo "not yet" >&2; exit 3; }' sh "$TMP/flaky"
run 0 "$PG" cron add broken '@yearly' --schema "$S" --max-attempts 2 -- sh -c 'echo x >>"$1"; exit 9' sh "$TMP/broken"
run 0 "$PG" cron trigger flaky --schema "$S"
run 0 "$PG" cron trigger broken --schema "$S"
PGCOORD_TEST_MARK=cron_cmd_$$ "$PG" cron run --schema "$S" 2>"$TMP/s2" &
pids=($!)
wait_for 30 'test "$(q "SELECT count(*) FROM $S.job_history")" = $((done_so_far + 2))' ||
	{ cat "$TMP/s2"; fail "the jobs did not finish: $(q "SELECT id, status, attempts FROM $S.jobs")"; }
[ "$(tr '\n' ' ' <"$TMP/flaky")" = "1 2 " ] || fail "flaky ran as: $(cat "$TMP/flaky")"
[ "$(wc -l <"$TMP/broken")" = 2 ] || fail "broken ran $(wc -l <"$TMP/broken") times, not 2"
[ "$(q "SELECT string_agg(status, ' ' ORDER BY id) FROM $S.job_history WHERE id > $last_id")" = "succeeded failed" ] ||
	fail "outcomes: $(q "SELECT id, status FROM $S.job_history")"
grep -q "not yet" "$TMP/s2" || { cat "$TMP/s2"; fail "the command's stderr was not passed on"; }

# 3. A job in the command queue that names no command schedule runs nothing and fails.
run 0 "$PG" queue enqueue cron:commands --schema "$S" --max-attempts 1 \
	--payload '{"cron": {"schedule": "nosuch", "tick": "2026-01-01T00:00:00+00:00"}, "command": ["touch", "'"$TMP/forged"'"]}'
wait_for 20 'test "$(q "SELECT count(*) FROM $S.job_history")" = $((done_so_far + 3))' ||
	fail "the forged job was not handled"
[ ! -e "$TMP/forged" ] || fail "a job's payload chose the command"
[ "$(q "SELECT status FROM $S.job_history ORDER BY id DESC LIMIT 1")" = failed ] || fail "the forged job did not fail"

# 4. SIGTERM: the running command gets --grace, then its whole group is killed, the job goes
# back to pending, and cron run exits 0.
stop_all
wait "${pids[0]}" || fail "cron run exited $?"
pids=()
run 0 "$PG" cron add long '@yearly' --schema "$S" -- sh -c 'sleep 300 & echo $! >"$1"; wait' sh "$TMP/long.pid"
run 0 "$PG" cron trigger long --schema "$S"
PGCOORD_TEST_MARK=cron_cmd_$$ "$PG" cron run --schema "$S" --grace 1s 2>"$TMP/s4" &
pids=($!)
wait_for 20 'test -s "$TMP/long.pid"' || { cat "$TMP/s4"; fail "the long command did not start"; }
child=$(cat "$TMP/long.pid")
kill -0 "$child" || fail "the command's child is not running"
kill -TERM "${pids[0]}"
st=0
wait_for 15 '! kill -0 "${pids[0]}" 2>/dev/null' || fail "cron run did not stop within 15 s"
wait "${pids[0]}" || st=$?
pids=()
[ "$st" = 0 ] || { cat "$TMP/s4"; fail "cron run exited $st after SIGTERM"; }
grep -q "running commands get 1s" "$TMP/s4" || { cat "$TMP/s4"; fail "no grace announced"; }
grep -q "1 released" "$TMP/s4" || { cat "$TMP/s4"; fail "the running job was not released"; }
wait_for 5 '! kill -0 "$child" 2>/dev/null' || fail "the command's process group outlived cron run"
[ "$(q "SELECT status FROM $S.jobs WHERE queue = 'cron:commands'")" = pending ] ||
	fail "the stopped command's job: $(q "SELECT id, status FROM $S.jobs")"

# 5. --once fires what is due and runs the command jobs that are runnable, then exits.
run 0 "$PG" cron remove long --schema "$S"
run 0 "$PG" cron add once '@yearly' --schema "$S" -- sh -c 'echo ran >"$1"' sh "$TMP/once"
run 0 "$PG" cron trigger once --schema "$S"
run 0 timeout 30 "$PG" cron run --schema "$S" --once
[ "$(cat "$TMP/once" 2>/dev/null)" = ran ] || fail "--once did not run the command"
exit 0
