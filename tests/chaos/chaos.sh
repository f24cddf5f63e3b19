#!/usr/bin/env bash
# chaos.sh [short|long] [PART...] - real faults against real processes on a server of its own.
#
# Parts: queue (N jobs through 4 workers, two running a command per job and two running an
# in-process C handler, under SIGKILL, SIGSTOP past the lease, terminated sessions and one
# server restart: every job succeeds, each has exactly one result for its final claim, and the
# duplicate executions that at-least-once delivery allows are counted), locks (6 `pgcoord run -w --fence` contenders under terminated sessions and SIGKILL:
# a holder that lost its lock has its command killed within the check interval plus a margin,
# the fenced sink accepts no stale token, nothing is left held), elect (leader election under
# SIGKILL, SIGSTOP/SIGCONT and terminated sessions; no two leaders' fenced writes interleave). Each part injects faults at random for a bounded time,
# then checks its promises and prints one summary row; the run ends with a summary table and
# exits non-zero on any violation. The server is its own (scripts/pg-tmp), so that restarting
# it cannot disturb anything else.
# Not run by default: failover-sync, failover-async (tests/chaos/failover.sh, on a Patroni cluster of its own).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
PG=${PGCOORD_BIN:-$top/build/pgcoord}
CHAOS_WORKER=${PGCOORD_CHAOS_WORKER:-$top/build/tests/chaos_worker}
profile=${1:-short}
shift || true
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(queue locks elect)
case "$profile" in
short) ELECT_SECS=20 LOCK_SECS=20 QUEUE_JOBS=20000 QUEUE_FAULT_SECS=25 ;;
long) ELECT_SECS=180 LOCK_SECS=180 QUEUE_JOBS=1000000 QUEUE_FAULT_SECS=300 ;;
*) echo "chaos: unknown profile $profile (short or long)" >&2; exit 64 ;;
esac

# The failover parts bring a cluster of their own: no server is started for them alone.
need_server=0
for part in "${parts[@]}"; do
	case "$part" in failover-*) ;; *) need_server=1 ;; esac
done

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

PGBIN=$(dirname "$(ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -n 1)")
[ -x "$PGBIN/pg_ctl" ] || PGBIN=$(dirname "$(command -v pg_ctl)")
if [ "$need_server" = 1 ]; then
	DSN=$("$top/scripts/pg-tmp" start "$work/pg") || { echo "chaos: cannot start a server" >&2; exit 1; }
	export PGCOORD_DSN="$DSN"
	"$PG" -q init || { echo "chaos: init failed" >&2; exit 1; }
fi
psql_q() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$DSN" -c "$1"; }

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
	# Two faults in three hit the leader (its holder ID is HOST:PID), the others a candidate
	# picked at random.
	leader_slot() {
		local pid j
		pid=$(psql_q "SELECT split_part(holder, ':', 2) FROM pgcoord.leases
		              WHERE name = 'chaos' AND expires_at > clock_timestamp()")
		for j in 0 1 2; do [ "${cand[$j]}" = "$pid" ] && { echo "$j"; return; }; done
		rand 3
	}
	while [ "$(date +%s)" -lt "$end" ]; do
		sleep "0.$(( 5 + $(rand 5) ))"
		if [ "$(rand 3)" -eq 0 ]; then i=$(rand 3); else i=$(leader_slot); fi
		case $(rand 3) in
		0) kill -KILL "${cand[$i]}" 2>/dev/null
		   start_candidate "$i"; kills=$((kills + 1)) ;;
		1) kill -STOP "${cand[$i]}" 2>/dev/null; sleep 2.5; kill -CONT "${cand[$i]}" 2>/dev/null
		   stops=$((stops + 1)) ;;
		2) psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		           WHERE application_name = 'pgcoord/elect' AND pid IN (SELECT pid FROM pg_locks)
		           ORDER BY random() LIMIT 1" >/dev/null
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


