# queue_times.sh - one grammar for TIME options, finite times only, and no single row that
# breaks a view of all rows: --run-at takes ISO 8601 with an offset, @SECONDS or a duration
# from now, and refuses "infinity", "epoch", "yesterday" and DateStyle-dependent forms; the
# server refuses an infinite run_at from any client; and a table that already holds one (from
# before that) still gives queue stats, their Prometheus form, and the web's /api/queues and
# /metrics.
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/web_lib.sh"
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_qtimes
trap 'web_cleanup; own_schema_cleanup' EXIT

# Refused before anything is sent, each naming the grammar.
for t in -infinity infinity epoch yesterday now today 12/04/2026 "04.12.2026 10:00" 2026-12-04 \
	2026-12-04T10:00 "2026-13-01T00:00Z" "0000-01-01T00:00Z" "10000-01-01T00:00Z" "@" "@x" ""; do
	run 64 "$PG" queue enqueue tq --payload '{}' --run-at "$t" --schema "$S"
	err_has "^pgcoord: --run-at"
done
[ "$(psql_q "SELECT count(*) FROM $S.jobs")" = 0 ] || fail "a refused --run-at enqueued a job"
err_has "ISO 8601 with an offset"

# Accepted, and stored as meant whatever the server's DateStyle and zone.
run 0 "$PG" queue enqueue tq --payload '{"n":1}' --run-at "2099-12-04T09:30:00Z" --schema "$S"
run 0 "$PG" queue enqueue tq --payload '{"n":2}' --run-at "2099-12-04 10:30:00.25+01:00" --schema "$S"
run 0 "$PG" queue enqueue tq --payload '{"n":3}' --run-at "@4000000000" --schema "$S"
run 0 "$PG" queue enqueue tq --payload '{"n":4}' --run-at "2h" --schema "$S"
got=$(psql -X -A -t -q "$PGCOORD_TEST_DSN" -c "SET datestyle = 'SQL, DMY'; SET timezone = 'America/New_York';
	SELECT string_agg(payload->>'n' || '=' || to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), ',' ORDER BY id)
	FROM $S.jobs WHERE payload->>'n' IN ('1', '2', '3')")
[ "$got" = "1=2099-12-04 09:30:00.000000,2=2099-12-04 09:30:00.250000,3=2096-10-02 07:06:40.000000" ] ||
	fail "stored: $got"
# A duration is a delay on the server's clock.
[ "$(psql_q "SELECT run_at BETWEEN now() + interval '119 minutes' AND now() + interval '121 minutes' FROM $S.jobs WHERE payload->>'n' = '4'")" = t ] ||
	fail "--run-at 2h: $(psql_q "SELECT run_at - now() FROM $S.jobs WHERE payload->>'n' = '4'")"

# The server refuses an infinite run_at whoever writes it.
if psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_TEST_DSN" >"$TMP/psql.out" 2>&1 <<SQL; then
INSERT INTO $S.jobs (id, queue, status, run_at, payload) VALUES (900000001, 'tq', 'pending', '-infinity', '{}');
SQL
	fail "an infinite run_at was stored"
fi
grep -q "jobs_run_at_finite" "$TMP/psql.out" || { cat "$TMP/psql.out"; fail "not refused by the constraint"; }

# A table that holds such rows from before: every view of all queues still answers.
psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_TEST_DSN" >/dev/null <<SQL || fail "legacy rows"
ALTER TABLE $S.jobs DROP CONSTRAINT jobs_run_at_finite;
INSERT INTO $S.jobs (id, queue, status, run_at, payload) VALUES
  (900000001, 'tq', 'pending', '-infinity', '{}'), (900000002, 'tq', 'scheduled', 'infinity', '{}');
INSERT INTO $S.queues (name) VALUES ('tq') ON CONFLICT DO NOTHING;
ALTER TABLE $S.jobs ADD CONSTRAINT jobs_run_at_finite CHECK (isfinite(run_at)) NOT VALID;
SQL
run 0 "$PG" queue stats --schema "$S"
out_has "^tq "
run 0 "$PG" queue stats --prometheus --schema "$S"
out_has 'queue="tq"'
run 0 "$PG" --json queue stats tq --schema "$S"
run 0 "$PG" queue show 900000001 --schema "$S"
run 0 "$PG" queue list tq --schema "$S"
web_start qt --schema "$S"
req 200 "$WURL/api/queues"
body_has '"tq"'
req 200 "$WURL/metrics"
body_has 'queue="tq"'
web_stop "$WPID"
echo ok
