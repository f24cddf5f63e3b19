# run_contention.sh - 8 pgcoord run processes on one name: with -n exactly one runs the
# command; with -w all run, one at a time, their run intervals never overlapping
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/run_lib.sh"
name="contend-$$"

contend() { # EXPECTED-CONFLICT-CODE RUN-OPTIONS...
	local want=$1 i
	shift
	: >"$TMP/ran"
	rm -f "$TMP"/rc.*
	local pids=()
	# The command that runs holds the lock until the seven others have given up (at most 60 s),
	# so that "started together" holds however slow the machine (or valgrind) is.
	for i in 1 2 3 4 5 6 7 8; do
		( timeout 90 "$PG" -d "$DSN" run "$@" "$name" -- sh -c "echo $i >>'$TMP/ran'; n=0
			while [ \$(ls '$TMP' | grep -c '^rc\.') -lt 7 ] && [ \$n -lt 600 ]; do sleep 0.1; n=\$((n + 1)); done" \
			>"$TMP/out.$i" 2>&1
		  echo $? >"$TMP/rc.$i" ) &
		pids+=($!)
	done
	local ok=0 conflict=0 other=0
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}"
		case $(cat "$TMP/rc.$((i + 1))") in
		0) ok=$((ok + 1)) ;;
		"$want") conflict=$((conflict + 1)) ;;
		*) other=$((other + 1)); cat "$TMP/out.$((i + 1))" ;;
		esac
	done
	[ "$ok" -eq 1 ] || fail "$ok processes ran the command, expected exactly 1"
	[ "$conflict" -eq 7 ] || fail "$conflict processes exited $want, expected 7 (others: $other)"
	[ "$(wc -l <"$TMP/ran")" -eq 1 ] || fail "the command ran $(wc -l <"$TMP/ran") times"
}
contend 1 -n
contend 3 -n -E 3
[ "$(sessions "$name")" -eq 0 ] || fail "lock still held after the -n runs"

# With a deadline all 8 run, one at a time.
: >"$TMP/intervals"
pids=()
for i in 1 2 3 4 5 6 7 8; do
	timeout 90 "$PG" -d "$DSN" run -w 60 "$name" -- sh -c \
		"a=\$(date +%s%N); sleep 0.2; b=\$(date +%s%N); echo \"\$a \$b\" >>'$TMP/intervals'" \
		>"$TMP/w.$i" 2>&1 &
	pids+=($!)
done
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || { cat "$TMP/w.$((i + 1))"; fail "waiting run $((i + 1)) failed"; }
done
[ "$(wc -l <"$TMP/intervals")" -eq 8 ] || fail "$(wc -l <"$TMP/intervals") of 8 commands ran"
sort -n "$TMP/intervals" | awk 'NR > 1 && $1 < prev { print "overlap: started " $1 " before the previous ended " prev; bad = 1 }
	{ prev = $2 } END { exit bad }' || fail "run intervals overlap"
[ "$(sessions "$name")" -eq 0 ] || fail "lock still held after the waiting runs"
echo ok
