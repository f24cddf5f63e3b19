#!/usr/bin/env bash
# failover.sh [short|long] sync|async - the failover part of the chaos suite: real primary
# changes of a Patroni cluster of its own (scripts/pg-ha, two nodes, synchronous or
# asynchronous replication) under load from every kind of pgcoord client at once, all through
# the multi-host DSN. Also run as tests/chaos/chaos.sh PROFILE failover-sync|failover-async.
#
# Load: 3 `pgcoord worker` processes drain a queue whose jobs each record their execution in a
# results table, while a producer keeps enqueueing (one job, then a file of three, in turn; each
# job has a unique payload key) and writes down what it was told: acknowledged, or the exit
# status and whether it said "nothing was enqueued" or "may or may not have been enqueued";
# 2 `pgcoord elect --follow` candidates whose leader makes fenced writes; 3 `pgcoord run -w
# --fence` contenders in a loop whose commands make fenced writes and log start, end or being
# killed with their token.
# Faults: a switchover, a crash failover (pg-ha failover: SIGKILL of the leader's Patroni and
# postmaster) and the old node's rejoin; once in the short profile, three rounds in the long.
# Promises checked at the end, one summary row and a non-zero exit on any violation:
# - a failed enqueue exits 69 or 75, and its jobs are all there or none (no half batch); a
#   failure that did not say "may or may not have been enqueued" left none there; no job
#   appears that the producer did not ask for;
# - sync: every acknowledged job succeeded and is exactly once in job_history, with exactly one
#   result for its final claim; async: the same, except that acknowledged jobs the new primary
#   never received are counted and reported as lost (what asynchronous replication allows);
#   in both, executions beyond one per job are counted as duplicates, and no job is left
#   pending or running;
# - the tokens of elect leaders and run holders, as logged and as written in the fenced tables,
#   strictly increase per name across the whole run, promotions included; no stale fenced
#   write commits; a run holder whose lock vanished with its primary has its command killed
#   within the bound of the check interval, the heartbeat timeout and a margin for a loaded
#   machine (5 s), counted from the kill, or for a switchover from the last time the old
#   primary answered before it refused connections; run and elect exit only with the
#   documented statuses; nothing is held or running at the end.
# Measured and printed: per fault, the time from the new primary's first write (pg-ha's
# last-switchover and last-failover) to the first job completed there, and how long the run
# holders took to see their lock gone; per change of leader, the gap from the old leader's last
# fenced write to the new one's first. Without Patroni or etcd it exits 77 (1 with PGCOORD_CI=1).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
PG=${PGCOORD_BIN:-$top/build/pgcoord}
HA=$top/scripts/pg-ha
case "${1:-}" in
sync | async) profile=short mode=$1 ;;
*) profile=${1:-short} mode=${2:-} ;;
esac
case "$profile" in
short) ROUNDS=1 BACKLOG=100 SETTLE_SECS=4 ;;
long) ROUNDS=3 BACKLOG=1000 SETTLE_SECS=15 ;;
*) echo "chaos failover: unknown profile $profile (short or long)" >&2; exit 64 ;;
esac
case "$mode" in
sync | async) ;;
*) echo "usage: failover.sh [short|long] sync|async" >&2; exit 64 ;;
esac
for tool in patroni:patroni etcd:etcd-server etcdctl:etcd-client; do
	if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
		echo "chaos failover: ${tool%%:*} is not installed (Debian package ${tool#*:})" >&2
		[ "${PGCOORD_CI:-}" = 1 ] && exit 1
		exit 77
	fi
done