# --- queue -------------------------------------------------------------------------------
# Jobs are enqueued in waves while 4 workers drain them; each handler appends (job id, claim
# token or attempt) to chaos_results in its own transaction. Faults, at random: SIGKILL a
# worker (a new one starts), pg_terminate_backend a worker's session, SIGSTOP a worker past its
# 2 s lease then SIGCONT, and once a fast restart of the server. Promises: at the end every job
# succeeded and nothing is pending or running; each job has exactly one result row for its
# final claim (attempt); executions >= completions, the difference being the duplicates that
# at-least-once delivery allows.
chaos_queue() {
	psql_q "CREATE TABLE chaos_results (job_id bigint NOT NULL, token bigint, attempt int NOT NULL,
	        via text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())" || return 1
	local handler="$work/handler.sh"
	cat >"$handler" <<'H'
#!/bin/sh
# The command handler: one result row per execution, in its own transaction.
exec psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_DSN" -c \
	"INSERT INTO chaos_results (job_id, attempt, via) VALUES ($PGCOORD_JOB_ID, $PGCOORD_JOB_ATTEMPT, 'cmd')" >/dev/null
H
	chmod +x "$handler"
	# A tenth of the jobs, at most 20,000, go to the command workers (a process per job).
	local cmd_jobs=$((QUEUE_JOBS / 10))
	[ "$cmd_jobs" -le 20000 ] || cmd_jobs=20000
	local c_jobs=$((QUEUE_JOBS - cmd_jobs))
	local wpid=() wkind=(cmd cmd c c) i
	start_worker() {
		if [ "${wkind[$1]}" = cmd ]; then
			"$PG" -q worker --queue chaos_cmd --concurrency 4 --lease 2s --backoff 200ms \
				--backoff-max 1s --grace 2s -- "$handler" >>"$work/worker.$1.log" 2>&1 &
		else
			"$CHAOS_WORKER" chaos_c 8 2000 >>"$work/worker.$1.log" 2>&1 &
		fi
		wpid[$1]=$!
		pids_to_kill+=($!)
		disown $!
	}
	for i in 0 1 2 3; do start_worker "$i"; done
	# The producer: waves of enqueues (all or nothing each) while the faults go on.
	(
		# wave QUEUE FROM TO: enqueues one wave; a wave that could not connect (the server is
		# restarting), or lost its session before COMMIT ("nothing was enqueued": the
		# transaction rolled back; or lost it before the transaction began, as the queue was
		# opened or at BEGIN), left nothing behind and is tried again, for up to 30 s. A
		# session lost during COMMIT ("may or may not have been enqueued") is resolved the way
		# a producer would: by counting the wave's jobs, waiting or finished. All or nothing
		# holds or the wave fails: none of them means try again, all of them means done.
		wave() {
			local try out rc n
			for try in $(seq 60); do
				out=$(seq "$2" "$3" | sed 's/.*/{"n":&}/' |
					"$PG" -q queue enqueue "$1" --max-attempts 100 - 2>&1)
				rc=$?
				[ $rc -eq 0 ] && return 0
				case $rc:$out in
				*"may or may not have been enqueued"*)
					n=$(wave_count "$@") || break
					[ "$n" -eq $(($3 - $2 + 1)) ] && return 0
					[ "$n" -eq 0 ] || { out="$out (then $n of the wave's $(($3 - $2 + 1)) jobs found)"; break; }
					sleep 0.5 ;;
				69:*"cannot connect"* | 69:*"nothing was enqueued"* | \
					69:*"server closed the connection unexpectedly"*) sleep 0.5 ;;
				*) break ;;
				esac
			done
			echo "$out" >&2
			echo "wave $w of $1 failed" >&2
		}
		# wave_count QUEUE FROM TO: how many of the wave's jobs exist, once the server answers.
		wave_count() {
			local t q="SELECT (SELECT count(*) FROM pgcoord.jobs WHERE queue = '$1'
			          AND (payload->>'n')::int BETWEEN $2 AND $3)
			        + (SELECT count(*) FROM pgcoord.job_history WHERE queue = '$1'
			          AND (payload->>'n')::int BETWEEN $2 AND $3)"
			for t in $(seq 60); do
				psql_q "$q" 2>/dev/null && return 0
				sleep 0.5
			done
			return 1
		}
		waves=10 w=0
		while [ $w -lt $waves ]; do
			wave chaos_c $((w * c_jobs / waves + 1)) $(((w + 1) * c_jobs / waves))
			wave chaos_cmd $((w * cmd_jobs / waves + 1)) $(((w + 1) * cmd_jobs / waves))
			w=$((w + 1))
			sleep 1
		done
	) >"$work/producer.log" 2>&1 &
	local producer=$!
	pids_to_kill+=($producer)
	local kills=0 stops=0 terms=0 restarts=0 restart_at=$(( QUEUE_FAULT_SECS / 2 ))
	local t0=$(date +%s) end=$(( $(date +%s) + QUEUE_FAULT_SECS ))
	while [ "$(date +%s)" -lt "$end" ]; do
		sleep "0.$(( 5 + $(rand 5) ))"
		i=$(rand 4)
		if [ "$restarts" -eq 0 ] && [ $(( $(date +%s) - t0 )) -ge "$restart_at" ]; then
			local owner
			owner=$(stat -c %U "$work/pg/data")
			if [ "$(id -u)" -eq 0 ]; then
				runuser -u "$owner" -- "$PGBIN/pg_ctl" -D "$work/pg/data" -w -t 60 -m fast \
					-o "-p $(cat "$work/pg/port")" restart >/dev/null 2>&1
			else
				"$PGBIN/pg_ctl" -D "$work/pg/data" -w -t 60 -m fast -o "-p $(cat "$work/pg/port")" \
					restart >/dev/null 2>&1
			fi
			restarts=1
			continue
		fi
		case $(rand 3) in
		0) kill -KILL "${wpid[$i]}" 2>/dev/null; start_worker "$i"; kills=$((kills + 1)) ;;
		1) kill -STOP "${wpid[$i]}" 2>/dev/null; sleep 3; kill -CONT "${wpid[$i]}" 2>/dev/null
		   stops=$((stops + 1)) ;;
		2) psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		           WHERE application_name IN ('pgcoord/worker', 'pgcoord/chaos-worker')
		           ORDER BY random() LIMIT 1" >/dev/null 2>&1
		   terms=$((terms + 1)) ;;
		esac
	done
	timeout 120 tail --pid="$producer" -f /dev/null
	# Let the workers finish: bounded.
	# At least 5 minutes, and 1 s per 500 jobs: a million jobs with one fsync'd results
	# transaction each drain at a few hundred to a few thousand per second on a small machine.
	local left=1 waited=0 bound=$((QUEUE_JOBS / 500))
	[ "$bound" -ge 300 ] || bound=300
	while [ "$waited" -lt "$bound" ]; do
		left=$(psql_q "SELECT count(*) FROM pgcoord.jobs" 2>/dev/null || echo 1)
		[ "$left" = 0 ] && break
		sleep 1
		waited=$((waited + 1))
	done
	for i in 0 1 2 3; do kill -TERM "${wpid[$i]}" 2>/dev/null; done
	for i in 0 1 2 3; do timeout 20 tail --pid="${wpid[$i]}" -f /dev/null; kill -KILL "${wpid[$i]}" 2>/dev/null; done
	local total succeeded notdone wrong executions dups
	total=$(psql_q "SELECT count(*) FROM pgcoord.job_history WHERE queue IN ('chaos_c', 'chaos_cmd')")
	succeeded=$(psql_q "SELECT count(*) FROM pgcoord.job_history WHERE queue IN ('chaos_c', 'chaos_cmd') AND status = 'succeeded'")
	notdone=$(psql_q "SELECT count(*) FROM pgcoord.jobs")
	# Exactly one result for the final claim of every succeeded job.
	wrong=$(psql_q "SELECT count(*) FROM pgcoord.job_history h
	                LEFT JOIN (SELECT job_id, attempt, count(*) AS n FROM chaos_results
	                           GROUP BY job_id, attempt) r ON r.job_id = h.id AND r.attempt = h.attempts
	                WHERE h.queue IN ('chaos_c', 'chaos_cmd') AND coalesce(r.n, 0) <> 1")
	executions=$(psql_q "SELECT count(*) FROM chaos_results")
	dups=$((executions - succeeded))
	local v=$(( wrong + notdone ))
	[ "$total" -eq "$QUEUE_JOBS" ] || { v=$((v + 1)); echo "chaos queue: $total of $QUEUE_JOBS jobs finished" >&2; cat "$work/producer.log" >&2; }
	[ "$succeeded" -eq "$total" ] || { v=$((v + 1)); echo "chaos queue: $((total - succeeded)) jobs did not succeed" >&2; }
	[ "$dups" -ge 0 ] || { v=$((v + 1)); echo "chaos queue: fewer executions ($executions) than completions ($succeeded)" >&2; }
	violations=$((violations + v))
	row queue "faults: sigkill=$kills sigstop=$stops terminate=$terms restart=$restarts; jobs=$QUEUE_JOBS succeeded=$succeeded left=$notdone executions=$executions duplicates=$dups final-claim-mismatches=$wrong violations=$v"
}

