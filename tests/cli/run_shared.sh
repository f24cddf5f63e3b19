# run_shared.sh - 4 shared holders run together; an exclusive waiter runs after all of them
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/run_lib.sh"
name="shared-$$"
pids=()
# Each shared holder keeps its lock until the test has seen all four holding and the
# exclusive one waiting (at most 60 s), however slowly the processes start.
for i in 1 2 3 4; do
	timeout 120 "$PG" -d "$DSN" run -s -n "$name" -- sh -c \
		"a=\$(date +%s%N); n=0; while [ ! -f '$TMP/go' ] && [ \$n -lt 600 ]; do sleep 0.1; n=\$((n + 1)); done
		 sleep 0.2; b=\$(date +%s%N); echo \"\$a \$b\" >>'$TMP/shared'" >"$TMP/s.$i" 2>&1 &
	pids+=($!)
done
wait_sessions "$name" granted 4
timeout 120 "$PG" -d "$DSN" run -w 90 "$name" -- sh -c "date +%s%N >'$TMP/excl'" >"$TMP/x" 2>&1 &
xpid=$!
wait_sessions "$name" waiting 1
touch "$TMP/go"
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || { cat "$TMP/s.$((i + 1))"; fail "shared holder $((i + 1)) failed"; }
done
wait "$xpid" || { cat "$TMP/x"; fail "exclusive waiter failed"; }
[ "$(wc -l <"$TMP/shared")" -eq 4 ] || fail "not all shared holders ran"
latest_start=$(awk '{ print $1 }' "$TMP/shared" | sort -n | tail -n 1)
earliest_end=$(awk '{ print $2 }' "$TMP/shared" | sort -n | head -n 1)
last_end=$(awk '{ print $2 }' "$TMP/shared" | sort -n | tail -n 1)
[ "$latest_start" -lt "$earliest_end" ] || fail "the shared holders did not run together"
[ "$(cat "$TMP/excl")" -ge "$last_end" ] || fail "the exclusive command started before the last shared one ended"
echo ok