work=$(mktemp -d /tmp/pgcoord-failover.XXXXXX)
chmod 711 "$work" # the cluster runs as another user when we are root
scripts="$work/(handler|writer|lockjob)\.sh"
loops=()
cleanup() {
	local p
	touch "$work/stop"
	# Everything this run started but the cluster names one of its scripts on its command line.
	pkill -TERM -f "$scripts" 2>/dev/null
	for p in "${loops[@]}"; do timeout 15 tail --pid="$p" -f /dev/null; kill -KILL "$p" 2>/dev/null; done
	pkill -KILL -f "$scripts" 2>/dev/null
	PGHA_QUIET=1 "$HA" stop "$work/ha" >/dev/null 2>&1 || echo "chaos failover: pg-ha stop failed" >&2
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

now_ms() { date +%s%3N; }
t_start=$(now_ms)
note() { printf '[%6.1f s] %s\n' "$(( $(now_ms) - t_start ))e-3" "$*"; }
# ms EPOCH-SECONDS: the same instant in epoch milliseconds.
ms() { awk -v s="$1" 'BEGIN { printf "%.0f\n", s * 1000 }'; }

mkdir "$work/ha"
note "pg-ha start --nodes 2 --$mode"
DSN=$(PGHA_QUIET=1 "$HA" start "$work/ha" --nodes 2 "--$mode") || { echo "chaos failover: pg-ha start failed" >&2; exit 1; }
export PGCOORD_DSN="$DSN"
hq() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$DSN" -c "$1"; }
"$PG" -q init || { echo "chaos failover: init failed" >&2; exit 1; }
hq "CREATE TABLE results (id bigserial PRIMARY KEY, job bigint NOT NULL, attempt int NOT NULL,
                          port int NOT NULL DEFAULT inet_server_port(),
                          at timestamptz NOT NULL DEFAULT clock_timestamp());
    CREATE TABLE fenced_writes (seq bigserial PRIMARY KEY, token bigint NOT NULL,
                                at timestamptz NOT NULL DEFAULT clock_timestamp());
    CREATE TABLE lock_writes (seq bigserial PRIMARY KEY, token bigint NOT NULL,
                              at timestamptz NOT NULL DEFAULT clock_timestamp());
    CREATE TABLE told (k bigint PRIMARY KEY, batch bigint NOT NULL, size int NOT NULL,
                       what text NOT NULL, rc int NOT NULL, at_ms bigint NOT NULL)" ||
	{ echo "chaos failover: cannot create the tables" >&2; exit 1; }
rows=()
violations=0
row() { rows+=("$(printf '%-15s %s' "$1" "$2")"); }

# --- the load ----------------------------------------------------------------------------
# The producer's log: "ack FROM TO MS", or "fail FROM TO STATUS WHAT MS MESSAGE" where WHAT is
# unknown ("may or may not have been enqueued"), none ("nothing was enqueued") or unsaid, and
# MS the time of the answer.
seq 1 "$BACKLOG" | sed 's/.*/{"k":&}/' >"$work/backlog"
"$PG" -q queue enqueue fq --max-attempts 100 --file "$work/backlog" ||
	{ echo "chaos failover: the backlog was not enqueued" >&2; exit 1; }
echo "ack 1 $BACKLOG $(now_ms)" >"$work/producer.log"
producer() {
	local n=$BACKLOG it=0 from out rc what
	while [ ! -e "$work/stop-producer" ]; do
		it=$((it + 1))
		from=$((n + 1))
		if [ $((it % 2)) -eq 1 ]; then
			n=$from
			out=$("$PG" -q queue enqueue fq --max-attempts 100 --payload "{\"k\":$n}" 2>&1)
		else
			n=$((n + 3))
			out=$(seq "$from" "$n" | sed 's/.*/{"k":&}/' | "$PG" -q queue enqueue fq --max-attempts 100 - 2>&1)
		fi
		rc=$?
		if [ $rc -eq 0 ]; then
			echo "ack $from $n $(now_ms)"
		else
			case $out in
			*"may or may not have been enqueued"*) what=unknown ;;
			*"nothing was enqueued"*) what=none ;;
			*) what=unsaid ;;
			esac
			echo "fail $from $n $rc $what $(now_ms) $(echo "$out" | tr '\n' ' ')"
		fi
		sleep 0.2
	done
}
producer >>"$work/producer.log" 2>&1 &
loops+=($!)

cat >"$work/handler.sh" <<'H'
#!/bin/sh
# One job: its execution recorded on whichever node is the primary, in its own transaction.
cat >/dev/null
exec psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_DSN" \
	-c "INSERT INTO results (job, attempt) VALUES ($PGCOORD_JOB_ID, $PGCOORD_JOB_ATTEMPT)" >/dev/null
H
worker_pids=()
for i in 1 2 3; do
	"$PG" -q worker --queue fq -c 2 --lease 4s --backoff 200ms --backoff-max 1s --grace 10s \
		-- sh "$work/handler.sh" 2>>"$work/worker.$i.log" &
	worker_pids+=($!)
