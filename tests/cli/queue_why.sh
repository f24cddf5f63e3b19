# queue_why.sh - queue show says why a pending job does not run (text and --json, the reason
# the dashboard gives too): its dependencies, its queue paused, scheduled for later, no worker
# serves its queue, its key at its limit, its queue's rate used up
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_why
pids=()
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; }
trap 'stop_all; own_schema_cleanup' EXIT
q() { "$PG" queue "$@" --schema "$S"; }
# enqueue_id QUEUE [OPTIONS]: enqueues {} and prints the job's id.
enqueue_id() { q enqueue "$@" --payload '{}' --json | sed 's/.*"id":\([0-9]*\).*/\1/'; }
# why ID TEXT: queue show ID says TEXT as its reason, and --json the same in wait.reason.
why() {
	run 0 q show "$1"
	out_has "^waiting: *$2"
	run 0 q show "$1" --json
	python3 - "$TMP/out" "$2" <<'PY' || fail "queue show $1 --json: $(cat "$TMP/out")"
import json, re, sys
w = json.load(open(sys.argv[1]))["wait"]
assert w["live"] and not w["running"] and re.match(sys.argv[2], w["reason"]), w
PY
}

# No worker at all: nobody serves the queue.
a=$(enqueue_id idle)
why "$a" "no listening worker serves its queue"
# Its dependency is not done.
b=$(enqueue_id idle --after "$a")
why "$b" "waiting for job $a$"
# Scheduled for later.
c=$(enqueue_id idle --delay 1h)
why "$c" "scheduled for later: runs in 3[56][0-9][0-9] s"
# Its queue is paused.
d=$(enqueue_id held)
run 0 q pause held
why "$d" "its queue is paused"

# With a worker serving them: a key at its limit, a queue whose rate is used up.
run 0 q config keyed --key-limit 1
run 0 q config rated --rate 1/1h
k1=$(enqueue_id keyed --key k)
k2=$(enqueue_id keyed --key k)
r1=$(enqueue_id rated)
r2=$(enqueue_id rated)
"$PG" worker --schema "$S" --queue keyed --queue rated -c 4 --grace 100ms -- sh -c 'sleep 60' 2>"$TMP/w.err" &
pids+=($!)
wait_query 30 "SELECT count(*) FROM $S.jobs WHERE id IN ($k1, $r1) AND status = 'running'" 2
why "$k2" "its key k is at its limit 1"
why "$r2" "queue rated is rate-limited until "
# A running job has no reason; text shows none.
run 0 q show "$k1"
grep -q "^waiting:" "$TMP/out" && fail "a running job says why it waits: $(cat "$TMP/out")"
stop_all
echo ok
