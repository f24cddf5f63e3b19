# pgbouncer_lib.sh - a real PgBouncer in front of the test server, for tests that need one
# (sourced after lib.sh). start_bouncer MODE [POOL_SIZE] starts one with pool_mode MODE on a
# free loopback port and sets $bouncer_dsn; every PgBouncer started is stopped on exit.
# PgBouncer refuses to run as root: then it runs as an unprivileged user, in a directory it
# owns. Without the pgbouncer binary the test is skipped, saying why (make test lists the
# reasons of its skips), except in CI (PGCOORD_CI=1), where a missing part is a failure.
bouncer_bin=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)
if [ -z "$bouncer_bin" ]; then
	[ "${PGCOORD_CI:-}" = 1 ] && fail "pgbouncer is not installed (Debian package pgbouncer)"
	echo "skipped: pgbouncer is not installed (Debian package pgbouncer)" >&2
	exit 77
fi
read -r bouncer_pghost bouncer_pgport bouncer_pguser bouncer_pgdb < <(psql -X -A -t -q -F ' ' "$PGCOORD_TEST_DSN" \
	-c "SELECT coalesce(host(inet_server_addr()), '127.0.0.1'), inet_server_port(), current_user, current_database()")
[ -n "$bouncer_pgport" ] || fail "cannot read the test server's address"
bouncer_user=$(id -un)
bouncer_runas=()
if [ "$(id -u)" -eq 0 ]; then
	bouncer_user=nobody
	id postgres >/dev/null 2>&1 && bouncer_user=postgres
	bouncer_runas=(setpriv --reuid="$bouncer_user" --regid="$(id -g "$bouncer_user")" --clear-groups --)
fi
bouncer_pids=()
bouncer_dirs=()
stop_bouncers() {
	local p
	for p in "${bouncer_pids[@]}"; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	rm -rf "${bouncer_dirs[@]}"
}

start_bouncer() {
	local mode=$1 size=${2:-5} dir port
	dir=$(mktemp -d /tmp/pgc-bouncer.XXXXXX)
	bouncer_dirs+=("$dir")
	chmod 755 "$dir"
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	printf '"%s" ""\n' "$bouncer_pguser" >"$dir/userlist.txt"
	cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$bouncer_pghost port=$bouncer_pgport

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = $mode
default_pool_size = $size
max_client_conn = 200
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
INI
	chown -R "$bouncer_user" "$dir"
	"${bouncer_runas[@]}" "$bouncer_bin" "$dir/pgbouncer.ini" >"$dir/stdout" 2>&1 &
	local bpid=$!
	bouncer_pids+=("$bpid")
	local i
	for i in $(seq 1 100); do
		if psql -X -A -t -q "postgresql://$bouncer_pguser@127.0.0.1:$port/$bouncer_pgdb" -c 'SELECT 1' >/dev/null 2>&1; then
			bouncer_dsn="postgresql://$bouncer_pguser@127.0.0.1:$port/$bouncer_pgdb"
			return 0
		fi
		kill -0 "$bpid" 2>/dev/null || { cat "$dir/stdout" "$dir/pgbouncer.log" 2>/dev/null; fail "pgbouncer ($mode mode) did not start"; }
		sleep 0.1
	done
	fail "pgbouncer ($mode mode) does not accept connections on port $port"
}
