# worker_pooler.sh - behind PgBouncer in transaction mode LISTEN cannot work: the worker says so
# once, polls, sends unprepared statements, and still runs every job exactly once; it does not
# vacuum there (the vacuum's session lock could stay on a pooled server connection)
. "$(dirname "$0")/lib.sh"
skip_without_pg
PGB=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null)
[ -n "$PGB" ] || { echo "skipped: pgbouncer is not installed" >&2; exit 77; }
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_pool_$$
host=$(psql_q "SELECT coalesce(inet_server_addr()::text, '127.0.0.1')" | sed 's|/.*||')
port=$(psql_q "SELECT current_setting('port')")
user=$(psql_q "SELECT current_user")
db=$(psql_q "SELECT current_database()")
pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$TMP/pgb.ini" <<INI
[databases]
$db = host=$host port=$port dbname=$db user=$user
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $pport
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 4
logfile = $TMP/pgb.log
pidfile = $TMP/pgb.pid
INI
# PgBouncer refuses to run as root: then it switches to nobody, who must reach its files.
asuser=()
if [ "$(id -u)" -eq 0 ]; then
	id nobody >/dev/null 2>&1 || { echo "skipped: running as root without a nobody user" >&2; exit 77; }
	chmod 777 "$TMP"
	asuser=(-u nobody)
fi
"$PGB" "${asuser[@]}" "$TMP/pgb.ini" >/dev/null 2>&1 &
pgb=$!
cleanup() {
	kill "$pgb" 2>/dev/null
	[ -n "${wpid:-}" ] && kill -KILL "$wpid" 2>/dev/null
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
pooled="postgresql://$user@127.0.0.1:$pport/$db"
end=$((SECONDS + 10))
until psql -X -A -t -q "$pooled" -c 'SELECT 1' >/dev/null 2>&1; do
	[ $SECONDS -lt $end ] || fail "pgbouncer did not start: $(cat "$TMP/pgb.log" 2>/dev/null)"
	sleep 0.1
done
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
