# json_errors.sh - under --json every failure is also one JSON object on stdout (the message
# stays on stderr), from every command and every kind of error
. "$(dirname "$0")/lib.sh"

# json_error EXIT [CLASS]: stdout is exactly one line, {"error":{...}} with that exit and class
# (CLASS "null": none known), and the message on stderr is the object's message.
json_error() {
	python3 - "$TMP/out" "$TMP/err" "$1" "${2:-}" <<'PY' || { cat "$TMP/out"; fail "not one JSON error object"; }
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
assert len(lines) == 1, lines
d = json.loads(lines[0])
assert list(d) == ["error"], d
e = d["error"]
assert set(e) == {"message", "detail", "hint", "sqlstate", "class", "reason", "exit"}, e
assert e["exit"] == int(sys.argv[3]), e
if sys.argv[4]:
    assert e["class"] == (None if sys.argv[4] == "null" else sys.argv[4]), e
assert e["message"] and "pgcoord: " + e["message"] in open(sys.argv[2]).read(), e
PY
}

# Connection refused: exit 69, class retry-later; the libpq lines are joined by one space.
run 69 "$PG" --json -d "postgresql://nobody@127.0.0.1:1/x?connect_timeout=5" info
json_error 69 retry-later
grep -q '  ' "$TMP/err" && fail "a double space in the message: $(cat "$TMP/err")"
# Usage errors: the global parser's, a command's getopt and a command's own checks.
run 64 "$PG" --json --bogus info
json_error 64 usage
run 64 "$PG" --json no-such-command
json_error 64 usage
run 64 "$PG" --json info --bogus
json_error 64 usage
run 64 "$PG" --json lease show --token 3
json_error 64 usage
# A command's own --json counts as well.
run 64 "$PG" blockers --json --count 2
json_error 64 usage
run 64 "$PG" doctor --json --schema ""
json_error 64 usage
# Without --json stdout stays empty.
run 69 "$PG" -d "postgresql://nobody@127.0.0.1:1/x?connect_timeout=5" info
[ -s "$TMP/out" ] && fail "stdout without --json: $(cat "$TMP/out")"

skip_without_pg
DSN=$PGCOORD_TEST_DSN
SCHEMA="pgc_jerr_$$"
trap 'psql -X -q "$DSN" -c "DROP SCHEMA IF EXISTS \"$SCHEMA\" CASCADE" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
"$PG" -d "$DSN" init --schema "$SCHEMA" >/dev/null || fail "pgcoord init failed"
# A role that does not exist: credentials refused, 77, with the server's SQLSTATE.
run 77 "$PG" --json -d "$(dsn_with_db "$DSN" postgres)&user=no_such_role_$$" info
json_error 77 config
python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["sqlstate"] == "28000", e' "$TMP/out" \
	|| fail "no SQLSTATE: $(cat "$TMP/out")"
# A database that does not exist: 78.
run 78 "$PG" --json -d "$(dsn_with_db "$DSN" no_such_db_$$)" info
json_error 78 config
# A lease that does not exist: exit 65, as every "not found" (cli_exit_code's table).
run 65 "$PG" --json -d "$DSN" lease show --schema "$SCHEMA" "no-such-lease-$$"
json_error 65
# A schema that is not there: the hint names it.
run 69 "$PG" --json -d "$DSN" queue list --schema "nosuch_$$"
json_error 69
err_has "run pgcoord init --schema nosuch_$$"
# Success prints the result only; a "found something" exit (lock status: held) no error.
run 0 "$PG" --json -d "$DSN" info
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "error" not in d, d' "$TMP/out" || fail "info"
echo ok
