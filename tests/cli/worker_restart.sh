# worker_restart.sh - a server restart under a running worker: it reconnects, flushes the
# completions it held, and every job ends succeeded (run alone: it restarts the test server)
. "$(dirname "$0")/lib.sh"
need_restartable_server
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
restart_server
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
