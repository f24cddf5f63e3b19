# cron_metrics.sh - cron list --prometheus (names, values, escaped labels) and the doctor's cron
# check: overdue schedules (no scheduler), no success in two periods, paused ones
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_cron_metrics
q() { psql_q "$1"; }

run 0 "$PG" cron add 'we"ird\x' '@yearly' --schema "$S" --queue q
run 0 "$PG" cron add late '* * * * *' --schema "$S" --queue q
run 0 "$PG" cron add stale '@hourly' --schema "$S" --queue q
run 0 "$PG" cron add idle '@daily' --schema "$S" --queue q
run 0 "$PG" cron add off '@daily' --schema "$S" --queue q
run 0 "$PG" cron pause off --schema "$S"
# late: its tick is 5 minutes behind the server (nobody fired it); stale: added 3 hours ago and
# fired since, but no job of it ever succeeded.
q "UPDATE $S.cron_schedules SET next_tick = now() - interval '5 minutes' WHERE name = 'late';
   UPDATE $S.cron_schedules SET created_at = now() - interval '3 hours', last_tick = now() - interval '10 minutes',
          missed = 3, fired = 2, skipped = 1 WHERE name = 'stale'" >/dev/null

run 64 "$PG" --json cron list --schema "$S" --prometheus
err_has "not both"
run 64 "$PG" cron show late --schema "$S" --prometheus
err_has "does not take --prometheus"
run 0 "$PG" cron list --schema "$S" --prometheus
for m in next_run_timestamp_seconds last_run_timestamp_seconds last_success_timestamp_seconds overdue_seconds; do
	out_has "^# TYPE pgcoord_cron_$m gauge$"
done
for m in fired missed skipped; do
	out_has "^# TYPE pgcoord_cron_${m}_total counter$"
done
out_has '^pgcoord_cron_fired_total{schedule="we\\"ird\\\\x"} 0$'
out_has '^pgcoord_cron_missed_total{schedule="stale"} 3$'
out_has '^pgcoord_cron_fired_total{schedule="stale"} 2$'
out_has '^pgcoord_cron_skipped_total{schedule="stale"} 1$'
out_has '^pgcoord_cron_paused{schedule="off"} 1$'
grep -q '^pgcoord_cron_next_run_timestamp_seconds{schedule="off"}' "$TMP/out" && fail "a paused schedule has a next run"
nt=$(q "SELECT extract(epoch FROM next_tick)::int8 FROM $S.cron_schedules WHERE name = 'idle'")
out_has "^pgcoord_cron_next_run_timestamp_seconds{schedule=\"idle\"} $nt.000$"
od=$(awk -F'} ' '/^pgcoord_cron_overdue_seconds\{schedule="late"\}/ { print int($2) }' "$TMP/out")
[ "${od:-0}" -ge 299 ] && [ "$od" -lt 400 ] || fail "late is overdue by ${od:-nothing} s, not about 300"
# Every sample line is NAME{schedule="..."} NUMBER.
grep -v '^#' "$TMP/out" | grep -Ev '^pgcoord_cron_[a-z_]+\{schedule="([^"\\]|\\.)*"\} [0-9]+(\.[0-9]+)?$' &&
	fail "a malformed sample"

# The exit status also reflects the server's settings for this role: only the finding counts.
doctor() {
	timeout 60 "$PG" "$@" doctor --schema "$S" >"$TMP/out" 2>"$TMP/err"
	local st=$?
	[ "$st" -le 1 ] || { cat "$TMP/out" "$TMP/err"; fail "doctor exited $st"; }
}
finding() { python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
f = [f for f in d["findings"] if f["check"] == "cron"]
assert len(f) == 1, d
print(f[0]["severity"], f[0]["value"], f[0]["message"], sep="|")' "$TMP/out"; }

# Overdue and stale: a warning that names them, and the paused one.
doctor --json
f=$(finding)
case "$f" in "warning|5|1 of 5 schedules overdue by more than a minute, up to 5m (late)"*) ;; *) fail "cron: $f" ;; esac
case "$f" in *"no success in two periods: stale"*"1 paused (off)"*) ;; *) fail "cron: $f" ;; esac
# A scheduler came: only stale is left.
q "UPDATE $S.cron_schedules SET next_tick = now() + interval '1 minute' WHERE name = 'late'" >/dev/null
doctor --json
f=$(finding)
[ "$f" = "warning|5|1 of 5 schedules with no successful job in their last two periods (stale); 1 paused (off)" ] ||
	fail "cron: $f"
# stale's job succeeds (a real worker): only the paused one is left, as information.
run 0 "$PG" cron trigger stale --schema "$S"
run 0 timeout 60 "$PG" worker --schema "$S" --queue q --once -- true
doctor --json
f=$(finding)
[ "$f" = "info|5|5 schedules, none overdue or failing; 1 paused (off)" ] || fail "cron: $f"
run 0 "$PG" cron remove off --schema "$S"
doctor
out_has "^ok       cron: 4 schedules, none overdue or failing$"
exit 0
