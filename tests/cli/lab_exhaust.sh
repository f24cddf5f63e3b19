# lab_exhaust.sh - pgcoord lab advisory-exhaust --allow-exhaust on a scratch server of its own
# with a tiny lock table (max_locks_per_transaction = 10, max_connections = 20): session
# advisory locks run it out (53200) while far more rows FOR UPDATE do not, the locks go with
# their session and the server is usable afterwards; with another client connected, and
# without --allow-exhaust, the experiment stops short and says why
. "$(dirname "$0")/lib.sh"
PGTMP="$SRC/scripts/pg-tmp"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null ||
	{ [ "${PGCOORD_CI:-}" = 1 ] && fail "no server binaries"; echo "skipped: no server binaries" >&2; exit 77; }
dir=$(mktemp -d /tmp/pgc-exhaust.XXXXXX)
cleanup() {
	local p
	for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	"$PGTMP" destroy "$dir" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT

dsn=$(timeout 120 "$PGTMP" start "$dir") || fail "pg-tmp start"
psql -X -q -v ON_ERROR_STOP=1 "$dsn" -c "ALTER SYSTEM SET max_locks_per_transaction = 10" \
	-c "ALTER SYSTEM SET max_connections = 20" || fail "cannot shrink the lock table"
"$PGTMP" stop "$dir" || fail "pg-tmp stop"
dsn=$(timeout 120 "$PGTMP" start "$dir") || fail "pg-tmp restart"
q() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$dsn" -c "$1"; }
[ "$(q "SHOW max_locks_per_transaction")" = 10 ] || fail "max_locks_per_transaction is not 10"
export PGCOORD_DSN="$dsn"

# The real exhaustion: nobody else is connected.
run 0 timeout 60 "$PG" lab --json --allow-exhaust advisory-exhaust
python3 - "$TMP/out" <<'PY' || { cat "$TMP/out"; fail "exhaustion"; }
import json, sys
e = json.loads(open(sys.argv[1]).readline())
v = e["values"]
assert e["name"] == "advisory-exhaust" and e["status"] == "PASS", e
assert v["exhausted"] is True, v
assert v["sqlstate"] == "53200" and "out of shared memory" in v["message"], v
assert v["lock_table_slots"] == 10 * (20 + v["max_prepared_transactions"]), v
assert v["advisory_locks_held"] >= v["lock_table_slots"], v
assert v["advisory_locks_after_release"] == 0 and v["server_usable_after"] is True, v
assert v["rows_locked"] >= 10 * v["advisory_locks_held"], v
assert v["row_lock_tuple_rows"] == 0 and v["row_lock_pg_locks_rows"] < 20, v
PY
# Another session takes locks that need the shared table: nothing is left over.
[ "$(q "BEGIN; CREATE TABLE after_exhaust (id int); LOCK TABLE after_exhaust; SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'; COMMIT")" = 0 ] ||
	fail "advisory locks left after the experiment"
q "DROP TABLE after_exhaust" >/dev/null || fail "server not usable after the experiment"

# Another client connected: --allow-exhaust is not enough, the experiment stays bounded.
psql -X -q "$dsn" -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
holder=$!
for _ in $(seq 1 100); do
	[ "$(q "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%'")" -eq 1 ] && break
	sleep 0.1
done
run 0 timeout 60 "$PG" lab --json --allow-exhaust advisory-exhaust
python3 - "$TMP/out" <<'PY' || { cat "$TMP/out"; fail "bounded with another client"; }
import json, sys
v = json.loads(open(sys.argv[1]).readline())["values"]
assert v["exhausted"] is False and v["other_client_sessions"] >= 1, v
assert v["not_exhausted_because"] == "other client sessions are connected", v
assert v["advisory_locks_held"] == 150 and v["advisory_locks_after_release"] == 0, v
PY
kill $holder 2>/dev/null
wait $holder 2>/dev/null

# Without --allow-exhaust: bounded, and it says how to ask.
run 0 timeout 60 "$PG" lab advisory-exhaust
out_has "^PASS  advisory-exhaust  *bounded, not exhausted because allow_exhaust (--allow-exhaust) is off"
echo ok
