# lab.sh - pgcoord lab: listing, argument errors, a full run with --json, the numbered lines,
# --keep, and an exit status that counts failures (locks held elsewhere fail in time)
. "$(dirname "$0")/lib.sh"

run 0 "$PG" lab --help
out_has "^Usage: pgcoord \[-d DSN\] lab"
out_has "--timeout=DUR"
[ "$(awk '{ if (length($0) > 80) n++ } END { print n + 0 }' "$TMP/out")" -eq 0 ] || fail "--help is wider than 80 columns"
run 0 "$PG" help lab
out_has "--key-base=N"
out_has "--allow-exhaust"

run 0 "$PG" lab --list
n=$(wc -l <"$TMP/out")
[ "$n" -ge 46 ] || fail "--list shows $n experiments, expected at least 46"
out_has "^singleton  *five contenders.* \[explicit locking, 13.3.5 advisory locks\]$"
out_has "^table-lock-matrix  *the 8x8 .* \[explicit locking, 13.3.1 table-level locks"
grep -q "§\|\[[0-9]" "$TMP/out" && fail "--list names a claim by a bare reference"
run 0 "$PG" --json lab --list
python3 - "$TMP/out" <<'PY' || fail "lab --list --json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) >= 46
for r in rows:
    assert set(r) == {"name", "description", "reference"}, r
    assert r["reference"] and "\u00a7" not in r["reference"], r
PY

run 64 "$PG" lab no-such-experiment
err_has 'unknown experiment "no-such-experiment"'
err_has 'Try "pgcoord lab --help"'
run 64 "$PG" lab --timeout 5x
err_has "unknown unit"
run 64 "$PG" lab --timeout 10ms
err_has "between 100ms and 10m"
run 64 "$PG" lab --key-base -3
err_has "key-base"
run 64 "$PG" lab --list singleton
err_has "takes no experiment names"
run 64 "$PG" lab --bogus
err_has "unknown option --bogus"
run 69 "$PG" -d "postgresql://u:pw1234@127.0.0.1:1/x?connect_timeout=3" lab singleton
err_has "cannot connect"
grep -q pw1234 "$TMP/err" "$TMP/out" && fail "password printed"

skip_without_pg
export PGCOORD_DSN="$PGCOORD_TEST_DSN"

# Every experiment passes, with every observation in the JSON.
run 0 timeout 120 "$PG" lab --json
python3 - "$TMP/out" <<'PY' || fail "lab --json"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
exps = [l for l in lines if l["type"] == "experiment"]
summary = lines[-1]
assert summary["type"] == "summary", summary
assert summary["experiments"] == len(exps) >= 46, summary
assert summary["passed"] == len(exps) and summary["failed"] == 0, summary
keys = {"type", "name", "description", "reference", "status", "passed", "observation", "values",
        "elapsed_ms", "schema", "schema_kept"}
for e in exps:
    assert set(e) == keys, (e["name"], set(e) ^ keys)
    assert e["status"] == "PASS" and e["passed"] is True, e
    assert e["observation"] and "\n" not in e["observation"], e
    assert isinstance(e["values"], dict) and e["values"], e
    assert e["schema_kept"] is False, e
m = {e["name"]: e for e in exps}
assert m["singleton"]["values"]["ran"] == 1
assert m["pool-trap"]["values"]["unlocked_from_other"] is False
assert m["table-lock-matrix"]["values"]["mismatches"] == 0
assert m["row-lock-matrix"]["values"]["mismatches"] == 0
assert m["oversell"]["values"]["conditional_sold"] == m["oversell"]["values"]["stock"]
assert m["oversell"]["values"]["read_then_write_sold"] > m["oversell"]["values"]["stock"]
assert m["deadlock"]["values"]["cycle_victims"] == 1
ws = m["write-skew"]
assert ws["reference"] == "concurrency control, 13.2.3 serializable isolation level", ws
w = ws["values"]
assert w["read_committed_both_committed"] is True and w["read_committed_on_call_after"] == 0, w
assert w["serialization_failures"] == 1 and w["serializable_on_call_after"] == 1, w
assert isinstance(w["siread_locks_a"], int) and w["siread_locks_a"] > 0, w
assert w["any_update_waited"] is False and w["retry_commit"] == "ok", w
hu = m["hot-upsert"]["values"]
assert hu["hot_n"] == hu["hot_upserts"] and hu["hot_lock_waits_seen"] > 0, hu
assert hu["distinct_lock_waits_seen"] == 0 and isinstance(hu["distinct_to_hot_ratio"], str), hu
assert m["advisory-exhaust"]["values"]["exhausted"] is False, m["advisory-exhaust"]
for name in ("optimistic-version", "nowait-table-lock", "deadlock-timeout", "idle-in-tx-timeout"):
    assert name in m, name
