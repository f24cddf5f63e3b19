# web_forest.sh - the Blocking forest page in a real browser: a session that two sessions of
# one tree block is drawn once, as a card with its buttons, and as "(shown above)" where the
# tree reaches it again (as pgcoord blockers prints it); a root that is idle in a transaction
# is offered no "Cancel query", which does nothing there, only Terminate.
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/web_lib.sh"
need_chromium
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_webfor_$$
K1=$((8000000 + $$))
K2=$((9000000 + $$))
APP=forest-$$
FD=()
cleanup() {
	web_cleanup
	psql_q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE '$APP-%'" >/dev/null 2>&1
	for f in "${FD[@]}"; do eval "exec $f>&-" 2>/dev/null; done
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
run 0 "$PG" init --schema "$S"

# open NAME: a psql session named $APP-NAME fed through a pipe, left open.
open_session() {
	mkfifo "$TMP/$1.in"
	PGAPPNAME="$APP-$1" psql -X -q "$PGCOORD_TEST_DSN" <"$TMP/$1.in" >/dev/null 2>&1 &
	local fd
	exec {fd}>"$TMP/$1.in"
	FD+=("$fd")
	eval "S_$1=$fd"
}
say() { local v="S_$1"; echo "$2" >&"${!v}"; }
waiting() { psql_q "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$APP-$1' AND wait_event_type = 'Lock'"; }

# R holds K1 and sits idle in its transaction; X and Y hold K2 shared and wait for K1; Z wants
# K2 exclusive and waits for both X and Y.
for n in R X Y Z; do open_session "$n"; done
say R "BEGIN; SELECT pg_advisory_xact_lock($K1);"
wait_query 60 "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$APP-R' AND state = 'idle in transaction'" 1
say X "BEGIN; SELECT pg_advisory_xact_lock_shared($K2); SELECT pg_advisory_xact_lock($K1);"
say Y "BEGIN; SELECT pg_advisory_xact_lock_shared($K2); SELECT pg_advisory_xact_lock($K1);"
wait_query 60 "SELECT count(*) FROM pg_stat_activity WHERE application_name IN ('$APP-X', '$APP-Y') AND wait_event_type = 'Lock'" 2
say Z "SELECT pg_advisory_lock($K2);"
wait_query 60 "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$APP-Z' AND wait_event_type = 'Lock'" 1
pidof() { psql_q "SELECT pid FROM pg_stat_activity WHERE application_name = '$APP-$1'"; }
R=$(pidof R)
Z=$(pidof Z)

umask 077
echo "forest-token-$$" >"$TMP/token"
web_start forest --schema "$S" --allow-actions --allow-terminate --auth-file "$TMP/token"
dom() {
	timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
		--user-data-dir="$TMP/chrome" --virtual-time-budget=6000 --dump-dom "$1" \
		>"$TMP/dom" 2>"$TMP/chrome.err" || { tail -5 "$TMP/chrome.err"; fail "chromium could not load $1"; }
}
# The page as seen once its data is in; the token comes in the link's fragment.
end=$((SECONDS + 120))
while :; do
	dom "$WURL/#blockers?token=forest-token-$$"
	grep -q "pid $Z" "$TMP/dom" && grep -q "pid $R" "$TMP/dom" && break
	[ $SECONDS -lt $end ] || { cat "$TMP/dom"; fail "the forest never showed pids $R and $Z"; }
	sleep 1
done
python3 - "$TMP/dom" "$R" "$Z" <<'PY' || exit 1
import re, sys
dom, root, z = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
nodes = re.findall(r'<div class="node( root)?">(.*?)</div>(?=<ul|</li>)', dom, re.S)
def cards(pid):
    return [n for n in nodes if re.match(r'<strong>pid %s</strong>' % pid, n[1])]
zc = cards(z)
assert len(zc) == 2, 'pid %s is drawn %d times, expected a card and a "(shown above)" line: %s' % (z, len(zc), zc)
full = [n for n in zc if '(shown above)' not in n[1]]
assert len(full) == 1, 'pid %s is drawn in full %d times' % (z, len(full))
rc = cards(root)
assert len(rc) == 1, rc
assert 'Cancel query' not in rc[0][1], 'the idle-in-transaction root offers Cancel query'
assert 'Terminate' in rc[0][1], 'the root offers no Terminate'
PY
echo ok
