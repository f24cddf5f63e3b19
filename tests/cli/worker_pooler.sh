# worker_pooler.sh - behind PgBouncer in transaction mode LISTEN cannot work: the worker says so
# once, polls, sends unprepared statements, and still runs every job exactly once; it does not
# vacuum there (the vacuum's session lock could stay on a pooled server connection)
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/pgbouncer_lib.sh"
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_pool_$$
cleanup() {
	[ -n "${wpid:-}" ] && kill -KILL "$wpid" 2>/dev/null
	stop_bouncers
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
start_bouncer transaction 4
pooled=$bouncer_dsn
run 0 "$PG" init --schema "$S"
seq 1 200 | sed 's/.*/{"n":&}/' >"$TMP/jobs"
run 0 "$PG" -d "$pooled" queue enqueue p --schema "$S" --file "$TMP/jobs"
cat >"$TMP/job.sh" <<'SH'
#!/bin/sh
cat >>"$OUT"
SH
chmod +x "$TMP/job.sh"
export OUT=$TMP/ran
"$PG" -d "$pooled" worker --schema "$S" --queue p -c 4 --poll 200ms -- "$TMP/job.sh" 2>"$TMP/werr" &
wpid=$!
end=$((SECONDS + 30))
while [ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE status = 'succeeded'")" != 200 ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/werr"; fail "the jobs were not all done behind the pooler"; }
	sleep 0.2
done
# A job enqueued while the worker is idle is found by the adaptive poll.
run 0 "$PG" -d "$pooled" queue enqueue p --schema "$S" --payload '{"n":201}'
end=$((SECONDS + 10))
until grep -q '"n": 201' "$OUT"; do
	[ $SECONDS -lt $end ] || fail "the idle worker did not poll"
	sleep 0.1
done
kill -TERM "$wpid"
wait "$wpid" || fail "worker exit status"
wpid=
[ "$(grep -c 'LISTEN cannot work' "$TMP/werr")" -eq 1 ] || { cat "$TMP/werr"; fail "the pooler was not reported exactly once"; }
[ "$(grep -c 'not vacuuming the jobs table' "$TMP/werr")" -eq 1 ] || { cat "$TMP/werr"; fail "the skipped vacuum was not reported exactly once"; }
[ "$(sort "$OUT" | uniq | wc -l)" -eq 201 ] && [ "$(wc -l <"$OUT")" -eq 201 ] || fail "jobs did not run exactly once: $(wc -l <"$OUT")"
exit 0
