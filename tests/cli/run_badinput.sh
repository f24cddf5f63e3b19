# run_badinput.sh - every bad input exits 64 naming the problem; an unreachable database 69; a
# name collision 65; and nothing is left held afterwards
. "$(dirname "$0")/lib.sh"
name="bad-$$"
bad="postgresql://nobody:secret@127.0.0.1:1/x?connect_timeout=3"

run 0 "$PG" run --help
out_has "^Usage: pgcoord \[-d DSN\] run"
awk 'length > 80 { exit 1 }' "$TMP/out" || fail "run --help is wider than 80 columns"
run 0 "$PG" help run
run 0 "$PG" lock --help
awk 'length > 80 { exit 1 }' "$TMP/out" || fail "lock --help is wider than 80 columns"

run 64 "$PG" run "" -- true
err_has "lock name is empty"
err_has 'Try "pgcoord run --help"'
run 64 "$PG" run "$(printf 'x%.0s' $(seq 1 256))" -- true
err_has "longer than 255 bytes"
run 64 "$PG" run --key 9223372036854775808 -- true
err_has 'invalid key "9223372036854775808"'
run 64 "$PG" run --key 2147483648,1 -- true
err_has "must be an int4"
run 64 "$PG" run --key 1,2,3 -- true
err_has 'invalid key "1,2,3": expected one number or two'
run 64 "$PG" run --key abc -- true
err_has 'invalid key "abc"'
run 64 "$PG" run "$name" true
err_has 'missing "--" before the command'
run 64 "$PG" run "$name" --
err_has 'missing command after "--"'
run 64 "$PG" run --bogus "$name" -- true
err_has "unknown option --bogus"
run 64 "$PG" run -w "$name" -- true
err_has "--wait: invalid duration"
run 64 "$PG" run -w soon "$name" -- true
err_has "--wait: invalid duration"
run 64 "$PG" run -E 256 "$name" -- true
err_has "conflict-exit-code must be a number from 0 to 255"
run 64 "$PG" run --kill-after -1 "$name" -- true
err_has "kill-after"
run 64 "$PG" run --check-interval 0 "$name" -- true
err_has "check-interval must be at least"
run 64 "$PG" run --key 5 "$name" -- true
err_has "not both"
run 64 "$PG" run -- true
err_has "missing lock NAME"
run 64 "$PG" run "$name" extra -- true
err_has 'unexpected argument "extra"'
run 64 "$PG" run -E
err_has "option -E needs a value"
run 64 "$PG" lock
err_has "missing subcommand"
run 64 "$PG" lock frob x
err_has 'unknown subcommand "frob"'
run 64 "$PG" lock key
err_has "missing lock NAME"
run 64 "$PG" lock key ""
err_has "lock name is empty"
run 64 "$PG" lock status --key 1,2,3
err_has "not more"
run 64 "$PG" lock key a b
err_has 'unexpected argument "b"'

# Unreachable database: 69, one line, password masked, and the command never ran.
run 69 "$PG" -d "$bad" run "$name" -- touch "$TMP/ran"
err_has "cannot connect to postgresql://nobody:\*\*\*\*@127.0.0.1:1/x"
grep -q secret "$TMP/err" && fail "password printed"
err_lines 1
[ -e "$TMP/ran" ] && fail "the command ran without the lock"
run 69 "$PG" -d "$bad" lock status "$name"

skip_without_pg
. "$(dirname "$0")/run_lib.sh"
[ "$(sessions "$name" all)" -eq 0 ] || fail "something was left held"

# A name collision: another name recorded under this name's key.
schema="pgc_runbad_$$"
run 0 "$PG" -d "$DSN" init --schema "$schema"
run 0 "$PG" -d "$DSN" run --schema "$schema" "$name" -- true
[ "$(psql_q "SELECT name FROM $schema.lock_names WHERE key = $("$PG" lock key "$name")")" = "$name" ] \
	|| fail "the name was not recorded"
run 0 "$PG" -d "$DSN" lock status --schema "$schema" --key "$("$PG" lock key "$name")"
out_has "^lock $name (key [-0-9]*): free$"
run 0 "$PG" -d "$DSN" lock status --key "$("$PG" lock key "$name")"
out_has "^lock [-0-9]*: free$"
victim="victim-$$"
psql_q "INSERT INTO $schema.lock_names (key, name) VALUES ($("$PG" lock key "$victim"), 'impostor')"
run 65 "$PG" -d "$DSN" run --schema "$schema" "$victim" -- touch "$TMP/ran"
err_has "lock names \"$victim\" and \"impostor\" both map to key"
[ -e "$TMP/ran" ] && fail "the command ran despite the collision"
run 0 "$PG" -d "$DSN" run --no-register --schema "$schema" "$victim" -- true
[ "$(sessions "$victim" all)" -eq 0 ] || fail "lock left held after a collision"
psql_q "DROP SCHEMA $schema CASCADE" >/dev/null
echo ok
