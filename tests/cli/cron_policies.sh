# cron_policies.sh - catch-up after downtime (skip, once, all with its bounds), overlap skip,
# and run-time changes (pause, resume, edit, trigger, remove) seen by a running scheduler
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_cron_pol
q() { psql_q "$1"; }

# ---- catch-up: every scheduler was down for ten minutes ----
# The downtime is made by moving next_tick back (nothing else knows the time): ticks at the
# start of each of the last ten minutes and of this one are due. Not near a minute's end, so
# that no further tick comes due meanwhile.
sec() { date +%S | sed "s/^0//"; }
while [ "$(sec)" -ge 45 ] || [ "$(sec)" -lt 3 ]; do sleep 1; done
for p in skip once all all5; do
	extra=()
	case $p in
	all) extra=(--catch-up all --catch-up-max 3) ;;
	all5) extra=(--catch-up all --catch-up-window 5m) ;;
	*) extra=(--catch-up "$p") ;;
	esac
	run 0 "$PG" cron add "c_$p" '* * * * *' --queue "q_$p" --schema "$S" "${extra[@]}"
done
q "UPDATE $S.cron_schedules SET next_tick = date_trunc('minute', now()) - interval '10 minutes'" >/dev/null
run 0 "$PG" cron run --once --schema "$S"
# skip: the tick of this minute fires; the ten before are missed, in one row.
[ "$(q "SELECT fired || ' ' || missed FROM $S.cron_schedules WHERE name = 'c_skip'")" = "1 10" ] ||
	fail "skip: $(q "SELECT fired, missed FROM $S.cron_schedules WHERE name = 'c_skip'")"
[ "$(q "SELECT ticks FROM $S.cron_ticks WHERE schedule = 'c_skip' AND outcome = 'missed'")" = 10 ] ||
	fail "skip: no summary row of 10 missed ticks"
[ "$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_skip' AND (payload->'cron'->>'tick')::timestamptz
	= date_trunc('minute', now())")" = 1 ] || fail "skip: the job is not this minute's tick"
# once: one job for the late ticks (its tick the latest of them), and this minute's.
[ "$(q "SELECT fired || ' ' || missed FROM $S.cron_schedules WHERE name = 'c_once'")" = "2 9" ] ||
	fail "once: $(q "SELECT fired, missed FROM $S.cron_schedules WHERE name = 'c_once'")"
[ "$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_once' AND (payload->'cron'->>'tick')::timestamptz
	= date_trunc('minute', now()) - interval '1 minute'")" = 1 ] || fail "once: no job for the latest late tick"
# all, at most 3: the newest three.
[ "$(q "SELECT fired || ' ' || missed FROM $S.cron_schedules WHERE name = 'c_all'")" = "3 8" ] ||
	fail "all: $(q "SELECT fired, missed FROM $S.cron_schedules WHERE name = 'c_all'")"
# all, within 5 minutes: this minute's and the four before.
[ "$(q "SELECT fired || ' ' || missed FROM $S.cron_schedules WHERE name = 'c_all5'")" = "5 6" ] ||
	fail "all5: $(q "SELECT fired, missed FROM $S.cron_schedules WHERE name = 'c_all5'")"
[ "$(q "SELECT count(DISTINCT payload->'cron'->>'tick') FROM $S.jobs WHERE queue = 'q_all5'")" = 5 ] ||
	fail "all5: the jobs are not five different ticks"
# Every schedule now waits for the next minute.
[ "$(q "SELECT count(*) FROM $S.cron_schedules WHERE next_tick = date_trunc('minute', now()) + interval '1 minute'")" = 4 ] ||
	fail "next_tick not moved to the next minute"
run 0 "$PG" cron history c_skip --schema "$S"
out_has missed
for p in skip once all all5; do run 0 "$PG" cron remove "c_$p" --schema "$S"; done
# Jitter: the job starts at its tick plus up to the jitter (scheduled for later, here). A daily
# schedule, so that a slow scheduler (memcheck) finds this one tick due and no other.
run 0 "$PG" cron add jit '0 0 * * *' --jitter 1h --queue q_jit --schema "$S"
q "UPDATE $S.cron_schedules SET next_tick = date_trunc('second', now())" >/dev/null
run 0 "$PG" cron run --once --schema "$S"
[ "$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_jit' AND status = 'scheduled'
	AND run_at > (payload->'cron'->>'tick')::timestamptz
	AND run_at <= (payload->'cron'->>'tick')::timestamptz + interval '1 hour'")" = 1 ] ||
	fail "jitter: $(q "SELECT status, run_at, payload FROM $S.jobs WHERE queue = 'q_jit'")"
run 0 "$PG" cron remove jit --schema "$S"

