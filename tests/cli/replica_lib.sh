# replica_lib.sh - a primary (scripts/pg-tmp) and an asynchronous streaming standby of it,
# for the tests of what a failover does (sourced after lib.sh). Both are stopped and deleted on
# exit. Every wait is bounded.
#   pair_start          sets PRI_DSN, SBY_DSN, PRI_DATA, SBY_DATA
#   wait_replayed       until the standby has replayed everything the primary wrote
#   cut_stream          stops the standby's walreceiver: later commits never reach it
#   crash_primary       pg_ctl stop -m immediate
#   promote_standby     pg_promote(), until the standby takes writes
#   psql_at DSN SQL     like psql_q, on DSN
bindir=""
for d in ${PG_BINDIR:-} $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
	if [ -x "$d/pg_ctl" ] && [ -x "$d/pg_basebackup" ]; then bindir=$d; break; fi
done
if [ -z "$bindir" ] && command -v pg_ctl >/dev/null && command -v pg_basebackup >/dev/null; then
	bindir=$(dirname "$(command -v pg_ctl)")
fi
if [ -z "$bindir" ] || [ ! -x "$bindir/pg_basebackup" ]; then
	echo "skipped: pg_ctl and pg_basebackup not found (install the PostgreSQL server binaries)" >&2
	exit 77
fi
# The servers' directories must be reachable by the unprivileged user they run as.
PAIR=$(mktemp -d /tmp/pgcoord-pair.XXXXXX)
chmod 755 "$PAIR"
pair_cleanup() {
	local data
	for data in "$PAIR/standby/data" "$PAIR/primary/data"; do
		[ -f "$data/postmaster.pid" ] || continue
		as_owner "$data" timeout 30 "$bindir/pg_ctl" -D "$data" -m immediate -w -t 20 stop >/dev/null 2>&1 || true
	done
	rm -rf "$PAIR" "$TMP"
}
trap pair_cleanup EXIT
# as_owner DIR CMD...: runs CMD as the owner of DIR when we are root.
as_owner() {
	local dir=$1
	shift
	if [ "$(id -u)" -eq 0 ]; then runuser -u "$(stat -c %U "$dir")" -- "$@"; else "$@"; fi
}
psql_at() { timeout 30 psql -X -A -t -q -v ON_ERROR_STOP=1 "$1" -c "$2"; }
free_port() {
	local p i
	for i in $(seq 1 200); do
		p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
	done
	fail "no free port"
}
# wait_for SECONDS CMD...: until CMD succeeds, polling every 0.1 s.
wait_for() {
	local until=$(( $(date +%s) + $1 ))
	shift
	while ! "$@"; do
		[ "$(date +%s)" -lt "$until" ] || return 1
		sleep 0.1
	done
}

pair_start() {
	PRI_DSN=$(PG_BINDIR=$bindir timeout 120 "$SRC/scripts/pg-tmp" start "$PAIR/primary") ||
		fail "the primary did not start"
	PRI_DATA=$PAIR/primary/data
	local pport sport
	pport=$(cat "$PAIR/primary/port")
	mkdir -p "$PAIR/standby"
	chown "$(stat -c %U "$PRI_DATA")" "$PAIR/standby" 2>/dev/null || true
	SBY_DATA=$PAIR/standby/data
	as_owner "$PAIR/standby" timeout 120 "$bindir/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres \
		-D "$SBY_DATA" -R -X stream -c fast >"$PAIR/basebackup.log" 2>&1 ||
		{ cat "$PAIR/basebackup.log"; fail "pg_basebackup failed"; }
	# The standby names itself to the primary, so that pg_stat_replication shows which one it is.
	sed -i "s/^primary_conninfo = '/primary_conninfo = 'application_name=standby1 /" "$SBY_DATA/postgresql.auto.conf"
	local attempt
	for attempt in 1 2 3; do
		sport=$(free_port)
		if as_owner "$SBY_DATA" timeout 90 "$bindir/pg_ctl" -D "$SBY_DATA" -l "$PAIR/standby/server.log" -w -t 60 \
			-o "-p $sport -k $PAIR/standby" start >"$PAIR/standby/pg_ctl.log" 2>&1; then
			SBY_DSN="postgresql://postgres@127.0.0.1:$sport/postgres"
			echo "$sport" >"$PAIR/standby/port"
			break
		fi
		grep -q -i 'could not bind\|address already in use' "$PAIR/standby/server.log" ||
			{ cat "$PAIR/standby/pg_ctl.log" "$PAIR/standby/server.log"; fail "the standby did not start"; }
	done
	[ -n "${SBY_DSN:-}" ] || fail "no free port for the standby"
	wait_for 30 streaming || fail "the standby does not stream from the primary"
}
streaming() { [ "$(psql_at "$PRI_DSN" "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" = 1 ]; }
replayed() {
	local lsn
	lsn=$(psql_at "$PRI_DSN" "SELECT pg_current_wal_lsn()") || return 1
	[ "$(psql_at "$SBY_DSN" "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn")" = t ]
}
wait_replayed() { wait_for 30 replayed || fail "the standby did not replay the primary's WAL within 30 s"; }
no_receiver() { [ "$(psql_at "$SBY_DSN" "SELECT count(*) FROM pg_stat_wal_receiver")" = 0 ]; }
no_sender() { [ "$(psql_at "$PRI_DSN" "SELECT count(*) FROM pg_stat_replication")" = 0 ]; }
cut_stream() {
	psql_at "$SBY_DSN" "ALTER SYSTEM SET primary_conninfo = ''" >/dev/null || fail "ALTER SYSTEM on the standby"
	psql_at "$SBY_DSN" "SELECT pg_reload_conf()" >/dev/null
	wait_for 30 no_receiver || fail "the standby's walreceiver did not stop"
	wait_for 30 no_sender || fail "the primary still has a walsender"
}
crash_primary() {
	as_owner "$PRI_DATA" timeout 60 "$bindir/pg_ctl" -D "$PRI_DATA" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
		fail "the primary did not stop"
}
writable() { [ "$(psql_at "$SBY_DSN" "SELECT pg_is_in_recovery()")" = f ]; }
promote_standby() {
	psql_at "$SBY_DSN" "SELECT pg_promote(true, 30)" >/dev/null || fail "pg_promote failed"
	wait_for 30 writable || fail "the standby is still in recovery"
}
