#!/usr/bin/env bash
# chaos.sh [short|long] [PART...] - real faults against real processes on a server of its own.
#
# Parts: elect (leader election under SIGKILL, SIGSTOP/SIGCONT and terminated sessions; no two
# leaders' fenced writes interleave). Each part injects faults at random for a bounded time,
# then checks its promises and prints one summary row; the run ends with a summary table and
# exits non-zero on any violation. The server is its own (scripts/pg-tmp), so that restarting
# it cannot disturb anything else.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
PG=${PGCOORD_BIN:-$top/build/pgcoord}
profile=${1:-short}
shift || true
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(elect)
case "$profile" in
short) ELECT_SECS=20 ;;
long) ELECT_SECS=300 ;;
*) echo "chaos: unknown profile $profile (short or long)" >&2; exit 64 ;;
esac

work=$(mktemp -d /tmp/pgcoord-chaos.XXXXXX)
chmod 711 "$work" # the server runs as another user when we are root
pids_to_kill=()
cleanup() {
	for p in "${pids_to_kill[@]}"; do kill -KILL "$p" 2>/dev/null; done
	"$top/scripts/pg-tmp" destroy "$work/pg" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

DSN=$("$top/scripts/pg-tmp" start "$work/pg") || { echo "chaos: cannot start a server" >&2; exit 1; }
export PGCOORD_DSN="$DSN"
psql_q() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$DSN" -c "$1"; }
"$PG" -q init || { echo "chaos: init failed" >&2; exit 1; }

rows=()
violations=0
row() { rows+=("$(printf '%-8s %s' "$1" "$2")"); }
now_ms() { date +%s%3N; }
rand() { echo $(( RANDOM % $1 )); }

# --- elect -------------------------------------------------------------------------------
# Three candidates with --follow lead in turn; the leader's command writes rows guarded by
# fence_check in a loop. Faults: SIGKILL of a candidate's pgcoord (a new one is started),
# SIGSTOP of a candidate past its TTL then SIGCONT, pg_terminate_backend of a candidate's
# session. Promise: in commit order, the fencing token of the writes never goes down.
chaos_elect() {
	psql_q "CREATE TABLE fenced_writes (seq bigserial PRIMARY KEY, token bigint NOT NULL,
	        at timestamptz NOT NULL DEFAULT clock_timestamp())" || return 1
	local writer="$work/writer.sh"
	cat >"$writer" <<'W'
#!/bin/sh
# A leader's work: fenced writes, one transaction each, until killed.
while :; do
	psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_DSN" >/dev/null 2>&1 <<SQL || true
BEGIN;
SELECT pgcoord.fence_check('chaos', $PGCOORD_FENCE_TOKEN);
INSERT INTO fenced_writes (token) VALUES ($PGCOORD_FENCE_TOKEN);
COMMIT;
SQL
	sleep 0.05
done
W
	chmod +x "$writer"
	local cand=() i
	start_candidate() {
		"$PG" -q elect --ttl 2s --follow chaos -- "$writer" >>"$work/elect.log" 2>&1 &
		cand[$1]=$!
		pids_to_kill+=($!)
		disown $!
	}
	for i in 0 1 2; do start_candidate "$i"; done
	local kills=0 stops=0 terms=0 end=$(( $(date +%s) + ELECT_SECS ))
	while [ "$(date +%s)" -lt "$end" ]; do
		sleep "0.$(( 5 + $(rand 5) ))"
		i=$(rand 3)
		case $(rand 3) in
		0) kill -KILL "${cand[$i]}" 2>/dev/null
		   start_candidate "$i"; kills=$((kills + 1)) ;;
		1) kill -STOP "${cand[$i]}" 2>/dev/null; sleep 2.5; kill -CONT "${cand[$i]}" 2>/dev/null
		   stops=$((stops + 1)) ;;
		2) psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		           WHERE application_name = 'pgcoord/elect' ORDER BY random() LIMIT 1" >/dev/null
		   terms=$((terms + 1)) ;;
		esac
	done
	for i in 0 1 2; do kill -TERM "${cand[$i]}" 2>/dev/null; done
	for i in 0 1 2; do timeout 15 tail --pid="${cand[$i]}" -f /dev/null; kill -KILL "${cand[$i]}" 2>/dev/null; done
	local writes leaders backwards
	writes=$(psql_q "SELECT count(*) FROM fenced_writes")
	leaders=$(psql_q "SELECT count(DISTINCT token) FROM fenced_writes")
	backwards=$(psql_q "SELECT count(*) FROM (SELECT token < max(token) OVER (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS back FROM fenced_writes) s WHERE back")
	local v=$backwards
	[ "$writes" -gt 0 ] || { v=$((v + 1)); echo "chaos elect: no fenced write at all" >&2; }
	[ "$leaders" -gt 1 ] || { v=$((v + 1)); echo "chaos elect: leadership never changed" >&2; }
	violations=$((violations + v))
	row elect "faults: sigkill=$kills sigstop=$stops terminate=$terms; writes=$writes leaders=$leaders stale-writes-committed=$backwards violations=$v"
}

for part in "${parts[@]}"; do
	case "$part" in
	elect) chaos_elect ;;
	*) echo "chaos: unknown part $part" >&2; exit 64 ;;
	esac
done

echo "chaos ($profile profile)"
for r in "${rows[@]}"; do echo "  $r"; done
echo "violations: $violations"
[ "$violations" -eq 0 ]
