# run_locklost.sh - the holder's backend is terminated: the command's whole process group is
# gone within the check interval plus a margin, pgcoord exits 75 saying why, and a waiter
# gets the lock; a command that ignores SIGTERM gets SIGKILL after --kill-after
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/run_lib.sh"
name="lost-$$"
timeout 60 "$PG" -d "$DSN" run --check-interval 1s --kill-after 2s "$name" -- sh -c \
	"echo \$\$ >'$TMP/child'; sleep 50 & echo \$! >'$TMP/grandchild'; wait" >"$TMP/h.out" 2>"$TMP/h.err" &
hpid=$!
wait_sessions "$name" granted 1
timeout 60 "$PG" -d "$DSN" run -w 40 "$name" -- sh -c "echo got >'$TMP/waiter'" >"$TMP/w" 2>&1 &
wpid=$!
wait_sessions "$name" waiting 1
for i in $(seq 1 100); do [ -s "$TMP/grandchild" ] && break; sleep 0.05; done
child=$(cat "$TMP/child")
grandchild=$(cat "$TMP/grandchild")
psql_q "SELECT pg_terminate_backend($(holder_pid "$name"))" >/dev/null
t0=$(now_ns)
wait "$hpid"
st=$?
ms=$((($(now_ns) - t0) / 1000000))
[ "$st" -eq 75 ] || { cat "$TMP/h.err"; fail "holder exited $st, expected 75"; }
[ "$ms" -lt 8000 ] || fail "holder took $ms ms to stop the command"
grep -q "lock $name (key .*) lost: the server ended the session: terminating connection due to administrator command" "$TMP/h.err" \
	|| { cat "$TMP/h.err"; fail "the message does not say the lock was lost and why"; }
grep -q "SIGTERM to process group" "$TMP/h.err" || { cat "$TMP/h.err"; fail "no word of the SIGTERM"; }
wait_gone "$child" 5 || fail "the command (pid $child) survived the lost lock"
wait_gone "$grandchild" 5 || fail "the command's background child (pid $grandchild) survived"
wait "$wpid" || { cat "$TMP/w"; fail "the waiter did not get the lock"; }
[ "$(cat "$TMP/waiter")" = got ] || fail "the waiter's command did not run"

# A command that ignores SIGTERM is killed after --kill-after.
timeout 60 "$PG" -d "$DSN" run --check-interval 1s --kill-after 1s "$name" -- sh -c \
	"trap '' TERM; echo \$\$ >'$TMP/stubborn'; sleep 50" >"$TMP/s.out" 2>"$TMP/s.err" &
spid=$!
wait_sessions "$name" granted 1
for i in $(seq 1 100); do [ -s "$TMP/stubborn" ] && break; sleep 0.05; done
psql_q "SELECT pg_terminate_backend($(holder_pid "$name"))" >/dev/null
t0=$(now_ns)
wait "$spid"
st=$?
ms=$((($(now_ns) - t0) / 1000000))
[ "$st" -eq 75 ] || { cat "$TMP/s.err"; fail "exited $st, expected 75"; }
[ "$ms" -ge 900 ] || fail "SIGKILL came after $ms ms, before --kill-after"
[ "$ms" -lt 10000 ] || fail "took $ms ms"
wait_gone "$(cat "$TMP/stubborn")" 5 || fail "the stubborn command survived SIGKILL"
[ "$(sessions "$name" all)" -eq 0 ] || fail "lock still held"

# The holder's backend stops answering (SIGSTOP, as in a network partition): the heartbeat's
# deadline declares the lock lost.
timeout 60 "$PG" -d "$DSN" run --check-interval 200ms --heartbeat-timeout 500ms --kill-after 1s "$name" -- \
	sh -c "echo \$\$ >'$TMP/frozen'; sleep 50" >"$TMP/f.out" 2>"$TMP/f.err" &
fpid=$!
wait_sessions "$name" granted 1
for i in $(seq 1 100); do [ -s "$TMP/frozen" ] && break; sleep 0.05; done
bpid=$(holder_pid "$name")
if kill -STOP "$bpid" 2>/dev/null; then
	t0=$(now_ns)
	wait "$fpid"
	st=$?
	ms=$((($(now_ns) - t0) / 1000000))
	kill -CONT "$bpid"
	[ "$st" -eq 75 ] || { cat "$TMP/f.err"; fail "frozen backend: exited $st, expected 75"; }
	[ "$ms" -lt 10000 ] || fail "frozen backend: took $ms ms"
	err=$(cat "$TMP/f.err")
	case $err in *"did not answer a heartbeat within 500 ms"*) ;; *) fail "frozen backend: $err" ;; esac
	wait_gone "$(cat "$TMP/frozen")" 5 || fail "the command survived the frozen backend"
	wait_sessions "$name" all 0
else
	echo "cannot stop the backend (a remote server?): frozen-backend case skipped" >&2
	kill -TERM "$fpid"
	wait "$fpid"
fi
echo ok