done

# The leader's work: it logs its token once, then writes fenced rows until stopped.
cat >"$work/writer.sh" <<'W'
#!/bin/sh
echo "lead $PGCOORD_FENCE_TOKEN $(date +%s%3N)" >>"$CHAOS_DIR/elect-terms.log"
trap 'echo "stop $PGCOORD_FENCE_TOKEN $(date +%s%3N)" >>"$CHAOS_DIR/elect-terms.log"; exit 143' TERM
while :; do
	psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_DSN" >/dev/null 2>&1 <<SQL
BEGIN;
SELECT pgcoord.fence_check('chaos-elect', $PGCOORD_FENCE_TOKEN);
INSERT INTO fenced_writes (token) VALUES ($PGCOORD_FENCE_TOKEN);
COMMIT;
SQL
	sleep 0.1 & wait $!
done
W
export CHAOS_DIR=$work
candidate() {
	local rc
	while [ ! -e "$work/stop" ]; do
		"$PG" -q elect --ttl 3s --follow chaos-elect -- sh "$work/writer.sh" 2>>"$work/elect.$1.log"
		rc=$?
		[ -e "$work/stop" ] || echo "exit $rc $(now_ms)" >>"$work/elect-exits.log"
		sleep 0.2
	done
}
for i in 1 2; do
	candidate "$i" &
	loops+=($!)
done

# A holder's work: about 3 s of fenced writes, its start, end or death logged with its token.
LOCK_CHECK_MS=200
LOCK_HEARTBEAT_MS=2000
LOCK_MARGIN_MS=5000
cat >"$work/lockjob.sh" <<'J'
#!/bin/bash
ms() { date +%s%3N; }
trap 'echo "killed $PGCOORD_FENCE_TOKEN $(ms)" >>"$CHAOS_DIR/locks.log"; exit 143' TERM
echo "start $PGCOORD_FENCE_TOKEN $(ms)" >>"$CHAOS_DIR/locks.log"
for i in $(seq 15); do
	psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_DSN" >/dev/null 2>&1 <<SQL
BEGIN;
SELECT pgcoord.fence_check('chaos-lock', $PGCOORD_FENCE_TOKEN);
INSERT INTO lock_writes (token) VALUES ($PGCOORD_FENCE_TOKEN);
COMMIT;
SQL
	sleep 0.1 & wait $!
done
echo "end $PGCOORD_FENCE_TOKEN $(ms)" >>"$CHAOS_DIR/locks.log"
J
: >"$work/locks.log"
contender() {
	local rc
	while [ ! -e "$work/stop-locks" ]; do
		"$PG" run --fence -w 30s --check-interval "${LOCK_CHECK_MS}ms" \
			--heartbeat-timeout "${LOCK_HEARTBEAT_MS}ms" --kill-after 1s chaos-lock \
			-- "$work/lockjob.sh" 2>>"$work/run.$1.log"
		rc=$?
		echo "exit $rc $(now_ms)" >>"$work/run-exits.log"
		[ $rc -eq 0 ] || sleep 0.2
	done
}
chmod +x "$work/lockjob.sh"
for i in 1 2 3; do
	contender "$i" &
	loops+=($!)
done

done_count() { hq "SELECT count(*) FROM pgcoord.job_history WHERE queue = 'fq'" 2>/dev/null; }
# progress N SECONDS: waits until N more jobs are done than now, for at most SECONDS.
progress() {
	local base got end=$((SECONDS + $2))
	base=$(done_count) || base=0
	while [ $SECONDS -lt $end ]; do
		got=$(done_count) && [ -n "$got" ] && [ "$got" -ge $((base + $1)) ] && return 0
		sleep 0.5
	done
	note "no $1 more jobs done within $2 s (${got:-?} done)"
}