# ---- a running scheduler sees changes within about a second ----
"$PG" cron run --schema "$S" 2>"$TMP/sched" &
wpid=$!
# Overlap skip: nobody takes the jobs, so after the first tick's job every tick is skipped.
run 0 "$PG" cron add ov '* * * * * *' --overlap skip --queue q_ov --schema "$S"
wait_query 10 "SELECT skipped >= 2 FROM $S.cron_schedules WHERE name = 'ov'" t
[ "$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_ov'")" = 1 ] || fail "overlap skip enqueued twice"
[ "$(q "SELECT count(*) >= 2 FROM $S.cron_ticks WHERE schedule = 'ov' AND outcome = 'skipped-overlap'")" = t ] ||
	fail "no skipped-overlap ticks recorded"
run 1 "$PG" cron trigger ov --schema "$S"
err_has "still pending or running"
run 0 "$PG" cron pause ov --schema "$S"

# Add: ticks start within a few seconds.
run 0 "$PG" cron add live '* * * * * *' --queue q_live --schema "$S"
wait_query 5 "SELECT count(*) >= 2 FROM $S.jobs WHERE queue = 'q_live'" t
# The scheduler fires its ticks ahead (the default lookahead): jobs scheduled for ticks to come.
wait_query 5 "SELECT count(*) > 0 FROM $S.jobs WHERE queue = 'q_live' AND status = 'scheduled' AND run_at > now()" t
# Pause: no more ticks (after the one that may be firing), and those fired ahead are taken back.
run 0 "$PG" cron pause live --schema "$S"
[ "$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_live' AND run_at > now()")" = 0 ] ||
	fail "pause left jobs of ticks to come: $(q "SELECT id, status, run_at FROM $S.jobs WHERE queue = 'q_live'")"
sleep 1.5
n=$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_live'")
sleep 2
[ "$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_live'")" = "$n" ] || fail "a paused schedule fired"
# Trigger a paused schedule: one job now, outcome triggered, next_tick unchanged.
nt=$(q "SELECT next_tick FROM $S.cron_schedules WHERE name = 'live'")
run 0 "$PG" cron trigger live --schema "$S"
id=$(cat "$TMP/out")
[ "$(q "SELECT outcome FROM $S.cron_ticks WHERE job_id = $id")" = triggered ] || fail "trigger: no triggered tick"
[ "$(q "SELECT next_tick FROM $S.cron_schedules WHERE name = 'live'")" = "$nt" ] || fail "trigger moved next_tick"
# Resume: from now on, the ticks of the pause are not caught up.
t0=$(q "SELECT now()")
run 0 "$PG" cron resume live --schema "$S"
[ "$(q "SELECT next_tick > '$t0' FROM $S.cron_schedules WHERE name = 'live'")" = t ] ||
	fail "resume: next_tick not after the resume: $(q "SELECT next_tick FROM $S.cron_schedules WHERE name = 'live'")"
wait_query 5 "SELECT count(*) >= $((n + 3)) FROM $S.jobs WHERE queue = 'q_live'" t
[ "$(q "SELECT missed FROM $S.cron_schedules WHERE name = 'live'")" = 0 ] || fail "resume caught up the pause"
# Edit: the jobs go to the new queue within a few seconds.
run 1 "$PG" cron add live '* * * * * *' --queue q_live2 --schema "$S"
err_has "exists"
run 0 "$PG" cron add live '* * * * * *' --queue q_live2 --replace --schema "$S"
[ "$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_live' AND run_at > now()")" = 0 ] ||
	fail "the edit left jobs of the old definition's ticks to come"
wait_query 5 "SELECT count(*) >= 1 FROM $S.jobs WHERE queue = 'q_live2'" t
# Remove: no more ticks, none of those fired ahead left.
run 0 "$PG" cron remove live --schema "$S"
[ "$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_live2' AND run_at > now()")" = 0 ] ||
	fail "remove left jobs of ticks to come"
sleep 1.5
n=$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_live2'")
sleep 2
[ "$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'q_live2'")" = "$n" ] || fail "a removed schedule fired"
run 65 "$PG" cron show live --schema "$S"
err_has "no schedule live"
kill -TERM "$wpid"
wait "$wpid" || { cat "$TMP/sched"; fail "the scheduler did not stop cleanly"; }
wpid=
grep -q "skipped (overlap)" "$TMP/sched" || { cat "$TMP/sched"; fail "the scheduler did not log the overlap"; }

# ---- the worker gets the schedule and the tick ----
run 1 "$PG" cron trigger ov --schema "$S" # ov's first job is still pending: refused
q "DELETE FROM $S.jobs WHERE queue = 'q_ov'" >/dev/null
run 0 "$PG" cron trigger ov --schema "$S"
cat >"$TMP/job.sh" <<'SH'
#!/bin/sh
echo "$PGCOORD_CRON_SCHEDULE $PGCOORD_CRON_TICK" >>"$OUT"
SH
chmod +x "$TMP/job.sh"
OUT=$TMP/env timeout 30 "$PG" worker --once --schema "$S" --queue q_ov -- "$TMP/job.sh" 2>/dev/null ||
	fail "worker --once"
grep -qE '^ov [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\+00:00$' "$TMP/env" || { cat "$TMP/env"; fail "worker env"; }
exit 0
