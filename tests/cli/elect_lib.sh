# elect_lib.sh - helpers for the tests of pgcoord elect and pgcoord lease (sourced).
# Each test gets its own schema; candidates' children log "start PID TOKEN TIME" and
# "stop PID TOKEN TIME" with CLOCK_REALTIME (date +%s.%N) in $LOG.
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN="$PGCOORD_TEST_DSN"
SCHEMA="pgc_elect_$$"
LOG="$TMP/log"
: >"$LOG"
# Every process this test starts carries this mark in its environment, so that a pid another
# process has taken since (on a busy machine pids are soon reused) is not mistaken for ours.
export PGCOORD_TEST_MARK="elect-$$"
ours() { grep -qzx "PGCOORD_TEST_MARK=$PGCOORD_TEST_MARK" "/proc/$1/environ" 2>/dev/null; }
"$PG" init --schema "$SCHEMA" >/dev/null || fail "pgcoord init failed"

elect_cleanup() {
	local p
	for p in $(jobs -p); do kill -TERM "$p" 2>/dev/null; done
	sleep 0.3
	for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
	# Children that outlived everything (a failed test) go too.
	for p in $(awk '$1 == "start" { print $2 }' "$LOG" 2>/dev/null); do ours "$p" && kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	psql -X -q "$PGCOORD_TEST_DSN" -c "DROP SCHEMA IF EXISTS \"$SCHEMA\" CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap elect_cleanup EXIT

# The child: logs start, runs for $2 seconds (0: until stopped), logs stop on exit or SIGTERM.
cat >"$TMP/child.sh" <<'SH'
#!/bin/sh
log=$1
echo "start $$ $PGCOORD_FENCE_TOKEN $(date +%s.%N)" >>"$log"
# A killed leader's command may get SIGTERM twice (its parent's death signal and the watchdog's
# group kill): the second must not interrupt the first's date, so the handler ignores it.
trap 'trap "" TERM; echo "stop $$ $PGCOORD_FENCE_TOKEN $(date +%s.%N) term" >>"$log"; exit 0' TERM
if [ "$2" = 0 ]; then
	while :; do sleep 0.05; done
fi
sleep "$2"
echo "stop $$ $PGCOORD_FENCE_TOKEN $(date +%s.%N) exit" >>"$log"
SH
chmod +x "$TMP/child.sh"
CHILD="$TMP/child.sh"

now() { date +%s.%N; }
# wait_until SECONDS CMD... : polls CMD every 50 ms; fails the test after SECONDS.
wait_until() {
	local limit=$1 i
	shift
	for i in $(seq 1 $(( limit * 20 ))); do
		"$@" && return 0
		sleep 0.05
	done
	return 1
}
starts() { awk '$1 == "start"' "$LOG" | wc -l; }
has_starts() { [ "$(starts)" -ge "$1" ]; }
# The last started child: its pid and token.
last_child_pid() { awk '$1 == "start" { p = $2 } END { print p }' "$LOG"; }
last_token() { awk '$1 == "start" { t = $3 } END { print t }' "$LOG"; }
# The pgcoord pid of the current holder of lease $1 (the default holder is HOST:PID).
holder_pid() { psql_q "SELECT split_part(holder, ':', 2) FROM \"$SCHEMA\".leases WHERE name = '$1'"; }
alive() { kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ] && ours "$1"; }
dead() { ! alive "$1"; }

# check_log MARGIN: children's intervals never overlap by more than MARGIN seconds, and tokens
# grow strictly in the order the children started. Every started child must have stopped.
check_log() {
	awk -v margin="$1" '
		$1 == "start" { n++; pid[n] = $2; tok[n] = $3; s[n] = $4; idx[$2] = n }
		$1 == "stop" && $4 ~ /^[0-9]/ && !($2 in done) { e[idx[$2]] = $4; done[$2] = 1 }
		END {
			for (i = 1; i <= n; i++) {
				if (e[i] == "") { printf "child %s (token %s) never stopped\n", pid[i], tok[i]; bad = 1 }
				if (i > 1) {
					if (tok[i] + 0 <= tok[i-1] + 0) { printf "token %s after %s\n", tok[i], tok[i-1]; bad = 1 }
					if (s[i] + margin < e[i-1]) {
						printf "child %s started at %s before child %s stopped at %s\n", pid[i], s[i], pid[i-1], e[i-1]; bad = 1
					}
				}
			}
			exit bad
		}' "$LOG" || { cat "$LOG"; fail "children overlap or tokens out of order"; }
}
