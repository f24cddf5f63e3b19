# elect_three.sh - three candidates run their command one at a time, with growing tokens, and
# each clean exit hands over at once (well within a poll interval, long before the TTL).
. "$(dirname "$0")/elect_lib.sh"

pids=""
for i in 1 2 3; do
	timeout 60 "$PG" elect --schema "$SCHEMA" --ttl 10s --renew-every 3s three -- "$CHILD" "$LOG" 0.7 \
		2>"$TMP/err$i" &
	pids="$pids $!"
done
for p in $pids; do
	wait "$p"
	rc=$?
	[ "$rc" -eq 0 ] || { cat "$TMP"/err*; cat "$LOG"; fail "a candidate exited $rc, expected the command's 0"; }
done
[ "$(starts)" -eq 3 ] || { cat "$LOG"; fail "expected 3 runs of the command"; }
check_log 0
# Handover after a clean exit: next start within one poll interval (3 s) of the stop; with
# the release notification it is normally a few milliseconds.
awk '$1 == "start" { s[++n] = $4 } $1 == "stop" { e[++m] = $4 }
	END { for (i = 2; i <= n; i++) if (s[i] - e[i-1] > 3) { printf "handover took %.3f s\n", s[i] - e[i-1]; exit 1 } }' "$LOG" ||
	{ cat "$LOG"; fail "handover slower than one poll interval"; }
grep -q "elected for \"three\" with token" "$TMP/err1" || { cat "$TMP/err1"; fail "no election message"; }
# Everything released: the lease shows the last token, not held.
run 0 "$PG" --json lease show --schema "$SCHEMA" three
out_has '"token":3'
out_has '"held":false'
