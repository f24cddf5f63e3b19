# lib.sh - helpers for the HA tests (sourced by tests/ha/*.sh, after which tests/cli/lib.sh's
# helpers are there too). ha_start [pg-ha start options] starts a cluster of the test's own
# with scripts/pg-ha and sets HA_DIR and HA_DSN; it is stopped and deleted on every exit. A test
# that needs more clean-up on exit defines ha_on_exit. Without Patroni or etcd the test is
# skipped, saying why, except in CI (PGCOORD_CI=1), where a missing part is a failure.
. "$(dirname "$0")/../cli/lib.sh"
HA=$SRC/scripts/pg-ha
for ha_tool in patroni:patroni etcd:etcd-server etcdctl:etcd-client; do
	if ! command -v "${ha_tool%%:*}" >/dev/null 2>&1; then
		[ "${PGCOORD_CI:-}" = 1 ] && fail "${ha_tool%%:*} is not installed (Debian package ${ha_tool#*:})"
		echo "skipped: ${ha_tool%%:*} is not installed (Debian package ${ha_tool#*:})" >&2
		exit 77
	fi
done
HA_DIR=""
ha_exit() {
	local st=$?
	if declare -F ha_on_exit >/dev/null; then ha_on_exit; fi
	if [ -n "$HA_DIR" ]; then
		if [ "$st" -ne 0 ]; then
			echo "--- the cluster at the end:" >&2
			"$HA" status "$HA_DIR" >&2 2>&1 || true
		fi
		note "pg-ha stop"
		"$HA" stop "$HA_DIR" >&2 || echo "pg-ha stop $HA_DIR failed" >&2
		note "stopped"
	fi
	rm -rf "$TMP"
	exit "$st"
}
trap ha_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

ha_start() {
	HA_DIR=$(mktemp -d /tmp/pgc-ha.XXXXXX)
	note "pg-ha start $*"
	HA_DSN=$("$HA" start "$HA_DIR" "$@") || { HA_DIR=""; fail "pg-ha start $*"; }
	export HA_DSN
	note "cluster up: $HA_DSN"
}
# hq SQL: one query on the primary, through the multi-host DSN.
hq() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$HA_DSN" -c "$1"; }
# nq HOST:PORT SQL: one query on that node.
nq() { psql -X -A -t -q -v ON_ERROR_STOP=1 "postgresql://postgres@$1/postgres?connect_timeout=2" -c "$2"; }
ha_leader() { "$HA" leader "$HA_DIR"; }
now_s() { date +%s.%N; }
HA_T0=$(now_s)
# note TEXT: TEXT on stdout after the seconds since the test started, so that a slow step shows.
note() { printf '[%6.1f s] %s\n' "$(python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$HA_T0" "$(date +%s.%N)")" "$*"; }
secs_since() { python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$(now_s)"; }
# ha_jobs N: pgcoord init, then N jobs in queue q, a results table and $TMP/job.sh, a command
# that records each execution (job, attempt, node, time) on whichever node is the primary
# through its own psql, so that duplicates show.
ha_jobs() {
	run 0 "$PG" -d "$HA_DSN" init
	hq "CREATE TABLE results (id bigserial PRIMARY KEY, job bigint NOT NULL, attempt int NOT NULL,
	                          port int NOT NULL DEFAULT inet_server_port(),
	                          at timestamptz NOT NULL DEFAULT clock_timestamp())" >/dev/null ||
		fail "create results"
	seq 1 "$1" | sed 's/.*/{"n":&}/' >"$TMP/jobs"
	run 0 "$PG" -d "$HA_DSN" queue enqueue q --file "$TMP/jobs"
	[ "$(hq "SELECT count(*) FROM pgcoord.jobs")" = "$1" ] || fail "not $1 jobs enqueued"
	cat >"$TMP/job.sh" <<'SH'
#!/bin/sh
cat >/dev/null
exec psql -X -q -v ON_ERROR_STOP=1 "$HA_DSN" \
	-c "INSERT INTO results (job, attempt) VALUES ($PGCOORD_JOB_ID, $PGCOORD_JOB_ATTEMPT)" >/dev/null
SH
	chmod +x "$TMP/job.sh"
}
