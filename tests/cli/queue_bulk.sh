# queue_bulk.sh - pgcoord queue cancel --all, retry --all, purge: count, confirm (a terminal,
# or --yes; without either exit 64), work in short batches next to a worker that keeps claiming
. "$(dirname "$0")/lib.sh"

# Bad input is refused before anything is done (no server needed).
run 64 "$PG" queue cancel --all
err_has "\-\-all needs a QUEUE"
run 64 "$PG" queue cancel --all q --status running --yes
err_has "\-\-status must be pending or scheduled"
run 64 "$PG" queue retry --all q --status succeeded --yes
err_has "\-\-status must be failed or cancelled"
run 64 "$PG" queue cancel --all q --older-than soon --yes
err_has "\-\-older-than: invalid duration"
run 64 "$PG" queue cancel --all q --key-prefix "" --yes
err_has "\-\-key-prefix must not be empty"
run 64 "$PG" queue cancel --all q --batch-size 0 --yes
run 64 "$PG" queue cancel 5 --status pending
err_has "go with \-\-all QUEUE"
run 64 "$PG" queue enqueue q --all
err_has "\-\-all does not apply to queue enqueue"
run 64 "$PG" queue list --yes
run 64 "$PG" queue enqueue q --max-deferrals 0
err_has "\-\-max-deferrals must be an integer from 1"

skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_qbulk
q() { "$PG" queue "$@" --schema "$S" >/dev/null || fail "queue $*"; }
live() { psql_q "SELECT count(*) FROM $S.jobs WHERE queue = '$1'"; }

# A queue that does not exist (a misspelt name) is bad data, not "nothing to do".
for sub in "cancel --all" "retry --all"; do
	# shellcheck disable=SC2086
	run 65 "$PG" queue $sub nosuchqueue --yes --schema "$S"
	err_has 'no queue named "nosuchqueue"'
done
run 65 "$PG" queue purge nosuchqueue --yes --schema "$S"

seq 1 20000 | sed 's/.*/{"n":&}/' >"$TMP/big.jsonl"
q enqueue big --file "$TMP/big.jsonl"
q enqueue big --payload '{"n":"later"}' --delay 1d

# Without a terminal and without --yes: exit 64, nothing done; the purge too.
run 64 "$PG" queue cancel --all big --schema "$S" </dev/null
err_has "pass \-\-yes"
run 64 "$PG" queue purge --schema "$S" </dev/null
err_has "pass \-\-yes"
[ "$(live big)" = 20001 ] || fail "a refused cancel changed something"

# On a terminal: the count, then the question; anything but yes or y changes nothing.
printf 'no\n' | script -qec "\"$PG\" queue cancel --all big --schema $S" /dev/null >"$TMP/tty" 2>&1
grep -q "this will cancel 20001 pending or scheduled jobs (running jobs are never cancelled) of queue big" "$TMP/tty" ||
	{ cat "$TMP/tty"; fail "no count before the question"; }
grep -q "not confirmed: nothing was cancelled" "$TMP/tty" || { cat "$TMP/tty"; fail "a no was not a no"; }
[ "$(live big)" = 20001 ] || fail "a declined cancel changed something"

# A worker keeps claiming while the cancel runs in batches of 500: every job is either
# cancelled or completed, exactly.
timeout 120 "$PG" worker --once --schema "$S" --queue big -c 4 -- sh -c 'cat >/dev/null' 2>"$TMP/werr" &
wpid=$!
end=$((SECONDS + 20))
while [ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE queue = 'big'")" -lt 20 ] && [ $SECONDS -lt $end ]; do
	sleep 0.05
done
run 0 timeout 120 "$PG" --json queue cancel --all big --schema "$S" --batch-size 500 --yes
out_has '^{"queue":"big","matched":[0-9]*,"cancelled":[0-9]*}$'
said=$(sed 's/.*"cancelled":\([0-9]*\).*/\1/' "$TMP/out")
wait "$wpid"
rc=$?
wpid=
[ "$rc" -eq 0 ] || { cat "$TMP/werr"; fail "the worker exited $rc"; }
cancelled=$(psql_q "SELECT count(*) FROM $S.job_history WHERE queue = 'big' AND status = 'cancelled'")
succeeded=$(psql_q "SELECT count(*) FROM $S.job_history WHERE queue = 'big' AND status = 'succeeded'")
[ "$cancelled" = "$said" ] || fail "said $said cancelled, the history has $cancelled"
[ "$succeeded" -gt 0 ] || fail "the worker completed nothing"
[ $((cancelled + succeeded)) -eq 20001 ] || fail "cancelled $cancelled + succeeded $succeeded is not 20001"
[ "$(live big)" = 0 ] || fail "jobs left: $(live big)"

# Filters: age (from creation), unique-key prefix (no wildcards), status.
for k in imp_1 imp_2 imp-3 impx; do q enqueue keys --unique-key "$k"; done
q enqueue keys --payload '{"old":true}'
psql_q "UPDATE $S.jobs SET created_at = created_at - interval '2 days' WHERE payload ? 'old'" >/dev/null
q enqueue keys --delay 1h
run 0 "$PG" queue cancel --all keys --schema "$S" --key-prefix imp_ --yes
out_has "^cancelled 2 jobs of queue keys$"
run 0 "$PG" --json queue cancel --all keys --schema "$S" --older-than 1d --yes
out_has '"matched":1,"cancelled":1'
run 0 "$PG" --json queue cancel --all keys --schema "$S" --status scheduled --yes
out_has '"matched":1,"cancelled":1'
[ "$(psql_q "SELECT string_agg(unique_key, ',' ORDER BY id) FROM $S.jobs WHERE queue = 'keys'")" = "imp-3,impx" ] ||
	fail "left: $(psql_q "SELECT string_agg(unique_key, ',' ORDER BY id) FROM $S.jobs WHERE queue = 'keys'")"
# A queue that exists with nothing to match: nothing to do, exit 0.
run 0 "$PG" queue cancel --all keys --status waiting --schema "$S" --yes
err_has "no job matches: nothing cancelled"
out_has "^cancelled 0 jobs of queue keys$"

# Retry every failed job of a queue; then the cancelled ones on a terminal, answered y.
for i in 1 2 3; do q enqueue sad --max-attempts 1; done
run 0 timeout 60 "$PG" worker --once --schema "$S" --queue sad -- false
[ "$(psql_q "SELECT count(*) FROM $S.job_history WHERE queue = 'sad' AND status = 'failed'")" = 3 ] || fail "no dead letters"
run 0 "$PG" --json queue retry --all sad --schema "$S" --yes
out_has '"matched":3,"retried":3,"skipped":0'
[ "$(psql_q "SELECT count(*) FROM $S.jobs WHERE queue = 'sad' AND status = 'pending' AND attempts = 0")" = 3 ] || fail "not pending again"
printf 'y\n' | script -qec "\"$PG\" queue retry --all keys --status cancelled --schema $S" /dev/null >"$TMP/tty" 2>&1
grep -q "retried 4 jobs of queue keys" "$TMP/tty" || { cat "$TMP/tty"; fail "retry on a terminal"; }

# Purge: asks too; by queue and status.
run 0 "$PG" --json queue purge big --schema "$S" --status cancelled --batch-size 700 --yes
out_has "\"matched\":$cancelled,\"purged\":$cancelled"
run 0 "$PG" queue purge --schema "$S" --yes
out_has "^purged $succeeded jobs of every queue$"
[ "$(psql_q "SELECT count(*) FROM $S.job_history")" = 0 ] || fail "history left"
exit 0
