# diag_probe.sh - probe: the locks of ALTER TABLE, SELECT FOR UPDATE and CREATE INDEX, refusals,
# a lock wait explained, and the table unchanged afterwards
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/diag_lib.sh"

dbq "CREATE TABLE t (id serial PRIMARY KEY, x int); INSERT INTO t (x) VALUES (1), (2);"
shape() { dbq "SELECT (SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 't'::regclass AND attnum > 0 AND NOT attisdropped), (SELECT count(*) FROM pg_index WHERE indrelid = 't'::regclass), (SELECT string_agg(id || ':' || x, ',' ORDER BY id) FROM t)"; }
before=$(shape)

run 0 "$PG" -d "$DB_DSN" probe -c "ALTER TABLE t ADD COLUMN c int"
out_has "^probe: ALTER TABLE t ADD COLUMN c int$"
out_has "rolled back"
out_has "^  AccessExclusiveLock on public.t: blocks every read and write of public.t until the transaction ends$"
out_has "^    conflicts with: ACCESS SHARE, ROW SHARE, ROW EXCLUSIVE, SHARE UPDATE EXCLUSIVE, SHARE, SHARE ROW EXCLUSIVE, EXCLUSIVE, ACCESS EXCLUSIVE$"
out_has "^note: sequence values"
run 0 "$PG" -d "$DB_DSN" probe -c "SELECT * FROM t FOR UPDATE"
out_has "^  RowShareLock on public.t: blocks EXCLUSIVE and ACCESS EXCLUSIVE on public.t"
grep -q "AccessExclusiveLock on public.t" "$TMP/out" && fail "FOR UPDATE reported as ACCESS EXCLUSIVE"
out_has "^  and row locks on the 2 rows it returned: other writers of them wait"
# The rows are only returned: the locking clause is for later, and probably stronger than needed.
out_has "^advice: FOR UPDATE takes the strongest row lock, but this statement only reads the rows: if nothing later in the transaction updates or deletes them, drop the locking clause"
out_has "FOR KEY SHARE is enough; if it changes only non-key columns later, FOR NO KEY UPDATE"
run 0 "$PG" -d "$DB_DSN" probe -c "select x from t for share of t skip locked"
out_has "^advice: FOR SHARE blocks every update of the rows, but this statement only reads them: .* FOR KEY SHARE lets updates of other columns go on$"
run 0 "$PG" -d "$DB_DSN" probe --json -c "SELECT * FROM t FOR NO KEY UPDATE NOWAIT"
jcheck 'd["advice"].startswith("FOR NO KEY UPDATE keeps other writers off the rows, but this statement only reads them")' True \
	'"FOR KEY SHARE is enough" in d["advice"]' True 'd["rows_locked"]' 2
# A statement that changes the rows it locks, or that locks none, gets no advice.
for q in "WITH p AS (SELECT x FROM t ORDER BY x FOR UPDATE SKIP LOCKED LIMIT 1) UPDATE t SET x = t.x FROM p WHERE t.x = p.x" \
	"WITH d AS (DELETE FROM t WHERE false RETURNING x) SELECT * FROM t FOR UPDATE" \
	"SELECT 'FOR UPDATE' FROM t" "SELECT * FROM t"; do
	run 0 "$PG" -d "$DB_DSN" probe -c "$q"
	grep -q "^advice:" "$TMP/out" && { cat "$TMP/out"; fail "advice for: $q"; }
	run 0 "$PG" -d "$DB_DSN" probe --json -c "$q"
	jcheck 'd["advice"]' None
done
run 0 "$PG" -d "$DB_DSN" probe -c "CREATE INDEX ON t (x)"
out_has "^  ShareLock on public.t: blocks every write (INSERT, UPDATE, DELETE) and schema change of public.t"
out_has "^    conflicts with: ROW EXCLUSIVE, SHARE UPDATE EXCLUSIVE, SHARE ROW EXCLUSIVE, EXCLUSIVE, ACCESS EXCLUSIVE$"
run 0 "$PG" -d "$DB_DSN" probe --json -c "INSERT INTO t (x) VALUES (3)"
jcheck 'd["outcome"], d["rolled_back"], d["command_tag"]' "('ran', True, 'INSERT 0 1')" \
	'[(l["relation"], l["mode"]) for l in d["locks"] if l["relation"] == "public.t"]' "[('public.t', 'RowExclusiveLock')]" \
	'any("sequence" in n for n in d["notes"])' True \
	'd["rows_locked"]' 0

