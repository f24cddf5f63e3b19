# worker_result.sh - pgcoord worker: a command gives its job a result by writing JSON to the
# file PGCOORD_RESULT_FILE names; it is kept with the job in the history, and the file is
# gone after the run. Nothing written: no result. Not JSON, or over 64 kB: the attempt fails
# with the reason, and the other jobs of the batch complete.
. "$(dirname "$0")/lib.sh"

skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_wresult
q() { "$PG" queue "$@" --schema "$S" >/dev/null || fail "queue $*"; }

for k in good none bad big; do q enqueue r --payload "{\"k\":\"$k\"}" --max-attempts 1; done
export FILES=$TMP/files
timeout 60 "$PG" worker --once --schema "$S" --queue r -c 4 -- sh -c '
	p=$(cat); echo "$PGCOORD_RESULT_FILE" >>"$FILES"
	case "$p" in
	*good*) printf "{\"id\": %s, \"ok\": true}\n" "$PGCOORD_JOB_ID" >"$PGCOORD_RESULT_FILE" ;;
	*bad*) echo "{not json" >"$PGCOORD_RESULT_FILE" ;;
	*big*) head -c 70000 /dev/zero | tr "\0" x | sed "s/.*/\"&\"/" >"$PGCOORD_RESULT_FILE" ;;
	esac' >"$TMP/wout" 2>"$TMP/werr" || { cat "$TMP/werr"; fail "worker --once"; }
good=$(psql_q "SELECT id FROM $S.job_history WHERE payload->>'k' = 'good'")
[ "$(psql_q "SELECT status || ' ' || result::text FROM $S.job_history WHERE id = $good")" = \
  "succeeded {\"id\": $good, \"ok\": true}" ] || fail "the good job's result"
[ "$(psql_q "SELECT status || ' ' || coalesce(result::text, 'none') FROM $S.job_history WHERE payload->>'k' = 'none'")" = \
  "succeeded none" ] || fail "a job that wrote nothing has a result"
bad=$(psql_q "SELECT status || ': ' || last_error FROM $S.job_history WHERE payload->>'k' = 'bad'")
case "$bad" in "failed: the handler's result was refused: "*json*) ;; *) fail "not JSON: $bad" ;; esac
big=$(psql_q "SELECT status || ': ' || last_error FROM $S.job_history WHERE payload->>'k' = 'big'")
case "$big" in "failed: "*"over the limit of 65536"*) ;; *) fail "too big: $big" ;; esac
[ "$(wc -l <"$FILES")" -eq 4 ] || fail "not one result file per run"
while read -r f; do [ ! -e "$f" ] || fail "result file $f left behind"; done <"$FILES"
# The library's reader of results sees the same.
[ "$(psql_q "SELECT (result->>'ok') FROM $S.job_result($good)")" = true ] || fail "job_result()"
exit 0
