# clients_restart.sh - the workers of every language across a real server restart: the C
# library's, Go's, Python's and Node.js's bench workers (bench/clients, each on its client's
# public API) work a queue each on a scratch server of this test's own, which is restarted
# (pg_ctl restart, fast shutdown) while they hold jobs. Every job of the queue ends succeeded
# (at least once: a job cut off by the restart may run twice, never fail), each worker goes on
# working jobs enqueued after the restart, and stops gracefully on SIGTERM. The server is the
# test's own, so it runs beside the others. A missing toolchain skips, except in CI
# (PGCOORD_CI=1), where it fails.
. "$(dirname "$0")/lib.sh"
PGTMP="$SRC/scripts/pg-tmp"
BUILD=${PGCOORD_BUILD:?}
missing() {
	[ "${PGCOORD_CI:-}" = 1 ] && fail "$1 (CI installs it)"
	echo "skipped: $1" >&2
	exit 77
}
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing "no server binaries"
[ -x "$BUILD/bench/bench_client_c" ] || fail "no $BUILD/bench/bench_client_c (build first)"

# The workers' command lines, built where they need building (never into the source tree).
declare -A cmd
cmd[c]="$BUILD/bench/bench_client_c"
export GOCACHE=${GOCACHE:-$BUILD/go-cache}
gocmd=$(PGCOORD_BENCH_BUILD=$TMP/go "$SRC/bench/clients/go/cmd" 2>"$TMP/go.err")
case $? in
0) cmd[go]=$(head -n 1 <<<"$gocmd") ;;
69) missing "the Go client's toolchain: $(cat "$TMP/go.err")" ;;
*) cat "$TMP/go.err"; fail "building the Go bench worker" ;;
esac
pycmd=$("$SRC/bench/clients/python/cmd" 2>"$TMP/py.err") || missing "the Python client's toolchain: $(cat "$TMP/py.err")"
cmd[python]=$(head -n 1 <<<"$pycmd")
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing "node and npm"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || missing "Node.js 20 or newer"
# The Node client's ESM build that the tests of a run share (tests/cli/node_esm.sh).
nodeout=$("$SRC/tests/cli/node_esm.sh" 2>"$TMP/node.err") || { cat "$TMP/node.err"; fail "building the Node.js client"; }
export PGCOORD_NODE_CLIENT_ESM=$nodeout/esm
cmd[node]="node $SRC/bench/clients/node/bench_worker.mjs"
langs=(c go python node)

