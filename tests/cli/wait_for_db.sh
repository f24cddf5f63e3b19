# wait_for_db.sh - worker, elect and run -w started before the database: with --wait-for-db
# they keep trying (one log line, not one per attempt) and go on once a server comes up on
# that address; without it, and with -n, they fail fast (69); a setting that cannot work
# (78) is not waited for; --wait-for-db=D gives up after D with 69; SIGTERM ends the wait at
# once (143; the worker: 0, its stop status)
. "$(dirname "$0")/lib.sh"
PGTMP="$SRC/scripts/pg-tmp"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null ||
	{ [ "${PGCOORD_CI:-}" = 1 ] && fail "no server binaries"; echo "skipped: no server binaries" >&2; exit 77; }
dir=$(mktemp -d /tmp/pgc-dbwait.XXXXXX)
cleanup() {
	local p
	for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	"$PGTMP" destroy "$dir" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT

# A server with the schema installed, stopped: its port is then known and refuses.
"$PGTMP" start "$dir" >/dev/null || fail "pg-tmp start"
port=$(cat "$dir/port")
export PGCOORD_DSN="postgresql://postgres@127.0.0.1:$port/postgres?connect_timeout=2"
run 0 "$PG" init
"$PGTMP" stop "$dir" || fail "pg-tmp stop"
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && fail "port $port still answers"

# wait_exit PID SECONDS: the status of background PID, which must end within SECONDS.
wait_exit() {
	local i
	for i in $(seq 1 $(($2 * 10))); do
		kill -0 "$1" 2>/dev/null || { wait "$1"; return $?; }
		sleep 0.1
	done
	fail "pid $1 still running after $2 s"
}
# until_file FILE SECONDS: FILE exists within SECONDS.
until_file() {
	local i
	for i in $(seq 1 $(($2 * 10))); do [ -s "$1" ] && return 0; sleep 0.1; done
	fail "$1 did not appear within $2 s"
}
# one_waiting_line FILE: exactly one "waiting for the database" line, naming the refusal.
one_waiting_line() {
	local n
	n=$(grep -c "waiting for the database (--wait-for-db" "$1")
	[ "$n" -eq 1 ] || { cat "$1"; fail "$1: $n lines saying it waits, expected 1"; }
	grep -q "Connection refused" "$1" || { cat "$1"; fail "$1: the first line does not say why"; }
}

# Without --wait-for-db, and with -n: 69 at once, as before.
run 69 timeout 30 "$PG" run dbw -- true
run 69 timeout 30 "$PG" run -n dbw -- true
run 69 timeout 30 "$PG" run -w 10s dbw -- true
run 69 timeout 30 "$PG" elect --ttl 3s dbw -- true
run 69 timeout 30 "$PG" worker --queue dbw -- true
# A setting that cannot work is not waited for.
run 78 timeout 30 "$PG" -d "postgresql://postgres@127.0.0.1:$port/postgres?sslmode=bogus" run --wait-for-db dbw -- true
run 78 timeout 30 "$PG" -d "postgresql://postgres@127.0.0.1:$port/postgres?sslmode=bogus" worker --wait-for-db --queue dbw -- true
# A limit: 69 after it, saying so.
run 69 timeout 30 "$PG" run --wait-for-db=1s dbw -- true
err_has "database still unavailable after 1s"
grep -q "waiting for the database (--wait-for-db, for at most 1s)" "$TMP/err" || { cat "$TMP/err"; fail "no first line"; }
run 64 "$PG" run --wait-for-db=soon dbw -- true
err_has "wait-for-db"

# SIGTERM while waiting ends the wait at once.
"$PG" run --wait-for-db dbw -- true 2>"$TMP/run.term" &
r=$!
"$PG" elect --wait-for-db --ttl 3s dbw -- true 2>"$TMP/elect.term" &
e=$!
"$PG" worker --wait-for-db --queue dbw -- true 2>"$TMP/worker.term" &
w=$!
for f in run elect worker; do until_file "$TMP/$f.term" 15; done
sleep 1.5 # a few attempts
kill -TERM "$r" "$e" "$w"
wait_exit "$r" 10; rc=$?; [ "$rc" -eq 143 ] || { cat "$TMP/run.term"; fail "run: exit $rc after SIGTERM, expected 143"; }
wait_exit "$e" 10; rc=$?; [ "$rc" -eq 143 ] || { cat "$TMP/elect.term"; fail "elect: exit $rc after SIGTERM, expected 143"; }
wait_exit "$w" 10; rc=$?; [ "$rc" -eq 0 ] || { cat "$TMP/worker.term"; fail "worker: exit $rc after SIGTERM, expected 0"; }
for f in run elect worker; do one_waiting_line "$TMP/$f.term"; done

# Started before the server; it comes up on the same address; they go on.
cat >"$TMP/job.sh" <<SH
#!/bin/sh
cat >"$TMP/job.out"
SH
chmod +x "$TMP/job.sh"
"$PG" worker --wait-for-db --queue dbw --poll 200ms -- "$TMP/job.sh" 2>"$TMP/worker.err" &
w=$!
"$PG" elect --wait-for-db --ttl 5s dbw -- sh -c "echo \$PGCOORD_FENCE_TOKEN >'$TMP/elect.out'" 2>"$TMP/elect.err" &
e=$!
"$PG" run --wait-for-db -w 30s dbw -- sh -c "echo ran >'$TMP/run.out'" 2>"$TMP/run.err" &
r=$!
for f in run elect worker; do until_file "$TMP/$f.err" 15; done
sleep 2
for p in "$w" "$e" "$r"; do kill -0 "$p" 2>/dev/null || fail "pid $p gave up before the server came up"; done
PGTMP_PORT=$port "$PGTMP" start "$dir" >/dev/null || fail "pg-tmp start on port $port"
wait_exit "$r" 30; rc=$?; [ "$rc" -eq 0 ] || { cat "$TMP/run.err"; fail "run: exit $rc"; }
[ "$(cat "$TMP/run.out")" = ran ] || fail "run did not run its command"
wait_exit "$e" 30; rc=$?; [ "$rc" -eq 0 ] || { cat "$TMP/elect.err"; fail "elect: exit $rc"; }
[ "$(cat "$TMP/elect.out")" -ge 1 ] || fail "elect ran without a token"
run 0 "$PG" queue enqueue dbw --payload '{"n":1}'
until_file "$TMP/job.out" 30
grep -q '"n"' "$TMP/job.out" || fail "the worker's job saw no payload"
kill -TERM "$w"
wait_exit "$w" 30; rc=$?; [ "$rc" -eq 0 ] || { cat "$TMP/worker.err"; fail "worker: exit $rc"; }
for f in run elect worker; do
	one_waiting_line "$TMP/$f.err"
	grep -q "database available after" "$TMP/$f.err" || { cat "$TMP/$f.err"; fail "$f: no line saying the wait ended"; }
done
# With the server up, a database that does not exist is a setting (78), not waited for.
run 78 timeout 30 "$PG" -d "postgresql://postgres@127.0.0.1:$port/nosuchdb" run --wait-for-db dbw -- true
echo "ok: worker, elect and run wait for the database with --wait-for-db"
