# web_api.sh - pgcoord web's JSON API with curl: every path's shape, 400 and 404, keyset pages
# that cover every job once, actions refused (403 without --allow-actions, 401 without or with
# a wrong token, 403 cross-origin) and accepted (token and origin, logged), --hide-payloads,
# a monitoring role's view, sessions reopened after their backends were terminated, SIGTERM
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/web_lib.sh"
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_webapi_$$
MON=pgc_webmon_$$
NOGRANT=pgc_webnog_$$
cleanup() {
	web_cleanup
	[ -n "${holder:-}" ] && kill "$holder" 2>/dev/null
	psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'web-api-holder-$$'" >/dev/null 2>&1
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	psql_q "DROP ROLE IF EXISTS $MON" >/dev/null 2>&1
	psql_q "DROP ROLE IF EXISTS $NOGRANT" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
run 0 "$PG" init --schema "$S"

# Jobs: 57 in "mail" (3 of them finished: 2 succeeded, 1 failed with an error), 5 in "sms".
for i in $(seq 57); do echo "{\"n\":$i,\"secret\":\"s3cr3t-$i\"}"; done >"$TMP/mail.jsonl"
run 0 "$PG" queue enqueue mail --schema "$S" --file "$TMP/mail.jsonl"
for i in $(seq 5); do echo "{\"n\":$i}"; done | "$PG" queue enqueue sms --schema "$S" - >/dev/null 2>&1 ||
	fail "enqueue sms"
# Keyed jobs: 3 of key acme and 2 of key other in "tenant".
for i in 1 2 3; do echo "{\"t\":$i}"; done >"$TMP/acme.jsonl"
run 0 "$PG" queue enqueue tenant --schema "$S" --key acme --file "$TMP/acme.jsonl"
printf '{"t":4}\n{"t":5}\n' | "$PG" queue enqueue tenant --schema "$S" --key other - >/dev/null || fail "enqueue tenant other"
run 0 "$PG" queue config tenant --schema "$S" --key-limit 2
psql_q "WITH c AS (SELECT id FROM $S.jobs WHERE queue = 'mail' ORDER BY id LIMIT 3),
  d AS (DELETE FROM $S.jobs j USING c WHERE j.id = c.id RETURNING j.*)
  INSERT INTO $S.job_history (id, queue, status, priority, run_at, attempts, max_attempts, last_error,
    errors, created_at, started_at, payload)
  SELECT id, queue, CASE WHEN id = (SELECT min(id) FROM c) THEN 'failed' ELSE 'succeeded' END, priority, run_at,
    1, max_attempts, CASE WHEN id = (SELECT min(id) FROM c) THEN 'smtp refused: 550' END,
    CASE WHEN id = (SELECT min(id) FROM c) THEN '[{\"attempt\":1,\"error\":\"smtp refused: 550\"}]'::jsonb END,
    created_at, now(), payload FROM d" >/dev/null || fail "finish three jobs"
failed_id=$(psql_q "SELECT id FROM $S.job_history WHERE status = 'failed'")
pending_id=$(psql_q "SELECT max(id) FROM $S.jobs WHERE queue = 'mail'")
# A job waiting for another one: the last pending mail job.
run 0 "$PG" queue enqueue chain --schema "$S" --after "$pending_id" --payload '{"then":1}'
waiting_id=$(psql_q "SELECT id FROM $S.jobs WHERE queue = 'chain'")
run 0 "$PG" cron add --schema "$S" nightly '0 3 * * *' --queue mail
# An advisory lock held by a session of its own, for /api/locks (for as long as the test runs,
# under valgrind too; the cleanup ends it).
psql -X -q "$PGCOORD_TEST_DSN" -c "SET application_name = 'web-api-holder-$$'" \
	-c "SELECT pg_advisory_lock(4242$$)" -c "SELECT pg_sleep(900)" >/dev/null 2>&1 &
holder=$!
for _ in $(seq 100); do
	[ "$(psql_q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = (4242$$ & 4294967295)")" = 1 ] && break
	sleep 0.1
done

# ---- read-only server ----
WEB_DSN=$(dsn_param "$PGCOORD_TEST_DSN" application_name "pgcoord/web-test-$$") web_start ro --schema "$S"
ro=$WPID
URL=$WURL
grep -q 'read-only' "$TMP/ro.err" || fail "the start line does not say read-only"

req 200 "$URL/api/config"
body_has '"actions":false'
body_has '"auth":false'
body_has '"refresh_ms":2000'
grep -qi '^Content-Security-Policy: default-src .none.; script-src .self.; style-src .self.; img-src .self. data:; connect-src .self.; base-uri .none.; frame-ancestors .none.; form-action .self.' "$TMP/headers" ||
	{ cat "$TMP/headers"; fail "no Content-Security-Policy"; }
grep -qi '^X-Content-Type-Options: nosniff' "$TMP/headers" || fail "no nosniff"
grep -qi '^Referrer-Policy: no-referrer' "$TMP/headers" || fail "no Referrer-Policy"
grep -qi '^Cache-Control: no-store' "$TMP/headers" || fail "the API is not no-store"
# The page and its files are embedded; they carry the headers too.
req 200 "$URL/"
body_has '<script src="/app.js"'
grep -qi '^Content-Security-Policy:' "$TMP/headers" || fail "the page has no CSP"
req 200 "$URL/app.js"
grep -qi '^Content-Type: text/javascript' "$TMP/headers" || fail "app.js type"
req 200 "$URL/app.css"
! grep -q 'innerHTML' "$TMP/body" || fail "app.css?"

req 200 "$URL/api/queues"
[ "$(json "[q['queue'] for q in j['queues']]")" = "['chain', 'mail', 'sms', 'tenant']" ] || fail "queues: $(cat "$TMP/body")"
[ "$(json "[(q['pending'], q['succeeded'], q['failed']) for q in j['queues'] if q['queue'] == 'mail'][0]")" = "(54, 2, 1)" ] ||
	fail "mail counts: $(cat "$TMP/body")"
body_has '"count_cap":10000'
req 200 "$URL/api/queues?queue=sms"
[ "$(json "len(j['queues'])")" = 1 ] || fail "queue=sms"
req 404 "$URL/api/queues?queue=nosuch"
req 200 "$URL/api/workers"
body_has '"workers":[]'

req 200 "$URL/api/jobs?queue=mail&status=failed"
[ "$(json "[(x['id'], x['last_error']) for x in j['jobs']]")" = "[($failed_id, 'smtp refused: 550')]" ] ||
	fail "failed jobs: $(cat "$TMP/body")"
body_has '"next":null'
req 200 "$URL/api/jobs/$failed_id"
[ "$(json "j['job']['errors'][0]['error']")" = "smtp refused: 550" ] || fail "error history"
body_has '"live":false'
req 200 "$URL/api/jobs/$pending_id"
body_has 's3cr3t-57'
[ "$(json "j['job']['wait']['ahead']")" = 53 ] || fail "jobs ahead: $(cat "$TMP/body")"
[ "$(json "j['job']['wait']['reason']")" = "no listening worker serves its queue (seen in the last 10 s; polling workers do not register)" ] ||
	fail "reason: $(cat "$TMP/body")"
req 200 "$URL/api/jobs?q=s3cr3t-42"
[ "$(json "len(j['jobs'])")" = 1 ] || fail "text search"
req 200 "$URL/api/jobs?key_prefix=nokey"
[ "$(json "len(j['jobs'])")" = 0 ] || fail "key prefix"
req 200 "$URL/api/jobs?key=acme"
[ "$(json "','.join(sorted(set(x['key'] for x in j['jobs']))) + ' ' + str(len(j['jobs']))")" = "acme 3" ] ||
	fail "concurrency key filter: $(cat "$TMP/body")"
req 200 "$URL/api/jobs?queue=tenant&key=other&status=pending"
[ "$(json "len(j['jobs'])")" = 2 ] || fail "concurrency key with queue and status: $(cat "$TMP/body")"

req 200 "$URL/api/queues?queue=chain"
[ "$(json "j['queues'][0]['waiting']")" = 1 ] || fail "waiting count: $(cat "$TMP/body")"
req 200 "$URL/api/jobs?status=waiting"
[ "$(json "str([(x['id'], x['held']) for x in j['jobs']])")" = "[($waiting_id, 'waiting for job $pending_id')]" ] ||
	fail "waiting jobs: $(cat "$TMP/body")"
req 200 "$URL/api/jobs/$waiting_id"
[ "$(json "j['job']['wait']['reason']")" = "waiting for job $pending_id" ] || fail "why waiting: $(cat "$TMP/body")"
req 200 "$URL/api/keys?queue=tenant"
[ "$(json "str([(k['key'], k['pending'], k['limit']) for k in j['keys']]) + ' ' + str(j['total'])")" = "[('acme', 3, 2), ('other', 2, 2)] 2" ] ||
	fail "keys: $(cat "$TMP/body")"
req 400 "$URL/api/keys"
[ "$(json "j['error']['parameter']")" = queue ] || fail "keys without a queue: $(cat "$TMP/body")"
req 404 "$URL/api/keys?queue=tenant&key=nokey"

req 200 "$URL/api/schedules"
[ "$(json "[(s['name'], s['schedule'], s['paused']) for s in j['schedules']]")" = "[('nightly', '0 3 * * *', False)]" ] ||
	fail "schedules: $(cat "$TMP/body")"
# A lease has one JSON shape: the API's is lease show --json's.
psql_q "SELECT $S.fence_next('web-fence-$$', 'web-api-test')" >/dev/null || fail "fence_next"
req 200 "$URL/api/leases"
body_has '"leases":['
"$PG" --json lease show --schema "$S" "web-fence-$$" >"$TMP/lease.json" || fail "lease show --json"
[ "$(json "sorted(j['leases'][0])")" = "$(python3 -c "import json,sys; print(sorted(json.load(open(sys.argv[1]))))" "$TMP/lease.json")" ] ||
	fail "/api/leases and lease show --json differ: $(cat "$TMP/body") / $(cat "$TMP/lease.json")"
# A schedule and a job have one JSON shape each as well: the API's objects have the keys of
# cron show --json and queue show --json; a list's job has the preview in place of output,
# errors and the whole payload (queue list --json keeps those: a script reads them).
keys_of() { python3 -c 'import json,sys; print(sorted(json.loads(open(sys.argv[1]).readline())))' "$1"; }
req 200 "$URL/api/schedules"
"$PG" --json cron show --schema "$S" nightly >"$TMP/sched.json" || fail "cron show --json"
[ "$(json "sorted(j['schedules'][0])")" = "$(keys_of "$TMP/sched.json")" ] ||
	fail "/api/schedules and cron show --json differ: $(cat "$TMP/body") / $(cat "$TMP/sched.json")"
req 200 "$URL/api/jobs/$failed_id"
"$PG" --json queue show --schema "$S" "$failed_id" >"$TMP/job.json" || fail "queue show --json"
[ "$(json "sorted(j['job'])")" = "$(keys_of "$TMP/job.json")" ] ||
	fail "/api/jobs/ID and queue show --json differ: $(cat "$TMP/body") / $(cat "$TMP/job.json")"
"$PG" --json queue list --schema "$S" mail --limit 1 >"$TMP/list.json" || fail "queue list --json"
[ "$(keys_of "$TMP/list.json")" = "$(python3 -c 'import json,sys; print(sorted(set(json.load(open(sys.argv[1]))) - {"wait"}))' "$TMP/job.json")" ] ||
	fail "queue list --json and queue show --json differ: $(cat "$TMP/list.json") / $(cat "$TMP/job.json")"
req 200 "$URL/api/jobs?queue=mail&limit=1"
[ "$(json "sorted(j['jobs'][0])")" = "$(python3 -c 'import json,sys; print(sorted(set(json.load(open(sys.argv[1]))) - {"wait", "output", "errors", "payload"} | {"payload_preview"}))' "$TMP/job.json")" ] ||
	fail "/api/jobs and queue show --json differ: $(cat "$TMP/body") / $(cat "$TMP/job.json")"
req 200 "$URL/api/locks"
[ "$(json "[l['application'] for l in j['locks'] if l['key'] == '4242$$']")" = "['web-api-holder-$$']" ] ||
	fail "locks: $(cat "$TMP/body")"
body_has '"backend_start":"'
req 200 "$URL/api/blockers"
# Other tests' sessions may block each other on this server meanwhile: the shape only.
body_has '"roots":['
body_has '"sessions":['
req 200 "$URL/api/doctor"
body_has '"findings":[{"check":"server"'
req 200 "$URL/metrics"
grep -qi '^Content-Type: text/plain; version=0.0.4' "$TMP/headers" || fail "metrics type"
body_has 'pgcoord_queue_jobs{queue="mail",status="pending"} 54'
body_has 'pgcoord_cron_paused{schedule="nightly"} 0'
body_has 'pgcoord_queue_key_pending{queue="tenant",key="acme"} 3'
body_has 'pgcoord_queue_key_limit{queue="tenant",key="other"} 2'

# Bad parameters: 400 naming the parameter; unknown paths 404; other methods 405.
for bad in 'limit=0:limit' 'limit=501:limit' 'limit=x:limit' 'after=-1:after' 'after=abc:after' \
	'status=done:status' 'foo=1:foo' 'q=:q' 'key=:key' 'key_prefix=:key_prefix' \
	"key=$(head -c 129 /dev/zero | tr '\0' k):key"; do
	req 400 "$URL/api/jobs?${bad%%:*}"
	[ "$(json "j['error']['parameter']")" = "${bad##*:}" ] || fail "?${bad%%:*} named $(cat "$TMP/body")"
done
req 400 "$URL/api/queues?queue="
req 400 "$URL/api/queues?limit=3"
req 404 "$URL/api/nosuch"
req 404 "$URL/api/jobs/999999999"
req 404 "$URL/api/jobs/abc"
req 404 "$URL/nosuch.html"
req 405 -X PUT "$URL/api/queues"
req 405 -X DELETE "$URL/"

# Keyset pages: limit 5 until next is null, every job of the schema exactly once.
total=$(psql_q "SELECT (SELECT count(*) FROM $S.jobs) + (SELECT count(*) FROM $S.job_history)")
after=
: >"$TMP/ids"
for _ in $(seq 100); do
	req 200 "$URL/api/jobs?limit=5${after:+&after=$after}"
	json "'\n'.join(str(x['id']) for x in j['jobs'])" >>"$TMP/ids"
	after=$(json "j['next'] or ''")
	[ -z "$after" ] && break
done
[ -z "$after" ] || fail "paging never ended"
sed -i '/^$/d' "$TMP/ids"
[ "$(wc -l <"$TMP/ids")" -eq "$total" ] || fail "pages gave $(wc -l <"$TMP/ids") jobs, the schema holds $total"
[ "$(sort -u "$TMP/ids" | wc -l)" -eq "$total" ] || fail "a job came twice"
sort -n -r -c "$TMP/ids" 2>/dev/null || fail "pages not newest first"

# The Host of another site (DNS rebinding): refused.
req 403 -H "Host: evil.example:$WPORT" "$URL/api/queues"
body_has 'loopback'
req 200 -H "Host: localhost:$WPORT" "$URL/api/queues"

# Actions are off: every POST is 403, and nothing changed.
req 403 -X POST "$URL/api/jobs/$failed_id/retry"
body_has 'allow-actions'
req 403 -X POST "$URL/api/queues/mail/pause"
[ "$(psql_q "SELECT status FROM $S.job_history WHERE id = $failed_id")" = failed ] || fail "retried without actions"

# The sessions are read-only and bounded.
[ "$(psql_q "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgcoord/web-test-$$'")" -ge 1 ] ||
	fail "no session of the server"
# Its sessions terminated (as by a server restart): the next requests open new ones.
psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pgcoord/web-test-$$'" >/dev/null
ok=0
for _ in $(seq 50); do
	code=$(curl -s --max-time 10 -o "$TMP/body" -w '%{http_code}' "$URL/api/queues")
	[ "$code" = 200 ] && { ok=1; break; }
	[ "$code" = 503 ] || fail "after a terminate: $code $(cat "$TMP/body")"
	sleep 0.1
done
[ "$ok" = 1 ] || fail "the server did not reopen its sessions"
web_stop "$ro"
grep -q 'SIGTERM: stopping' "$TMP/ro.err" || fail "no stop line"

# ---- refusals at start ----
run 64 "$PG" web --schema "$S" --listen 127.0.0.1:0 --allow-actions
err_has '--allow-actions needs --auth-file'
printf 'ci:%s\n' "tok-$$-0123456789abcdef" >"$TMP/auth"
chmod 644 "$TMP/auth"
run 64 "$PG" web --schema "$S" --listen 127.0.0.1:0 --allow-actions --auth-file "$TMP/auth"
err_has 'permissions 0644'
err_has 'chmod 600'
chmod 600 "$TMP/auth"
run 64 "$PG" web --schema "$S" --listen 127.0.0.1:0 --allow-terminate
run 64 "$PG" web --schema "$S" --listen nowhere:80
run 64 "$PG" web --schema "$S" --listen 127.0.0.1:70000
run 64 "$PG" web --schema "$S" --refresh 10ms
printf '\n# nothing\n' >"$TMP/empty"
chmod 600 "$TMP/empty"
run 64 "$PG" web --schema "$S" --listen 127.0.0.1:0 --auth-file "$TMP/empty"
err_has 'holds no token'

# ---- actions allowed ----
TOK="tok-$$-0123456789abcdef"
web_start rw --schema "$S" --allow-actions --auth-file "$TMP/auth"
rw=$WPID
URL=$WURL
ORIGIN="Origin: http://127.0.0.1:$WPORT"
AUTH="Authorization: Bearer $TOK"
# Reads need the token too; /api/config and the page do not.
req 401 "$URL/api/queues"
grep -qi '^WWW-Authenticate: Bearer' "$TMP/headers" || fail "no challenge"
req 200 "$URL/api/config"
body_has '"auth":true'
body_has '"actions":true'
req 200 "$URL/"
req 200 -H "$AUTH" "$URL/api/queues"
req 200 -u "ci:$TOK" "$URL/api/queues"
req 401 -u "other:$TOK" "$URL/api/queues"
# No token, a wrong one: 401; cross-origin: 403; nothing done.
req 401 -X POST -H "$ORIGIN" "$URL/api/jobs/$failed_id/retry"
req 401 -X POST -H "$ORIGIN" -H "Authorization: Bearer ${TOK}x" "$URL/api/jobs/$failed_id/retry"
req 401 -X POST -H "$ORIGIN" -H "Authorization: Bearer tok" "$URL/api/jobs/$failed_id/retry"
req 403 -X POST -H "$AUTH" -H "Origin: http://evil.example" "$URL/api/jobs/$failed_id/retry"
body_has 'cross-origin'
req 403 -X POST -H "$AUTH" -H "Sec-Fetch-Site: cross-site" "$URL/api/jobs/$failed_id/retry"
[ "$(psql_q "SELECT status FROM $S.job_history WHERE id = $failed_id")" = failed ] || fail "a refused retry ran"
# Token and origin: done, and logged with who and from where.
req 200 -X POST -H "$AUTH" -H "$ORIGIN" "$URL/api/jobs/$failed_id/retry"
body_has '"ok":true'
[ "$(psql_q "SELECT status FROM $S.jobs WHERE id = $failed_id")" = pending ] || fail "retry did nothing"
grep -q "action by ci from 127.0.0.1:[0-9]*: retry job $failed_id: 1 job" "$TMP/rw.err" || { cat "$TMP/rw.err"; fail "retry not logged"; }
req 404 -X POST -H "$AUTH" -H "$ORIGIN" "$URL/api/jobs/999999999/retry"
req 200 -X POST -H "$AUTH" "$URL/api/jobs/$pending_id/cancel"
[ "$(psql_q "SELECT status FROM $S.job_history WHERE id = $pending_id")" = cancelled ] || fail "cancel did nothing"
req 409 -X POST -H "$AUTH" "$URL/api/jobs/$pending_id/cancel"
req 200 -X POST -H "$AUTH" "$URL/api/queues/sms/pause"
[ "$(psql_q "SELECT paused FROM $S.queues WHERE name = 'sms'")" = t ] || fail "pause"
req 200 -X POST -H "$AUTH" "$URL/api/queues/sms/resume"
[ "$(psql_q "SELECT paused FROM $S.queues WHERE name = 'sms'")" = f ] || fail "resume"
req 200 -X POST -H "$AUTH" "$URL/api/schedules/nightly/pause"
[ "$(psql_q "SELECT paused FROM $S.cron_schedules WHERE name = 'nightly'")" = t ] || fail "schedule pause"
req 200 -X POST -H "$AUTH" "$URL/api/schedules/nightly/trigger"
body_has 'triggered: job'
req 404 -X POST -H "$AUTH" "$URL/api/schedules/nosuch/trigger"
req 404 -X POST -H "$AUTH" "$URL/api/jobs/$failed_id/explode"
# Bulk: a dry count, then the action with the count confirmed; a stale count is refused.
req 200 -X POST -H "$AUTH" "$URL/api/jobs/bulk?op=cancel&queue=sms&dry_run=1"
[ "$(json "j['count']")" = 5 ] || fail "bulk count: $(cat "$TMP/body")"
upto=$(json "j['upto']")
req 400 -X POST -H "$AUTH" "$URL/api/jobs/bulk?op=cancel&queue=sms"
[ "$(json "j['error']['parameter']")" = confirm ] || fail "bulk without confirm"
req 409 -X POST -H "$AUTH" "$URL/api/jobs/bulk?op=cancel&queue=sms&confirm=4&upto=$upto"
[ "$(psql_q "SELECT count(*) FROM $S.jobs WHERE queue = 'sms'")" = 5 ] || fail "a refused bulk ran"
run 0 "$PG" queue enqueue sms --schema "$S" --payload '{"late":1}'
req 200 -X POST -H "$AUTH" "$URL/api/jobs/bulk?op=cancel&queue=sms&confirm=5&upto=$upto"
[ "$(json "j['rows']")" = 5 ] || fail "bulk: $(cat "$TMP/body")"
[ "$(psql_q "SELECT count(*) FROM $S.jobs WHERE queue = 'sms'")" = 1 ] || fail "bulk touched a job enqueued after its count"
grep -q "action by ci from 127.0.0.1:[0-9]*: bulk cancel queue sms status (default) key prefix (any): 5 jobs" "$TMP/rw.err" ||
	{ cat "$TMP/rw.err"; fail "bulk not logged"; }
req 400 -X POST -H "$AUTH" "$URL/api/jobs/bulk?op=drop&queue=sms&dry_run=1"
# Sessions: by pid and start only; terminate needs --allow-terminate.
hpid=$(psql_q "SELECT pid FROM pg_stat_activity WHERE application_name = 'web-api-holder-$$'")
req 200 -H "$AUTH" "$URL/api/locks"
hstart=$(json "[l['backend_start'] for l in j['locks'] if l['pid'] == $hpid][0]")
req 400 -X POST -H "$AUTH" "$URL/api/sessions/$hpid/cancel"
req 403 -X POST -H "$AUTH" "$URL/api/sessions/$hpid/terminate?backend_start=$hstart"
req 404 -X POST -H "$AUTH" "$URL/api/sessions/$hpid/cancel?backend_start=2000-01-01T00:00:00.000000Z"
req 200 -X POST -H "$AUTH" "$URL/api/sessions/$hpid/cancel?backend_start=$hstart"
body_has '"done":true'
grep -Eq "action by ci from 127.0.0.1:[0-9]*: cancel pid $hpid \(started $hstart\): (done|session gone)" "$TMP/rw.err" ||
	{ cat "$TMP/rw.err"; fail "cancel not logged"; }
web_stop "$rw"

# ---- hidden payloads ----
web_start hide --schema "$S" --hide-payloads
URL=$WURL
req 200 "$URL/api/jobs?queue=mail&limit=3"
body_lacks 's3cr3t'
body_has '"payload_hidden":true'
body_has '"payload_preview":null'
req 200 "$URL/api/jobs/$((pending_id - 1))"
body_lacks 's3cr3t'
body_has '"payload":null'
# A search cannot tell what a hidden payload holds.
req 200 "$URL/api/jobs?q=s3cr3t-42"
[ "$(json "len(j['jobs'])")" = 0 ] || fail "a search looked into hidden payloads"
req 200 "$URL/api/schedules"
body_has '"payload":null'
web_stop "$WPID"

# ---- a monitoring role: pg_monitor and SELECT on the schema's tables ----
wait "$holder" 2>/dev/null
psql -X -q "$PGCOORD_TEST_DSN" -c "SET application_name = 'web-api-holder-$$'" \
	-c "SELECT pg_advisory_lock(4242$$)" -c "SELECT pg_sleep(900)" >/dev/null 2>&1 &
holder=$!
for _ in $(seq 100); do
	[ "$(psql_q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = (4242$$ & 4294967295)")" = 1 ] && break
	sleep 0.1
done
psql_q "CREATE ROLE $MON LOGIN; GRANT pg_monitor TO $MON; GRANT USAGE ON SCHEMA $S TO $MON;
  GRANT SELECT ON ALL TABLES IN SCHEMA $S TO $MON;
  CREATE ROLE $NOGRANT LOGIN" >/dev/null || fail "create roles"
# The test DSN as another role: the URI's user replaced, or user= added to the keyword form.
as_role() {
	case "$PGCOORD_TEST_DSN" in
	postgres://* | postgresql://*)
		python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); h = p.netloc.rsplit("@", 1)[-1]
print(u.urlunsplit(p._replace(netloc=sys.argv[2] + "@" + h)))' "$PGCOORD_TEST_DSN" "$1" ;;
	*) echo "$PGCOORD_TEST_DSN user=$1" ;;
	esac
}
mondsn=$(as_role "$MON")
WEB_DSN=$mondsn web_start mon --schema "$S"
URL=$WURL
for p in queues jobs schedules leases locks blockers doctor workers; do req 200 "$URL/api/$p"; done
req 200 "$URL/api/jobs?status=failed"
req 200 "$URL/api/locks"
body_has "\"application\":\"web-api-holder-$$\""
# pg_monitor: the queries of other roles' sessions are readable.
req 200 "$URL/api/blockers"
req 200 "$URL/api/doctor"
body_lacks 'permission denied'

