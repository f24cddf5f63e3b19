# run_lib.sh - helpers for the tests of pgcoord run and pgcoord lock (sourced after lib.sh)
skip_without_pg
DSN=$PGCOORD_TEST_DSN
pgc() { "$PG" -d "$DSN" "$@"; }
# sessions NAME [granted|waiting|all]: how many sessions hold / wait for / touch the lock NAME.
# (An observer, so never under valgrind: it must stay quick.)
sessions() {
	"$PGCOORD_BIN" -d "$DSN" --json lock status "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
want = sys.argv[1]
print(sum(1 for s in d["sessions"] if want == "all" or s["granted"] == (want == "granted")))' "${2:-all}"
}
# wait_sessions NAME KIND COUNT: waits (at most 60 s) until exactly COUNT sessions match.
wait_sessions() {
	local n end=$((SECONDS + 60))
	while :; do
		n=$(sessions "$1" "$2")
		[ "$n" -eq "$3" ] 2>/dev/null && return 0
		[ $SECONDS -lt $end ] || break
		sleep 0.05
	done
	fail "lock $1: $n $2 sessions after 60 s, expected $3"
}
# The pid of the backend holding NAME.
holder_pid() {
	"$PGCOORD_BIN" -d "$DSN" --json lock status "$1" | python3 -c '
import json, sys
print([s["pid"] for s in json.load(sys.stdin)["sessions"] if s["granted"]][0])'
}
now_ns() { date +%s%N; }
# wait_gone PID SECONDS: true once PID no longer exists.
wait_gone() {
	local i
	for i in $(seq 1 $(($2 * 20))); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.05
	done
	return 1
}