# --- the faults ----------------------------------------------------------------------------
# Each switchover and failover is written to $work/faults as "KIND FROM_MS LOST_MS DOWN_MS
# END_MS WRITE_TS ADDR": when pg-ha was asked; when the old primary's sessions, and their locks,
# went away: the kill for a failover, for a switchover between the last time the old primary
# answered and the first time it refused (polled every 100 ms; the request if it never
# answered); when pg-ha returned; pg-ha's time of the first write on the new primary.
: >"$work/faults"
fault() {
	local kind=$1 t0 t1 lost down ts addr old watch=""
	old=$(PGHA_QUIET=1 "$HA" leader "$work/ha" 2>/dev/null)
	rm -f "$work/old-down"
	if [ "$kind" = switchover ] && [ -n "$old" ]; then
		# When the old primary stops taking connections: its sessions, and their locks, are gone.
		(
			ok=$(now_ms)
			while t=$(now_ms) && pg_isready -q -t 1 -h "${old%:*}" -p "${old#*:}"; do ok=$t; sleep 0.1; done
			echo "$ok $(now_ms)" >"$work/old-down"
		) &
		watch=$!
	fi
	t0=$(now_ms)
	if ! PGHA_QUIET=1 "$HA" "$kind" "$work/ha" 2>"$work/pg-ha.err"; then
		[ -z "$watch" ] || kill "$watch" 2>/dev/null
		cat "$work/pg-ha.err" >&2
		echo "chaos failover: pg-ha $kind failed" >&2
		violations=$((violations + 1))
		return 1
	fi
	t1=$(now_ms)
	[ "$kind" = rejoin ] && { note "rejoined in $(( (t1 - t0) / 1000 )) s"; return 0; }
	read -r ts addr <"$work/ha/last-$kind"
	lost=$t0
	if [ -n "$watch" ]; then
		timeout 5 tail --pid="$watch" -f /dev/null
		kill "$watch" 2>/dev/null
		[ -s "$work/old-down" ] && read -r lost down <"$work/old-down"
	fi
	[ "$kind" = failover ] && lost=$(ms "$(cat "$work/ha/killed-at")")
	echo "$kind $t0 $lost ${down:-$lost} $t1 $ts $addr" >>"$work/faults"
	note "$kind: $addr accepts writes $(( (t1 - t0) / 1000 )) s after pg-ha was asked"
}
progress 30 60
for r in $(seq "$ROUNDS"); do
	note "round $r: switchover with $(done_count) jobs done"
	fault switchover || break
	progress 30 90
	note "round $r: failover with $(done_count) jobs done"
	fault failover || break
	progress 30 90
	note "round $r: rejoin"
	fault rejoin || break
	sleep "$SETTLE_SECS"
done

# --- the end: stop the load, bounded -----------------------------------------------------
touch "$work/stop-producer" "$work/stop-locks"
timeout 30 tail --pid="${loops[0]}" -f /dev/null
drained=0
for i in $(seq 360); do
	[ "$(hq "SELECT count(*) FROM pgcoord.jobs WHERE queue = 'fq'" 2>/dev/null)" = 0 ] && { drained=1; break; }
	sleep 0.5
done
[ "$drained" = 1 ] || note "the queue did not drain within 180 s"
touch "$work/stop"
for p in "${worker_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
pkill -TERM -f "elect --ttl 3s --follow chaos-elect -- sh $work/writer.sh" 2>/dev/null
for p in "${loops[@]:1}" "${worker_pids[@]}"; do
	timeout 30 tail --pid="$p" -f /dev/null || note "process $p still runs 30 s after the stop"
done
bad_worker_exits=0
for p in "${worker_pids[@]}"; do
	wait "$p"
	st=$?
	[ "$st" -eq 0 ] || { bad_worker_exits=$((bad_worker_exits + 1)); echo "chaos failover: a worker exited $st after SIGTERM" >&2; }
done
sleep 1
left_running=$(pgrep -f "$scripts" | wc -l)
[ "$left_running" -eq 0 ] && [ "$bad_worker_exits" -eq 0 ] || pgrep -a -f "$scripts" >&2

# --- the queue's promises ------------------------------------------------------------------
awk '{ for (k = $2; k <= $3; k++) printf "%d\t%d\t%d\t%s\t%d\t%s\n", k, $2, $3 - $2 + 1,
	($1 == "ack" ? "ack" : $5), ($1 == "ack" ? 0 : $4), ($1 == "ack" ? $4 : $6) }' "$work/producer.log" >"$work/told.tsv"
