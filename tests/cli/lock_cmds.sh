# lock_cmds.sh - pgcoord lock key (stable keys, JSON) and pgcoord lock status (holders,
# waiters, exit status, JSON)
. "$(dirname "$0")/lib.sh"

run 0 "$PG" lock key nightly-report
[ "$(cat "$TMP/out")" = "-7492483901388791363" ] || fail "the key of nightly-report changed: $(cat "$TMP/out")"
run 0 "$PG" --json lock key nightly-report
python3 - "$TMP/out" <<'PY' || fail "lock key --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d == {"name": "nightly-report", "key": "-7492483901388791363", "key_space": "bigint",
             "classid": 2550487446, "objid": 2892194237, "objsubid": 1}, d
PY
run 0 "$PG" --json lock key --key=-20,7
out_has '"key":"-20,7","key_space":"int4pair","classid":4294967276,"objid":7,"objsubid":2'
run 0 "$PG" lock key --key -5
out_has "^-5$"
# A name that is not UTF-8 is bad input (no lock can have it: every name entry refuses it).
run 64 "$PG" --json lock key "$(printf 'caf\xe9-\xff')"
err_has "lock name is not valid UTF-8: byte 0xe9 at offset 3"

skip_without_pg
. "$(dirname "$0")/run_lib.sh"
# wait_exit PID WHAT: waits (at most 30 s) for PID to end and returns its status; if it does
# not end, shows what it and its children are doing and on which server session, and fails.
wait_exit() {
	local end=$((SECONDS + 30))
	while kill -0 "$1" 2>/dev/null; do
		if [ $SECONDS -ge $end ]; then
			pstree -p "$1" 2>/dev/null
			show_procs "$1"
			psql_q "SELECT pid, application_name, state, wait_event_type, wait_event, left(query, 80)
			          FROM pg_stat_activity WHERE application_name LIKE 'pgcoord/%'"
			kill -KILL "$1" 2>/dev/null
			fail "$2 did not end within 30 s"
		fi
		sleep 0.1
	done
	wait "$1"
}
name="status-$$"
run 0 "$PG" -d "$DSN" lock status "$name"
out_has "^lock $name (key [-0-9]*): free$"
timeout 60 "$PG" -d "$DSN" run --no-register "$name" -- sleep 30 >/dev/null 2>&1 &
hpid=$!
wait_sessions "$name" granted 1
timeout 60 "$PG" -d "$DSN" run -s -w 30 "$name" -- true >/dev/null 2>&1 &
wpid=$!
wait_sessions "$name" waiting 1
run 1 "$PG" -d "$DSN" lock status "$name"
out_has "^lock $name (key [-0-9]*): held$"
# SINCE: when the lock was taken (not known for a session lock nobody recorded: --no-register)
# or asked for; the session's state, which each heartbeat renews, in a column of its own.
out_has "exclusive holds -  *idle since 20[0-9-]*T[0-9:]*Z "
out_has "shared    waits 20[0-9-]*T[0-9:]*Z  *active since 20"
out_has "pgcoord/run"
run 1 "$PG" -d "$DSN" --json lock status "$name"
python3 - "$TMP/out" <<'PY' || fail "lock status --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["state"] == "held" and d["key_space"] == "bigint", d
h, w = d["sessions"]
assert h["granted"] and h["mode"] == "exclusive" and h["application_name"] == "pgcoord/run", h
assert h["client_addr"] is not None and h["state"] == "idle" and h["wait_start"] is None, h
assert not w["granted"] and w["mode"] == "shared" and w["wait_start"], w
assert set(h) == {"pid", "mode", "granted", "application_name", "client_addr", "state",
                  "state_change", "acquired_at", "wait_start", "backend_start"}, h
# Timestamps are ISO 8601 whatever the server's DateStyle.
assert h["acquired_at"] is None and "T" in h["state_change"] and "T" in w["wait_start"], (h, w)
PY
kill -TERM "$hpid"
wait_exit "$hpid" "the holder, after SIGTERM,"
wait_exit "$wpid" "the waiter" || fail "the waiter did not run"
run 0 "$PG" -d "$DSN" --json lock status "$name"
out_has '"state":"free","sessions":\[\]'

# With the schema installed, pgcoord run records when it took the lock: SINCE is that time,
# the same after the holder's heartbeats (which change its session state), and nothing stays
# recorded once it exits.
S=pgc_lockcmds_$$
trap 'psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
run 0 "$PG" -d "$DSN" init --schema "$S"
timeout 60 "$PG" -d "$DSN" run --schema "$S" "$name" -- sleep 30 >/dev/null 2>&1 &
hpid=$!
wait_sessions "$name" granted 1
holder_times() {
	run 1 "$PG" -d "$DSN" --json lock status --schema "$S" "$name"
	python3 -c 'import json, sys
h = [s for s in json.load(open(sys.argv[1]))["sessions"] if s["granted"]][0]
print(h["acquired_at"], h["state_change"])' "$TMP/out"
}
read -r taken1 change1 < <(holder_times)
sleep 1.5 # past a heartbeat
read -r taken2 change2 < <(holder_times)
[ "$taken1" != None ] && [ "$taken1" = "$taken2" ] || fail "the time the lock was taken moved: $taken1, then $taken2"
[ "$change2" != "$change1" ] || fail "no heartbeat in 1.5 s: the test shows nothing"
run 1 "$PG" -d "$DSN" lock status --schema "$S" "$name"
out_has "exclusive holds ${taken1:0:19}Z  *idle since 20"
kill -TERM "$hpid"
wait_exit "$hpid" "the recorded holder, after SIGTERM,"
[ "$(psql_q "SELECT count(*) FROM $S.lock_holds")" = 0 ] || fail "a record stayed after the holder exited"
echo ok
