# web_forest.sh - the Blocking forest page in a real browser: a session that two sessions of
# one tree block is drawn once, as a card with its buttons, and as "(shown above)" where the
# tree reaches it again (as pgcoord blockers prints it); a root that is idle in a transaction
# is offered no "Cancel query", which does nothing there, only Terminate.
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/web_lib.sh"
need_chromium
# Sessions on a database of the test's own (diag_lib.sh), each ended after 300 s at most.
SESSION_LIFETIME=300
. "$(dirname "$0")/diag_lib.sh"
trap 'web_cleanup; diag_cleanup' EXIT
K1=$((8000000 + $$))
K2=$((9000000 + $$))
run 0 "$PG" -d "$DB_DSN" init

# R holds K1 and sits idle in its transaction; X and Y hold K2 shared and wait for K1; Z wants
# K2 exclusive and waits for both X and Y. Their waits last as long as the sessions do.
for n in R X Y Z; do
	open "$n"
	send "$n" "SET lock_timeout = 0; SET idle_in_transaction_session_timeout = 0;"
done
R=$(pid R)
Z=$(pid Z)
send R "BEGIN; SELECT pg_advisory_xact_lock($K1);"
state "$R" "idle in transaction"
send X "BEGIN; SELECT pg_advisory_xact_lock_shared($K2); SELECT pg_advisory_xact_lock($K1);"
send Y "BEGIN; SELECT pg_advisory_xact_lock_shared($K2); SELECT pg_advisory_xact_lock($K1);"
waiting "$(pid X)" "$(pid Y)"
send Z "SELECT pg_advisory_lock($K2);"
waiting "$Z"

umask 077
echo "forest-token-$$" >"$TMP/token"
WEB_DSN=$DB_DSN web_start forest --allow-actions --allow-terminate --auth-file "$TMP/token"
# The page as seen once its data is in; the token comes in the link's fragment.
end=$((SECONDS + 120))
while :; do
	chrome_dom "$WURL/#blockers?token=forest-token-$$"
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
