# cron_runlog.sh - the run log: a cron tick shows what became of its job (status, exit status,
# duration, the end of its output) in cron history, list and show; queue list shows a
# failure's last line (a traceback's exception), queue show the whole; the run log's
# retention bound prunes old ticks (the scheduler) and old history rows (the reaper)
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_runlog
q() { psql_q "$1"; }
pids=()
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; }
trap 'stop_all; own_schema_cleanup' EXIT

# 1. A command schedule whose command exits 127 (it says why on stderr first), and one whose
# command does not exist (the worker's own exit 127): one attempt each, every second.
run 0 "$PG" cron add dies '* * * * * *' --schema "$S" --max-attempts 1 -- \
	sh -c 'echo "starting" >&2; echo "dies: no such thing" >&2; exit 127'
run 0 "$PG" cron add missing '* * * * * *' --schema "$S" --max-attempts 1 -- "pgcoord-no-such-command-$$"
"$PG" cron run --schema "$S" -c 2 >"$TMP/cron.out" 2>"$TMP/cron.err" &
pids+=($!)
wait_query 30 "SELECT count(*) >= 2 FROM (SELECT DISTINCT t.schedule FROM $S.cron_ticks t
               JOIN $S.job_history h ON h.id = t.job_id WHERE h.status = 'failed') x" t
run 0 "$PG" cron pause dies --schema "$S"
run 0 "$PG" cron pause missing --schema "$S"
stop_all
wait "${pids[0]}" || { cat "$TMP/cron.err"; fail "cron run exited $?"; }
pids=()

# history: the tick's job failed with exit status 127, and the end of its output.
run 0 "$PG" cron history dies --schema "$S"
out_has "^TICK .*STATUS *EXIT *TOOK *OUTPUT$"
out_has " enqueued .* failed  *127 .* dies: no such thing$"
grep -q " enqueued .* enqueued " "$TMP/out" && fail "a tick's job shows as enqueued: $(cat "$TMP/out")"
run 0 "$PG" --json cron history dies --schema "$S"
python3 - "$TMP/out" <<'PY' || fail "cron history --json: $(cat "$TMP/out")"
import json, sys
ticks = json.load(open(sys.argv[1]))["ticks"]
done = [t for t in ticks if t["job_status"] == "failed"]
assert done, ticks
t = done[0]
assert t["exit_status"] == 127 and t["output"].endswith("dies: no such thing"), t
assert "starting" in t["output"] and t["error"].startswith("exit status 127"), t
assert isinstance(t["duration_ms"], int) and 0 <= t["duration_ms"] < 30000, t
assert t["attempts"] == 1 and t["max_attempts"] == 1, t
PY
run 0 "$PG" cron history missing --schema "$S"
out_has " failed  *127 .*command not found (exit 127)$"

# list and show: the last run's job.
run 0 "$PG" cron list --schema "$S"
out_has "^NAME .* OUTCOME *JOB "
out_has "^dies .* failed/127 "
out_has "^missing .* failed/127 "
run 0 "$PG" cron show dies --schema "$S"
out_has "^last job: *[0-9][0-9]* failed, exit 127, "
out_has "^last output: *dies: no such thing$"
run 0 "$PG" --json cron show dies --schema "$S"
python3 - "$TMP/out" <<'PY' || fail "cron show --json: $(cat "$TMP/out")"
import json, sys
j = json.load(open(sys.argv[1]))["last_job"]
assert j["status" if "status" in j else "job_status"] == "failed" and j["exit_status"] == 127, j
PY

# 2. A command that prints a traceback: queue list shows its exception, queue show all of it.
# enqueue_id QUEUE [OPTIONS]: enqueues {} and prints the job's id.
enqueue_id() { "$PG" --json queue enqueue "$@" --schema "$S" --payload '{}' | sed 's/.*"id":\([0-9]*\).*/\1/'; }
id=$(enqueue_id tb --max-attempts 1)
run 0 timeout 60 "$PG" worker --once --schema "$S" --queue tb -- sh -c \
	'printf "Traceback (most recent call last):\n  File \"job.py\", line 3, in <module>\n    run()\nValueError: bad\n\n" >&2; exit 1'
