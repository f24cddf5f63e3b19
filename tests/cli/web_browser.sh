# web_browser.sh - the dashboard in a real browser (Debian's chromium, headless) over hostile
# data from everywhere the database can give it: a queue, payloads, error texts, unique keys,
# a concurrency key, a schedule name, a lease, a lock name, application_name and query text of blocking
# sessions. Each page must show the strings as text, hold no element or attribute they carry,
# and run none of their scripts (each would change document.title or set data-pwned). A
# screenshot of the overview is kept in $PGCOORD_WEB_SHOTS (default: the test's own folder).
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/web_lib.sh"
need_chromium
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_webbr_$$
K=$((7000000 + $$))
pids=()
cleanup() {
	web_cleanup
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	# The blocker sleeps for up to 10 minutes: end it and its waiter with the test.
	psql_q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE '%pg_advisory%lock($K)%'
	  OR query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()" >/dev/null 2>&1
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
run 0 "$PG" init --schema "$S"

# Every script here would change the title or mark the document.
Q="<script>document.title='Q'</script>"
P1="\"><img src=x onerror=\"document.title='P'\">"
P2="javascript:document.documentElement.setAttribute('data-pwned','link')"
E="<img src=x onerror=document.documentElement.setAttribute('data-pwned','err')>"
UK="javascript:document.title='K'"
C="<svg/onload=document.title='C'>"
LN="<img/src=x/onerror=document.title='N'>"
LH="\"><iframe/src=javascript:document.title='H'>"
APP="<img src=x onerror=document.title='A'>"
APP2="\"><script>document.title='W'</script>"
QT="<script>document.title='T'</script>"
CK="<img src=x onerror=document.title='Y'>"

payload=$(python3 -c 'import json, sys; print(json.dumps({"a": sys.argv[1], "link": sys.argv[2], "html": "<b>bold</b>"}))' "$P1" "$P2")
run 0 "$PG" queue enqueue "$Q" --schema "$S" --payload "$payload"
run 0 "$PG" queue enqueue "$Q" --schema "$S" --payload "$payload" --unique-key "$UK"
run 0 "$PG" queue enqueue mail --schema "$S" --payload '{"x":1}'
run 0 "$PG" queue enqueue mail --schema "$S" --payload '{"x":2}' --key "$CK"
# A failed job whose error and error history carry markup.
fid=$(psql_q "SELECT min(id) FROM $S.jobs")
psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_TEST_DSN" -v e="$E" >/dev/null <<SQL || fail "failed job"
WITH d AS (DELETE FROM $S.jobs WHERE id = $fid RETURNING *)
INSERT INTO $S.job_history (id, queue, status, priority, run_at, attempts, max_attempts, last_error, errors,
  unique_key, created_at, started_at, payload)
SELECT id, queue, 'failed', priority, run_at, 1, max_attempts, :'e', jsonb_build_array(jsonb_build_object('attempt', 1, 'error', :'e')),
  unique_key, created_at, now(), payload FROM d;
SQL
run 0 "$PG" cron add --schema "$S" "$C" '*/5 * * * *' --queue "$Q" --payload "$payload"
psql -X -q -v ON_ERROR_STOP=1 "$PGCOORD_TEST_DSN" -v n="$LN" -v h="$LH" -v k="$K" >/dev/null <<SQL || fail "lease and lock name"
INSERT INTO $S.leases (name, token, kind, holder, granted_at, renewed_at, expires_at, ttl_ms)
VALUES (:'h', 1, 'lease', :'h', now(), now(), now() + interval '1 hour', 3600000);
INSERT INTO $S.lock_names (key, name) VALUES (:k, :'n');
SQL
# A root blocker with markup in its application_name and query, and a waiter behind it.
psql -X -q "$PGCOORD_TEST_DSN" -v app="$APP" -v qt="$QT" -v k="$K" >/dev/null 2>&1 <<SQL &
SET application_name = :'app';
BEGIN;
SELECT pg_advisory_xact_lock(:k);
SELECT :'qt' AS x, pg_sleep(600);
SQL
pids+=($!)
# (The query text holds the literal with its quotes doubled.)
wait_query 120 "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%document.title=''''T''''%' AND state = 'active' AND pid <> pg_backend_pid()" 1
psql -X -q "$PGCOORD_TEST_DSN" -v app="$APP2" -v k="$K" >/dev/null 2>&1 <<SQL &
SET application_name = :'app';
SELECT pg_advisory_lock(:k);
SQL
pids+=($!)
wait_query 120 "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = $K" 1

web_start br --schema "$S"
URL=$WURL

# chromium PAGE: the page's DOM after its scripts ran (virtual time: its polls included).
dom() {
	chrome_dom "$URL/$1"
	[ -s "$TMP/dom" ] || fail "chromium gave no DOM for $1"
}
# The DOM as text: entities decoded, tags dropped (what a reader sees).
text_of() { python3 -c 'import html, re, sys; print(html.unescape(re.sub(r"<[^>]*>", " ", open(sys.argv[1]).read())))' "$TMP/dom"; }
# see PAGE TEXT...: loads PAGE until every TEXT is shown (the page fills in as its requests
# answer, later on a loaded machine), checking every load for injection; fails after 120 s
# naming the first text still missing.
see() {
	page=$1
	shift
	local end=$((SECONDS + 120)) t missing
	while :; do
		dom "$page"
		clean
		text_of >"$TMP/text"
		missing=
		for t in "$@"; do
			grep -qF -- "$t" "$TMP/text" || { missing=$t; break; }
		done
		[ -z "$missing" ] && return 0
		[ $SECONDS -ge $end ] && { cat "$TMP/dom"; fail "$page: the text $missing is not shown"; }
		sleep 1
	done
}
# Nothing injected: no element the data carried, no handler attribute, no script link, no
# marker, the title untouched, and one script only: app.js.
clean() {
	python3 - "$TMP/dom" "$page" <<'PY' || exit 1
import re, sys
dom, page = open(sys.argv[1]).read(), sys.argv[2]
bad = []
tags = re.findall(r'<([a-zA-Z][a-zA-Z0-9]*)([^>]*)>', dom)
for name, attrs in tags:
    low = name.lower()
    if low in ('img', 'iframe', 'b', 'object', 'embed'):
        bad.append('element <%s%s>' % (name, attrs))
    if low == 'svg' and 'class="spark"' not in attrs:
        bad.append('element <svg%s>' % attrs)
    if low == 'script' and 'src="/app.js"' not in attrs:
        bad.append('element <script%s>' % attrs)
    # Attribute names outside quoted values (a value may hold escaped markup as text).
    for a in re.findall(r'\s([a-zA-Z-]+)=', re.sub(r'"[^"]*"', '""', attrs)):
        if a.lower().startswith('on') or a.lower() == 'data-pwned':
            bad.append('attribute %s in <%s%s>' % (a, name, attrs))
    for v in re.findall(r'(?:href|src|action)="([^"]*)"', attrs):
        if v.strip().lower().startswith('javascript:') or (name == 'a' and not v.startswith('#')):
            bad.append('link %s' % v)
if re.search(r'<html[^>]*data-pwned', dom):
    bad.append('the document was marked')
m = re.search(r'<title>(.*?)</title>', dom, re.S)
if not m or m.group(1) != 'pgcoord':
    bad.append('the title changed: %r' % (m.group(1) if m else None))
if bad:
    print('FAIL: %s: %s' % (page, '; '.join(bad)), file=sys.stderr)
    sys.exit(1)
PY
}

see '#overview' "$Q" "blocks 1 session ($APP)"
grep -q 'class="problems"' "$TMP/dom" || fail "no problems list on the overview"

qenc=$(python3 -c 'import sys, urllib.parse as u; print(u.quote(sys.argv[1], safe=""))' "$Q")
for p in '#jobs' "#jobs?queue=$qenc" "#jobs?queue=$qenc&status=failed"; do
	see "$p" "$Q" "$E"
done
see '#jobs' "$UK"
# The keys of a queue, and the jobs of one key.
ckenc=$(python3 -c 'import sys, urllib.parse as u; print(u.quote(sys.argv[1], safe=""))' "$CK")
for p in '#jobs?queue=mail' "#jobs?queue=mail&key=$ckenc"; do
	see "$p" "Keys of mail" "$CK"
done
see "#job?id=$fid" "$E" "$P2" '<b>bold</b>' "Job $fid"
see '#schedules' "$C" "$Q"
see '#leaders' "$LH" "$LN" "$APP"
see '#blockers' "SELECT '<script>document.title=''T''</script>' AS x" "$APP" "$APP2" 'root blocker'
see '#doctor' 'lock_timeout'
page="#job?id=$qenc"
dom "$page"
clean

# The overview's problems come in the order of what matters: the blocked pile-up and the
# failed job (in red) before the stale queue.
psql_q "INSERT INTO $S.job_history (id, queue, status, priority, run_at, attempts, max_attempts, created_at, payload)
  VALUES (999999, 'mail', 'failed', 0, now(), 1, 1, now(), '{}')" >/dev/null || fail "a fresh failure"
page='#overview'
see "$page" 'failed for good' ' blocks '
python3 - "$TMP/dom" <<'PY' || fail "the overview's problems are out of order"
import re, sys
items = re.findall(r'<li class="(\w+)">(.*?)</li>', open(sys.argv[1]).read(), re.S)
text = [re.sub(r'<[^>]*>', '', t) for _, t in items]
blocks = next(i for i, t in enumerate(text) if ' blocks ' in t)
failed = next(i for i, t in enumerate(text) if 'failed for good' in t)
assert blocks < failed, text
assert items[failed][0] == 'error', items[failed]
PY
# A screenshot of the overview, to be looked at.
shots=${PGCOORD_WEB_SHOTS:-$TMP}
mkdir -p "$shots"
timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars \
	--user-data-dir="$TMP/chrome" --window-size=1280,900 --virtual-time-budget=6000 \
	--screenshot="$shots/web-overview.png" "$URL/#overview" >/dev/null 2>&1 ||
	fail "chromium could not take the screenshot"
[ -s "$shots/web-overview.png" ] || fail "no screenshot"
web_stop "$WPID"

# The overview never says "No problems seen." when it sees nothing.
# Before the token: "token needed", in red, not a green all-clear.
umask 077
echo "browser-token-$$" >"$TMP/token"
web_start tok --schema "$S" --auth-file "$TMP/token"
URL=$WURL
see '#overview' 'token needed'
grep -q 'No problems seen' "$TMP/dom" && fail "no problems seen, before the token"
grep -q '<li class="error">token needed' "$TMP/dom" || fail "token needed is not an error"
web_stop "$WPID"
# The database out of reach (the role may no longer log in, its sessions ended): "cannot
# reach the database".
R=pgc_webbr_role_$$
psql_q "CREATE ROLE $R LOGIN" >/dev/null || fail "create role"
case "$PGCOORD_TEST_DSN" in
postgres://* | postgresql://*)
	RDSN=$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); h = p.netloc.rsplit("@", 1)[-1]
print(u.urlunsplit(p._replace(netloc=sys.argv[2] + "@" + h)))' "$PGCOORD_TEST_DSN" "$R") ;;
*) RDSN="$PGCOORD_TEST_DSN user=$R" ;;
esac
WEB_DSN=$RDSN web_start down --schema "$S"
URL=$WURL
psql_q "ALTER ROLE $R NOLOGIN; SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '$R'" >/dev/null
see '#overview' 'cannot reach the database'
grep -q 'No problems seen' "$TMP/dom" && fail "no problems seen, with the database out of reach"
web_stop "$WPID"
psql_q "DROP ROLE IF EXISTS $R" >/dev/null
exit 0
