# worker_metrics.sh - pgcoord worker --metrics: the outcomes of its commands by queue, jobs in
# flight, the duration and claim-to-start histograms, the library's counters; only /metrics,
# with the web's headers; refused addresses; it stops with the worker
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/web_lib.sh"
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_wmet
run 64 "$PG" worker --queue a --metrics nowhere -- true
err_has '--metrics: "nowhere" is not ADDR:PORT'
run 64 "$PG" worker --queue a --metrics 127.0.0.1:99999 -- true
for p in '{"do":"ok"}' '{"do":"ok"}' '{"do":"fail"}' '{"do":"later"}'; do
	run 0 "$PG" queue enqueue a --schema "$S" --payload "$p" --max-attempts 1 --max-deferrals 5
done
run 0 "$PG" queue enqueue b --schema "$S" --payload '{"do":"ok"}'
cat >"$TMP/job.sh" <<'SH'
#!/bin/sh
p=$(cat)
case "$p" in
*fail*) exit 3 ;;
*later*) [ -e "$0.later" ] && exit 0; touch "$0.later"; exit 75 ;;
esac
exit 0
SH
chmod +x "$TMP/job.sh"
APP="pgcoord/worker-metrics-$$"
"$PG" -d "$(dsn_param "$PGCOORD_TEST_DSN" application_name "$APP")" worker --schema "$S" --queue a --queue b --retry-delay 100ms --metrics 127.0.0.1:0 -- "$TMP/job.sh" \
	2>"$TMP/worker.err" &
wpid=$!
port=
for _ in $(seq 100); do
	port=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$TMP/worker.err")
	[ -n "$port" ] && break
	sleep 0.1
done
[ -n "$port" ] || { cat "$TMP/worker.err"; fail "no metrics line"; }
URL="http://127.0.0.1:$port"
# Five jobs and one run again after its "later": six commands.
for _ in $(seq 150); do
	[ "$(psql_q "SELECT count(*) FROM $S.job_history")" = 5 ] && break
	sleep 0.1
done
[ "$(psql_q "SELECT count(*) FROM $S.job_history")" = 5 ] || fail "the jobs did not finish"
req 200 "$URL/metrics"
grep -qi '^Content-Type: text/plain; version=0.0.4' "$TMP/headers" || fail "metrics type"
grep -qi '^Content-Security-Policy:' "$TMP/headers" || fail "no CSP"
body_has 'pgcoord_worker_jobs_completed_total{queue="a"} 3'
body_has 'pgcoord_worker_jobs_completed_total{queue="b"} 1'
body_has 'pgcoord_worker_jobs_failed_total{queue="a"} 1'
body_has 'pgcoord_worker_jobs_retried_total{queue="a"} 1'
body_has 'pgcoord_worker_jobs_in_flight 0'
body_has 'pgcoord_worker_job_duration_seconds_count 6'
body_has 'pgcoord_worker_job_duration_seconds_bucket{le="+Inf"} 6'
body_has 'pgcoord_worker_claim_to_start_seconds_count 6'
body_has 'pgcoord_worker_jobs_claimed_total 6'
body_has 'pgcoord_worker_lease_losses_total 0'
body_has 'pgcoord_worker_reconnects_total 0'
req 404 "$URL/api/queues"
req 405 -X POST "$URL/metrics"
# Its session terminated: counted as a reconnect.
[ "$(psql_q "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$APP'")" -ge 1 ] ||
	fail "no session named $APP"
psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '$APP'" >/dev/null
ok=0
for _ in $(seq 100); do
	curl -s --max-time 5 "$URL/metrics" >"$TMP/body"
	grep -q 'pgcoord_worker_reconnects_total [1-9]' "$TMP/body" && { ok=1; break; }
	sleep 0.1
done
[ "$ok" = 1 ] || { cat "$TMP/worker.err"; fail "no reconnect counted"; }
kill -TERM "$wpid"
for _ in $(seq 100); do kill -0 "$wpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$wpid" 2>/dev/null && fail "the worker did not stop"
wait "$wpid" || fail "the worker exited $?"
wpid=
curl -s --max-time 2 "$URL/metrics" >/dev/null && fail "metrics still served after the worker stopped"
exit 0
