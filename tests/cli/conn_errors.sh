# conn_errors.sh - a connection that cannot work says so: refused credentials exit 77
# (EX_NOPERM), settings that can never work 78 (EX_CONFIG), a server that is not there now 69;
# each message names what was wrong, and nothing is retried as if it were transient.
. "$(dirname "$0")/lib.sh"
skip_without_pg
read -r host port < <(psql -X -A -t -q -F ' ' "$PGCOORD_TEST_DSN" \
	-c "SELECT coalesce(host(inet_server_addr()), '127.0.0.1'), inet_server_port()")
ok="host=$host port=$port dbname=postgres user=postgres connect_timeout=5"

run 0 "$PG" -d "$ok" info
# Credentials: a role the server does not know (28000).
run 77 "$PG" -d "host=$host port=$port dbname=postgres user=pgc_no_such_role_$$" info
err_has "SQLSTATE 28000"
# Settings that cannot work.
run 78 "$PG" -d "host=$host port=$port dbname=pgc_no_such_db_$$ user=postgres" info
err_has "SQLSTATE 3D000"
run 78 "$PG" -d "host=pgc-no-such-host.invalid port=$port dbname=postgres" info
err_has "unknown host name"
run 78 "$PG" -d "host=$host port=99999 dbname=postgres" info
err_has 'invalid port "99999"'
run 78 "$PG" -d "host=$host port=abc dbname=postgres" info
err_has 'invalid port "abc"'
run 78 "$PG" -d "$ok sslmode=bogus" info
err_has 'invalid sslmode "bogus"'
PGSSLMODE=bogus run 78 "$PG" -d "$ok" info
err_has "from PGSSLMODE"
run 78 "$PG" -d "$ok target_session_attrs=primary-only" info
err_has "invalid target_session_attrs"
run 78 "$PG" -d "host=$host,$host port=1,2,3 dbname=postgres" info
err_has "3 port numbers for 2 hosts"
# Encryption that the server does not offer: a setting that cannot work (the test server has
# no SSL), not "try again later".
run 78 "$PG" -d "$ok sslmode=require" info
err_has "SSL was required"
# A misspelt keyword is named; the values, a password's among them, never are.
run 64 "$PG" -d "$ok pasword=sekrit-$$" info
err_has 'invalid connection option "pasword"'
grep -q "sekrit-$$" "$TMP/err" && fail "the value was shown"
run 64 "$PG" -d "postgresql://$host:$port/postgres?pasword=sekrit-$$" info
err_has 'invalid URI query parameter: "pasword"'
grep -q "sekrit-$$" "$TMP/err" && fail "the value was shown"
run 64 "$PG" -d "$ok password=sekrit-$$ x" info
grep -q "sekrit-$$" "$TMP/err" && fail "the value was shown"
# The same classes reach a library caller (pgcoord run's own connection).
run 78 "$PG" -d "$ok sslmode=bogus" run -n x -- true
# A server that is not there now: retry later.
run 69 "$PG" -d "host=127.0.0.1 port=1 dbname=postgres connect_timeout=5" info
err_has "cannot connect"
# A multi-host DSN moves past a host that refuses, each host with its own deadline.
run 0 "$PG" -d "host=127.0.0.1,$host port=1,$port dbname=postgres user=postgres connect_timeout=5" info
run 0 "$PG" -d "postgresql://postgres@127.0.0.1:1,$host:$port/postgres?target_session_attrs=read-write" info
echo ok
