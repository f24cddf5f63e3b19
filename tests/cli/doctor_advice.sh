# doctor_advice.sh - the doctor's findings about what sessions do now, with the conditions made
# for real by a role of the test's own (which sees only its own sessions, so that other tests
# running at the same time change nothing here): a lock wait longer than deadlock_timeout and
# its blocker, advisory locks held for long (one recorded by pgcoord run, with its registered
# name), a session without an application_name, foreign keys without an index; then the same
# run once they are gone. Last, the advisory locks' share of the shared lock table, on a small
# server of the test's own.
. "$(dirname "$0")/lib.sh"

run 64 "$PG" doctor --advisory-age 10ms
err_has "advisory-age must be at least 1s"
run 64 "$PG" doctor --advisory-age soon
err_has "advisory-age"
run 64 "$PG" doctor --advisory-age 31d
err_has "advisory-age must be at most 30d"

skip_without_pg
role="pgc_advice_$$"
sch="advice_$$"
S="pgc_advice_s_$$"
pids=()
# idle APP DSN SQL: a psql session named APP (may be empty) that runs SQL and then stays idle
# for at most a minute, in a process group of its own (its pid in pids, to be killed with it).
idle() {
	setsid bash -c '{ echo "$3"; exec sleep 60; } | PGAPPNAME=$1 exec psql -X -q "$2"' _ "$@" \
		>/dev/null 2>&1 </dev/null &
	pids+=($!)
}
kill_all() {
	local p
	for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done
	pids=()
}
cleanup() {
	kill_all
	psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '$role'" >/dev/null 2>&1
	psql_q "DROP OWNED BY $role CASCADE; DROP SCHEMA IF EXISTS ${S}_theirs CASCADE" >/dev/null 2>&1
	psql_q "DROP ROLE IF EXISTS $role" >/dev/null 2>&1
	[ -n "${SMALL:-}" ] && { "$SRC/scripts/pg-tmp" destroy "$SMALL" >/dev/null 2>&1 || true; }
	rm -rf "$TMP"
}
trap cleanup EXIT
psql_q "DROP ROLE IF EXISTS $role; CREATE ROLE $role LOGIN;
        GRANT CREATE ON DATABASE \"$(psql_q 'SELECT current_database()')\" TO $role" >/dev/null ||
	fail "cannot create role $role"
# The role's settings leave nothing else to fix, so that the last run can exit 0.
psql_q "ALTER ROLE $role SET lock_timeout = '5s'; ALTER ROLE $role SET statement_timeout = '1min';
        ALTER ROLE $role SET idle_in_transaction_session_timeout = '1min';
        ALTER ROLE $role SET log_lock_waits = on" >/dev/null
dsn=$(python3 - "$PGCOORD_TEST_DSN" "$role" <<'PY'
import sys, urllib.parse as u
dsn, role = sys.argv[1], sys.argv[2]
if dsn.startswith(("postgres://", "postgresql://")):
    p = u.urlsplit(dsn)
    host = p.netloc.rsplit("@", 1)[-1]
    print(u.urlunsplit((p.scheme, role + "@" + host, p.path, p.query, p.fragment)))
else:
    print(dsn + " user=" + role)
PY
)
rq() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$dsn" -c "$1"; }
run 0 "$PG" -d "$dsn" init --schema "$S"

