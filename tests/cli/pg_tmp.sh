# pg_tmp.sh - the throwaway server: start/stop twice in one DIR and in two DIRs, no strays
. "$(dirname "$0")/lib.sh"
PGTMP="$SRC/scripts/pg-tmp"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || { echo "skipped: no server binaries" >&2; exit 77; }
a=$(mktemp -d /tmp/pgc-pgtmp-a.XXXXXX)
b=$(mktemp -d /tmp/pgc-pgtmp-b.XXXXXX)
trap '"$PGTMP" destroy "$a" >/dev/null 2>&1; "$PGTMP" destroy "$b" >/dev/null 2>&1; rm -rf "$TMP"' EXIT

pid_of() { head -n 1 "$1/data/postmaster.pid"; }
alive() { local s; s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ "$s" != Z ]; }
for round in 1 2; do
	dsn=$("$PGTMP" start "$a") || fail "start $a (round $round)"
	[ "$("$PGTMP" dsn "$a")" = "$dsn" ] || fail "dsn differs"
	[ "$(psql -X -A -t "$dsn" -c 'SHOW fsync')" = on ] || fail "fsync is not on"
	[ "$(psql -X -A -t "$dsn" -c 'SHOW synchronous_commit')" = on ] || fail "synchronous_commit is not on"
	[ "$(psql -X -A -t "$dsn" -c 'SHOW max_connections')" = 200 ] || fail "max_connections is not 200"
	[ "$(psql -X -A -t "$dsn" -c "SELECT inet_server_addr()")" = 127.0.0.1 ] || fail "not on 127.0.0.1"
	# The unix socket is in DIR.
	port=$(cat "$a/port")
	[ -S "$a/.s.PGSQL.$port" ] || fail "no unix socket in $a"
	run 1 "$PGTMP" start "$a"
	err_has "already running"
	dsn2=$("$PGTMP" start "$b") || fail "start $b (round $round)"
	[ "$dsn" != "$dsn2" ] || fail "two servers got one DSN"
	pa=$(pid_of "$a"); pb=$(pid_of "$b")
	"$PGTMP" stop "$a" || fail "stop $a"
	"$PGTMP" stop "$b" || fail "stop $b"
	alive "$pa" && fail "server $pa still running after stop"
	alive "$pb" && fail "server $pb still running after stop"
	"$PGTMP" status "$a" && fail "status says running after stop"
	"$PGTMP" stop "$a" || fail "stop of a stopped server must succeed"
done
run 1 "$PGTMP" dsn "$a"
err_has "no server is running"
run 64 "$PGTMP" bogus "$a"
echo ok
