# doctor_pgbouncer.sh - doctor through a real PgBouncer: transaction mode is reported as an
# error (exit 2), session mode as information; the lab's pool-trap fails through the former
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
user=$(id -un)
runas=()
if [ "$(id -u)" -eq 0 ]; then
	user=nobody
	id postgres >/dev/null 2>&1 && user=postgres
	runas=(setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --)
fi
pids=()
dirs=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "${dirs[@]}" "$TMP"' EXIT

# start_bouncer MODE: starts PgBouncer with pool_mode MODE on a free loopback port; sets $port.
start_bouncer() {
	local dir
	dir=$(mktemp -d /tmp/pgc-bouncer.XXXXXX)
	dirs+=("$dir")
	chmod 755 "$dir"
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
pool_mode = $1
default_pool_size = 5
max_client_conn = 100
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
INI
	chown -R "$user" "$dir"
	"${runas[@]}" "$bouncer" "$dir/pgbouncer.ini" >"$dir/stdout" 2>&1 &
	local bpid=$!
	pids+=("$bpid")
	for _ in $(seq 1 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
		kill -0 "$bpid" 2>/dev/null || { cat "$dir/stdout" "$dir/pgbouncer.log" 2>/dev/null; fail "pgbouncer ($1 mode) did not start"; }
		sleep 0.1
	done
	fail "pgbouncer ($1 mode) does not accept connections on port $port"
}

start_bouncer session
session_dsn="postgresql://$pguser@127.0.0.1:$port/postgres"
start_bouncer transaction
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
# A session-mode pool keeps each client on one server session: safe, said as information.
run 1 timeout 60 "$PG" -d "$session_dsn" doctor --schema "pgc_doctor_none_$$"
out_has "^info     pooler: a pooler or proxy is in between"
out_has "session locks are safe"
out_has "doctor: 0 errors"

# --no-pooler-check skips it (and then only warnings are left).
run 1 timeout 60 "$PG" -d "$dsn" doctor --no-pooler-check --schema "pgc_doctor_none_$$"
grep -q "pooler" "$TMP/out" && fail "--no-pooler-check still checked the pooler"

# What the pooler does to session locks: in the lab's pool-trap, the "other" client's unlock now
# can land on the server session that holds the lock: the experiment no longer sees what a
# direct connection shows.
timeout 60 "$PG" -d "$dsn" lab --timeout 2s pool-trap >"$TMP/out" 2>&1
st=$?
[ "$st" -eq 1 ] || { cat "$TMP/out"; fail "lab pool-trap through pgbouncer exited $st, expected 1 (a FAIL)"; }
out_has "^FAIL  pool-trap"
echo ok
