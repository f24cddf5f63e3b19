# queue.sh - pgcoord queue: enqueue (one, file, stdin), inspection, admin, bad input, exit codes
. "$(dirname "$0")/lib.sh"

run 0 "$PG" queue --help
out_has "^Usage: pgcoord \[-d DSN\] queue"
out_has "enqueue QUEUE"
run 0 "$PG" help queue
run 64 "$PG" queue
err_has "no queue subcommand given"
run 64 "$PG" queue frob
err_has 'unknown queue subcommand "frob"'
run 64 "$PG" queue enqueue
err_has "a queue name is required"
run 64 "$PG" queue enqueue ""
err_has "queue name must not be empty"
run 64 "$PG" queue enqueue q --priority high
err_has "\-\-priority must be an integer"
run 64 "$PG" queue enqueue q --max-attempts -1
err_has "\-\-max-attempts must be an integer from 1"
run 64 "$PG" queue enqueue q --delay soon
err_has "\-\-delay: invalid duration"
run 64 "$PG" queue enqueue q --payload '{}' --file x
err_has "not both"
run 64 "$PG" queue enqueue q --delay 1s --run-at 2030-01-01
run 64 "$PG" queue stats --payload '{}'
err_has "\-\-payload does not apply to queue stats"
run 64 "$PG" queue show abc
err_has "job ID must be a positive integer"
run 64 "$PG" queue purge --status pending
run 64 "$PG" queue pause
err_has "a queue name is required"

skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_qcli_$$
trap 'psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
# Before init: the schema is missing.
run 69 "$PG" queue stats --schema "$S"
err_has "pgcoord init"
run 0 "$PG" init --schema "$S"

run 0 "$PG" queue enqueue mail --schema "$S" --payload '{"to":"a@example.com"}' --priority 5
out_has "^enqueued job [0-9]* in queue mail$"
run 0 "$PG" --json queue enqueue mail --schema "$S" --payload '{"to":"b"}' --delay 1h
out_has '^{"queue":"mail","id":[0-9]*}$'
id=$(sed 's/.*"id":\([0-9]*\).*/\1/' "$TMP/out")

# Invalid JSON: exit 65, one clear line, nothing enqueued.
run 65 "$PG" queue enqueue mail --schema "$S" --payload '{"to":'
err_has "\-\-payload is not valid JSON"
[ "$(psql_q "SELECT count(*) FROM $S.jobs")" = 2 ] || fail "a bad payload was enqueued"

# A file: all or nothing, the bad line named.
printf '{"n":1}\n\n{"n":2}\n{"n":3\n{"n":4}\n' >"$TMP/bad.jsonl"
run 65 "$PG" queue enqueue bulk --schema "$S" --file "$TMP/bad.jsonl"
err_has "bad.jsonl line 4: not valid JSON"
err_has "nothing was enqueued"
[ "$(psql_q "SELECT count(*) FROM $S.jobs WHERE queue = 'bulk'")" = 0 ] || fail "a partial batch was enqueued"
seq 1 12000 | sed 's/.*/{"n":&}/' >"$TMP/good.jsonl"
run 0 "$PG" queue enqueue bulk --schema "$S" --file "$TMP/good.jsonl" --priority -3
out_has "enqueued 12000 jobs in queue bulk"
printf '{"a":1}\n{"a":2}\n' | "$PG" --json queue enqueue stdin --schema "$S" - >"$TMP/out" 2>"$TMP/err" || fail "enqueue from stdin"
out_has '"enqueued":2,"skipped":0'
run 65 "$PG" queue enqueue x --schema "$S" --file "$TMP/nonexistent"
err_has "cannot open"

