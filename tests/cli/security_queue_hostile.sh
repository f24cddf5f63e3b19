# security_queue_hostile.sh - queue input at its worst: a 100 MB payload, batches with one bad
# line in the middle (also past the first chunk of 5000), payloads jsonb cannot hold, and queue
# names with quotes and Unicode at the length limit: stored exactly or refused whole
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_secq_$$
cleanup() {
	psql_q "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
run 0 "$PG" init --schema "$S"
jobs() { psql_q "SELECT count(*) FROM $S.jobs"; }

# 100 MB on standard input: refused by the limit before it is sent, exit 65, nothing enqueued.
# (Under valgrind, 10 MB: memcheck reads 100 MB too slowly, and the limit is 1 MiB either way.)
BIG=100000000
[ -n "${PGCOORD_VALGRIND:-}" ] && BIG=10000000
{ printf '{"x":"'; head -c $BIG /dev/zero | tr '\0' a; printf '"}\n'; } |
	timeout 120 "$PG" queue enqueue big --schema "$S" - >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 65 ] || { cat "$TMP/err"; fail "100 MB payload exited $rc, expected 65"; }
err_has "standard input line 1: $((BIG + 8)) bytes, over the limit of 1048576 bytes"
err_has "nothing was enqueued"
[ "$(jobs)" = 0 ] || fail "the 100 MB payload was enqueued"
# The same from a file, after good lines: nothing of the batch is enqueued.
{ printf '{"ok":1}\n{"ok":2}\n{"x":"'; head -c $BIG /dev/zero | tr '\0' b; printf '"}\n{"ok":3}\n'; } >"$TMP/big.jsonl"
run 65 timeout 120 "$PG" queue enqueue big --schema "$S" --file "$TMP/big.jsonl"
err_has "big.jsonl line 3: $((BIG + 8)) bytes, over the limit"
rm -f "$TMP/big.jsonl"
[ "$(jobs)" = 0 ] || fail "part of the batch with a 100 MB line was enqueued"
# A low limit and an over-limit line after a good one: named, and the batch refused whole.
run 0 "$PG" queue config --schema "$S" --max-payload 64
{ printf '{"ok":1}\n'; printf '{"pad":"%s"}\n' "$(head -c 80 /dev/zero | tr '\0' p)"; } >"$TMP/pad.jsonl"
run 65 "$PG" queue enqueue pad --schema "$S" --file "$TMP/pad.jsonl"
err_has "pad.jsonl line 2: 90 bytes, over the limit of 64 bytes"
run 0 "$PG" queue config --schema "$S" --max-payload 1048576

# One bad line in the middle of 12,000: past the first chunk of 5,000, so the chunks already
# sent must be rolled back with it. The line is named; nothing is enqueued.
seq 1 12000 | sed 's/.*/{"n":&}/' | sed '7001s/.*/{"n":7001,}/' >"$TMP/mid.jsonl"
run 65 timeout 120 "$PG" queue enqueue mid --schema "$S" --file "$TMP/mid.jsonl"
err_has "mid.jsonl line 7001: not valid JSON"
err_has "nothing was enqueued"
[ "$(jobs)" = 0 ] || fail "a batch with a bad line 7001 was partly enqueued"
# Blank lines do not shift the reported number.
printf '{"a":1}\n\n\n{"a":2}\n{"a":\n{"a":4}\n' >"$TMP/blank.jsonl"
run 65 "$PG" queue enqueue mid --schema "$S" --file "$TMP/blank.jsonl"
err_has "blank.jsonl line 5: not valid JSON"
# Payloads jsonb cannot hold (\u0000) or that are not JSON in other ways: the line is named too.
for bad in '{"a":"\u0000"}' '{"a":"\ud800"}' "{'a':1}" 'NaN' '{"a":1}{"b":2}' '[1,2' '"unterminated'; do
	printf '{"ok":1}\n%s\n{"ok":3}\n' "$bad" >"$TMP/b.jsonl"
	run 65 "$PG" queue enqueue odd --schema "$S" --file "$TMP/b.jsonl"
	err_has "b.jsonl line 2: not valid JSON"
	[ "$(jobs)" = 0 ] || fail "payload $bad: part of the batch was enqueued"
done
run 65 "$PG" queue enqueue odd --schema "$S" --payload '{"a":"\u0000"}'
err_has "not valid JSON"
# A file with a NUL byte is refused before anything is sent.
printf '{"a":1}\n{"a":"\0"}\n' >"$TMP/nul.jsonl"
run 65 "$PG" queue enqueue odd --schema "$S" --file "$TMP/nul.jsonl"
err_has "NUL byte"
[ "$(jobs)" = 0 ] || fail "bad payloads enqueued something"

# Queue names with quotes, backslashes and Unicode: stored and claimed back exactly.
names=("it's" '"dq"' 'back\slash' '名前のキュー' '🚀 launch' 'e\u0301 é' '‮rtl' "semi;colon -- x" '$1')
for n in "${names[@]}"; do
	run 0 "$PG" --json queue enqueue "$n" --schema "$S" --payload '{"k":1}'
	got=$(psql_q "SELECT encode(convert_to(queue, 'UTF8'), 'hex') FROM $S.jobs ORDER BY id DESC LIMIT 1")
	[ "$got" = "$(printf '%s' "$n" | od -An -tx1 | tr -d ' \n')" ] || fail "queue name [$n] not stored exactly"
	run 0 "$PG" --json queue stats "$n" --schema "$S"
	out_has '"pending":1'
done
# The 128-byte limit counts bytes: 42 three-byte characters fit, 43 do not.
n42=$(printf '名%.0s' $(seq 42))
n43=$(printf '名%.0s' $(seq 43))
run 0 "$PG" queue enqueue "$n42" --schema "$S" --payload '{}'
run 64 "$PG" queue enqueue "$n43" --schema "$S" --payload '{}'
err_has "longer than 128 bytes"
err_lines 2
[ "$(psql_q "SELECT count(*) FROM $S.jobs")" = $((${#names[@]} + 1)) ] || fail "unexpected number of jobs"
exit 0
