# queue_lost.sh - an enqueue whose session ends while the statement is on its way cannot know
# whether the job landed: pgcoord says so (exit 69), for one job and for a file; a file's
# transaction that never reached COMMIT, and an enqueue whose session ended while the queue was
# being opened, say that nothing was enqueued.
. "$(dirname "$0")/lib.sh"
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema qlost
# lost_during ARGS...: pgcoord queue enqueue ARGS while the table $LOCKED (default jobs) is
# locked by another session, then the enqueue's session is terminated while it waits.
lost_during() {
	local table=${LOCKED:-jobs}
	local mark="qlost-$$-$RANDOM"
	PGAPPNAME=$mark-locker psql -X -q "$PGCOORD_TEST_DSN" >/dev/null 2>&1 <<SQL &
BEGIN; LOCK TABLE $S.$table IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(60); COMMIT;
SQL
	local locker=$!
	local end=$((SECONDS + 45))
	until [ "$(psql_q "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
	             JOIN pg_namespace n ON n.oid = c.relnamespace
	            WHERE n.nspname = '$S' AND c.relname = '$table' AND l.mode = 'AccessExclusiveLock' AND l.granted")" = 1 ]; do
		[ $SECONDS -lt $end ] || fail "the locker did not get its lock"
		sleep 0.1
	done
	PGAPPNAME=$mark "$PG" queue enqueue --schema "$S" "$@" >"$TMP/out" 2>"$TMP/err" &
	local enq=$!
	end=$((SECONDS + 45))
	until [ "$(psql_q "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$mark' AND wait_event_type = 'Lock'")" = 1 ]; do
		[ $SECONDS -lt $end ] || fail "the enqueue did not wait for the lock"
		sleep 0.1
	done
	psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '$mark'" >/dev/null
	wait "$enq"
	got=$?
	psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '$mark-locker'" >/dev/null
	wait "$locker" 2>/dev/null
}
lost_during q --payload '{"n":1}'
[ "$got" = 69 ] || { cat "$TMP/err"; fail "one job: exit $got, expected 69"; }
err_has "may or may not have been enqueued"
printf '{"n":2}\n{"n":3}\n' >"$TMP/batch"
lost_during q --file "$TMP/batch"
[ "$got" = 69 ] || { cat "$TMP/err"; fail "a file: exit $got, expected 69"; }
err_has "nothing was enqueued"
grep -q "may or may not" "$TMP/err" && fail "a file whose COMMIT was never sent said the outcome is unknown"
[ "$(psql_q "SELECT count(*) FROM $S.jobs")" = 0 ] || fail "jobs were enqueued"
# Lost while the queue was being opened (it reads queue_settings): nothing was sent.
LOCKED=queue_settings lost_during q --file "$TMP/batch"
[ "$got" = 69 ] || { cat "$TMP/err"; fail "lost at open: exit $got, expected 69"; }
err_has "nothing was enqueued"
grep -q "may or may not" "$TMP/err" && fail "an enqueue lost before it sent anything said the outcome is unknown"
LOCKED=queue_settings lost_during q --payload '{"n":4}'
[ "$got" = 69 ] || { cat "$TMP/err"; fail "one job lost at open: exit $got, expected 69"; }
err_has "nothing was enqueued"
[ "$(psql_q "SELECT count(*) FROM $S.jobs")" = 0 ] || fail "jobs were enqueued"
echo ok
