# doctor.sh - pgcoord doctor: help, argument errors, exit 0/1/2, --json, and the timeouts of a
# dedicated role before and after ALTER ROLE ... SET
. "$(dirname "$0")/lib.sh"

run 0 "$PG" doctor --help
out_has "^Usage: pgcoord \[-d DSN\] doctor"
[ "$(awk '{ if (length($0) > 80) n++ } END { print n + 0 }' "$TMP/out")" -eq 0 ] || fail "--help is wider than 80 columns"
run 0 "$PG" help doctor
run 64 "$PG" doctor --bogus
err_has "unknown option --bogus"
err_has 'Try "pgcoord doctor --help"'
run 64 "$PG" doctor extra
err_has 'unexpected argument "extra"'
run 64 "$PG" doctor --schema ""
err_has "1 to 63 bytes"
run 64 "$PG" doctor --schema
err_has "needs a value"
run 69 "$PG" -d "postgresql://bob:hunter2@127.0.0.1:1/x?connect_timeout=3" doctor
err_has "cannot connect to postgresql://bob:\*\*\*\*@127.0.0.1:1/x"
grep -q hunter2 "$TMP/err" "$TMP/out" && fail "password printed"

skip_without_pg
role="pgc_doctor_cli_$$"
none="pgc_doctor_none_$$"
psql_q "DROP ROLE IF EXISTS $role; CREATE ROLE $role LOGIN" >/dev/null || fail "cannot create role $role"
trap 'psql_q "DROP ROLE IF EXISTS $role" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
dsn=$(python3 - "$PGCOORD_TEST_DSN" "$role" <<'PY'
import sys, urllib.parse as u
dsn, role = sys.argv[1], sys.argv[2]
if dsn.startswith(("postgres://", "postgresql://")):
    p = u.urlsplit(dsn)
    host = p.netloc.rsplit("@", 1)[-1]
    print(u.urlunsplit((p.scheme, role + "@" + host, p.path, p.query, p.fragment)))
else:
    print(dsn + " user=" + role)
PY
)

# A default server: the three timeouts are 0 for the role, log_lock_waits is off: warnings.
run 1 timeout 60 "$PG" -d "$dsn" doctor --schema "$none"
for s in lock_timeout statement_timeout idle_in_transaction_session_timeout; do
	out_has "^warning  $s: $s is 0 (no limit) for role $role (source: default)"
	out_has "Fix: ALTER ROLE \"\?$role\"\? SET $s = "
done
out_has "^warning  log_lock_waits: log_lock_waits is off"
out_has "^ok       pooler: direct session"
out_has "^ok       lock_table: shared lock table: max_locks_per_transaction [0-9]* x (max_connections [0-9]*"
out_has "^info     schema: schema $none is not installed"
out_has "^doctor: 0 errors, 4 warnings$"
run 1 timeout 60 "$PG" -d "$dsn" --json doctor --schema "$none"
python3 - "$TMP/out" <<'PY' || fail "doctor --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"findings", "errors", "warnings", "worst"}, d.keys()
checks = [f["check"] for f in d["findings"]]
assert checks == ["server", "pooler", "lock_timeout", "statement_timeout",
                  "idle_in_transaction_session_timeout", "log_lock_waits", "deadlock_timeout",
                  "lock_table", "lock_waits", "long_advisory", "idle_in_transaction",
                  "application_name", "fk_index", "schema", "cron", "replication",
                  "dsn_hosts", "failover"], checks
for f in d["findings"]:
    assert set(f) == {"check", "severity", "value", "message", "fix"}, f
    assert f["severity"] in ("ok", "info", "warning", "error"), f
    if f["severity"] == "warning":
        assert f["fix"], f
assert d["worst"] == "warning" and d["warnings"] == 4 and d["errors"] == 0, d
PY

# After ALTER ROLE ... SET, nothing is left to fix for this role: exit 0.
psql_q "ALTER ROLE $role SET lock_timeout = '5s'; ALTER ROLE $role SET statement_timeout = '1min';
        ALTER ROLE $role SET idle_in_transaction_session_timeout = '1min';
        ALTER ROLE $role SET log_lock_waits = on" >/dev/null
run 0 timeout 60 "$PG" -d "$dsn" doctor --schema "$none"
out_has "^ok       lock_timeout: lock_timeout is 5s for role $role (source: user)"
out_has "^ok       statement_timeout: statement_timeout is 1min for role $role (source: user)"
out_has "^ok       idle_in_transaction_session_timeout: idle_in_transaction_session_timeout is 1min"
out_has "^ok       log_lock_waits: log_lock_waits is on"
out_has "^doctor: 0 errors, 0 warnings$"
run 0 timeout 60 "$PG" -q -d "$dsn" doctor --schema "$none"
[ -s "$TMP/out" ] && { cat "$TMP/out"; fail "-q printed something with nothing to fix"; }

# A schema newer than this binary is an error: exit 2.
newer="pgc_doctor_newer_$$"
run 0 "$PG" -d "$PGCOORD_TEST_DSN" init --schema "$newer"
psql_q "INSERT INTO $newer.migrations (version, name) VALUES (9999, 'from the future')" >/dev/null || fail "cannot fake a newer schema"
run 2 timeout 60 "$PG" -d "$PGCOORD_TEST_DSN" doctor --schema "$newer"
out_has "^error    schema: schema $newer is at version 9999, newer than this pgcoord"
psql_q "DROP SCHEMA $newer CASCADE" >/dev/null
echo ok