psql -X -q -v ON_ERROR_STOP=1 "$DSN" -c "\\copy told FROM '$work/told.tsv'" ||
	{ echo "chaos failover: cannot load what the producer was told" >&2; violations=$((violations + 1)); }
hq "CREATE VIEW fate AS
    SELECT t.k, t.batch, t.size, t.what, t.rc, t.at_ms, coalesce(h.n, 0) AS hist, coalesce(h.ok, 0) AS ok,
           coalesce(j.n, 0) AS live
      FROM told t
      LEFT JOIN (SELECT (payload->>'k')::bigint AS k, count(*) AS n,
                        count(*) FILTER (WHERE status = 'succeeded') AS ok
                   FROM pgcoord.job_history WHERE queue = 'fq' GROUP BY 1) h USING (k)
      LEFT JOIN (SELECT (payload->>'k')::bigint AS k, count(*) AS n
                   FROM pgcoord.jobs WHERE queue = 'fq' GROUP BY 1) j USING (k)" >/dev/null
acked=$(hq "SELECT count(*) FROM told WHERE what = 'ack'")
failed_calls=$(hq "SELECT count(DISTINCT batch) FROM told WHERE what <> 'ack'")
failed_kinds=$(hq "SELECT coalesce(string_agg(what || '=' || n, ' ' ORDER BY what), 'none')
                   FROM (SELECT what, count(DISTINCT batch) AS n FROM told WHERE what <> 'ack' GROUP BY what) w")
bad_rc=$(hq "SELECT count(DISTINCT batch) FROM told WHERE what <> 'ack' AND rc NOT IN (69, 75)")
lost=$(hq "SELECT count(*) FROM fate WHERE what = 'ack' AND hist = 0 AND live = 0")
doubled=$(hq "SELECT count(*) FROM fate WHERE hist + live > 1")
not_ok=$(hq "SELECT count(*) FROM fate WHERE hist = 1 AND ok = 0")
half=$(hq "SELECT count(*) FROM (SELECT batch FROM fate GROUP BY batch
                                 HAVING count(*) FILTER (WHERE hist + live > 0) NOT IN (0, max(size))) b")
unreported=$(hq "SELECT count(DISTINCT batch) FROM fate WHERE what IN ('none', 'unsaid') AND hist + live > 0")
unknown_in=$(hq "SELECT count(DISTINCT batch) FROM fate WHERE what = 'unknown' AND hist + live > 0")
phantom=$(hq "SELECT count(*) FROM (SELECT payload FROM pgcoord.job_history WHERE queue = 'fq'
                                    UNION ALL SELECT payload FROM pgcoord.jobs WHERE queue = 'fq') j
              WHERE NOT EXISTS (SELECT FROM told t WHERE t.k = (j.payload->>'k')::bigint)")
left=$(hq "SELECT count(*) FROM pgcoord.jobs")
finished=$(hq "SELECT count(*) FROM pgcoord.job_history WHERE queue = 'fq'")
read -r executions dups < <(hq "SELECT count(*), count(*) - count(DISTINCT job) FROM results
                                 WHERE job IN (SELECT id FROM pgcoord.job_history WHERE queue = 'fq')" | tr '|' ' ')
mismatch=$(hq "SELECT count(*) FROM pgcoord.job_history h
               LEFT JOIN (SELECT job, attempt, count(*) AS n FROM results GROUP BY 1, 2) r
                      ON r.job = h.id AND r.attempt = h.attempts
               WHERE h.queue = 'fq' AND coalesce(r.n, 0) <> 1")
v=$((bad_rc + doubled + not_ok + half + unreported + phantom + left))
[ "$mode" = sync ] && v=$((v + lost + mismatch))
[ "$finished" -gt 0 ] || { v=$((v + 1)); echo "chaos failover: no job finished at all" >&2; }
if [ "$v" -gt 0 ] || [ "$lost" -gt 0 ]; then
	kills=$(awk '$1 == "failover" { printf "%s%s", sep, $3; sep = "," }' "$work/faults")
	echo "--- the jobs that broke a promise or were lost (key|batch|size|told|status|ms before the next crash|in history|succeeded|live):" >&2
	hq "SELECT k, batch, size, what, rc,
               coalesce(((SELECT min(x) FROM unnest('{${kills}}'::bigint[]) x WHERE x >= at_ms) - at_ms)::text, 'none'),
               hist, ok, live FROM fate
         WHERE (what = 'ack' AND hist + live <> 1) OR hist + live > 1 OR (hist = 1 AND ok = 0)
            OR (what IN ('none', 'unsaid') AND hist + live > 0) ORDER BY k LIMIT 20" >&2
	[ "$v" -eq 0 ] || grep '^fail' "$work/producer.log" | cut -c 1-240 | head -n 10 >&2
	[ "$left" -eq 0 ] || hq "SELECT id, status, attempts, payload FROM pgcoord.jobs LIMIT 10" >&2
fi
echo "  enqueue failures (count, status, what the producer was told):"
awk '$1 == "fail" { rc = $4; what = $5; $1 = $2 = $3 = $4 = $5 = $6 = ""; gsub(/[0-9]+/, "N"); sub(/^ +/, "")
                   print rc, what, substr($0, 1, 150) }' "$work/producer.log" | sort | uniq -c | sort -rn |
	head -n 8 | sed 's/^/   /'
violations=$((violations + v))
row "queue-$mode" "acked=$acked failed-calls=$failed_calls ($failed_kinds; exit-not-69/75=$bad_rc unknown-that-landed=$unknown_in reported-failed-but-enqueued=$unreported half-batches=$half) finished=$finished lost=$lost doubled=$doubled not-succeeded=$not_ok phantom=$phantom left=$left executions=$executions duplicates=$dups final-claim-mismatches=$mismatch violations=$v"

# --- tokens and holders --------------------------------------------------------------------
# inversions FILE: lines of FILE whose token is not above every token logged before them.
inversions() {
	sort -k3,3n -k2,2n "$1" | awk '{ if (NR > 1 && $2 <= max) { n++; printf "  %s after %.0f\n", $0, max > "/dev/stderr" }
	                                if ($2 > max) max = $2 } END { print n + 0 }'
}
touch "$work/elect-terms.log" "$work/elect-exits.log" "$work/run-exits.log"
grep '^lead ' "$work/elect-terms.log" >"$work/lead-starts"
grep '^start ' "$work/locks.log" >"$work/lock-starts"
elect_inv=$(inversions "$work/lead-starts")
lock_inv=$(inversions "$work/lock-starts")
terms=$(wc -l <"$work/lead-starts")
holders=$(wc -l <"$work/lock-starts")
# In commit order, a fenced table's token never goes down; and it holds only tokens handed out.
stale() {
	hq "SELECT count(*) FROM (SELECT token < max(token) OVER (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING
	    AND 1 PRECEDING) AS back FROM $1) s WHERE back"
}
elect_stale=$(stale fenced_writes)
lock_stale=$(stale lock_writes)
unknown_tokens=0
for f in fenced_writes:lead-starts lock_writes:lock-starts; do
	n=$(hq "SELECT DISTINCT token FROM ${f%%:*}" | grep -vxF -f <(awk '{print $2}' "$work/${f#*:}") -c)
	[ "$n" -eq 0 ] || echo "chaos failover: ${f%%:*} holds $n tokens nobody logged" >&2
	unknown_tokens=$((unknown_tokens + n))