# Payload limit.
run 0 "$PG" queue config --schema "$S" --max-payload 64
out_has "max_payload: *64 bytes"
run 65 "$PG" queue enqueue mail --schema "$S" --payload "{\"x\":\"$(head -c 100 /dev/zero | tr '\0' a)\"}"
err_has "over the limit of 64 bytes"
run 0 "$PG" --json queue config --schema "$S" --max-payload 1048576 --aging 2m
out_has '"aging_ms":120000'
# Durations take days, and settings show in the largest exact unit.
run 0 "$PG" queue config --schema "$S" --succeeded-retention 1d --failed-retention 1.5d --aging 90s
out_has "^aging: *90s$"
out_has "^succeeded_retention: *1d$"
out_has "^failed_retention: *36h$"
run 0 "$PG" --json queue config --schema "$S" --aging 2m --failed-retention 7d
out_has '"aging_ms":120000,"succeeded_retention_ms":86400000,"failed_retention_ms":604800000'
run 64 "$PG" queue config --schema "$S" --aging 1w
err_has "unknown unit (use ms, s, m, h or d)"

# Unique keys: exit 1 on a duplicate.
run 0 "$PG" queue enqueue report --schema "$S" --unique-key r-1
run 1 "$PG" queue enqueue report --schema "$S" --unique-key r-1
err_has "already pending or running"
run 64 "$PG" queue enqueue report --schema "$S" --unique-key r-1 --file "$TMP/good.jsonl"

# Inspection.
run 0 "$PG" queue stats --schema "$S"
out_has "^bulk .* 12000 "
out_has "xmin horizon"
run 0 "$PG" --json queue stats mail --schema "$S"
out_has '"queue":"mail","paused":false,"pending":1,"scheduled":1'
out_has '"dead_tuples":'
run 0 "$PG" queue stats --schema "$S" --prometheus
out_has '^pgcoord_queue_jobs{queue="bulk",status="pending"} 12000$'
out_has '^# TYPE pgcoord_queue_oldest_pending_seconds gauge$'
run 65 "$PG" queue stats nosuch --schema "$S"
err_has 'no queue named "nosuch"'
run 64 "$PG" queue stats --schema "$S" --json --prometheus
timeout 60 "$PG" queue stats mail --schema "$S" --watch 200ms >"$TMP/out" 2>&1 &
wpid=$!
# Two screens, or give up after 30 s (valgrind is slow).
for _ in $(seq 300); do
	[ "$(grep -c '^QUEUE' "$TMP/out")" -ge 2 ] && break
	sleep 0.1
done
kill "$wpid"
wait "$wpid" 2>/dev/null
[ "$(grep -c '^QUEUE' "$TMP/out")" -ge 2 ] || { cat "$TMP/out"; fail "--watch did not repeat"; }

run 0 "$PG" queue list mail --schema "$S"
out_has "^ID "
run 0 "$PG" --json queue list mail --schema "$S" --status pending --limit 1
[ "$(wc -l <"$TMP/out")" -eq 1 ] || fail "--limit 1 gave more than one job"
run 0 "$PG" --json queue show "$id" --schema "$S"
out_has '"status":"scheduled"'
out_has '"payload":{"to": "b"}'
run 65 "$PG" queue show 999999999 --schema "$S"
err_has "no job with id 999999999"

# Cancel, retry, purge.
run 0 "$PG" queue cancel "$id" --schema "$S"
out_has "cancelled"
run 1 "$PG" queue cancel "$id" --schema "$S"
err_has "job $id has already finished (cancelled): nothing to cancel"
run 65 "$PG" queue cancel 999999999 --schema "$S"
err_has "no job with id 999999999"
run 0 "$PG" --json queue show "$id" --schema "$S"
out_has '"status":"cancelled"'
run 0 "$PG" queue retry "$id" --schema "$S"
out_has "pending again"
run 65 "$PG" queue retry "$id" --schema "$S"
run 0 "$PG" queue cancel "$id" --schema "$S"
run 0 "$PG" --json queue purge mail --schema "$S" --status cancelled --yes
out_has '"purged":1'
run 0 "$PG" queue purge --schema "$S" --older-than 1h --yes
out_has "purged 0 jobs of every queue"

# Pause and resume.
run 0 "$PG" queue pause bulk --schema "$S"
out_has "queue bulk paused"
run 0 "$PG" --json queue stats bulk --schema "$S"
out_has '"paused":true'
run 0 "$PG" queue resume bulk --schema "$S"
run 0 "$PG" --json queue stats bulk --schema "$S"
out_has '"paused":false'
exit 0