web_stop "$WPID"
# Without the grants: the panels that read the schema's tables say what they need.
WEB_DSN=$(as_role "$NOGRANT") web_start nog --schema "$S"
URL=$WURL
req 403 "$URL/api/queues"
body_has '"sqlstate":"42501"'
body_has "\"needs\":\"GRANT USAGE ON SCHEMA $S TO <role>; GRANT SELECT ON ALL TABLES IN SCHEMA $S TO <role>\""
req 403 "$URL/api/jobs"
req 200 "$URL/api/blockers"
req 200 "$URL/api/doctor"
web_stop "$WPID"

# An address in use: one line naming it and the system's reason (libmicrohttpd's own
# "Failed to bind to port 0" is not passed on), exit 78; the same for a worker's --metrics.
web_start busy --schema "$S"
run 78 "$PG" web --schema "$S" --listen "127.0.0.1:$WPORT"
err_has "web: cannot listen on 127.0.0.1:$WPORT: Address already in use"
err_lines 1
run 78 timeout 30 "$PG" worker --schema "$S" -q busyq --metrics "127.0.0.1:$WPORT" -- true
err_has "cannot listen on 127.0.0.1:$WPORT for --metrics: Address already in use"
grep -q "port 0" "$TMP/err" && fail "the port 0 line is still there"
web_stop "$WPID"
exit 0