run 0 "$PG" queue list tb --schema "$S"
out_has "^$id .* failed .* ValueError: bad$"
grep -q "Traceback" "$TMP/out" && fail "queue list shows the traceback's first line: $(cat "$TMP/out")"
run 0 "$PG" queue show "$id" --schema "$S"
out_has "^last_error: *exit status 1: Traceback (most recent call last):.*ValueError: bad"
out_has "^exit: *1$"
out_has "^duration: "
run 0 "$PG" --json queue list tb --schema "$S"
out_has '"error_line":"ValueError: bad"'
out_has '"exit_status":1,'
# A command that succeeds leaves the end of its output and exit status 0.
okid=$(enqueue_id ok)
run 0 timeout 60 "$PG" worker --once --schema "$S" --queue ok -- sh -c 'echo "all fine" >&2'
run 0 "$PG" --json queue show "$okid" --schema "$S"
out_has '"status":"succeeded"'
out_has '"exit_status":0,'
out_has '"output":"all fine"'

# 3. Retention. Ticks older than the longer history retention go as the scheduler fires,
# unless their job is still live; younger ones stay. History rows older than their
# retention go with the reaper.
run 0 "$PG" queue config --schema "$S" --succeeded-retention 1h --failed-retention 2h
run 0 "$PG" cron add tidy '0 0 1 1 *' --schema "$S" --queue tidyq
q "INSERT INTO $S.cron_ticks (schedule, tick_at, outcome) SELECT 'tidy', now() - i * interval '10 minutes' - interval '5 minutes', 'missed'
   FROM generate_series(1, 30) i" >/dev/null
livejob=$(enqueue_id tidyq --delay 1d)
q "INSERT INTO $S.cron_ticks (schedule, tick_at, outcome, job_id) VALUES ('tidy', now() - interval '3 days', 'enqueued', $livejob)" >/dev/null
q "UPDATE $S.cron_schedules SET next_tick = now() WHERE name = 'tidy'" >/dev/null
[ "$(q "SELECT count(*) FROM $S.cron_ticks WHERE schedule = 'tidy' AND tick_at < now() - interval '2 hours'")" = 20 ] ||
	fail "setup: $(q "SELECT count(*) FROM $S.cron_ticks WHERE schedule = 'tidy'")"
run 0 timeout 60 "$PG" cron run --schema "$S" --once --no-commands
[ "$(q "SELECT count(*) FROM $S.cron_ticks WHERE schedule = 'tidy' AND tick_at < now() - interval '2 hours'")" = 1 ] ||
	fail "old ticks left: $(q "SELECT tick_at, job_id FROM $S.cron_ticks WHERE schedule = 'tidy' AND tick_at < now() - interval '2 hours'")"
[ "$(q "SELECT job_id FROM $S.cron_ticks WHERE schedule = 'tidy' AND tick_at < now() - interval '2 hours'")" = "$livejob" ] ||
	fail "the tick of a live job was pruned"
[ "$(q "SELECT count(*) FROM $S.cron_ticks WHERE schedule = 'tidy' AND tick_at >= now() - interval '2 hours'")" -ge 12 ] ||
	fail "young ticks were pruned"
# A history row past the failed retention goes with the next reaper pass; a younger one stays.
q "UPDATE $S.job_history SET finished_at = now() - interval '3 hours' WHERE id = $id" >/dev/null
"$PG" worker --schema "$S" --queue tidy-none -- true >/dev/null 2>"$TMP/w.err" &
pids+=($!)
wait_query 30 "SELECT count(*) FROM $S.job_history WHERE id = $id" 0
stop_all
wait "${pids[0]}" || { cat "$TMP/w.err"; fail "worker exited $?"; }
pids=()
[ "$(q "SELECT count(*) FROM $S.job_history WHERE id = $okid")" = 1 ] || fail "a young history row was pruned"
# A tick whose job's history row is gone says so.
run 0 "$PG" --json cron history dies --schema "$S"
q "DELETE FROM $S.job_history" >/dev/null
run 0 "$PG" cron history dies --schema "$S"
out_has " enqueued .* gone "
echo ok
