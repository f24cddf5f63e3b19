# run_timeout.sh - a waiter with -w 1 behind a holder exits 1 after about a second and leaves
# no request behind in pg_locks
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/run_lib.sh"
name="timeout-$$"
timeout 60 "$PG" -d "$DSN" run "$name" -- sleep 30 >"$TMP/h" 2>&1 &
hpid=$!
wait_sessions "$name" granted 1
t0=$(now_ns)
run 1 timeout 30 "$PG" -d "$DSN" run -w 1 "$name" -- true
ms=$((($(now_ns) - t0) / 1000000))
[ "$ms" -ge 900 ] || fail "gave up after $ms ms, before the 1 s deadline"
[ "$ms" -lt 10000 ] || fail "gave up after $ms ms"
[ -s "$TMP/err" ] && { cat "$TMP/err"; fail "a timeout without -v must be silent"; }
[ "$(sessions "$name" waiting)" -eq 0 ] || fail "a waiting request was left behind"
[ "$(sessions "$name" all)" -eq 1 ] || fail "pg_locks shows more than the holder"
# -v says why; -E picks the code; -w 0 is -n.
run 4 timeout 30 "$PG" -d "$DSN" run -v -w 300ms -E 4 "$name" -- true
err_has "timed out after 300 ms waiting for lock $name (key "
run 1 timeout 30 "$PG" -d "$DSN" run -v -w 0 "$name" -- true
err_has "is held by another session"
[ "$(sessions "$name" all)" -eq 1 ] || fail "pg_locks shows more than the holder"
# A waiter interrupted by a signal leaves nothing behind either.
timeout 60 "$PG" -d "$DSN" run "$name" -- true >"$TMP/i" 2>&1 &
ipid=$!
wait_sessions "$name" waiting 1
kill -INT "$ipid"
wait "$ipid"
st=$?
[ "$st" -eq 130 ] || fail "interrupted waiter exited $st, expected 130"
[ "$(sessions "$name" waiting)" -eq 0 ] || fail "the interrupted waiter left its request behind"
kill -TERM "$hpid"
wait "$hpid"
st=$?
[ "$st" -eq 143 ] || fail "holder exited $st after SIGTERM, expected 143"
[ "$(sessions "$name" all)" -eq 0 ] || fail "lock still held"
echo ok
