# worker_sigkill.sh - pgcoord worker and pgcoord cron run killed by SIGKILL while a job's
# command runs a grandchild: the grandchild (and everything else in the command's process
# group) is gone soon after, long before the job's lease expires, so that the worker that
# claims the job again never runs it beside what is left of the first run.
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_wsigkill
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	[ -f "$TMP/gc.pids" ] && while read -r p; do kill -KILL "$p" 2>/dev/null; done <"$TMP/gc.pids"
	own_schema_cleanup
}
trap cleanup EXIT
# alive PID: that process exists and is not a zombie.
alive() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
# group_alive PGID: a process of that group that is not a zombie still exists.
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }
# wait_lines FILE N SECONDS: until FILE has N lines.
wait_lines() {
	local end=$((SECONDS + $3))
	while [ "$(cat "$1" 2>/dev/null | wc -l)" -lt "$2" ] && [ $SECONDS -lt $end ]; do sleep 0.05; done
	[ "$(cat "$1" 2>/dev/null | wc -l)" -ge "$2" ]
}
# gone_within SECONDS PID PGID WHAT: the process and its group are gone within SECONDS.
gone_within() {
	local end=$((SECONDS + $1))
	while { alive "$2" || group_alive "$3"; } && [ $SECONDS -lt $end ]; do sleep 0.1; done
	! alive "$2" || fail "$4: grandchild $2 still runs $1 s after the SIGKILL"
	! group_alive "$3" || { ps -e -o pid,pgid,stat,args | awk -v g="$3" '$2 == g'; fail "$4: process group $3 still runs"; }
}

# The critical section, held by the command's grandchild: a run that finds the previous one's
# holder still running inside records an overlap. (A holder killed by SIGKILL leaves the
# directory behind: a dead holder, or one dead and not yet reaped, is no overlap.)
export CS=$TMP/cs
mkdir -p "$CS"
cat >"$TMP/crit" <<'SH'
#!/bin/sh
if ! mkdir "$CS/in" 2>/dev/null; then
	old=$(cat "$CS/who" 2>/dev/null)
	# A zombie runs nothing: only a holder that still runs is an overlap (the same test as
	# alive() below; kill -0 would count a killed holder no one has reaped yet).
	[ -n "$old" ] && [ -e "/proc/$old" ] && [ "$(awk '{print $3}' "/proc/$old/stat" 2>/dev/null)" != Z ] &&
		echo "overlap: $$ found $old alive inside" >>"$CS/bad"
fi
echo $$ >"$CS/who"
sleep "$1"
rm -f "$CS/who"
rmdir "$CS/in"
SH
chmod +x "$TMP/crit"
# The command: starts the section in the background (in its process group, as a shell without
# job control does), tells its pid and pgid, and waits.
cat >"$TMP/cmd" <<'SH'
#!/bin/sh
"$TMP/crit" 30 &
echo "$! $$" >>"$TMP/gc.pids"
wait
SH
chmod +x "$TMP/cmd"
export TMP

# 1. pgcoord worker: SIGKILL while the job runs, twice; the second worker claims the job again
# once its lease (1 s) expires, and finds the first run gone.
id=$("$PG" queue enqueue w --schema "$S" --payload '{}' --max-attempts 10 | sed -n 's/^enqueued job \([0-9]*\) .*/\1/p')
[ -n "$id" ] || fail "no job enqueued"
for round in 1 2; do
	"$PG" worker --schema "$S" --queue w --lease 1s --poll 200ms -- "$TMP/cmd" 2>"$TMP/werr.$round" &
	w=$!
	pids+=("$w")
	wait_lines "$TMP/gc.pids" "$round" 30 || { cat "$TMP/werr.$round"; fail "round $round: the job did not start"; }
	read -r gc pg < <(sed -n "${round}p" "$TMP/gc.pids")
	alive "$gc" || fail "round $round: grandchild $gc is not running"
	kill -KILL "$w"
	wait "$w" 2>/dev/null
	# Within a second or two, before the lease (1 s) lets another worker claim the job,
	# whatever the timing; 10 s is the bound for a loaded machine.
	gone_within 10 "$gc" "$pg" "worker round $round"
done
[ ! -s "$CS/bad" ] || { cat "$CS/bad"; fail "a job ran twice at once"; }
# And the job still finishes: a worker that is not killed runs it to the end (a short section).
sed -i 's/crit" 30/crit" 0.1/' "$TMP/cmd"
"$PG" worker --schema "$S" --queue w --lease 1s --poll 200ms -- "$TMP/cmd" 2>"$TMP/werr.3" &
w=$!
pids+=("$w")
wait_query 30 "SELECT status FROM $S.job_history WHERE id = $id" succeeded
kill -TERM "$w"
wait "$w" || { cat "$TMP/werr.3"; fail "the last worker exited $? on SIGTERM"; }
[ ! -s "$CS/bad" ] || { cat "$CS/bad"; fail "a job ran twice at once"; }

# 2. pgcoord cron run runs the commands of command schedules itself: the same for it.
sed -i 's/crit" 0.1/crit" 30/' "$TMP/cmd"
: >"$TMP/gc.pids"
run 0 "$PG" cron add hold '* * * * * *' --schema "$S" -- "$TMP/cmd"
"$PG" cron run --schema "$S" -c 4 2>"$TMP/cerr" &
c=$!
pids+=("$c")
wait_lines "$TMP/gc.pids" 2 30 || { cat "$TMP/cerr"; fail "cron run started no command"; }
run 0 "$PG" cron pause hold --schema "$S"
kill -KILL "$c"
wait "$c" 2>/dev/null
while read -r gc pg; do
	gone_within 10 "$gc" "$pg" "cron run"
done <"$TMP/gc.pids"
echo "ok: no grandchild outlived a SIGKILLed worker or cron run, no job ran twice at once"