dir=$(mktemp -d /tmp/pgc-restart.XXXXXX)
declare -A wpids
cleanup() {
	local p
	for p in "${wpids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	"$PGTMP" destroy "$dir" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
dsn=$(timeout 120 "$PGTMP" start "$dir") || fail "pg-tmp start"
q() { psql -X -A -t -q -v ON_ERROR_STOP=1 "$dsn" -c "$1"; }
run 0 "$PG" -d "$dsn" init
bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
[ -x "$bindir/pg_ctl" ] || bindir=$(dirname "$(command -v pg_ctl)")
restart() {
	local ctl=("$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 restart)
	if [ "$(id -u)" -eq 0 ]; then runuser -u "$(stat -c %U "$dir/data")" -- "${ctl[@]}"; else "${ctl[@]}"; fi \
		>"$TMP/pgctl.log" 2>&1 || { cat "$TMP/pgctl.log"; fail "pg_ctl restart"; }
}
# enqueue LANG PHASE N: N jobs {"phase": PHASE, "n": k} on LANG's queue, in one call.
enqueue() {
	seq 1 "$3" | sed "s/.*/{\"phase\": $2, \"n\": &}/" >"$TMP/jobs"
	run 0 "$PG" -d "$dsn" queue enqueue "q_$1" --file "$TMP/jobs"
}
# succeeded LANG: that queue's jobs in job_history as succeeded.
succeeded() { q "SELECT count(*) FROM pgcoord.job_history WHERE queue = 'q_$1' AND status = 'succeeded'"; }

for l in "${langs[@]}"; do
	# A short lease, so that a job whose completion the restart cut off runs again soon.
	PGCOORD_BENCH_DSN=$dsn PGCOORD_BENCH_SCHEMA=pgcoord PGCOORD_BENCH_QUEUE=q_$l PGCOORD_BENCH_MODE=work \
		PGCOORD_BENCH_CONCURRENCY=4 PGCOORD_BENCH_HANDLER=sleep:20 PGCOORD_BENCH_LEASE_MS=3000 \
		${cmd[$l]} >"$TMP/$l.out" 2>"$TMP/$l.err" &
	wpids[$l]=$!
done
# The jobs once every worker is up, so that all four are busy when the server restarts: 300
# jobs of 20 ms on 4 handlers last 1.5 s, and the restart comes when each has done 10.
end=$((SECONDS + 120))
for l in "${langs[@]}"; do
	until grep -q '^ready$' "$TMP/$l.out"; do
		kill -0 "${wpids[$l]}" 2>/dev/null || { cat "$TMP/$l.err"; fail "the $l worker exited before it was ready"; }
		[ $SECONDS -lt $end ] || { cat "$TMP/$l.err"; fail "the $l worker was not ready in 120 s"; }
		sleep 0.05
	done
done
for l in "${langs[@]}"; do enqueue "$l" 1 300; done
for l in "${langs[@]}"; do
	until [ "$(succeeded "$l")" -ge 10 ]; do
		kill -0 "${wpids[$l]}" 2>/dev/null || { cat "$TMP/$l.err"; fail "the $l worker exited before the restart"; }
		[ $SECONDS -lt $end ] || { cat "$TMP/$l.err"; fail "the $l worker completed no 10 jobs in 120 s"; }
		sleep 0.05
	done
done
restart
for l in "${langs[@]}"; do enqueue "$l" 2 50; done

end=$((SECONDS + 150))
for l in "${langs[@]}"; do
	until [ "$(succeeded "$l" 2>/dev/null)" = 350 ]; do
		kill -0 "${wpids[$l]}" 2>/dev/null || { cat "$TMP/$l.err"; fail "the $l worker exited after the restart"; }
		[ $SECONDS -lt $end ] || {
			cat "$TMP/$l.err"
			fail "the $l worker's queue has $(succeeded "$l") of 350 jobs succeeded 150 s after the restart"
		}
		sleep 0.2
	done
done
[ "$(q "SELECT count(*) FROM pgcoord.jobs")" = 0 ] || fail "jobs left: $(q "SELECT queue, status, count(*) FROM pgcoord.jobs GROUP BY 1, 2")"
[ "$(q "SELECT count(*) FROM pgcoord.job_history WHERE status <> 'succeeded'")" = 0 ] ||
	fail "jobs that did not succeed: $(q "SELECT queue, status, last_error FROM pgcoord.job_history WHERE status <> 'succeeded' LIMIT 5")"
# Each worker was in the middle of its first jobs when the server went down.
for l in "${langs[@]}"; do
	after=$(q "SELECT count(*) FROM pgcoord.job_history WHERE queue = 'q_$l' AND (payload->>'phase')::int = 1
		AND finished_at > pg_postmaster_start_time()")
	[ "$after" -gt 0 ] || fail "the $l worker had finished its first 300 jobs before the restart: the test tested nothing"
done

for l in "${langs[@]}"; do kill -TERM "${wpids[$l]}"; done
for l in "${langs[@]}"; do
	wait "${wpids[$l]}"
	st=$?
	unset "wpids[$l]"
	[ "$st" -eq 0 ] || { cat "$TMP/$l.err"; fail "the $l worker exited $st after SIGTERM, expected 0"; }
	handled=$(sed -n 's/^{"handled": *\([0-9]*\)}$/\1/p' "$TMP/$l.out")
	[ -n "$handled" ] && [ "$handled" -ge 350 ] ||
		{ cat "$TMP/$l.out" "$TMP/$l.err"; fail "the $l worker says it handled '$handled' jobs, expected 350 or more"; }
	echo "ok: $l: 350 jobs across the restart, $handled handled, $(grep -c . "$TMP/$l.err") lines of log"
done
