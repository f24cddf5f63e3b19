# run_role_timeouts.sh - a role's statement_timeout and lock_timeout neither cut short nor
# stretch pgcoord run's wait: -w 4s under a 2 s role statement_timeout waits 4 s and exits 1,
# and without -w it waits until the lock comes.
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/run_lib.sh"
role=pgc_rto_$$
psql_q "CREATE ROLE $role LOGIN; ALTER ROLE $role SET statement_timeout = '2s';
        ALTER ROLE $role SET lock_timeout = '1s'" >/dev/null || fail "create role"
cleanup() {
	for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
	psql_q "DROP ROLE IF EXISTS $role" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
read -r host port db < <(psql -X -A -t -q -F ' ' "$PGCOORD_TEST_DSN" \
	-c "SELECT coalesce(host(inet_server_addr()), '127.0.0.1'), inet_server_port(), current_database()")
as_role="host=$host port=$port dbname=$db user=$role"
[ "$(psql -X -A -t -q "$as_role" -c 'SHOW statement_timeout')" = 2s ] || fail "the role's setting did not apply"
name=rto-$$

# Another session holds the lock for 7 s (this lock: other tests hold advisory locks too).
"$PG" -d "$PGCOORD_TEST_DSN" run --no-register "$name" -- sleep 7 >/dev/null 2>&1 &
wait_sessions "$name" granted 1
t0=$(date +%s%N)
run 1 "$PG" -d "$as_role" run --no-register -v -w 4s "$name" -- echo got
el=$((($(date +%s%N) - t0) / 1000000))
[ "$el" -ge 3800 ] || fail "-w 4s gave up after $el ms (the role's timeouts cut it short)"
[ "$el" -lt 9000 ] || fail "-w 4s waited $el ms"
err_has "timed out after 4000 ms"
grep -q "statement timeout" "$TMP/err" && fail "the role's statement_timeout ended the wait"
# Without -w: waits until the holder lets go, past both role settings.
run 0 "$PG" -d "$as_role" run --no-register "$name" -- echo got
grep -q got "$TMP/out" || fail "the command did not run"
echo ok
