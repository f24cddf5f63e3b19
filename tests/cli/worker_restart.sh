# worker_restart.sh - a server restart under a running worker: it reconnects, flushes the
# completions it held, and every job ends succeeded (run alone: it restarts the test server)
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
own_schema pgc_restart
seq 1 60 | sed 's/.*/{"n":&}/' >"$TMP/jobs"
run 0 "$PG" queue enqueue r --schema "$S" --file "$TMP/jobs"
cat >"$TMP/job.sh" <<'SH'
#!/bin/sh
sleep 0.05
cat >>"$OUT"
SH
chmod +x "$TMP/job.sh"
export OUT=$TMP/ran
"$PG" worker --schema "$S" --queue r -c 2 --lease 3s --poll 200ms -- "$TMP/job.sh" 2>"$TMP/werr" &
wpid=$!
end=$((SECONDS + 30))
until [ -s "$OUT" ] && [ "$(wc -l <"$OUT")" -ge 10 ]; do
	[ $SECONDS -lt $end ] || fail "the worker did not start working"
	sleep 0.05
done
pgctl -D "$PGCOORD_TEST_PGDIR/data" -m fast -w -t 60 restart >"$TMP/pgctl.log" 2>&1 ||
	{ cat "$TMP/pgctl.log"; fail "pg_ctl restart"; }
end=$((SECONDS + 60))
until [ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE status = 'succeeded'" 2>/dev/null)" = 60 ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/werr"; fail "not every job succeeded after the restart"; }
	sleep 0.2
done
kill -TERM "$wpid"
wait "$wpid" || fail "worker exit status"
wpid=
grep -q "reconnected" "$TMP/werr" || { cat "$TMP/werr"; fail "the worker did not report reconnecting"; }
# At least once: every job ran; a job cut off by the restart may have run twice.
[ "$(sort -u "$OUT" | wc -l)" -eq 60 ] || fail "some jobs never ran"
[ "$(psql_q "SELECT count(*) FROM $S.jobs")" = 0 ] || fail "jobs left behind"
exit 0
