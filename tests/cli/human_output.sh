# human_output.sh - what the human output of the tool looks like: control characters in names
# and queries escaped, one timestamp form, lock status's SINCE, blockers' count of waits in
# other databases, queue stats --watch screens, pgcoord's own sessions described instead of
# their internal SQL, doctor's fix in pgcoord commands, -q over run -v, singular counts
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/diag_lib.sh"
export PGCOORD_DSN=$DB_DSN
S=pgc_out_$$
"$PG" init --schema "$S" >/dev/null || fail "pgcoord init failed"
ISO='[0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]Z'
ESC=$(printf '\033')
# no_raw_controls: neither stdout nor stderr holds a control character other than newline.
no_raw_controls() {
	if LC_ALL=C grep -q '[[:cntrl:]]' <(tr -d '\n' <"$TMP/out") <(tr -d '\n' <"$TMP/err"); then
		cat -A "$TMP/out" "$TMP/err"
		fail "raw control characters in the output"
	fi
}

# 1. A queue named "a<newline>b<ESC>": escaped in every line and table, one row per job.
q=$(printf 'a\nb\033[31m')
run 0 "$PG" queue enqueue --schema "$S" "$q" --payload '{"n":1}'
no_raw_controls
out_has 'in queue a\\nb\\x1b\[31m$'
run 0 "$PG" queue list --schema "$S"
no_raw_controls
[ "$(wc -l <"$TMP/out")" -eq 2 ] || { cat "$TMP/out"; fail "queue list: one header and one row expected"; }
out_has "a\\\\nb\\\\x1b\[31m .* pending .* 0/25 $ISO"
id=$(awk 'NR == 2 { print $1 }' "$TMP/out")
run 0 "$PG" queue show --schema "$S" "$id"
no_raw_controls
# Every label ends in a colon; every timestamp is ISO 8601 in UTC.
awk '$1 !~ /:$/ { print; bad = 1 } END { exit bad }' "$TMP/out" || fail "queue show: a label without a colon"
out_has "^queue: *a\\\\nb\\\\x1b\[31m$"
out_has "^run_at: *$ISO$"
out_has "^created_at: *$ISO$"
run 0 "$PG" queue stats --schema "$S"
no_raw_controls
out_has "^a\\\\nb\\\\x1b\[31m  *no "
# --json keeps the name as it is (JSON-escaped) and timestamps as the server's ISO 8601.
run 0 "$PG" --json queue show --schema "$S" "$id"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["queue"] == "a\nb\x1b[31m", d' "$TMP/out" ||
	fail "queue show --json"

# 2. queue stats --watch: each screen starts with the time; on a terminal the screen is cleared.
# (Waits of up to 60 s for the screens: under valgrind each one takes a while.)
header="^pgcoord queue stats, every 200ms, at $ISO$"
timeout 90 "$PG" queue stats --schema "$S" --watch 200ms >"$TMP/out" 2>"$TMP/err" &
wpid=$!
for _ in $(seq 600); do
	[ "$(grep -c "$header" "$TMP/out")" -ge 2 ] && break
	sleep 0.1
done
kill -TERM "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null
[ "$(grep -c "$header" "$TMP/out")" -ge 2 ] ||
	{ cat "$TMP/out"; fail "queue stats --watch: no screen headers"; }
cleared="${ESC}\[H${ESC}\[2Jpgcoord queue stats, every 200ms, at .*(Ctrl-C to stop)"
script -qfec "timeout 90 $PG queue stats --schema $S --watch 200ms" /dev/null >"$TMP/tty" 2>&1 &
wpid=$!
for _ in $(seq 600); do
	grep -q "$cleared" "$TMP/tty" && break
	sleep 0.1
done
kill -TERM "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null
grep -q "$cleared" "$TMP/tty" ||
	{ cat -A "$TMP/tty" | head -5; fail "queue stats --watch on a terminal does not clear the screen"; }

# 3. Lock status: a lock name with a tab, the holder's and the waiter's times, the session
# state in a column of its own.
lk=$(printf 'out\t%s' "$$")
"$PG" run --schema "$S" "$lk" -- sleep 20 &
hold=$!
for i in $(seq 1 100); do
	"$PG" lock status --schema "$S" "$lk" >/dev/null 2>&1; [ $? -eq 1 ] && break
	sleep 0.1
