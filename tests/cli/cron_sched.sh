# cron_sched.sh - five schedulers race for every-second ticks, two of them on hosts whose clocks
# are 5 s ahead and 5 s behind (faketime), with different lookaheads: every tick is enqueued
# exactly once, none is missing, no job can run before its tick
. "$(dirname "$0")/lib.sh"
skip_without_pg
# libfaketime, preloaded directly: the faketime(1) wrapper forks, and a signal to it would not
# reach the scheduler.
lib=$(ls /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1 2>/dev/null | head -n 1)
if [ -z "$lib" ]; then
	[ -n "${PGCOORD_CI:-}" ] && fail "libfaketime is not installed (Debian package faketime)"
	echo "skipped: libfaketime is not installed (Debian package faketime)" >&2
	exit 77
fi
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_cron_race
# Under AddressSanitizer the preloaded library comes before ASan's runtime, which ASan refuses
# unless told that the order is meant.
case "${PGCOORD_SANITIZE:-}" in *address*) export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" ;; esac
# The skew is real inside faketime's processes.
ahead=$(LD_PRELOAD=$lib FAKETIME=+5s date +%s)
[ $((ahead - $(date +%s))) -ge 4 ] || fail "faketime does not move the clock ($ahead)"

# Under valgrind on a loaded 2-core machine every scheduler can stall for seconds at once; the
# ticks they come back to late are then caught up rather than missed (the default policy), so
# that the test still checks that each tick is enqueued once, not how fast valgrind runs.
catch_up=()
[ -n "${PGCOORD_VALGRIND:-}" ] && catch_up=(--catch-up all)
run 0 "$PG" cron add tick '* * * * * *' --queue race --schema "$S" --payload '{"k":"v"}' "${catch_up[@]}"
pids=()
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; }
trap 'stop_all; own_schema_cleanup' EXIT
# Each scheduler carries the test's mark in its environment, and only those pids are stopped.
# Their lookaheads differ too: one fires each tick when it is due, the others up to 2 s or
# 5 s (the default) ahead.
for i in 1 2 3; do
	la=()
	case $i in 1) la=(--lookahead 0) ;; 2) la=(--lookahead 2s) ;; esac
	PGCOORD_TEST_MARK=cron_race_$$ "$PG" cron run --schema "$S" "${la[@]}" 2>"$TMP/s$i" &
	pids+=($!)
done
PGCOORD_TEST_MARK=cron_race_$$ LD_PRELOAD=$lib FAKETIME=+5s "$PG" cron run --schema "$S" 2>"$TMP/s4" &
pids+=($!)
PGCOORD_TEST_MARK=cron_race_$$ LD_PRELOAD=$lib FAKETIME=-5s "$PG" cron run --schema "$S" --lookahead 0 2>"$TMP/s5" &
pids+=($!)
sleep 25
stop_all
for i in "${!pids[@]}"; do
	wait "${pids[$i]}"
	st=$?
	[ "$st" -eq 0 ] || { cat "$TMP/s$((i + 1))"; fail "scheduler $((i + 1)) exited $st"; }
done
pids=()
for i in 1 2 3 4 5; do
	grep -q "on the database's clock" "$TMP/s$i" || { cat "$TMP/s$i"; fail "scheduler $i did not start"; }
	grep -q "stopping" "$TMP/s$i" || { cat "$TMP/s$i"; fail "scheduler $i did not stop cleanly"; }
done

q() { psql_q "$1"; }
ticks=$(q "SELECT count(*) FROM $S.cron_ticks WHERE schedule = 'tick'")
[ "$ticks" -ge 15 ] || fail "only $ticks ticks in 25 s"
# Every row enqueued, each with a job, each job once; no gap between the first and the last.
[ "$(q "SELECT count(*) FROM $S.cron_ticks WHERE outcome <> 'enqueued'")" = 0 ] ||
	{ q "SELECT * FROM $S.cron_ticks WHERE outcome <> 'enqueued'"; fail "ticks not enqueued"; }
span=$(q "SELECT extract(epoch FROM max(tick_at) - min(tick_at))::int + 1 FROM $S.cron_ticks")
[ "$span" = "$ticks" ] || fail "$ticks ticks over $span seconds: some are missing"
jobs=$(q "SELECT count(*) FROM $S.jobs WHERE queue = 'race'")
[ "$jobs" = "$ticks" ] || fail "$jobs jobs for $ticks ticks"
[ "$(q "SELECT count(DISTINCT payload->'cron'->>'tick') FROM $S.jobs")" = "$ticks" ] ||
	fail "two jobs carry the same tick"
# No job could run before the server's clock reached its tick (the host 5 s ahead decides
# nothing): a tick fired ahead is a job scheduled for the tick, never sooner, and ahead by at
# most the lookahead, by the server's clock.
[ "$(q "SELECT count(*) FROM $S.cron_ticks t JOIN $S.jobs j ON j.id = t.job_id WHERE j.run_at < t.tick_at")" = 0 ] ||
	{ q "SELECT t.tick_at, t.fired_at, j.run_at FROM $S.cron_ticks t JOIN $S.jobs j ON j.id = t.job_id
		WHERE j.run_at < t.tick_at"; fail "jobs runnable before their ticks"; }
[ "$(q "SELECT count(*) FROM $S.cron_ticks WHERE fired_at < tick_at - interval '5 seconds'")" = 0 ] ||
	{ q "SELECT tick_at, fired_at FROM $S.cron_ticks WHERE fired_at < tick_at - interval '5 seconds'"
	  fail "ticks fired more than the lookahead ahead"; }
[ "$(q "SELECT count(*) > 0 FROM $S.cron_ticks WHERE fired_at < tick_at")" = t ] || fail "no tick fired ahead"
# Each tick's job is the one that names it, and the schedule's payload is kept.
[ "$(q "SELECT count(*) FROM $S.cron_ticks t JOIN $S.jobs j ON j.id = t.job_id
	WHERE (j.payload->'cron'->>'tick')::timestamptz = t.tick_at AND j.payload->'cron'->>'schedule' = 'tick'
	  AND j.payload->>'k' = 'v'")" = "$ticks" ] || fail "a job does not carry its tick"
[ "$(q "SELECT fired || ' ' || missed || ' ' || skipped FROM $S.cron_schedules")" = "$ticks 0 0" ] ||
	fail "counters: $(q "SELECT fired, missed, skipped FROM $S.cron_schedules")"
exit 0
