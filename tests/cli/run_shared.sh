# run_shared.sh - 4 shared holders run together; an exclusive waiter runs after all of them
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/run_lib.sh"
name="shared-$$"
pids=()
for i in 1 2 3 4; do
	timeout 60 "$PG" -d "$DSN" run -s -n "$name" -- sh -c \
		"a=\$(date +%s%N); sleep 2; b=\$(date +%s%N); echo \"\$a \$b\" >>'$TMP/shared'" >"$TMP/s.$i" 2>&1 &
	pids+=($!)
done
wait_sessions "$name" granted 4
timeout 60 "$PG" -d "$DSN" run -w 30 "$name" -- sh -c "date +%s%N >'$TMP/excl'" >"$TMP/x" 2>&1 &
xpid=$!
wait_sessions "$name" waiting 1
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