# Statements that cannot run in a transaction block are refused with a clear message.
run 64 "$PG" -d "$DB_DSN" probe -c "VACUUM t"
err_has "cannot probe: VACUUM cannot run inside a transaction block"
err_lines 2
run 64 "$PG" -d "$DB_DSN" probe -c "create index concurrently on t (x)"
err_has "CREATE INDEX CONCURRENTLY cannot run inside a transaction block"
run 64 "$PG" -d "$DB_DSN" probe -c "DISCARD ALL"
err_has "DISCARD ALL cannot run inside a transaction block"
run 64 "$PG" -d "$DB_DSN" probe -c "COMMIT"
err_has "transaction control cannot be probed"
run 64 "$PG" -d "$DB_DSN" probe -c "SELECT 1; DROP TABLE t"
err_has "one statement at a time"
run 65 "$PG" -d "$DB_DSN" probe -c "SELECT * FROM no_such_table"
err_has "the statement failed (rolled back, nothing changed): relation \"no_such_table\" does not exist"
run 64 "$PG" probe
err_has "no statement given"
run 64 "$PG" probe -c "SELECT 1" --lock-timeout 0
err_has "between 1ms and 24h"
run 64 "$PG" probe -c "SELECT 1" extra
run 0 "$PG" probe --help
out_has "lock-timeout"
run 69 "$PG" -d "postgresql://127.0.0.1:1/x?connect_timeout=3" probe -c "SELECT 1"

# A lock wait: the probe gives up after its lock timeout and names who holds it up.
open H; H=$(pid H)
send H "BEGIN; SELECT count(*) FROM t;"
state "$H" "idle in transaction"
run 1 timeout 30 "$PG" -d "$DB_DSN" probe --lock-timeout 2s -c "ALTER TABLE t ADD COLUMN c int"
out_has "could not get a lock within 2.0s (lock_timeout)"
out_has "it waited for AccessExclusiveLock on relation public.t, held up by:"
out_has "^  pid $H .*$APP-H  idle in transaction"
run 1 timeout 30 "$PG" -d "$DB_DSN" probe --json --lock-timeout 2s -c "ALTER TABLE t ADD COLUMN c int"
jcheck 'd["outcome"], d["waited_for"]["mode"], [b["pid"] for b in d["blocked_by"]], d["error"]["sqlstate"]' \
	"('lock_timeout', 'AccessExclusiveLock', [$H], '55P03')"
psql_q "SELECT pg_terminate_backend($H, 5000)" >/dev/null

# The probe's timeouts are its own: a role whose statement_timeout (1s) and lock_timeout
# (500ms) are shorter cuts neither the lock wait it was given short.
ROLE=pgc_probe_role_$$
psql_q "CREATE ROLE $ROLE LOGIN" >/dev/null || fail "create role"
trap 'diag_cleanup; psql -X -q "$PGCOORD_TEST_DSN" -c "DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1' EXIT
psql_q "ALTER ROLE $ROLE SET statement_timeout = '1s'" >/dev/null
psql_q "ALTER ROLE $ROLE SET lock_timeout = '500ms'" >/dev/null
dbq "GRANT SELECT ON t TO $ROLE"
ROLE_DSN="$DB_DSN user=$ROLE"
case "$DB_DSN" in *://*) ROLE_DSN="$DB_DSN&user=$ROLE" ;; esac
[ "$(psql -X -A -t -q "$ROLE_DSN" -c "SHOW statement_timeout")" = 1s ] || fail "the role's statement_timeout is not in force"
start L "BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE;"
wait_sql "SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $L AND mode = 'AccessExclusiveLock' AND granted)"
# A lock held throughout: the outcome is the lock wait, after the probe's 3 s.
run 1 timeout 30 "$PG" -d "$ROLE_DSN" probe --json --lock-timeout 3s -c "SELECT * FROM t"
jcheck 'd["outcome"], d["error"]["sqlstate"], [b["pid"] for b in d["blocked_by"]]' "('lock_timeout', '55P03', [$L])" \
	'2.9 <= d["elapsed_s"] < 8' True
# A lock released after the probe has waited 1.5 s: the statement runs.
timeout 30 "$PG" -d "$ROLE_DSN" probe --json --lock-timeout 5s -c "SELECT * FROM t" >"$TMP/out" 2>"$TMP/err" &
prober=$!
wait_sql "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE a.application_name = 'pgcoord/probe' AND a.usename = '$ROLE' AND NOT l.granted)"
sleep 1.5
send L "COMMIT;"
wait $prober || { cat "$TMP/out" "$TMP/err"; fail "the probe under the role's timeouts did not run"; }
jcheck 'd["outcome"], d["command_tag"], d["elapsed_s"] >= 1.5' "('ran', 'SELECT 2', True)"

# A statement that runs too long is stopped.
run 1 timeout 30 "$PG" -d "$DB_DSN" probe --statement-timeout 300ms -c "SELECT pg_sleep(5) FROM t"
out_has "still running after 300ms (statement_timeout); stopped and rolled back"

# Nothing changed: same columns, same indexes, same rows.
after=$(shape)
expect_eq "$after" "$before" "table shape after the probes"
exit 0
