# security_worker_role.sh - pgcoord init --worker-role: a real pgcoord worker runs under the
# role, and everything beyond a worker's job is refused with 42501
. "$(dirname "$0")/lib.sh"

run 0 "$PG" init --help
out_has "\-\-worker-role=ROLE"
out_has "\-\-login"
run 64 "$PG" init --worker-role ""
err_has "\-\-worker-role must not be empty"
run 64 "$PG" init --login
err_has "\-\-login needs \-\-worker-role"
run 64 "$PG" init --worker-role

skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_secw_$$
R=pgc_secw_role_$$
C=pgc_secw_canary_$$
cleanup() {
	[ -n "${wpid:-}" ] && kill -KILL "$wpid" 2>/dev/null
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	psql_q "DROP TABLE IF EXISTS public.$C" >/dev/null 2>&1
	psql_q "DROP ROLE IF EXISTS $R" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
psql_q "CREATE TABLE public.$C (secret text); INSERT INTO public.$C VALUES ('canary')" >/dev/null

# Reserved and over-powered roles are refused.
run 64 "$PG" init --schema "$S" --worker-role public
err_has "reserved"
run 64 "$PG" init --schema "$S" --worker-role "$(psql_q 'SELECT current_user')"
err_lines 1

# Created NOLOGIN, then given LOGIN; re-running is quiet about creation and grants again.
run 0 "$PG" init --schema "$S" --worker-role "$R"
out_has "worker role $R: created and granted"
[ "$(psql_q "SELECT rolcanlogin FROM pg_roles WHERE rolname = '$R'")" = f ] || fail "role has LOGIN"
run 0 "$PG" --json init --schema "$S" --worker-role "$R" --login
out_has "\"worker_role\":\"$R\",\"role_created\":false"
[ "$(psql_q "SELECT rolcanlogin FROM pg_roles WHERE rolname = '$R'")" = t ] || fail "role lacks LOGIN"
psql_q "ALTER ROLE $R PASSWORD 'worker-secret'" >/dev/null

nmig=$(psql_q "SELECT count(*) FROM $S.migrations")
# The role's DSN: the test server trusts local connections, so the user name is enough.
RDSN=$(psql_q "SELECT 'host=' || coalesce(host(inet_server_addr()), split_part(current_setting('unix_socket_directories'), ',', 1)) || ' port=' || current_setting('port') || ' dbname=' || current_database()")
RDSN="$RDSN user=$R"
[ "$(psql -X -A -t -q "$RDSN" -c 'SELECT current_user')" = "$R" ] || fail "cannot connect as $R"

for i in 1 2 3 4 5; do "$PG" queue enqueue work --schema "$S" --payload "{\"n\":$i}" >/dev/null || fail enqueue; done
"$PG" queue enqueue work --schema "$S" --payload '{"fail":true}' --max-attempts 2 >/dev/null || fail enqueue
cat >"$TMP/job.sh" <<'SH'
#!/bin/sh
p=$(cat)
case "$p" in *fail*) echo "no luck" >&2; exit 3 ;; esac
exit 0
SH
chmod +x "$TMP/job.sh"
timeout 60 "$PG" -d "$RDSN" worker --schema "$S" --queue work --vacuum-threshold 0 \
	--concurrency 2 -- "$TMP/job.sh" >"$TMP/wout" 2>"$TMP/werr" &
wpid=$!
end=$((SECONDS + 30))
while [ $SECONDS -lt $end ]; do
	[ "$(psql_q "SELECT count(*) FROM $S.jobs")" = 0 ] && break
	sleep 0.2
done
kill -TERM "$wpid"
wait "$wpid"
wrc=$?
wpid=
[ "$wrc" -eq 0 ] || { cat "$TMP/werr"; fail "worker as $R exited $wrc"; }
grep -q "woken by LISTEN/NOTIFY" "$TMP/werr" || { cat "$TMP/werr"; fail "the worker did not LISTEN"; }
if grep -qi "permission denied\|42501" "$TMP/werr"; then cat "$TMP/werr"; fail "the worker hit a permission error"; fi
[ "$(psql_q "SELECT count(*) FROM $S.jobs")" = 0 ] || fail "jobs left behind"
[ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE status = 'succeeded'")" = 5 ] || fail "not 5 succeeded"
got=$(psql_q "SELECT string_agg(status || ':' || attempts || ':' || last_error, ',') FROM $S.job_history WHERE status = 'failed'"); [ "$got" = "failed:2:exit status 3: no luck" ] ||
	fail "the failing job did not retry and dead-letter: $got"
# It registered itself and unregistered on the way out.
[ "$(psql_q "SELECT count(*) FROM $S.workers")" = 0 ] || fail "registration left behind"

# Everything else is refused: psql as the role, error codes only.
refused() {
	local got
	got=$(psql -X -A -t -q -v VERBOSITY=sqlstate "$RDSN" -c "$1" 2>&1)
	case $got in
	*42501*) ;;
	*) fail "as $R, [$1] gave [$got], not 42501" ;;
	esac
}
refused "SELECT * FROM public.$C"
refused "UPDATE public.$C SET secret = 'x'"
refused "DROP TABLE public.$C"
refused "CREATE TABLE public.pgc_secw_evil_$$ (x int)"
refused "CREATE TABLE $S.evil (x int)"
refused "SELECT * FROM $S.lock_names"
refused "SELECT * FROM $S.leases"
refused "SELECT * FROM $S.migrations"
refused "SELECT payload FROM $S.job_history"
refused "INSERT INTO $S.jobs (id, queue, payload) VALUES (1000000, 'x', '{}')"
refused "UPDATE $S.jobs SET payload = '{}'"
refused "ALTER TABLE $S.jobs ADD COLUMN evil int"
refused "DROP TABLE $S.jobs"
refused "DROP SCHEMA $S CASCADE"
refused "TRUNCATE $S.job_history"
refused "UPDATE $S.queue_settings SET max_payload_bytes = 1"
# The tool's admin commands too: exit 77 (a privilege is missing) with the server's reason,
# nothing changed.
run 77 "$PG" -d "$RDSN" queue enqueue work --schema "$S" --payload '{}'
err_has "permission denied"
err_has "42501"
run 77 "$PG" -d "$RDSN" queue pause work --schema "$S"
err_has "42501"
run 77 "$PG" -d "$RDSN" queue config --schema "$S" --max-payload 1
run 77 "$PG" -d "$RDSN" init --schema "$S"
run 77 "$PG" -d "$RDSN" init --schema "$S" --worker-role "${R}_x"
[ "$(psql_q "SELECT secret FROM public.$C")" = canary ] || fail "canary changed"
[ "$(psql_q "SELECT count(*) FROM $S.migrations")" = "$nmig" ] || fail "migrations changed"
[ "$(psql_q "SELECT count(*) FROM pg_roles WHERE rolname = '${R}_x'")" = 0 ] || fail "role created"
exit 0
