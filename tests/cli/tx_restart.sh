# tx_restart.sh - pgcoord tx across a real server restart (pg_ctl restart of the pg-tmp
# server): the session dies before COMMIT, reconnecting fails while the server is down, and
# the script runs again, once, when it is back. Runs alone (it restarts the shared server).
. "$(dirname "$0")/lib.sh"

skip_without_pg
if [ -z "${PGCOORD_TEST_PGDIR:-}" ] || [ ! -d "$PGCOORD_TEST_PGDIR/data" ]; then
	echo "skipped: PGCOORD_TEST_PGDIR is not set (the server was not started by scripts/with-pg)" >&2
	exit 77
fi
T="timeout 120"
DSN=$PGCOORD_TEST_DSN
S=pgc_txrs_$$
psql_q "CREATE SCHEMA $S; CREATE TABLE $S.t (id int PRIMARY KEY); CREATE SEQUENCE $S.first" >/dev/null ||
	fail "setup"
trap 'psql_q "DROP SCHEMA $S CASCADE" >/dev/null 2>&1; rm -rf "$TMP"' EXIT

# pg_ctl as the server's owner, as scripts/pg-tmp runs it.
bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
[ -x "$bindir/pg_ctl" ] || bindir=$(dirname "$(command -v pg_ctl)")
pg_ctl_as_owner() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u "$(stat -c %U "$PGCOORD_TEST_PGDIR/data")" -- "$bindir/pg_ctl" "$@"
	else
		"$bindir/pg_ctl" "$@"
	fi
}

# The first attempt inserts, then sleeps until the restart kills it; later attempts do not
# sleep. A second application of the insert would fail on the primary key.
$T "$PG" -d "$DSN" --json tx --retries 60 --max-backoff 500ms -c "
INSERT INTO $S.t VALUES (1);
SELECT pg_sleep(CASE WHEN nextval('$S.first') = 1 THEN 30 ELSE 0 END);" >"$TMP/tx.out" 2>"$TMP/tx.err" &
txpid=$!
for _ in $(seq 200); do
	[ "$(psql_q "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%$S.first%' AND state = 'active' AND pid <> pg_backend_pid()")" = 1 ] && break
	sleep 0.05
done
pg_ctl_as_owner -D "$PGCOORD_TEST_PGDIR/data" -m fast -w -t 60 restart >"$TMP/pg_ctl.log" 2>&1 ||
	{ cat "$TMP/pg_ctl.log"; fail "pg_ctl restart"; }
wait $txpid
rc=$?
[ $rc -eq 0 ] || { cat "$TMP/tx.out" "$TMP/tx.err"; fail "pgcoord tx exited $rc across the restart"; }
python3 - "$TMP/tx.out" <<'EOF' || { cat "$TMP/tx.out" "$TMP/tx.err"; fail "tx --json after the restart"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["status"] == "committed" and d["attempts"] >= 2 and d["reconnects"] == 1, d
assert d["sqlstates"][0] in ("57P01", None), d
EOF
grep -q "reconnecting and retrying" "$TMP/tx.err" || { cat "$TMP/tx.err"; fail "no retry announced"; }
[ "$(psql_q "SELECT count(*) FROM $S.t")" = 1 ] || fail "the row is not there exactly once"
echo ok
