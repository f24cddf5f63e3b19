# security_password.sh - a password in the DSN is never printed, whatever the command and
# however the connection fails: every command of `pgcoord --help` runs against a server that
# rejects the password (scram for a dedicated role), with and without --json.
. "$(dirname "$0")/lib.sh"
skip_without_pg
[ -n "${PGCOORD_TEST_PGDIR:-}" ] || { echo "skipped: needs the pg-tmp server started by make test" >&2; exit 77; }
hba="$PGCOORD_TEST_PGDIR/data/pg_hba.conf"
secret='S3cr3t-pw_%40@x?y'
role=pgc_sec_$$
psql_q "CREATE ROLE $role LOGIN PASSWORD 'the-right-one'" >/dev/null || fail "create role"
cleanup_hba() {
	sed -i "/ $role /d" "$hba"
	psql_q "SELECT pg_reload_conf()" >/dev/null
	psql_q "DROP ROLE IF EXISTS $role" >/dev/null
	rm -rf "$TMP"
}
trap cleanup_hba EXIT
# Put the rule first so that it wins over the trust lines.
sed -i "1i host all $role 127.0.0.1/32 scram-sha-256" "$hba"
psql_q "SELECT pg_reload_conf()" >/dev/null
port=$(cat "$PGCOORD_TEST_PGDIR/port")
sleep 0.3

# In a URI the password is percent-encoded as it must be; a raw one is tried below.
uri="postgresql://$role:S3cr3t-pw_%2540%40x%3Fy@127.0.0.1:$port/postgres?connect_timeout=5"
kv="host=127.0.0.1 port=$port user=$role password='$secret' dbname=postgres connect_timeout=5"
commands=$("$PGCOORD_BIN" --help | awk '/^Commands:/ {on=1; next} /^$/ {on=0} on {print $1}')
[ -n "$commands" ] || fail "no commands in --help"
checked=0
for dsn in "$uri" "$kv"; do
	# The rejection itself: 77 (EX_NOPERM: fix the credentials) and the masked DSN.
	run 77 "$PG" -d "$dsn" info
	err_has "password authentication failed"
	for cmd in $commands; do
		for json in "" --json; do
			"$PG" -d "$dsn" $json "$cmd" >"$TMP/out" 2>"$TMP/err" </dev/null
			for f in "$TMP/out" "$TMP/err"; do
				if grep -q -F -e "S3cr3t" -e "$secret" "$f"; then
					cat "$f"
					fail "pgcoord $json $cmd printed the password"
				fi
			done
			checked=$((checked + 1))
		done
	done
	# Through the environment too.
	PGCOORD_DSN="$dsn" run 77 "$PG" info
	DATABASE_URL="$dsn" run 77 "$PG" init
	PGPASSWORD="$secret" run 77 "$PG" -d "host=127.0.0.1 port=$port user=$role dbname=postgres" info
	grep -q -F "S3cr3t" "$TMP/out" "$TMP/err" && fail "PGPASSWORD printed"
done
# A malformed URI with raw '@' and '?' in the password: libpq's own parse error quotes a piece
# of it, which must not reach the output either.
run 64 "$PG" -d "postgresql://$role:$secret@127.0.0.1:$port/postgres" info
err_has "invalid connection string"
grep -q -F -e "S3cr3t" -e "x?y" -e "y@" "$TMP/err" "$TMP/out" && { cat "$TMP/err"; fail "a malformed DSN leaked part of the password"; }
echo "ok: $checked command runs printed no password"
