# worker_idle.sh - an idle worker sleeps, whatever the number of its queues and handler slots:
# with more queues than free slots (-c 1 on two queues, -c 4 on five), --once exits at once on
# empty queues, and a worker left running on them sends the server a few transactions a poll
# interval, not thousands a second. The worker runs on a database of the test's own, so that
# the database's transaction count is the worker's alone.
. "$(dirname "$0")/lib.sh"
skip_without_pg
DB=pgc_widle_$$
DB_DSN=$(dsn_with_db "$PGCOORD_TEST_DSN" "$DB")
wpid=
cleanup() {
	[ -n "$wpid" ] && kill -KILL "$wpid" 2>/dev/null
	psql -X -q "$PGCOORD_TEST_DSN" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
psql_q "CREATE DATABASE $DB TEMPLATE template0" >/dev/null || fail "cannot create database $DB"
export PGCOORD_DSN=$DB_DSN
run 0 "$PG" init

# --once on empty queues, more queues than slots: it exits (it used to claim for ever).
run 0 timeout 60 "$PG" worker --once -c 1 -q a1 -q a2 -- true
err_has "no runnable job left"
run 0 timeout 60 "$PG" worker --once -c 4 -q b1 -q b2 -q b3 -q b4 -q b5 -- true
err_has "no runnable job left"
# With jobs in every queue, --once still runs them all, one slot for five queues.
for q in b1 b2 b3 b4 b5; do
	run 0 "$PG" queue enqueue "$q" --payload '{}'
	run 0 "$PG" queue enqueue "$q" --payload '{}'
done
run 0 timeout 60 "$PG" worker --once -c 1 -q b1 -q b2 -q b3 -q b4 -q b5 -- true
err_has "stopped: 10 completed"

# xact_commit of the database, once its statistics are flushed: a new session each time, and
# a backend that has ended has flushed its counts.
xacts() { psql -X -A -t -q "$DB_DSN" -c "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"; }
before=$(xacts)
"$PG" worker -c 1 -q c1 -q c2 -q c3 --poll 1s -- true 2>"$TMP/werr" &
wpid=$!
# Wait until it is up (its registration row), then let it idle for 5 s.
PGCOORD_TEST_DSN=$DB_DSN wait_query 60 "SELECT count(*) > 0 FROM pgcoord.workers" t
sleep 5
kill -TERM "$wpid"
wait "$wpid"
rc=$?
wpid=
[ "$rc" -eq 0 ] || { cat "$TMP/werr"; fail "worker exited $rc on SIGTERM"; }
# Its session has ended: wait until the server has counted it, then read the count.
wait_query 60 "SELECT count(*) FROM pg_stat_activity WHERE datname = '$DB' AND application_name LIKE 'pgcoord/worker%'" 0
sleep 1
after=$(xacts)
n=$((after - before))
# About one claim a second for 5 s, its setup and its heartbeats, and this test's own few
# queries: far under 300. A worker that claims without sleeping makes thousands.
[ "$n" -lt 300 ] || { cat "$TMP/werr"; fail "an idle worker on 3 queues with 1 slot made $n transactions in about 5 s"; }
echo "ok: idle worker, $n transactions in about 5 s"
