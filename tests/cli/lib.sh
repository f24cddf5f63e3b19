# lib.sh - helpers for the whole-process tests of the tool (sourced by tests/cli/*.sh).
# Every wait is bounded; every assertion prints both sides.
set -uo pipefail
PG=${PGCOORD_BIN:?PGCOORD_BIN is not set}
SRC=${PGCOORD_SRC:?}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# make valgrind: every pgcoord process runs under memcheck; a leak or an invalid access makes
# it exit 99 (the report is kept in $PGCOORD_VALGRIND_LOGS).
if [ -n "${PGCOORD_VALGRIND:-}" ]; then
	vglogs=${PGCOORD_VALGRIND_LOGS:-/tmp}
	mkdir -p "$vglogs"
	cat >"$TMP/pgcoord" <<VG
#!/bin/sh
exec valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 \\
	--log-file="$vglogs/vg.%p.log" "$PGCOORD_BIN" "\$@"
VG
	chmod +x "$TMP/pgcoord"
	PG="$TMP/pgcoord"
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
skip_without_pg() {
	if [ -z "${PGCOORD_TEST_DSN:-}" ]; then
		echo "skipped: PGCOORD_TEST_DSN is not set (run through make test)" >&2
		exit 77
	fi
}
# run EXPECTED-STATUS CMD... : runs CMD with output in $TMP/out and $TMP/err.
run() {
	local want=$1
	shift
	"$@" >"$TMP/out" 2>"$TMP/err"
	local got=$?
	if [ "$got" -ne "$want" ]; then
		echo "--- stdout"; cat "$TMP/out"; echo "--- stderr"; cat "$TMP/err"
		fail "$* exited $got, expected $want"
	fi
}
out_has() { grep -q -- "$1" "$TMP/out" || { cat "$TMP/out"; fail "stdout lacks \"$1\""; }; }
err_has() { grep -q -- "$1" "$TMP/err" || { cat "$TMP/err"; fail "stderr lacks \"$1\""; }; }
err_lines() { local n; n=$(wc -l <"$TMP/err"); [ "$n" -eq "$1" ] || { cat "$TMP/err"; fail "stderr has $n lines, expected $1"; }; }
psql_q() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$PGCOORD_TEST_DSN" -c "$1"; }
# timeout(1) runs in the foreground of the test's process group. Without --foreground it
# follows every signal it forwards with a SIGCONT to the command and to its whole group; under
# ASan that SIGCONT can land while LeakSanitizer's exit-time check stops the exiting pgcoord
# with ptrace, cancel the SIGSTOP that check waits for, and leave pgcoord spinning at exit for
# ever. The tests signal timeout's pid to reach pgcoord alone, which --foreground does too. A
# command on PATH rather than a function, so that `timeout ... &` leaves timeout's pid in $!.
if real_timeout=$(command -v timeout); then
	mkdir "$TMP/bin"
	printf '#!/bin/sh\nexec %s --foreground "$@"\n' "$real_timeout" >"$TMP/bin/timeout"
	chmod +x "$TMP/bin/timeout"
	PATH=$TMP/bin:$PATH
fi
# show_procs PID: PID and every process under it, each with its state, where it sleeps in the
# kernel, its blocked and pending signals and, for root, its kernel stack: what a process that
# does not end is doing.
show_procs() {
	local p kids
	[ -d "/proc/$1" ] || return 0
	echo "== process $1: $(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)"
	grep -E '^(State|SigBlk|SigPnd|ShdPnd|SigIgn|SigCgt):' "/proc/$1/status" 2>/dev/null
	echo "wchan: $(cat "/proc/$1/wchan" 2>/dev/null); syscall: $(cat "/proc/$1/syscall" 2>/dev/null)"
	cat "/proc/$1/stack" 2>/dev/null
	command -v gdb >/dev/null 2>&1 && timeout 20 gdb -q -batch -p "$1" -ex bt 2>/dev/null | grep '^#'
	kids=$(cat /proc/"$1"/task/*/children 2>/dev/null)
	for p in $kids; do show_procs "$p"; done
}
# own_schema PREFIX: installs a pgcoord schema of the test's own, $S (PREFIX_PID), dropped on
# exit together with the worker $wpid if one still runs.
# wait_query SECONDS SQL EXPECTED: polls SQL until it gives EXPECTED, failing after SECONDS.
wait_query() {
	local end=$((SECONDS + $1)) got
	while [ $SECONDS -lt "$end" ]; do
		got=$(psql_q "$2")
		[ "$got" = "$3" ] && return 0
		sleep 0.1
	done
	fail "waited $1 s for [$2] = $3, last got $got"
}
own_schema() {
	S=$1_$$
	trap own_schema_cleanup EXIT
	run 0 "$PG" init --schema "$S"
}
own_schema_cleanup() {
	[ -n "${wpid:-}" ] && kill -KILL "$wpid" 2>/dev/null
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
# dsn_with_db DSN DB: DSN (URI or keyword form) naming database DB instead.
dsn_with_db() {
	case "$1" in
	postgres://* | postgresql://*)
		case "$1" in
		*\?*) echo "$1&dbname=$2" ;;
		*) echo "$1?dbname=$2" ;;
		esac ;;
	*) echo "$1 dbname=$2" ;;
	esac
}
# need_restartable_server: skips unless PGCOORD_TEST_PGDIR names the pg-tmp server the tests
# use (make test sets it), then defines restart_server, which restarts it (fast shutdown).
need_restartable_server() {
	skip_without_pg
	[ -n "${PGCOORD_TEST_PGDIR:-}" ] && [ -f "$PGCOORD_TEST_PGDIR/data/postmaster.pid" ] ||
		{ echo "skipped: PGCOORD_TEST_PGDIR does not name the pg-tmp server (run through make test)" >&2; exit 77; }
	restart_bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -n 1)
	[ -n "${PG_BINDIR:-}" ] && restart_bindir=$PG_BINDIR
	[ -x "$restart_bindir/pg_ctl" ] || { echo "skipped: no pg_ctl" >&2; exit 77; }
	restart_owner=$(stat -c %U "$PGCOORD_TEST_PGDIR/data")
}
restart_server() {
	local ctl=("$restart_bindir/pg_ctl" -D "$PGCOORD_TEST_PGDIR/data" -m fast -w -t 60 restart)
	if [ "$(id -u)" -eq 0 ]; then runuser -u "$restart_owner" -- "${ctl[@]}"; else "${ctl[@]}"; fi >"$TMP/pgctl.log" 2>&1 ||
		{ cat "$TMP/pgctl.log"; fail "pg_ctl restart"; }
}