done
elect_writes=$(hq "SELECT count(*) FROM fenced_writes")
lock_writes=$(hq "SELECT count(*) FROM lock_writes")
leader_gaps=$(hq "SELECT coalesce(string_agg(round(extract(epoch FROM at - prev_at)::numeric, 1) || 's', ',' ORDER BY seq), 'none')
                  FROM (SELECT seq, token, at, lag(token) OVER w AS prev_token, lag(at) OVER w AS prev_at
                          FROM fenced_writes WINDOW w AS (ORDER BY seq)) s
                 WHERE token <> prev_token")
# run and elect exit only as documented: run 0 (the command's status), 1 (timed out), 69
# (unavailable) or 75 (lock lost); elect --follow 69 or 75.
bad_run_exits=$(awk '$2 != 0 && $2 != 1 && $2 != 69 && $2 != 75' "$work/run-exits.log" | wc -l)
bad_elect_exits=$(awk '$2 != 69 && $2 != 75' "$work/elect-exits.log" | wc -l)
run_75=$(awk '$2 == 75' "$work/run-exits.log" | wc -l)
[ "$bad_run_exits$bad_elect_exits" = 00 ] || { echo "--- run and elect exits:" >&2; cat "$work/run-exits.log" "$work/elect-exits.log" >&2; }

# Lock-loss detection: every holder running when its primary went away, its command killed.
late=0 missed=0 detect="" nf=0
while read -r kind t0 lost down t1 ts addr; do
	nf=$((nf + 1))
	bound=$((down - lost + LOCK_CHECK_MS + LOCK_HEARTBEAT_MS + LOCK_MARGIN_MS))
	res=$(awk -v lost="$lost" -v down="$down" -v bound="$bound" '
		$1 == "start" { st[$2] = $3 }
		$1 != "start" && !($2 in en) { en[$2] = $3; how[$2] = $1 }
		END {
			max = -1; n = 0; late = 0; missed = 0
			for (t in st) {
				if (st[t] >= down || ((t in en) && en[t] <= lost)) continue
				n++
				if (!(t in en)) { missed++; print "token " t " never ended" > "/dev/stderr"; continue }
				d = en[t] - lost
				if (how[t] == "killed") { if (d > max) max = d; if (d > bound) late++ }
				else if (d > bound) { missed++; print "token " t " ran to its end " d " ms after its lock vanished" > "/dev/stderr" }
			}
			printf "%d %d %d %d\n", n, max, late, missed
		}' "$work/locks.log")
	read -r n max l m <<<"$res"
	late=$((late + l)) missed=$((missed + m))
	detect="$detect $nf-$kind:holders=$n,killed-after=$([ "$max" -ge 0 ] && echo "${max}ms" || echo -),bound=${bound}ms"
	resume=$(hq "SELECT coalesce(round((extract(epoch FROM min(finished_at)) - $ts)::numeric, 2)::text, 'none')
	             FROM pgcoord.job_history WHERE queue = 'fq' AND finished_at >= to_timestamp($ts)")
	echo "  fault $nf, $kind to $addr: first job completed there ${resume} s after it first accepted a write"
done <"$work/faults"
echo "  lock-loss detection (from the kill, or from the old primary's shutdown):$detect"
echo "  leader gaps (last fenced write of a leader to the first of the next): $leader_gaps"
held=$(hq "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted")
leases=$(hq "SELECT count(*) FROM pgcoord.leases WHERE name = 'chaos-elect' AND released_at IS NULL
             AND expires_at > clock_timestamp()")
switchovers=$(grep -c '^switchover' "$work/faults")
failovers=$(grep -c '^failover' "$work/faults")
v=$((elect_inv + lock_inv + elect_stale + lock_stale + unknown_tokens + late + missed + bad_run_exits + bad_elect_exits + held + leases + left_running + bad_worker_exits))
[ "$switchovers" -ge "$ROUNDS" ] && [ "$failovers" -ge "$ROUNDS" ] ||
	{ v=$((v + 1)); echo "chaos failover: $switchovers switchovers and $failovers failovers of $ROUNDS each" >&2; }
[ "$terms" -gt 0 ] && [ "$elect_writes" -gt 0 ] || { v=$((v + 1)); echo "chaos failover: no leader wrote" >&2; }
[ "$holders" -gt 3 ] || { v=$((v + 1)); echo "chaos failover: only $holders run commands ran" >&2; }
violations=$((violations + v))
row "fence-$mode" "faults: switchover=$switchovers failover=$failovers; leader-terms=$terms elect-writes=$elect_writes run-holders=$holders lock-writes=$lock_writes run-exit-75=$run_75 token-inversions=$((elect_inv + lock_inv)) stale-writes-committed=$((elect_stale + lock_stale)) unlogged-tokens=$unknown_tokens late-kills=$late missed-kills=$missed bad-exits=$((bad_run_exits + bad_elect_exits + bad_worker_exits)) held-at-end=$((held + leases)) running-at-end=$left_running violations=$v"

echo "chaos failover ($profile profile, $mode, $(( ($(now_ms) - t_start) / 1000 )) s)"
for r in "${rows[@]}"; do echo "  $r"; done
echo "violations: $violations"
[ "$violations" -eq 0 ]
