# diag_signal.sh - cancel and terminate: who it is first, --yes or a typed confirmation,
# refusals, bad input
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/diag_lib.sh"

alive() { [ "$(dbq "SELECT count(*) FROM pg_stat_activity WHERE pid = $1")" = 1 ]; }

open V; V=$(pid V)
send V "BEGIN; SELECT 1;"
state "$V" "idle in transaction"

# Without --yes and without a terminal: refused, exit 64, nothing changed.
run 64 "$PG" -d "$DB_DSN" terminate "$V" </dev/null
out_has "^pid $V  client backend  database $DB .* application $APP-V"
out_has "state: idle in transaction for"
out_has "blocks no one"
err_has "refusing to terminate pid $V without --yes"
err_lines 1
alive "$V" || fail "the session was terminated without --yes"
run 64 "$PG" -d "$DB_DSN" cancel "$V" </dev/null
alive "$V" || fail "gone after a refused cancel"

# A typed confirmation on a terminal: the wrong pid stops it, the right one does it.
if command -v script >/dev/null 2>&1; then
	printf '12345\n' | timeout 30 script -qec "'$PG' -d '$DB_DSN' terminate $V" /dev/null >"$TMP/tty" 2>&1
	grep -q "Type the pid ($V) to terminate it" "$TMP/tty" || { cat "$TMP/tty"; fail "no prompt on a terminal"; }
	grep -q "not confirmed; nothing was done" "$TMP/tty" || { cat "$TMP/tty"; fail "wrong pid accepted"; }
	alive "$V" || fail "terminated after a wrong confirmation"
fi

# cancel --yes on a running query: the query stops, the session stays.
open S; S=$(pid S)
send S "SELECT pg_sleep(30);"
state "$S" "active"
run 0 "$PG" -d "$DB_DSN" cancel --yes "$S"
out_has "^canceled the query of pid $S; the session is now idle"
alive "$S" || fail "cancel ended the session"

# terminate --yes: the session is gone.
run 0 "$PG" -d "$DB_DSN" terminate --yes "$V"
out_has "^terminated pid $V: the session is gone$"
alive "$V" && fail "the session is still there"
if command -v script >/dev/null 2>&1; then
	printf '%s\n' "$S" | timeout 30 script -qec "'$PG' -d '$DB_DSN' terminate $S" /dev/null >"$TMP/tty" 2>&1
	grep -q "terminated pid $S: the session is gone" "$TMP/tty" || { cat "$TMP/tty"; fail "typed confirmation did not terminate"; }
	alive "$S" && fail "the session is still there after a typed confirmation"
fi

# --json: the session and the outcome.
open J; J=$(pid J)
run 0 "$PG" -d "$DB_DSN" --json terminate --yes "$J"
jcheck 'd["action"], d["pid"], d["done"], d["gone"], d["session"]["application"]' "('terminate', $J, True, True, '$APP-J')"

# No privilege: the server refuses, pgcoord says so and exits 1; the session stays.
ROLE=pgc_diag_role_$$
psql_q "CREATE ROLE $ROLE LOGIN" >/dev/null
trap 'psql -X -q "$PGCOORD_TEST_DSN" -c "DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1; diag_cleanup' EXIT
case "$DB_DSN" in
*://*) ROLE_DSN="$DB_DSN&user=$ROLE" ;;
*) ROLE_DSN="$DB_DSN user=$ROLE" ;;
esac
open P; P=$(pid P)
run 1 "$PG" -d "$ROLE_DSN" terminate --yes "$P"
err_has "must be a superuser to terminate superuser process (SQLSTATE 42501)"
alive "$P" || fail "the session went away although the server refused"

# Bad input.
run 64 "$PG" -d "$DB_DSN" terminate abc
err_has 'invalid pid "abc": expected a positive number'
run 64 "$PG" -d "$DB_DSN" cancel -- -4
err_has 'invalid pid "-4"'
run 64 "$PG" -d "$DB_DSN" terminate
err_has "no PID given"
run 64 "$PG" -d "$DB_DSN" terminate 1 2
run 1 "$PG" -d "$DB_DSN" terminate --yes 2147483000
err_has "no session with pid 2147483000"
run 1 "$PG" -d "$DB_DSN" cancel --yes "$V"
err_has "no session with pid $V"
run 69 "$PG" -d "postgresql://127.0.0.1:1/x?connect_timeout=3" terminate --yes 5
run 0 "$PG" terminate --help
out_has "^Usage: pgcoord \[-d DSN\] terminate"
run 0 "$PG" help cancel
exit 0
