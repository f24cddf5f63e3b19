# names_utf8.sh - a lock, lease or queue name that is not valid UTF-8 is bad input (64, the
# byte offset named), refused before anything reaches the server: no command runs, nothing
# is recorded, and the server's 22021 never turns into 65 ("name collision")
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
schema="names_utf8_$$"
trap 'psql_q "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
run 0 "$PG" init --schema "$schema"
bad=$(printf 'ab\xffcd')
ran="$TMP/ran"

check() {
	# check WHAT ARGS...: exit 64, one "not valid UTF-8 ... offset 2" message first.
	local what=$1
	shift
	run 64 timeout 30 "$PG" "$@"
	head -n 1 "$TMP/err" | grep -q "^pgcoord: .*not valid UTF-8: byte 0xff at offset 2" ||
		{ cat "$TMP/err"; fail "$what: no UTF-8 message naming the byte offset first"; }
	[ ! -e "$ran" ] || fail "$what: the command ran"
}
check "run NAME" run --schema "$schema" "$bad" -- touch "$ran"
check "run -n NAME" run -n --schema "$schema" "$bad" -- touch "$ran"
check "run --fence NAME" run --fence --schema "$schema" "$bad" -- touch "$ran"
check "lock key NAME" lock key "$bad"
check "lock status NAME" lock status --schema "$schema" "$bad"
check "elect NAME" elect --schema "$schema" --wait 2s "$bad" -- touch "$ran"
check "elect --holder" elect --schema "$schema" --wait 2s --holder "$bad" ok-name -- touch "$ran"
check "worker --queue" worker --schema "$schema" --queue ok --queue "$bad" -- touch "$ran"
check "queue enqueue" queue enqueue --schema "$schema" "$bad" --payload '{}'
check "queue stats" queue stats --schema "$schema" "$bad"
check "queue list" queue list --schema "$schema" "$bad"
check "queue purge" queue purge --schema "$schema" "$bad"
check "queue pause" queue pause --schema "$schema" "$bad"
check "queue resume" queue resume --schema "$schema" "$bad"
check "lease show" lease show --schema "$schema" "$bad"
check "lease release" lease release --schema "$schema" "$bad" --token 1
# Nothing was recorded: no lock name, no lease, no job.
[ "$(psql_q "SELECT count(*) FROM $schema.lock_names")" = 0 ] || fail "a lock name was recorded"
[ "$(psql_q "SELECT count(*) FROM $schema.jobs")" = 0 ] || fail "a job was enqueued"
# Valid UTF-8 beyond ASCII is a name like any other.
run 0 "$PG" run --schema "$schema" "$(printf 'r\xc3\xa9sum\xc3\xa9')" -- true
[ "$(psql_q "SELECT count(*) FROM $schema.lock_names")" = 1 ] || fail "the UTF-8 name was not recorded"
echo "ok: every name entry refuses bytes that are not UTF-8"
