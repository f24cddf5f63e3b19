# run_restart.sh - the server restarts (pg_ctl restart) under a running command: the command is
# stopped and pgcoord exits 75 saying why. Runs alone: the restart ends every session.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/run_lib.sh"
dir=${PGCOORD_TEST_PGDIR:-}
if [ -z "$dir" ]; then
	echo "skipped: PGCOORD_TEST_PGDIR is not set (needs the pg-tmp server)" >&2
	exit 77
fi
name="restart-$$"
timeout 60 "$PG" -d "$DSN" run --kill-after 1s "$name" -- sh -c "echo \$\$ >'$TMP/child'; sleep 50" \
	>"$TMP/out" 2>"$TMP/err" &
p=$!
wait_sessions "$name" granted 1
for i in $(seq 1 100); do [ -s "$TMP/child" ] && break; sleep 0.05; done
owner=$(stat -c %U "$dir/data")
if [ "$(id -u)" -eq 0 ]; then
	runuser -u "$owner" -- pg_ctl -D "$dir/data" -m fast -w -t 60 restart -l "$dir/server.log" >/dev/null 2>&1
else
	pg_ctl -D "$dir/data" -m fast -w -t 60 restart -l "$dir/server.log" >/dev/null 2>&1
fi || fail "pg_ctl restart failed"
wait "$p"
st=$?
[ "$st" -eq 75 ] || { cat "$TMP/err"; fail "exited $st after a server restart, expected 75"; }
grep -q "lock $name (key .*) lost: the server ended the session: terminating connection due to administrator command" "$TMP/err" \
	|| { cat "$TMP/err"; fail "the message does not say why"; }
wait_gone "$(cat "$TMP/child")" 5 || fail "the command survived the restart"
echo ok