done
"$PG" run --schema "$S" --wait 20s "$lk" -- true &
waiter=$!
for i in $(seq 1 100); do
	n=$("$PGCOORD_BIN" --json lock status "$lk" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["sessions"]))')
	[ "$n" -eq 2 ] && break
	sleep 0.1
done
run 1 "$PG" lock status --schema "$S" "$lk"
no_raw_controls
out_has "^lock out\\\\t$$ (key [-0-9]*): held$"
out_has "^  PID  *MODE  *SINCE  *SESSION STATE  *APPLICATION  *CLIENT$"
out_has "exclusive holds $ISO idle since $ISO  *pgcoord/run"
out_has "exclusive waits $ISO  *active since $ISO  *pgcoord/run"

# 4. blockers and activity describe pgcoord's own sessions by their lock, not their SQL.
run 1 "$PG" blockers --schema "$S"
no_raw_controls
out_has "query: pgcoord run: waiting for lock out\\\\t$$ (key [-0-9]*)"
grep -q "set_config\|pg_advisory" "$TMP/out" && { cat "$TMP/out"; fail "blockers shows pgcoord's internal SQL"; }
run 0 "$PG" activity
out_has "pgcoord run: waiting for lock "
out_has "pgcoord run: holding lock "
kill -TERM "$hold" "$waiter" 2>/dev/null
wait "$hold" "$waiter" 2>/dev/null

# 5. A query with control characters: escaped in activity and blockers.
start Q "BEGIN; SELECT 'x${ESC}[2Jy' AS a, 1 AS b
, 2 AS c;"
state "$Q" "idle in transaction"
run 0 "$PG" activity
no_raw_controls
out_has "SELECT 'x\\\\x1b\[2Jy' AS a, 1 AS b , 2 AS c;"

# 6. doctor: the fix for a session idle in transaction is pgcoord's own commands.
run 1 "$PG" doctor --schema "$S" --no-pooler-check
out_has "pgcoord locks --pid [0-9]* and pgcoord blockers, end it with pgcoord terminate [0-9]*"
grep -q "pg_terminate_backend" "$TMP/out" && fail "doctor still suggests raw SQL"
send Q "ROLLBACK;"

# 7. blockers in a database without waiters counts the waits in the others and points to -a.
key=$((880000 + $$ % 10000))
other=$(dsn_with_db "$PGCOORD_TEST_DSN" postgres)
PGAPPNAME="$APP-o1" timeout 30 psql -X -q "$other" -c "SELECT pg_advisory_lock($key), pg_sleep(15)" >/dev/null 2>&1 &
for i in $(seq 1 100); do
	[ "$(psql_q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $key AND granted")" -eq 1 ] && break
	sleep 0.1
done
PGAPPNAME="$APP-o2" timeout 30 psql -X -q "$other" -c "SET lock_timeout = '20s'; SELECT pg_advisory_lock($key)" >/dev/null 2>&1 &
for i in $(seq 1 100); do
	[ "$(psql_q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $key AND NOT granted")" -eq 1 ] && break
	sleep 0.1
done
run 0 "$PG" blockers
out_has "^no session waits for a lock (.* in $DB); [0-9]* sessions\? waits\? in other databases (see -a)$"
run 0 "$PG" --json blockers
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["waiting"] == 0 and d["waiting_elsewhere"] >= 1, d' "$TMP/out" ||
	fail "blockers --json: waiting_elsewhere"
run 1 "$PG" blockers -a
psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name IN ('$APP-o1', '$APP-o2')" >/dev/null

# 8. -q wins over run -v; counts of one are singular.
run 0 "$PG" -q run --schema "$S" -v "quiet-$$" -- true
[ -s "$TMP/err" ] && fail "-q run -v printed: $(cat "$TMP/err")"
run 0 "$PG" run --schema "$S" -v "quiet-$$" -- true
err_has "acquired exclusive lock"
echo "DO \$\$BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = '40001'; END\$\$;" >"$TMP/retry.sql"
run 1 "$PG" tx --retries=0 -f "$TMP/retry.sql"
err_has "transaction failed 1 time, giving up"
run 0 "$PG" lab xact-rollback
out_has "^lab: 1 experiment, 1 passed, 0 failed"
run 69 "$PG" queue list --schema "nosuch_$$"
err_has "run pgcoord init --schema nosuch_$$"
run 0 "$PG" info --schema "nosuch_$$"
out_has "not installed (run: pgcoord init --schema nosuch_$$)"
echo ok
