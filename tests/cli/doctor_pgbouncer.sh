# doctor_pgbouncer.sh - doctor through a real PgBouncer: transaction mode is reported as an
# error (exit 2), session mode as information; the lab's pool-trap fails through the former
. "$(dirname "$0")/lib.sh"
skip_without_pg
. "$(dirname "$0")/pgbouncer_lib.sh"
trap 'stop_bouncers; rm -rf "$TMP"' EXIT

start_bouncer session
session_dsn=$bouncer_dsn
start_bouncer transaction
dsn=$bouncer_dsn

# Direct: no pooler.
run 1 timeout 60 "$PG" -d "$PGCOORD_TEST_DSN" --json doctor --schema "pgc_doctor_none_$$"
python3 - "$TMP/out" <<'PY' || fail "doctor reported a pooler on a direct connection"
import json, sys
d = json.load(open(sys.argv[1]))
p = [f for f in d["findings"] if f["check"] == "pooler"][0]
assert p["severity"] == "ok" and p["value"] == "none", p
PY

# Through PgBouncer in transaction mode: an error finding, exit 2, said plainly.
run 2 timeout 60 "$PG" -d "$dsn" doctor --schema "pgc_doctor_none_$$"
out_has "^error    pooler: a transaction-mode pooler is in between"
out_has "Session advisory locks and LISTEN are unsafe here"
out_has "doctor: 1 error"
run 2 timeout 60 "$PG" -d "$dsn" --json doctor --schema "pgc_doctor_none_$$"
python3 - "$TMP/out" <<'PY' || fail "doctor --json through pgbouncer"
import json, sys
d = json.load(open(sys.argv[1]))
p = [f for f in d["findings"] if f["check"] == "pooler"][0]
assert p["severity"] == "error" and p["value"] == "transaction", p
assert d["worst"] == "error" and d["errors"] == 1, d
PY
# A session-mode pool keeps each client on one server session: safe, said as information.
run 1 timeout 60 "$PG" -d "$session_dsn" doctor --schema "pgc_doctor_none_$$"
out_has "^info     pooler: a pooler or proxy is in between"
out_has "session locks are safe"
out_has "doctor: 0 errors"

# --no-pooler-check skips it (and then only warnings are left).
run 1 timeout 60 "$PG" -d "$dsn" doctor --no-pooler-check --schema "pgc_doctor_none_$$"
grep -q "pooler" "$TMP/out" && fail "--no-pooler-check still checked the pooler"

# What the pooler does to session locks: in the lab's pool-trap, the "other" client's unlock now
# can land on the server session that holds the lock: the experiment no longer sees what a
# direct connection shows.
timeout 60 "$PG" -d "$dsn" lab --timeout 2s pool-trap >"$TMP/out" 2>&1
st=$?
[ "$st" -eq 1 ] || { cat "$TMP/out"; fail "lab pool-trap through pgbouncer exited $st, expected 1 (a FAIL)"; }
out_has "^FAIL  pool-trap"
echo ok