# Tables of the role: two foreign keys without an index that leads with their columns (one with
# a name that needs quoting, one of two columns with an index on only the first), one covered
# by an index on the same columns in another order.
rq "CREATE SCHEMA $sch;
    CREATE TABLE $sch.parent (id int PRIMARY KEY);
    CREATE TABLE $sch.child (id int PRIMARY KEY, \"Parent Id\" int REFERENCES $sch.parent);
    CREATE TABLE $sch.pair (x int, y int, PRIMARY KEY (x, y));
    CREATE TABLE $sch.half (a int, b int, FOREIGN KEY (a, b) REFERENCES $sch.pair);
    CREATE INDEX ON $sch.half (a);
    CREATE TABLE $sch.covered (a int, b int, c int, FOREIGN KEY (a, b) REFERENCES $sch.pair);
    CREATE INDEX ON $sch.covered (b, a, c)" || fail "cannot create the tables"

run 1 timeout 60 "$PG" -d "$dsn" doctor --schema "$S" --advisory-age 1s
out_has "^ok       lock_waits: no session has waited for a lock longer than deadlock_timeout (1s) (only sessions of roles you can see"
out_has "^ok       long_advisory: no advisory lock in this database known to be held for 1s or more"
out_has "^ok       application_name: every client session has an application_name"
out_has "^warning  fk_index: 2 foreign key(s) without an index on the referencing columns: $sch.child (child_Parent Id_fkey, to $sch.parent), $sch.half (half_a_b_fkey, to $sch.pair)"
out_has "Fix: CREATE INDEX CONCURRENTLY ON $sch.child (\"Parent Id\"); CREATE INDEX CONCURRENTLY ON $sch.half (a, b);$"
out_has "^doctor: 0 errors, 1 warning$"

# The conditions, each in a process of its own, killed on exit; none waits more than a minute.
idle pgc-advice-holder "$dsn" "SELECT pg_advisory_lock(4242);"
setsid "$PG" -d "$dsn" run --schema "$S" advice-lead -- sleep 60 >/dev/null 2>&1 </dev/null &
pids+=($!)
idle pgc-advice-blocker "$dsn" "BEGIN; LOCK TABLE $sch.parent IN SHARE MODE;"
wait_query 20 "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
               WHERE a.application_name = 'pgc-advice-blocker' AND l.relation = '$sch.parent'::regclass" 1
PGAPPNAME=pgc-advice-waiter setsid psql -X -q "$dsn" \
	-c "SET lock_timeout = '60s'; INSERT INTO $sch.parent VALUES (1)" >/dev/null 2>&1 </dev/null &
pids+=($!)
idle "" "$dsn" ""
wait_query 20 "SELECT count(*) FROM pg_stat_activity WHERE usename = '$role' AND application_name = ''" 1
wait_query 20 "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
               AND pid IN (SELECT pid FROM pg_stat_activity WHERE usename = '$role' AND state = 'idle')" 2
# Waited longer than deadlock_timeout (1s), idle for more than the age given (1s).
wait_query 20 "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
               WHERE a.application_name = 'pgc-advice-waiter' AND NOT l.granted
               AND l.waitstart < clock_timestamp() - interval '1.5 s'" 1
sleep 1.5
waiter=$(psql_q "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgc-advice-waiter'")
blocker=$(psql_q "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgc-advice-blocker'")
holder=$(psql_q "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgc-advice-holder'")

run 1 timeout 60 "$PG" -d "$dsn" doctor --schema "$S" --advisory-age 1s
out_has "^warning  lock_waits: 1 session(s) waiting for a lock longer than deadlock_timeout (1s), as log_lock_waits would log: pid $waiter (pgc-advice-waiter) waits [0-9.]* s for RowExclusiveLock on table $sch.parent, blocked by pid $blocker (pgc-advice-blocker, idle in transaction, query started 20[0-9-]* [0-9:]*"
out_has "Fix: see the whole chain with pgcoord blockers; if pid $blocker is stuck, end it with pgcoord terminate $blocker (it is idle in transaction: a cancel does nothing)"
out_has "^warning  long_advisory: 2 advisory lock(s) held for 1s or more: "
out_has "pid $holder (pgc-advice-holder) holds key 4242 for at least [0-9]*s (idle that long, in a session [0-9]*s old: pg_locks does not say when a lock was taken)"
out_has "holds advice-lead (key -\?[0-9]*) for [0-9]*s (recorded when taken)"
out_has "Fix: for long leadership use pgcoord elect or a lease (pgcoord lease)"
out_has "^warning  idle_in_transaction: 1 session(s) idle in transaction now; the oldest, pid $blocker"
out_has "^warning  application_name: 1 client session(s) without an application_name: 1 of user $role from "
out_has "^doctor: 0 errors, 5 warnings$"
# A schema the role may not use: the registry and the recorded holds are not read, the rest is
# (the ages are then what pg_stat_activity gives: pgcoord run's heartbeats keep its session's
# idle time short, so its lock may not be counted).
run 0 "$PG" -d "$PGCOORD_TEST_DSN" init --schema "${S}_theirs"
run 1 timeout 60 "$PG" -d "$dsn" doctor --schema "${S}_theirs" --advisory-age 1s
out_has "^warning  long_advisory: [12] advisory lock(s) held for 1s or more: "
out_has "pid $holder (pgc-advice-holder) holds key 4242 for at least"
grep -q "advice-lead\|recorded when taken" "$TMP/out" && { cat "$TMP/out"; fail "read a registry it may not use"; }
out_has "^warning  schema: cannot read the version of schema ${S}_theirs: permission denied"
# With the default age (1h) these locks are not long.
run 1 timeout 60 "$PG" -d "$dsn" doctor --schema "$S"
out_has "^ok       long_advisory: no advisory lock in this database known to be held for 1h or more"

run 1 timeout 60 "$PG" -d "$dsn" --json doctor --schema "$S" --advisory-age 1s
python3 - "$TMP/out" "$waiter" "$blocker" <<'PY' || fail "doctor --json with the conditions"
import json, sys
d = json.load(open(sys.argv[1]))
f = {x["check"]: x for x in d["findings"]}
assert [x["check"] for x in d["findings"]] == ["server", "pooler", "lock_timeout",
    "statement_timeout", "idle_in_transaction_session_timeout", "log_lock_waits",
    "deadlock_timeout", "lock_table", "lock_waits", "long_advisory", "idle_in_transaction",
    "application_name", "fk_index", "schema", "cron", "replication", "dsn_hosts", "failover"], f.keys()
for name, value in (("lock_waits", "1"), ("long_advisory", "2"), ("application_name", "1"),
                    ("fk_index", "2")):
    assert f[name]["severity"] == "warning" and f[name]["value"] == value and f[name]["fix"], f[name]
assert "pid %s " % sys.argv[2] in f["lock_waits"]["message"], f["lock_waits"]
assert "blocked by pid %s " % sys.argv[3] in f["lock_waits"]["message"], f["lock_waits"]
assert d["warnings"] == 5 and d["errors"] == 0 and d["worst"] == "warning", d
PY

# Once the sessions are gone and the indexes made, nothing is left to fix.
kill_all
psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '$role'" >/dev/null
wait_query 20 "SELECT count(*) FROM pg_stat_activity WHERE usename = '$role'" 0
rq "CREATE INDEX ON $sch.child (\"Parent Id\"); CREATE INDEX ON $sch.half (b, a)" || fail "cannot index"
run 0 timeout 60 "$PG" -d "$dsn" doctor --schema "$S" --advisory-age 1s
out_has "^ok       fk_index: every foreign key of the tables $role can index has an index on its referencing columns"
out_has "^doctor: 0 errors, 0 warnings$"

# The advisory locks' share of the shared lock table, on a small server of our own:
# max_locks_per_transaction 10 x max_connections 20 = 200 slots. Half of them advisory is a
# warning, 80% an error, and the session that holds them is named.
SMALL=$(mktemp -d /tmp/pgcoord-small.XXXXXX)
chmod 755 "$SMALL"
"$SRC/scripts/pg-tmp" start "$SMALL" >/dev/null || fail "the small server did not start"
"$SRC/scripts/pg-tmp" stop "$SMALL" >/dev/null
printf 'max_connections = 20\nmax_locks_per_transaction = 10\n' >>"$SMALL/data/postgresql.conf"
small=$("$SRC/scripts/pg-tmp" start "$SMALL") || fail "the small server did not restart"
sq() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$small" -c "$1"; }
[ "$(sq "SELECT current_setting('max_locks_per_transaction')::int * current_setting('max_connections')::int")" = 200 ] ||
	fail "the small server's lock table is not 200 slots"
idle pgc-advice-many "$small" "SELECT count(pg_advisory_lock(g)) FROM generate_series(1, 110) AS g;"
wait_query_small() {
	local end=$((SECONDS + 20)) got
	while [ $SECONDS -lt "$end" ]; do
		got=$(sq "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
		[ "$got" = "$1" ] && return 0
		sleep 0.1
	done
	fail "the small server has $got advisory locks, expected $1"
}
wait_query_small 110
many=$(sq "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgc-advice-many'")
run 1 timeout 60 "$PG" -d "$small" doctor --schema "$S" --no-pooler-check
out_has "^warning  lock_table: shared lock table: max_locks_per_transaction 10 x (max_connections 20 + max_prepared_transactions 0) = 200 slots, shared by table and advisory locks; [0-9]* in use now (110 advisory); advisory locks alone take 55% of the slots (pid $many, application pgc-advice-many, holds 110 of them)"
out_has "Fix: take advisory locks for the work in progress only and release them when it ends (pid $many holds 110; pgcoord locks --pid $many --advisory lists them)"
kill_all
wait_query_small 0
idle pgc-advice-many "$small" "SELECT count(pg_advisory_lock(g)) FROM generate_series(1, 165) AS g;"
wait_query_small 165
many=$(sq "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgc-advice-many'")
run 2 timeout 60 "$PG" -d "$small" doctor --schema "$S" --no-pooler-check
out_has "^error    lock_table: .* (165 advisory); advisory locks alone take 82% of the slots (pid $many, application pgc-advice-many, holds 165 of them)"
echo ok
