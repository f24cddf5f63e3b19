# doctor_pgbouncer.sh - doctor through a real PgBouncer in transaction mode reports the pooler;
# the lab's pool-trap experiment then fails there, as the seed says it must
. "$(dirname "$0")/lib.sh"
skip_without_pg
bouncer=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)
if [ -z "$bouncer" ]; then
	echo "skipped: pgbouncer is not installed (Debian package pgbouncer)" >&2
	exit 77
fi

read -r pghost pgport pguser < <(psql -X -A -t -q -F ' ' "$PGCOORD_TEST_DSN" \
	-c "SELECT coalesce(host(inet_server_addr()), '127.0.0.1'), inet_server_port(), current_user")
[ -n "$pgport" ] || fail "cannot read the test server's address"

# PgBouncer refuses to run as root: run it as an unprivileged user, in a directory it owns.
dir=$(mktemp -d /tmp/pgc-bouncer.XXXXXX)
chmod 755 "$dir"
runas=()
if [ "$(id -u)" -eq 0 ]; then
	user=nobody
	id postgres >/dev/null 2>&1 && user=postgres
	chown "$user" "$dir"
	runas=(setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --)
fi
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '"%s" ""\n' "$pguser" >"$dir/userlist.txt"
cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$pghost port=$pgport

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 5
max_client_conn = 100
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
INI
chown -R "${user:-$(id -un)}" "$dir" 2>/dev/null || true
"${runas[@]}" "$bouncer" "$dir/pgbouncer.ini" >"$dir/stdout" 2>&1 &
bpid=$!
trap 'kill "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null; rm -rf "$dir" "$TMP"' EXIT
for _ in $(seq 1 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	kill -0 "$bpid" 2>/dev/null || { cat "$dir/stdout" "$dir/pgbouncer.log" 2>/dev/null; fail "pgbouncer did not start"; }
	sleep 0.1
done
dsn="postgresql://$pguser@127.0.0.1:$port/postgres"

# Direct: no pooler.
run 1 timeout 60 "$PG" -d "$PGCOORD_TEST_DSN" --json doctor --schema "pgc_doctor_none_$$"
python3 - "$TMP/out" <<'PY' || fail "doctor reported a pooler on a direct connection"
import json, sys
d = json.load(open(sys.argv[1]))
p = [f for f in d["findings"] if f["check"] == "pooler"][0]
assert p["severity"] == "ok" and p["value"] == "none", p
PY

# Through PgBouncer in transaction mode: an error finding, exit 2, said plainly.
run 2 timeout 60 "$PG" -d "$dsn" doctor --schema "pgc_doctor_none_$$"
out_has "^error    pooler: a transaction-mode pooler is in between"
out_has "Session advisory locks and LISTEN are unsafe here"
out_has "doctor: 1 error"
run 2 timeout 60 "$PG" -d "$dsn" --json doctor --schema "pgc_doctor_none_$$"
python3 - "$TMP/out" <<'PY' || fail "doctor --json through pgbouncer"
import json, sys
d = json.load(open(sys.argv[1]))
p = [f for f in d["findings"] if f["check"] == "pooler"][0]
assert p["severity"] == "error" and p["value"] == "transaction", p
assert d["worst"] == "error" and d["errors"] == 1, d
PY
# --no-pooler-check skips it (and then only warnings are left).
run 1 timeout 60 "$PG" -d "$dsn" doctor --no-pooler-check --schema "pgc_doctor_none_$$"
grep -q "pooler" "$TMP/out" && fail "--no-pooler-check still checked the pooler"

# What the pooler does to session locks: in the lab's pool-trap, the "other" client's unlock now
# lands on the server session that holds the lock (or the lock lands nowhere useful); either way
# the experiment no longer sees what a direct connection shows.
timeout 60 "$PG" -d "$dsn" lab --timeout 2s pool-trap >"$TMP/out" 2>&1
st=$?
[ "$st" -eq 1 ] || { cat "$TMP/out"; fail "lab pool-trap through pgbouncer exited $st, expected 1 (a FAIL)"; }
out_has "^FAIL  pool-trap"
echo ok
