# run_signals.sh - exit statuses, environment, signal forwarding to the whole group, 126/127,
# and a command that does not outlive a killed pgcoord
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/run_lib.sh"
name="sig-$$"
run 3 timeout 30 "$PG" -d "$DSN" run "$name" -- sh -c 'echo "$PGCOORD_LOCK_NAME|$PGCOORD_LOCK_KEY|$PGCOORD_LOCK_MODE"; exit 3'
key=$("$PG" lock key "$name")
out_has "^$name|$key|exclusive$"
run 0 timeout 30 "$PG" -d "$DSN" run -s --key 20,$$ -- sh -c 'echo "[$PGCOORD_LOCK_NAME]|$PGCOORD_LOCK_KEY|$PGCOORD_LOCK_MODE"'
out_has "^\[\]|20,$$|shared$"
run 137 timeout 30 "$PG" -d "$DSN" run "$name" -- sh -c 'kill -KILL $$'
run 127 timeout 30 "$PG" -d "$DSN" run "$name" -- /nonexistent/cmd
err_has "/nonexistent/cmd: No such file or directory"
touch "$TMP/noexec"; chmod 644 "$TMP/noexec"
run 126 timeout 30 "$PG" -d "$DSN" run "$name" -- "$TMP/noexec"
err_has "noexec: not executable"
[ "$(sessions "$name" all)" -eq 0 ] || fail "lock left held after exec failures"

# SIGTERM to pgcoord reaches the whole group: the shell and its background child.
for sig in TERM INT HUP QUIT; do
	rm -f "$TMP/got" "$TMP/bg"
	timeout 60 "$PG" -d "$DSN" run "$name" -- sh -c \
		"trap 'echo $sig >\"$TMP/got\"; exit 7' $sig; sleep 50 & echo \$! >'$TMP/bg'; wait" >"$TMP/o" 2>&1 &
	p=$!
	wait_sessions "$name" granted 1
	for i in $(seq 1 100); do [ -s "$TMP/bg" ] && break; sleep 0.05; done
	kill -"$sig" "$p"
	wait "$p"
	st=$?
	[ "$st" -eq 7 ] || { cat "$TMP/o"; fail "SIG$sig: pgcoord exited $st, expected the command's 7"; }
	[ "$(cat "$TMP/got")" = "$sig" ] || fail "SIG$sig did not reach the command"
	wait_gone "$(cat "$TMP/bg")" 5 || fail "SIG$sig did not reach the command's background child"
	[ "$(sessions "$name" all)" -eq 0 ] || fail "lock held after SIG$sig"
done

# pgcoord killed outright: its session ends and the command is told to stop.
rm -f "$TMP/died" "$TMP/cpid"
"$PG" -d "$DSN" run "$name" -- sh -c \
	"echo \$\$ >'$TMP/cpid'; trap 'echo died >\"$TMP/died\"; exit 0' TERM; while :; do sleep 0.1; done" >/dev/null 2>&1 &
p=$!
wait_sessions "$name" granted 1
for i in $(seq 1 100); do [ -s "$TMP/cpid" ] && break; sleep 0.05; done
kill -KILL "$p"
for i in $(seq 1 100); do [ -s "$TMP/died" ] && break; sleep 0.05; done
if [ "$(cat "$TMP/died" 2>/dev/null)" != died ]; then
	kill -KILL "$(cat "$TMP/cpid")" 2>/dev/null
	fail "the command outlived a killed pgcoord"
fi
wait_sessions "$name" all 0
echo ok
