# elect_restart.sh - the server restarts under a leader: the lease survives (it is a row),
# the leader reconnects and renews in time and keeps its command running, and fencing tokens
# never go backwards across the restart.
# Restarts the test server, so it runs alone (is_parallel: false in tests/meson.build).
. "$(dirname "$0")/elect_lib.sh"
if [ -z "${PGCOORD_TEST_PGDIR:-}" ]; then
	echo "skipped: PGCOORD_TEST_PGDIR is not set (the server was not started by scripts/with-pg)" >&2
	exit 77
fi
# pg_ctl as scripts/pg-tmp finds it: $PG_BINDIR, the newest /usr/lib/postgresql/*/bin, $PATH.
pg_ctl=$(command -v pg_ctl || true)
for d in ${PG_BINDIR:-} $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
	if [ -x "$d/pg_ctl" ]; then pg_ctl="$d/pg_ctl"; break; fi
done
[ -n "$pg_ctl" ] || fail "pg_ctl not found"
restart() {
	local data="$PGCOORD_TEST_PGDIR/data" port
	port=$(cat "$PGCOORD_TEST_PGDIR/port")
	if [ "$(id -u)" -eq 0 ]; then
		timeout 60 runuser -u "$(stat -c %U "$data")" -- "$pg_ctl" -D "$data" -w -t 50 restart -m "$1" -o "-p $port" >"$TMP/pg_ctl.log" 2>&1
	else
		timeout 60 "$pg_ctl" -D "$data" -w -t 50 restart -m "$1" -o "-p $port" >"$TMP/pg_ctl.log" 2>&1
	fi || { cat "$TMP/pg_ctl.log"; fail "pg_ctl restart failed"; }
}
q="\"$SCHEMA\""
# TTL 20 s, renewals every second: up to 19 s to reconnect after the restart, room enough for
# a loaded machine (a restart of a few seconds and the reconnect's backoff).
timeout 120 "$PG" elect --schema "$SCHEMA" --ttl 20s --renew-every 1s --kill-after 1s restart -- "$CHILD" "$LOG" 0 \
	2>"$TMP/err1" &
a_job=$!
wait_until 10 has_starts 1 || { cat "$TMP/err1"; fail "not elected"; }
a=$(holder_pid restart)
a_child=$(last_child_pid)
token=$(last_token)

# Tokens handed out right before the restart, from a session with synchronous_commit off
# (grants force a durable commit).
before=$(psql_q "SET synchronous_commit = off; SELECT max($q.fence_next('other', 'psql')) FROM generate_series(1, 20)")
[ "$before" = 20 ] || fail "fence_next gave $before, expected 20"
restart fast
t_up=$(psql_q "SELECT extract(epoch FROM clock_timestamp())")
after=$(psql_q "SELECT $q.fence_next('other', 'psql')")
[ "$after" -gt "$before" ] || fail "token went backwards across the restart: $after after $before"

# The leader keeps its lease: same token, renewed after the restart, command still running.
renewed_since() { [ "$(psql_q "SELECT renewed_at > to_timestamp($1) FROM $q.leases WHERE name = 'restart'")" = t ]; }
wait_until 20 renewed_since "$t_up" ||
	{ cat "$TMP/err1"; fail "the leader did not renew after the restart"; }
[ "$(psql_q "SELECT token FROM $q.leases WHERE name = 'restart'")" = "$token" ] || fail "the lease changed hands"
alive "$a" || { cat "$TMP/err1"; fail "the leader's pgcoord exited"; }
alive "$a_child" || fail "the leader's command was stopped"
[ "$(starts)" -eq 1 ] || fail "the command was restarted"

# Then a handover: the next token is greater.
timeout 60 "$PG" elect --schema "$SCHEMA" --ttl 6s restart -- "$CHILD" "$LOG" 0.2 2>"$TMP/err2" &
b_job=$!
sleep 0.3
kill -TERM "$a"
wait "$a_job"
rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/err1"; fail "the leader exited $rc after its command exited 0"; }
wait "$b_job" || { cat "$TMP/err2"; fail "the follower failed"; }
[ "$(last_token)" -gt "$token" ] || fail "the follower's token $(last_token) is not greater than $token"
check_log 0