# --- locks -------------------------------------------------------------------------------
# Six contenders run `pgcoord run -w --fence` on one name in a loop; each command logs its
# start and end with its token and writes fenced rows. Faults: pg_terminate_backend of the
# holder's session, SIGKILL of a contender's pgcoord. Promises: the command of a holder whose
# session was terminated is killed within the check interval plus a margin (2 s here, on a
# loaded 2-core machine); no write with a stale token commits; no advisory lock is left held.
LOCK_CHECK_MS=200
LOCK_MARGIN_MS=2000
chaos_locks() {
	psql_q "CREATE TABLE lock_writes (seq bigserial PRIMARY KEY, token bigint NOT NULL)" || return 1
	local log="$work/locks.log" job="$work/lockjob.sh"
	: >"$log"
	cat >"$job" <<'J'
#!/bin/bash
# One holder's work: log start, write fenced rows for a while, log end (or being killed).
ms() { date +%s%3N; }
trap 'echo "killed $PGCOORD_FENCE_TOKEN $(ms)" >>"$CHAOS_LOG"; exit 143' TERM
echo "start $PGCOORD_FENCE_TOKEN $(ms)" >>"$CHAOS_LOG"
for i in 1 2 3 4 5 6; do
	psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_DSN" >/dev/null 2>&1 <<SQL
BEGIN;
SELECT pgcoord.fence_check('chaos-lock', $PGCOORD_FENCE_TOKEN);
INSERT INTO lock_writes (token) VALUES ($PGCOORD_FENCE_TOKEN);
COMMIT;
SQL
	sleep 0.1 & wait $!
done
echo "end $PGCOORD_FENCE_TOKEN $(ms)" >>"$CHAOS_LOG"
J
	chmod +x "$job"
	local end=$(( $(date +%s) + LOCK_SECS )) i
	local slot=()
	contender() {
		while [ "$(date +%s)" -lt "$end" ]; do
			CHAOS_LOG="$log" "$PG" run -w 30s --fence --check-interval "${LOCK_CHECK_MS}ms" \
				--kill-after 1s chaos-lock -- "$job" >>"$work/run.log" 2>&1
		done
	}
	for i in 0 1 2 3 4 5; do
		contender 2>/dev/null &
		slot[$i]=$!
		pids_to_kill+=($!)
	done
	local terms=0 kills=0 detect_max=0 late=0 missed=0
	while [ "$(date +%s)" -lt "$end" ]; do
		sleep "0.$(( 3 + $(rand 6) ))"
		if [ "$(rand 3)" -eq 0 ]; then
			# SIGKILL a pgcoord that is running a command: its command must not outlive it. Only
			# ours: others on the machine may run the same command line.
			local victim
			victim=$(pgrep -f "pgcoord run -w 30s --fence .*-- $job\$" | shuf -n 1)
			[ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null && kills=$((kills + 1))
			continue
		fi
		# Terminate the holder's session, then wait for its command to be killed.
		local tok t0 line
		tok=$(awk '$1 == "start" {s[$2] = 1} $1 != "start" {delete s[$2]} END {for (t in s) print t}' "$log" | sort -n | tail -n 1)
		[ -n "$tok" ] || continue
		t0=$(now_ms)
		local n
		n=$(psql_q "SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
		            JOIN pg_stat_activity a ON a.pid = l.pid
		            WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'pgcoord/run'")
		[ "$n" -ge 1 ] || continue
		terms=$((terms + 1))
		line=""
		for i in $(seq 1 50); do
			line=$(awk -v t="$tok" '$2 == t && ($1 == "killed" || $1 == "end")' "$log" | head -n 1)
			[ -n "$line" ] && break
			sleep 0.1
		done
		case "$line" in
		killed*)
			local d=$(( ${line##* } - t0 ))
			[ "$d" -gt "$detect_max" ] && detect_max=$d
			[ "$d" -le $((LOCK_CHECK_MS + LOCK_MARGIN_MS)) ] || late=$((late + 1)) ;;
		end*) ;; # it finished on its own just then
		*) missed=$((missed + 1)); echo "chaos locks: token $tok still running 5 s after its session was terminated" >&2 ;;
		esac
	done
	for i in 0 1 2 3 4 5; do timeout 60 tail --pid="${slot[$i]}" -f /dev/null; done
	local held runs backwards
	sleep 0.5
	held=$(psql_q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
	runs=$(grep -c '^start' "$log")
	backwards=$(psql_q "SELECT count(*) FROM (SELECT token < max(token) OVER (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS back FROM lock_writes) s WHERE back")
	local overlap
	# Two commands with tokens a < b: b must not start before a ended or was killed.
	overlap=$(awk '$1 == "start" {st[$2] = $3} $1 != "start" {en[$2] = $3}
		END {n = 0; for (a in st) for (b in st) if (a + 0 < b + 0 && (a in en) && st[b] < en[a] - 0) n++; print n}' "$log")
	local v=$((late + missed + backwards + held))
	[ "$runs" -gt 6 ] || { v=$((v + 1)); echo "chaos locks: only $runs commands ran" >&2; }
	violations=$((violations + v))
	row locks "faults: terminate=$terms sigkill=$kills; commands=$runs max-loss-detection=${detect_max}ms late=$late missed=$missed stale-writes-committed=$backwards overlaps-while-fenced=$overlap held-at-end=$held violations=$v"
}

# --- failover-sync, failover-async ------------------------------------------------------------
# tests/chaos/failover.sh runs the part on a cluster of its own; its summary rows join ours.
chaos_failover() {
	local out="$work/failover-$1.out" st line
	PGCOORD_BIN="$PG" "$top/tests/chaos/failover.sh" "$profile" "$1" 2>&1 | tee "$out"
	st=${PIPESTATUS[0]}
	[ "$st" -eq 77 ] && { row "failover-$1" "skipped: $(tail -n 1 "$out")"; return; }
	while IFS= read -r line; do rows+=("${line#  }"); done < <(sed -n '/^chaos failover (/,/^violations:/p' "$out" | grep '^  ')
	line=$(sed -n 's/^violations: //p' "$out")
	[ "$st" -eq 0 ] || [ "${line:-0}" -gt 0 ] || line=1
	violations=$((violations + ${line:-0}))
}

for part in "${parts[@]}"; do
	case "$part" in
	failover-sync) chaos_failover sync ;;
	failover-async) chaos_failover async ;;
	queue) chaos_queue ;;
	locks) chaos_locks ;;
	elect) chaos_elect ;;
	*) echo "chaos: unknown part $part" >&2; exit 64 ;;
	esac
done

echo "chaos ($profile profile)"
for r in "${rows[@]}"; do echo "  $r"; done
echo "violations: $violations"
[ "$violations" -eq 0 ]
