# web_restart.sh - a server restart under pgcoord web: once the server is back every request
# answers 200 at the first try, each session the restart ended replaced before it is used,
# without a restart of pgcoord web (run alone: it restarts the test server)
. "$(dirname "$0")/lib.sh"
need_restartable_server
. "$(dirname "$0")/web_lib.sh"
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_webrs
trap 'web_cleanup; own_schema_cleanup' EXIT
run 0 "$PG" queue enqueue r --schema "$S" --payload '{"n":1}'
web_start rs --schema "$S"
URL=$WURL
for p in queues jobs blockers; do req 200 "$URL/api/$p"; done
restart_server
# The server is back (pg_ctl waited until it accepts connections): the very first request,
# on a session the restart ended, is found dead before anything is sent and served on a new
# one, not answered 503.
code=$(curl -s --max-time 20 -o "$TMP/body" -w '%{http_code}' "$URL/api/queues")
[ "$code" = 200 ] || fail "the first request after the restart: $code $(cat "$TMP/body")"
grep -q '"pending":1' "$TMP/body" || fail "queues after the restart: $(cat "$TMP/body")"
# Every session of the pool is found dead before a request uses it, and replaced: requests
# side by side, so that each session serves one, all answer 200 at the first try.
par=()
for i in 1 2 3 4 5 6 7 8; do
	curl -s --max-time 20 -o /dev/null -w '%{http_code}\n' "$URL/api/jobs" >"$TMP/par.$i" &
	par+=($!)
done
wait "${par[@]}"
for i in 1 2 3 4 5 6 7 8; do
	[ "$(cat "$TMP/par.$i")" = 200 ] || fail "request $i side by side after the restart: $(cat "$TMP/par.$i")"
done
for _ in 1 2 3 4 5 6; do
	for p in jobs blockers locks; do req 200 "$URL/api/$p"; done
done
web_stop "$WPID"
exit 0