PY
# No scratch schema is left.
left=$(psql_q "SELECT count(*) FROM pg_namespace WHERE nspname = ANY (string_to_array('$(python3 -c 'import json,sys; print(",".join(json.loads(l).get("schema","") for l in open(sys.argv[1])))' "$TMP/out")', ','))")
[ "$left" -eq 0 ] || fail "$left scratch schemas were left behind"

# The five numbered result lines of the advisory-lock experiments, word for word.
run 0 timeout 60 "$PG" lab singleton pool-trap xact-rollback stacked-unlock session-end
while IFS= read -r line; do
	grep -qxF -- "$line" <(cut -c 33- "$TMP/out") || { cat "$TMP/out"; fail "missing result line: $line"; }
done <<'LINES'
1. five instances tried a singleton job, instances that ran it: 1
2. lock taken=true, unlock from another connection=false, locks held after both went back to the pool: 1
3. xact lock: holder=true, second caller while held=false, after rollback=true
4. locked twice on one session: first unlock=true (locks still held: 1), second unlock=true
5. leaked lock rows before the pool closed its idle connections: 1, after: 0
LINES
out_has "^lab: 5 experiments, 5 passed, 0 failed"

# --keep leaves the schema and says so.
run 0 timeout 60 "$PG" lab --keep lock-table-default
schema=$(sed -n 's/.*(schema \(pgc_lab_[a-z_0-9]*\) kept).*/\1/p' "$TMP/out")
[ -n "$schema" ] || { cat "$TMP/out"; fail "--keep did not name the schema"; }
[ "$(psql_q "SELECT count(*) FROM pg_namespace WHERE nspname = '$schema'")" -eq 1 ] || fail "schema $schema is gone"
psql_q "DROP SCHEMA $schema CASCADE" >/dev/null

# SIGINT: the experiment under way finishes and cleans up, then the lab stops with 130.
timeout 120 "$PG" lab --json >"$TMP/int.out" 2>"$TMP/int.err" &
lab=$!
for _ in $(seq 1 200); do
	[ -s "$TMP/int.out" ] && break
	sleep 0.05
done
kill -INT $lab
wait $lab
st=$?
[ "$st" -eq 130 ] || { cat "$TMP/int.out" "$TMP/int.err"; fail "interrupted lab exited $st, expected 130"; }
grep -q "interrupted after" "$TMP/int.err" || fail "no interruption message"
grep -q '"type":"summary"' "$TMP/int.out" || fail "no summary after the interruption"
schemas=$(python3 -c 'import json,sys; print(",".join(json.loads(l).get("schema","") for l in open(sys.argv[1])))' "$TMP/int.out")
[ "$(psql_q "SELECT count(*) FROM pg_namespace WHERE nspname = ANY (string_to_array('$schemas', ','))")" -eq 0 ] ||
	fail "the interrupted lab left a schema behind"

# Locks held elsewhere: the experiments that need them fail within their timeout, with a
# message, and the exit status counts the failures.
base=$(( 7000000000 + $$ * 1000 ))
psql -X -q "$PGCOORD_TEST_DSN" -c "SELECT pg_advisory_lock($((base + 1))), pg_advisory_lock($((base + 3)))" \
	-c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
holder=$!
trap 'kill $holder 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 1 100); do
	[ "$(psql_q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = ($((base + 3)) & 4294967295)::oid AND classid = ($((base + 3)) >> 32)::oid")" -eq 1 ] && break
	sleep 0.1
done
start=$(date +%s)
timeout 60 "$PG" lab --key-base "$base" --timeout 300ms singleton pool-trap stacked-unlock >"$TMP/out" 2>"$TMP/err"
st=$?
[ "$st" -eq 2 ] || { cat "$TMP/out" "$TMP/err"; fail "exit status $st, expected 2 (two failures)"; }
[ $(( $(date +%s) - start )) -lt 50 ] || fail "the lab took too long with a lock held elsewhere"
out_has "^PASS  singleton"
out_has "^FAIL  pool-trap  *2. lock taken=false"
out_has "^FAIL  stacked-unlock  *session A: pg_advisory_lock.*lock timeout (SQLSTATE 55P03)"
out_has "^lab: 3 experiments, 1 passed, 2 failed"
kill $holder 2>/dev/null
wait $holder 2>/dev/null
echo ok
