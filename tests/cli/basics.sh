# basics.sh - help, version, argument errors and an unreachable database
. "$(dirname "$0")/lib.sh"

run 0 "$PG" --help
out_has "^Usage:"
out_has "Exit status:"
out_has "  init "
out_has "69   database unavailable"
run 0 "$PG" -h
run 0 "$PG" --version
out_has "^pgcoord [0-9]*\.[0-9]*\.[0-9]*$"
run 0 "$PG" help init
out_has "Usage: pgcoord \[-d DSN\] init"
run 0 "$PG" init --help
out_has "--schema"
run 0 "$PG" help

# Usage errors: exit 64, a message naming the problem, and the "Try" line.
run 64 "$PG"
err_has "no command given"
run 64 "$PG" frobnicate
err_has 'unknown command "frobnicate"'
err_has 'Try "pgcoord --help"'
run 64 "$PG" --bogus init
err_has "unknown option --bogus"
# An unknown short option inside a word names that word, not the one before it.
run 64 "$PG" cron next '-1 * * * *'
err_has 'unknown option -1 in "-1 \* \* \* \*"'
run 64 "$PG" run -Zx name -- true
err_has 'unknown option -Z in "-Zx"'
run 64 "$PG" run -Z name -- true
err_has 'unknown option -Z$'
run 64 "$PG" -d
err_has "option -d needs a value"
run 64 "$PG" help nosuch
err_has 'unknown command "nosuch"'
run 64 "$PG" init --nope
err_has "unknown option --nope"
err_has 'Try "pgcoord init --help"'
run 64 "$PG" init extra
err_has 'unexpected argument "extra"'
run 64 "$PG" init --schema ""
err_has "must not be empty"
run 64 "$PG" init --schema
err_has "option --schema needs a value"

# Unreachable database: exit 69, one line, password masked.
run 69 "$PG" -d "postgresql://bob:topsecret@127.0.0.1:1/x?connect_timeout=3" info
err_has "cannot connect to postgresql://bob:\*\*\*\*@127.0.0.1:1/x"
grep -q topsecret "$TMP/err" "$TMP/out" && fail "password printed"
err_lines 1
PGCOORD_DSN="host=127.0.0.1 port=1 password=topsecret connect_timeout=3" run 69 "$PG" init
grep -q topsecret "$TMP/err" "$TMP/out" && fail "password printed"
err_has "password=\*\*\*\*"

# DSN resolution order: -d beats PGCOORD_DSN beats DATABASE_URL.
DATABASE_URL="postgresql://127.0.0.1:2/fromurl?connect_timeout=3" run 69 "$PG" info
err_has "fromurl"
PGCOORD_DSN="postgresql://127.0.0.1:3/fromenv?connect_timeout=3" DATABASE_URL="postgresql://127.0.0.1:2/fromurl" run 69 "$PG" info
err_has "fromenv"
PGCOORD_DSN="postgresql://127.0.0.1:3/fromenv" run 69 "$PG" -d "postgresql://127.0.0.1:4/fromarg?connect_timeout=3" info
err_has "fromarg"

skip_without_pg
run 0 "$PG" -d "$PGCOORD_TEST_DSN" info
out_has "^server:   PostgreSQL [0-9]"
run 0 "$PG" -d "$PGCOORD_TEST_DSN" --json info
out_has '"server_version_num":[0-9]'
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["backend_pid"] > 0' "$TMP/out" || fail "info --json is not valid JSON"
echo ok
