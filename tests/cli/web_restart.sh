# web_restart.sh - a server restart under pgcoord web: requests answer 503 while the server is
# away, then 200 again on new sessions, without a restart of pgcoord web (run alone: it
# restarts the test server)
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
ok=0
for _ in $(seq 300); do
	code=$(curl -s --max-time 10 -o "$TMP/body" -w '%{http_code}' "$URL/api/queues")
	[ "$code" = 200 ] && { ok=1; break; }
	[ "$code" = 503 ] || fail "after the restart: $code $(cat "$TMP/body")"
	sleep 0.1
done
[ "$ok" = 1 ] || fail "pgcoord web did not come back within 30 s of the restart"
grep -q '"pending":1' "$TMP/body" || fail "queues after the restart: $(cat "$TMP/body")"
# Every session of the pool was replaced: the other paths answer too.
for _ in 1 2 3 4 5 6; do
	for p in jobs blockers locks; do req 200 "$URL/api/$p"; done
done
web_stop "$WPID"
exit 0
