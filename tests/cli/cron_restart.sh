# cron_restart.sh - a server restart under two running cron schedulers: they reconnect and go
# on, and no tick is doubled (run alone: it restarts the test server)
. "$(dirname "$0")/lib.sh"
skip_without_pg
[ -n "${PGCOORD_TEST_PGDIR:-}" ] && [ -f "$PGCOORD_TEST_PGDIR/data/postmaster.pid" ] ||
	{ echo "skipped: PGCOORD_TEST_PGDIR does not name the pg-tmp server (run through make test)" >&2; exit 77; }
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -n 1)
[ -n "${PG_BINDIR:-}" ] && bindir=$PG_BINDIR
[ -x "$bindir/pg_ctl" ] || { echo "skipped: no pg_ctl" >&2; exit 77; }
owner=$(stat -c %U "$PGCOORD_TEST_PGDIR/data")
pgctl() {
	if [ "$(id -u)" -eq 0 ]; then runuser -u "$owner" -- "$bindir/pg_ctl" "$@"; else "$bindir/pg_ctl" "$@"; fi
}
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_cron_restart
q() { psql_q "$1"; }
run 0 "$PG" cron add r '* * * * * *' --queue r --catch-up all --schema "$S"
"$PG" cron run --schema "$S" 2>"$TMP/s1" &
p1=$!
"$PG" cron run --schema "$S" 2>"$TMP/s2" &
p2=$!
trap 'kill -TERM $p1 $p2 2>/dev/null; own_schema_cleanup' EXIT
end=$((SECONDS + 15))
until [ "$(q "SELECT count(*) >= 3 FROM $S.cron_ticks" 2>/dev/null)" = t ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/s1"; fail "no ticks before the restart"; }
	sleep 0.1
done
pgctl -D "$PGCOORD_TEST_PGDIR/data" -m fast -w -t 60 restart >"$TMP/pgctl.log" 2>&1 ||
	{ cat "$TMP/pgctl.log"; fail "pg_ctl restart"; }
before=$(q "SELECT count(*) FROM $S.cron_ticks")
end=$((SECONDS + 30))
until [ "$(q "SELECT count(*) >= $before + 3 FROM $S.cron_ticks" 2>/dev/null)" = t ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/s1" "$TMP/s2"; fail "no ticks after the restart"; }
	sleep 0.2
done
kill -TERM $p1 $p2
wait $p1 || { cat "$TMP/s1"; fail "scheduler 1 exit status"; }
wait $p2 || { cat "$TMP/s2"; fail "scheduler 2 exit status"; }
cat "$TMP/s1" "$TMP/s2" | grep -q "reconnected" || { cat "$TMP/s1" "$TMP/s2"; fail "no scheduler reported reconnecting"; }
# Each enqueued tick has one job, and no two jobs carry the same tick.
ticks=$(q "SELECT count(*) FROM $S.cron_ticks WHERE outcome = 'enqueued'")
[ "$(q "SELECT count(*) FROM $S.jobs")" = "$ticks" ] || fail "$(q "SELECT count(*) FROM $S.jobs") jobs for $ticks ticks"
[ "$(q "SELECT count(DISTINCT payload->'cron'->>'tick') FROM $S.jobs")" = "$ticks" ] || fail "a tick was doubled"
[ "$(q "SELECT count(*) FROM $S.cron_ticks t JOIN $S.jobs j ON j.id = t.job_id
	WHERE (j.payload->'cron'->>'tick')::timestamptz = t.tick_at")" = "$ticks" ] || fail "a tick's job is not its own"
exit 0
