# cmd_check.sh - elect and run check that COMMAND can start before they campaign or lock, as
# the worker does before it claims: 127 not found, 126 not executable, with the worker's
# messages, and no lease, fencing token or lock taken for a command that never ran
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
schema="cmd_check_$$"
trap 'psql_q "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
run 0 "$PG" init --schema "$schema"
: >"$TMP/plain"
leases() { psql_q "SELECT count(*) FROM $schema.leases"; }

for cmd in elect run worker; do
	case $cmd in
	elect) args=(elect --schema "$schema" --ttl 5s --wait 5s "chk-$cmd") ;;
	run) args=(run --fence --schema "$schema" "chk-$cmd") ;;
	worker) args=(worker --schema "$schema" --queue "chk-$cmd") ;;
	esac
	run 127 timeout 30 "$PG" "${args[@]}" -- /nonexistent/command
	err_has "^pgcoord: /nonexistent/command: No such file or directory"
	run 127 timeout 30 "$PG" "${args[@]}" -- no-such-command-$$
	err_has "^pgcoord: no-such-command-$$: command not found"
	run 126 timeout 30 "$PG" "${args[@]}" -- "$TMP/plain"
	err_has "^pgcoord: $TMP/plain: not executable"
	run 126 timeout 30 "$PG" "${args[@]}" -- "$TMP"
	err_has "not executable"
	# Nothing was campaigned for or locked: no "elected", no lease row, no token.
	grep -q "elected" "$TMP/err" && fail "$cmd: elected for a command that cannot run"
	[ "$(leases)" = 0 ] || { psql_q "SELECT * FROM $schema.leases"; fail "$cmd: a lease or token was taken"; }
done
[ "$(psql_q "SELECT count(*) FROM $schema.lock_names")" = 0 ] || fail "run: the lock was taken (its name recorded)"
# The check is no obstacle to a command that can run.
run 0 "$PG" elect --schema "$schema" --ttl 5s --wait 5s chk-ok -- true
run 0 "$PG" run --schema "$schema" chk-ok -- true
echo "ok: commands are checked before any lease or lock"
