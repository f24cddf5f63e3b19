# diag_lib.sh - helpers for the diagnostics tests: a database of the test's own, and sessions
# held open through FIFOs so that they can sit idle in a transaction. Sourced after lib.sh.
# Every session gives up by itself (timeout, lock_timeout) and cleanup terminates them all.
# Under valgrind every pgcoord run takes seconds: sessions live longer there.
[ -n "${PGCOORD_VALGRIND:-}" ] && SESSION_LIFETIME=600
skip_without_pg
DB=pgc_diag_$$
APP=diagtest-$$
DB_DSN=$(dsn_with_db "$PGCOORD_TEST_DSN" "$DB")
declare -A FD

diag_cleanup() {
	psql -X -q -A -t "$PGCOORD_TEST_DSN" -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE '$APP-%' OR datname = '$DB'" >/dev/null 2>&1
	local f
	for f in "${FD[@]}"; do eval "exec $f>&-"; done
	wait 2>/dev/null
	psql -X -q "$PGCOORD_TEST_DSN" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap diag_cleanup EXIT
psql_q "CREATE DATABASE $DB TEMPLATE template0" >/dev/null || fail "cannot create database $DB"
dbq() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$DB_DSN" -c "$1"; }

# open NAME: a session named $APP-NAME reading SQL from a FIFO, with bounded lock waits.
open() {
	local name=$1 fd f
	mkfifo "$TMP/$name.in"
	(
		for f in "${FD[@]}"; do eval "exec $f>&-"; done
		PGAPPNAME="$APP-$name" exec timeout "${SESSION_LIFETIME:-90}" psql -X -q "$DB_DSN" <"$TMP/$name.in" >"$TMP/$name.log" 2>&1
	) &
	exec {fd}>"$TMP/$name.in"
	FD[$name]=$fd
	# Under valgrind every pgcoord run takes seconds: the sessions must outlive the whole test.
	if [ -n "${PGCOORD_VALGRIND:-}" ]; then
		send "$name" "SET lock_timeout = '300s'; SET statement_timeout = '400s'; SET idle_in_transaction_session_timeout = '600s';"
	else
		send "$name" "SET lock_timeout = '30s'; SET statement_timeout = '40s'; SET idle_in_transaction_session_timeout = '60s';"
	fi
}
send() { echo "$2" >&"${FD[$1]}"; }
# pid NAME: the backend pid of a session (waits up to 10 s for it to connect).
pid() {
	local p i
	for i in $(seq 1 100); do
		p=$(dbq "SELECT pid FROM pg_stat_activity WHERE application_name = '$APP-$1'")
		[ -n "$p" ] && { echo "$p"; return; }
		sleep 0.1
	done
	fail "session $1 did not connect"
}
# start NAME SQL: open NAME, send it SQL, and set the variable NAME to its backend pid.
start() {
	open "$1"
	printf -v "$1" '%s' "$(pid "$1")"
	send "$1" "$2"
}
# wait_sql SQL: until SQL returns t (10 s at most).
wait_sql() {
	local i
	for i in $(seq 1 100); do
		[ "$(dbq "$1")" = t ] && return
		sleep 0.1
	done
	fail "timed out waiting for: $1"
}
# waiting PID...: until each pid waits for a lock.
waiting() {
	local p
	for p in "$@"; do
		wait_sql "SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $p AND NOT granted)"
	done
}
# state PID STATE: until the session is in STATE.
state() { wait_sql "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state = '$2')"; }
# jcheck EXPR EXPECTED [EXPR EXPECTED]...: evaluates each python expression on the JSON in
# $TMP/out (as d, every line a document when there are several: then ds) in one interpreter and
# compares its str() with EXPECTED.
jcheck() {
	python3 - "$TMP/out" "$@" <<'PY' || { cat "$TMP/out"; fail "JSON check failed"; }
import json, sys
text = open(sys.argv[1]).read()
ds = [json.loads(l) for l in text.splitlines() if l.strip()]
d = ds[0] if len(ds) == 1 else None
bad = 0
for expr, want in zip(sys.argv[2::2], sys.argv[3::2]):
    got = str(eval(expr))
    if got != want:
        print("FAIL: %s: got %r, expected %r" % (expr, got, want), file=sys.stderr)
        bad = 1
sys.exit(bad)
PY
}
expect_eq() { [ "$1" = "$2" ] || fail "$3: got \"$1\", expected \"$2\""; }
