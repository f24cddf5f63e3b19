# doctor_replica.sh - pgcoord info and doctor on a primary and on its streaming standby: which
# host answered, primary or standby, the timeline, the standbys and their sync state, what an
# asynchronous failover can lose; for a superuser and for a role without privileges.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/replica_lib.sh"

pair_start
run 0 "$PG" -d "$PRI_DSN" init
psql_at "$PRI_DSN" "CREATE ROLE plain LOGIN; GRANT USAGE ON SCHEMA pgcoord TO plain;
    GRANT SELECT ON pgcoord.migrations TO plain" >/dev/null || fail "cannot create a role"
wait_replayed
pport=$(cat "$PAIR/primary/port")
sport=$(cat "$PAIR/standby/port")

# info: the primary, then the standby, then a multi-host DSN that must find the primary.
run 0 "$PG" -d "$PRI_DSN" info
out_has "^host:     127.0.0.1 port $pport$"
out_has "^role:     primary, timeline 1$"
run 0 "$PG" -d "$PRI_DSN" --json info
python3 - "$TMP/out" "$pport" <<'PY' || fail "info --json on the primary"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["host"] == "127.0.0.1" and d["port"] == sys.argv[2], d
assert d["role"] == "primary" and d["in_recovery"] is False, d
assert d["timeline"] == 1 and d["timeline_source"] == "wal", d
PY
run 0 "$PG" -d "$SBY_DSN" info
out_has "^host:     127.0.0.1 port $sport$"
out_has "^role:     standby (in recovery), timeline 1$"
run 0 "$PG" -d "$SBY_DSN" --json info
python3 - "$TMP/out" <<'PY' || fail "info --json on the standby"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["role"] == "standby" and d["in_recovery"] is True, d
assert d["timeline"] == 1 and d["timeline_source"] == "walreceiver", d
PY
# Without pg_read_all_stats the walreceiver's timeline is hidden: the restartpoint's is shown.
run 0 "$PG" -d "postgresql://plain@127.0.0.1:$sport/postgres" --json info
python3 - "$TMP/out" <<'PY' || fail "info --json on the standby as a plain role"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["role"] == "standby" and d["timeline"] == 1 and d["timeline_source"] == "checkpoint", d
PY
multi="host=127.0.0.1,127.0.0.1 port=$sport,$pport dbname=postgres user=postgres"
run 0 "$PG" -d "$multi target_session_attrs=read-write" info
out_has "^host:     127.0.0.1 port $pport$"
out_has "^role:     primary"
run 0 "$PG" -d "$multi" info
out_has "^host:     127.0.0.1 port $sport$"
out_has "^role:     standby"

# doctor on the primary: one asynchronous standby, and what that means.
run 1 "$PG" -d "$PRI_DSN" doctor --no-pooler-check
out_has "^ok       replication: 127.0.0.1:$pport is a primary, timeline 1; 1 standby(s) stream from it: standby1 async"
out_has "synchronous_standby_names is ''"
out_has "^info     dsn_hosts: the DSN names one host"
out_has "^warning  failover: replication is asynchronous"
out_has "the last lease grants and renewals, and jobs enqueued, claimed or completed"
out_has "fencing tokens still never repeat nor go backwards"
out_has "Fix: set synchronous_standby_names"
run 1 "$PG" -d "$PRI_DSN" --json doctor --no-pooler-check
python3 - "$TMP/out" <<'PY' || fail "doctor --json on the primary"
import json, sys
d = json.load(open(sys.argv[1]))
f = {x["check"]: x for x in d["findings"]}
assert f["replication"]["value"] == "primary" and f["replication"]["severity"] == "ok", f
assert f["failover"]["value"] == "asynchronous" and f["failover"]["severity"] == "warning", f
assert f["dsn_hosts"]["value"] == "1", f
PY
# A plain role sees that a standby streams, not its state.
run 1 "$PG" -d "postgresql://plain@127.0.0.1:$pport/postgres" doctor --no-pooler-check
out_has "1 standby(s) stream from it: standby1 ?"
out_has "visible only with pg_read_all_stats"
# Several hosts without target_session_attrs: a warning; with it: ok.
run 1 "$PG" -d "$multi target_session_attrs=read-write" doctor --no-pooler-check
out_has "^ok       dsn_hosts: the DSN names 2 hosts with target_session_attrs=read-write"

# doctor on the standby works, and says it is one: an error for coordination.
run 2 "$PG" -d "$SBY_DSN" doctor --no-pooler-check
out_has "^error    replication: 127.0.0.1:$sport is a standby (in recovery, timeline 1)"
out_has "Fix: connect to the primary"
out_has "^info     failover: whether replication is synchronous is known on the primary only"
run 2 "$PG" -d "$multi" doctor --no-pooler-check
out_has "^warning  dsn_hosts: the DSN names 2 hosts with target_session_attrs=any"
out_has "^error    replication: 127.0.0.1:$sport is a standby"

# Synchronous replication: a failover to the standby loses no commit.
psql_at "$PRI_DSN" "ALTER SYSTEM SET synchronous_standby_names = 'standby1'" >/dev/null
psql_at "$PRI_DSN" "SELECT pg_reload_conf()" >/dev/null
is_sync() { [ "$(psql_at "$PRI_DSN" "SELECT sync_state FROM pg_stat_replication")" = sync ]; }
wait_for 30 is_sync || fail "the standby did not become synchronous"
run 1 "$PG" -d "$PRI_DSN" doctor --no-pooler-check
out_has "standby1 sync"
out_has "^ok       failover: replication to 1 standby(s) is synchronous (synchronous_commit on)"
