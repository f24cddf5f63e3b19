# cron_restart.sh - a server restart under two running cron schedulers: they reconnect and go
# on, and no tick is doubled (run alone: it restarts the test server)
. "$(dirname "$0")/lib.sh"
need_restartable_server
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_cron_restart
q() { psql_q "$1"; }
run 0 "$PG" cron add r '* * * * * *' --queue r --catch-up all --schema "$S"
"$PG" cron run --schema "$S" 2>"$TMP/s1" &
p1=$!
"$PG" cron run --schema "$S" 2>"$TMP/s2" &
p2=$!
trap 'kill -TERM $p1 $p2 2>/dev/null; own_schema_cleanup' EXIT
# Both schedulers must be up before the restart (a scheduler that is still starting when the
# server goes down fails its first connection, as --wait-for-db documents; valgrind starts slowly).
end=$((SECONDS + 60))
until grep -q "pgcoord cron: scheduler" "$TMP/s1" && grep -q "pgcoord cron: scheduler" "$TMP/s2"; do
	[ $SECONDS -lt $end ] || { cat "$TMP/s1" "$TMP/s2"; fail "the schedulers did not start"; }
	kill -0 $p1 2>/dev/null && kill -0 $p2 2>/dev/null ||
		{ cat "$TMP/s1" "$TMP/s2"; fail "a scheduler exited before it started"; }
	sleep 0.1
done
end=$((SECONDS + 15))
until [ "$(q "SELECT count(*) >= 3 FROM $S.cron_ticks" 2>/dev/null)" = t ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/s1"; fail "no ticks before the restart"; }
	sleep 0.1
done
restart_server
before=$(q "SELECT count(*) FROM $S.cron_ticks")
end=$((SECONDS + 30))
until [ "$(q "SELECT count(*) >= $before + 3 FROM $S.cron_ticks" 2>/dev/null)" = t ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/s1" "$TMP/s2"; fail "no ticks after the restart"; }
	sleep 0.2
done
kill -TERM $p1 $p2
wait $p1 || { cat "$TMP/s1"; fail "scheduler 1 exit status"; }
wait $p2 || { cat "$TMP/s2"; fail "scheduler 2 exit status"; }
grep -q "reconnected" "$TMP/s1" "$TMP/s2" || { cat "$TMP/s1" "$TMP/s2"; fail "no scheduler reported reconnecting"; }
# Each enqueued tick has one job, and no two jobs carry the same tick.
ticks=$(q "SELECT count(*) FROM $S.cron_ticks WHERE outcome = 'enqueued'")
[ "$(q "SELECT count(*) FROM $S.jobs")" = "$ticks" ] || fail "$(q "SELECT count(*) FROM $S.jobs") jobs for $ticks ticks"
[ "$(q "SELECT count(DISTINCT payload->'cron'->>'tick') FROM $S.jobs")" = "$ticks" ] || fail "a tick was doubled"
[ "$(q "SELECT count(*) FROM $S.cron_ticks t JOIN $S.jobs j ON j.id = t.job_id
	WHERE (j.payload->'cron'->>'tick')::timestamptz = t.tick_at")" = "$ticks" ] || fail "a tick's job is not its own"
exit 0
