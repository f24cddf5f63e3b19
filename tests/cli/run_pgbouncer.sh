# run_pgbouncer.sh - pgcoord run through a real PgBouncer: in transaction mode the lock is held
# by one open transaction (the pooler keeps its server session until it ends), so there is
# exactly one holder at a time and nothing is left held after any exit, a SIGKILL included;
# that transaction holds no snapshot (vacuum and CREATE INDEX CONCURRENTLY go on); a lost
# holder's command is stopped (75). In session mode it is a session lock, in statement mode
# a refusal that names the fix.
. "$(dirname "$0")/lib.sh"
skip_without_pg
# A database of the test's own: what vacuum may remove and what CREATE INDEX CONCURRENTLY
# waits for are decided per database, so other tests' transactions on the shared server
# cannot stand in for the holder's.
S=pgc_runpgb_$$
server_dsn=$PGCOORD_TEST_DSN
psql_q "CREATE DATABASE $S TEMPLATE template0" >/dev/null || fail "cannot create database $S"
PGCOORD_TEST_DSN=$(dsn_with_db "$server_dsn" "$S")
cleanup() {
	for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
	declare -F stop_bouncers >/dev/null && stop_bouncers
	psql -X -q "$server_dsn" -c "DROP DATABASE IF EXISTS $S WITH (FORCE)" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
. "$(dirname "$0")/pgbouncer_lib.sh"
export PGCOORD_DSN=$PGCOORD_TEST_DSN
run 0 "$PG" init --schema "$S"
start_bouncer transaction 10
tx=$bouncer_dsn
start_bouncer session 10
sess=$bouncer_dsn
start_bouncer statement 10
stmt=$bouncer_dsn

name=pgbtx-$$
holders() { "$PG" --json lock status "$1" --schema "$S" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(1 for h in d.get("sessions", []) if h.get("granted")))'; }

# 1. The issue's first case: a second -n half a second later is refused while the first runs.
#    The first holds until the test is done with the second (at most 60 s), however slowly
#    either starts.
"$PG" -d "$tx" run -n "$name" --schema "$S" -- sh -c \
	'i=0; while [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done' sh "$TMP/a.go" \
	>"$TMP/a.out" 2>"$TMP/a.err" &
a=$!
sleep 0.5
end=$((SECONDS + 15))
until [ "$(holders "$name")" = 1 ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/a.err"; fail "the first run did not take the lock"; }
	sleep 0.1
done
run 1 "$PG" -d "$tx" run -n "$name" --schema "$S" -v -- echo second
touch "$TMP/a.go"
grep -q second "$TMP/out" && fail "the second run ran its command while the first held the lock"
err_has "held by another session"
wait "$a"
st=$?
[ "$st" -eq 0 ] || { cat "$TMP/a.err"; fail "the first run exited $st"; }
[ "$(holders "$name")" = 0 ] || fail "the lock is still held after the holder exited"
# and now it is free
run 0 "$PG" -d "$tx" run -n "$name" --schema "$S" -v -- echo third
err_has "held in an open transaction"

# 2. Five contenders: one at a time, every one runs, nothing left held; each one found the
#    pooler for what it is although the others shared the pool at the same moment.
log=$TMP/contend.log
: >"$log"
pids=()
for i in 1 2 3 4 5; do
	"$PG" -d "$tx" run -v -w 30s "$name" --schema "$S" -- sh -c \
		"echo start $i \$(date +%s%N) >>$log; sleep 0.3; echo end $i \$(date +%s%N) >>$log" \
		>"$TMP/c$i.out" 2>"$TMP/c$i.err" &
	pids+=($!)
done
for i in 0 1 2 3 4; do
	wait "${pids[$i]}"
	st=$?
	[ "$st" -eq 0 ] || { cat "$TMP/c$((i + 1)).err"; fail "contender $((i + 1)) exited $st"; }
	grep -q "held in an open transaction" "$TMP/c$((i + 1)).err" ||
		{ cat "$TMP/c$((i + 1)).err"; fail "contender $((i + 1)) took a session lock through a transaction-mode pooler"; }
done
python3 - "$log" <<'PY' || fail "two contenders held the lock at once"
import sys
ev = sorted((int(t), kind, i) for kind, i, t in (l.split() for l in open(sys.argv[1])))
inside = 0
for t, kind, i in ev:
    inside += 1 if kind == "start" else -1
    assert inside <= 1, ev
assert sum(1 for e in ev if e[1] == "start") == 5, ev
PY
[ "$(holders "$name")" = 0 ] || fail "the lock is still held after five contenders"
run 0 "$PG" -d "$PGCOORD_TEST_DSN" run -n "$name" --schema "$S" -- true

# 3. The holding transaction: named, idle in transaction, with no snapshot and no xid; vacuum
#    removes dead rows and CREATE INDEX CONCURRENTLY completes while it is held.
psql_q "CREATE TABLE $S.t (id int PRIMARY KEY, v text)" >/dev/null
psql_q "INSERT INTO $S.t SELECT g, 'x' FROM generate_series(1, 1000) g" >/dev/null
# The command's duration carries the test's pid, so that its clean-up kills no one else's.
"$PG" -d "$tx" run "$name" --schema "$S" -- sleep "30.$$" >"$TMP/h.out" 2>"$TMP/h.err" &
h=$!
end=$((SECONDS + 15))
until [ "$(holders "$name")" = 1 ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/h.err"; fail "the holder did not take the lock"; }
	sleep 0.1
done
sleep 1.2 # past a heartbeat
read -r hpid app state xmin xid < <(psql -X -A -t -q -F ' ' "$PGCOORD_TEST_DSN" -c "SELECT a.pid, a.application_name,
	replace(a.state, ' ', '_'), coalesce(a.backend_xmin::text, '-'), coalesce(a.backend_xid::text, '-')
	FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted
	AND l.pid IN (SELECT pid FROM pg_stat_activity WHERE application_name = 'pgcoord/lock-holder' AND datname = current_database())")
[ "$app" = pgcoord/lock-holder ] || fail "the holder's session is named \"$app\""
[ "$state" = idle_in_transaction ] || fail "the holder's session is $state"
[ "$xmin" = - ] && [ "$xid" = - ] || fail "the holding transaction has xmin $xmin, xid $xid"
psql_q "DELETE FROM $S.t WHERE id <= 500" >/dev/null
psql -X -q "$PGCOORD_TEST_DSN" -c "VACUUM (VERBOSE) $S.t" 2>"$TMP/vac" >/dev/null
grep -q "dead but not yet removable" "$TMP/vac" || { cat "$TMP/vac"; fail "no VACUUM VERBOSE report"; }
grep -Eq "[^0-9]0 are dead but not yet removable" "$TMP/vac" || { cat "$TMP/vac"; fail "the holder held back vacuum"; }
timeout 20 psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_TEST_DSN" -c "CREATE INDEX CONCURRENTLY t_v ON $S.t (v)" \
	|| fail "CREATE INDEX CONCURRENTLY did not complete while the lock was held"
kill -0 "$h" 2>/dev/null || { cat "$TMP/h.err"; fail "the holder ended early"; }
# doctor knows it for what it is: idle in transaction by design, not a problem. (doctor looks
# at the whole server, where other tests' sessions may sit idle in a transaction: the holder
# is counted apart and never named as one of them.)
"$PG" -d "$PGCOORD_TEST_DSN" --json doctor --no-pooler-check --schema "$S" >"$TMP/doc" 2>"$TMP/doc.err"
python3 - "$TMP/doc" "$hpid" <<'PY' || { cat "$TMP/doc"; fail "doctor reported the lock holder as a problem"; }
import json, re, sys
d = json.load(open(sys.argv[1]))
f = [f for f in d["findings"] if f["check"] == "idle_in_transaction"][0]
assert re.search(r"\b[1-9][0-9]* pgcoord lock holder\(s\) idle in transaction by design", f["message"]), f
assert not re.search(r"\bpid %s\b|\(%s\)" % (sys.argv[2], sys.argv[2]), f["message"] + " " + f["fix"]), f
if f["severity"] not in ("ok", "info"):
    assert f["message"].startswith(tuple("123456789")), f
PY

# 4. SIGKILL of pgcoord: the pooler ends the transaction with the client, and the lock is free.
kill -KILL "$h"
wait "$h" 2>/dev/null
pkill -KILL -x -f "sleep 30\.$$" 2>/dev/null
end=$((SECONDS + 10))
until [ "$(holders "$name")" = 0 ]; do
	[ $SECONDS -lt $end ] || fail "the lock stayed held after pgcoord was SIGKILLed"
	sleep 0.1
done
run 0 "$PG" -d "$PGCOORD_TEST_DSN" run -n "$name" --schema "$S" -- true

# 5. The holder's server session is terminated: the command is stopped and pgcoord exits 75.
"$PG" -d "$tx" run "$name" --schema "$S" --check-interval 200ms -- sleep 30 >"$TMP/l.out" 2>"$TMP/l.err" &
l=$!
end=$((SECONDS + 15))
until [ "$(holders "$name")" = 1 ]; do
	[ $SECONDS -lt $end ] || fail "the holder did not take the lock"
	sleep 0.1
done
psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pgcoord/lock-holder' AND datname = current_database()" >/dev/null
end=$((SECONDS + 15))
while kill -0 "$l" 2>/dev/null; do
	[ $SECONDS -lt $end ] || fail "pgcoord run did not notice the lost lock"
	sleep 0.1
done
wait "$l"
st=$?
[ "$st" -eq 75 ] || { cat "$TMP/l.err"; fail "a lost lock exited $st, expected 75"; }
grep -q "lost" "$TMP/l.err" || { cat "$TMP/l.err"; fail "no word of the loss"; }

# 6. --fence through the pooler: the token comes from a second session and is committed.
run 0 "$PG" -d "$tx" run -n "$name" --schema "$S" --fence -- sh -c 'test -n "$PGCOORD_FENCE_TOKEN"'

# 7. In session mode: a session lock (not a held transaction). The holder's command runs until
#    the test is done with it (at most 60 s), however slowly the contender starts.
"$PG" -d "$sess" run "$name" --schema "$S" -v -- sh -c \
	'i=0; while [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done' sh "$TMP/s.go" \
	>"$TMP/s.out" 2>"$TMP/s.err" &
s=$!
end=$((SECONDS + 15))
until [ "$(holders "$name")" = 1 ]; do
	[ $SECONDS -lt $end ] || { cat "$TMP/s.err"; fail "the session-mode holder did not take the lock"; }
	sleep 0.1
done
[ "$(psql_q "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgcoord/lock-holder' AND datname = current_database()")" = 0 ] \
	|| fail "session mode held the lock in a transaction"
run 1 "$PG" -d "$sess" run -n "$name" --schema "$S" -- true
touch "$TMP/s.go"
wait "$s" || { cat "$TMP/s.err"; fail "the session-mode holder failed"; }
grep -q "held in an open transaction" "$TMP/s.err" && fail "session mode said it held a transaction"

# 8. In statement mode: refused, naming the fix.
run 78 "$PG" -d "$stmt" run -n "$name" --schema "$S" --no-register -- true
err_has "statement-mode pooler"
err_has "connect straight to PostgreSQL"
[ "$(holders "$name")" = 0 ] || fail "statement mode left the lock held"
echo ok
