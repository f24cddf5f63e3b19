# diag_blockers.sh - blockers, locks and activity on sessions made here: the chain A/B/C/D with
# A idle in transaction, the DDL queue, exit status 0 and 1, --json, --watch
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/diag_lib.sh"

# A quiet database: nothing waits, exit 0.
run 0 "$PG" -d "$DB_DSN" blockers
out_has "^no session waits for a lock"
run 0 "$PG" -d "$DB_DSN" blockers --json
jcheck 'd["waiting"], d["roots"], d["sessions"]' "(0, [], [])"

run 0 "$PG" -d "$DB_DSN" init
dbq "CREATE TABLE t (id int PRIMARY KEY, x int); INSERT INTO t VALUES (1, 1), (2, 2);
     INSERT INTO pgcoord.lock_names VALUES (4242, 'nightly-report');"

# The chain: A locks row 1 FOR UPDATE and advisory keys 4242 and 20,7, then idles.
open A
send A "BEGIN; SELECT * FROM t WHERE id = 1 FOR UPDATE; SELECT pg_advisory_lock(4242); SELECT pg_advisory_lock(20, 7);"
A=$(pid A)
wait_sql "SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $A AND locktype = 'advisory' AND objsubid = 2)"
state "$A" "idle in transaction"
open B; B=$(pid B)
send B "UPDATE t SET x = 10 WHERE id = 1;"
waiting "$B"
open C; C=$(pid C)
send C "BEGIN; LOCK TABLE t IN SHARE MODE; COMMIT;"
open D; D=$(pid D)
send D "SELECT pg_advisory_lock(4242);"
waiting "$C" "$D"

run 1 "$PG" -d "$DB_DSN" blockers
out_has "^3 sessions wait for locks; 1 root blocker; worst: pid $A (.*, $APP-A) idle in transaction for .* blocks 3 sessions$"
# How long it has been idle, and apart from that how long its transaction has been open.
out_has "^3 sessions wait for locks; 1 root blocker; worst: pid $A (.*) idle in transaction for [0-9.]*[a-z]* (transaction open [0-9.]*[a-z]*) blocks 3 sessions$"
out_has "^pid $A .* idle in transaction [0-9.]*[a-z]*  xact [0-9.]*[a-z]*  \[ROOT, blocks 3\]"
# Root first, B under A, C under B, D under A (ASCII off a terminal).
grep -n "pid " "$TMP/out" | grep -v worst >"$TMP/tree"
sed -n 1p "$TMP/tree" | grep -q "^[0-9]*:pid $A .*idle in transaction.*\[ROOT, blocks 3\]" || { cat "$TMP/out"; fail "A is not the first root"; }
grep -q "^[0-9]*:|- pid $B .*\[blocks 1\]" "$TMP/tree" || { cat "$TMP/out"; fail "B is not under A"; }
grep -q "^[0-9]*:|  \`- pid $C " "$TMP/tree" || { cat "$TMP/out"; fail "C is not under B"; }
grep -q "^[0-9]*:\`- pid $D " "$TMP/tree" || { cat "$TMP/out"; fail "D is not the last child of A"; }
out_has "waits .* for ShareLock on transaction [0-9]* (row (0,1) of public.t)"
out_has "waits .* for ShareLock on relation public.t"
out_has "waits .* for ExclusiveLock on advisory 4242 \"nightly-report\""
out_has "query: UPDATE t SET x = 10 WHERE id = 1;"
out_has "pid $A holds ExclusiveLock on it"
out_has "pid $B holds RowExclusiveLock on it"

run 1 "$PG" -d "$DB_DSN" blockers --json
S='{s["pid"]: s for s in d["sessions"]}'
jcheck 'd["waiting"], d["roots"], d["worst_root"]' "(3, [$A], $A)" \
	"$S[$D][\"blocked_by\"]" "[$A]" \
	"$S[$C][\"blocked_by\"]" "[$B]" \
	"$S[$B][\"blocked_by\"]" "[$A]" \
	"[$S[$D][\"wants\"][k] for k in (\"key\", \"key_space\", \"key_name\")]" "['4242', 'bigint', 'nightly-report']" \
	"[$S[$A][k] for k in (\"root\", \"blocks_total\", \"state\")]" "[True, 3, 'idle in transaction']" \
	"$S[$C][\"blocked_by_locks\"]" "[{'pid': $B, 'mode': 'RowExclusiveLock', 'queued': False}]" \
	'sorted((e["waiter"], e["blocker"]) for e in d["edges"]) == sorted([('$B', '$A'), ('$C', '$B'), ('$D', '$A')])' True
# The global --json means the same.
run 1 "$PG" -d "$DB_DSN" --json blockers
jcheck 'd["roots"]' "[$A]"
# -q: only the status.
run 1 "$PG" -q -d "$DB_DSN" blockers
[ -s "$TMP/out" ] && fail "-q printed something"

# locks: decoded, filtered.
run 0 "$PG" -d "$DB_DSN" locks --pid "$A"
out_has "advisory .* advisory 4242 \"nightly-report\"$"
out_has "advisory .* advisory 20,7$"
out_has "RowShareLock .* relation public.t"
grep -q "^$B " "$TMP/out" && fail "locks --pid $A shows pid $B"
# Keys in JSON as pgcoord lock key shows them: the text --key takes, and the key space.
run 0 "$PG" -d "$DB_DSN" locks --pid "$A" --advisory --json
jcheck 'sorted((l["key"], l["key_space"], l["key_name"]) for l in d["locks"])' \
	"[('20,7', 'int4pair', None), ('4242', 'bigint', 'nightly-report')]"
run 0 "$PG" -d "$DB_DSN" locks --advisory
grep -v "^PID\|advisory\|locks, " "$TMP/out" && fail "--advisory shows other locks"
out_has "^$D .*WAITING .*advisory 4242"
run 0 "$PG" -d "$DB_DSN" locks --waiting --json
jcheck 'sorted(set(l["pid"] for l in d["locks"])) == sorted(['$B', '$C', '$D'])' True \
	'all(not l["granted"] for l in d["locks"])' True
run 1 "$PG" -d "$DB_DSN" locks --pid 2147483000
err_has "no session with pid 2147483000"
run 64 "$PG" -d "$DB_DSN" locks --pid abc
err_has 'invalid pid "abc"'

# activity: by transaction age, A oldest; the filters.
run 0 "$PG" -d "$DB_DSN" activity
grep "^[0-9]" "$TMP/out" | head -1 | grep -q "^$A .*idle-tx" || { cat "$TMP/out"; fail "A is not the oldest transaction"; }
run 0 "$PG" -d "$DB_DSN" activity --idle-in-tx
out_has "^$A "
grep -q "^$B " "$TMP/out" && fail "--idle-in-tx shows active B"
run 0 "$PG" -d "$DB_DSN" activity --older-than 1h --json
jcheck 'd["sessions"]' "[]"
run 0 "$PG" -d "$DB_DSN" activity --older-than 1ms --json
jcheck "$A in [s['pid'] for s in d['sessions']]" True
run 64 "$PG" -d "$DB_DSN" activity --older-than soon
err_has "--older-than: invalid duration"

# --watch off a terminal: N snapshots one after the other, then the last status.
run 1 timeout 20 "$PG" -d "$DB_DSN" blockers --watch 200ms --count 2
n=$(grep -c "^pgcoord blockers, every 200ms" "$TMP/out")
expect_eq "$n" 2 "--watch --count 2 snapshots"
run 1 timeout 20 "$PG" -d "$DB_DSN" blockers --json --watch 100ms --count 3
jcheck 'len(ds), [x["roots"] for x in ds]' "(3, [[$A], [$A], [$A]])"

# On a terminal --watch redraws in place: clear the screen, draw, again.
if command -v script >/dev/null 2>&1; then
	timeout 30 script -qec "'$PG' -d '$DB_DSN' blockers --watch 200ms --count 2" /dev/null >"$TMP/tty" 2>&1
	[ "$(grep -c $'\e\[H\e\[2J' "$TMP/tty")" -eq 2 ] || { cat -v "$TMP/tty"; fail "--watch on a terminal does not redraw"; }
	grep -q "(Ctrl-C to stop)" "$TMP/tty" || fail "--watch on a terminal lacks the header"
fi

# Ending A lets the chain drain: nothing waits any more.
psql_q "SELECT pg_terminate_backend($A, 5000)" >/dev/null
for i in $(seq 1 100); do
	"$PG" -q -d "$DB_DSN" blockers && break
	sleep 0.1
done
run 0 "$PG" -d "$DB_DSN" blockers

# --watch survives the loss of its session: it reports it and reconnects.
timeout 60 "$PG" -d "$DB_DSN" blockers --watch 200ms --count 20 >"$TMP/watch.out" 2>"$TMP/watch.err" &
watcher=$!
wait_sql "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'pgcoord/blockers' AND datname = '$DB')"
old_backend=$(dbq "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgcoord/blockers' AND datname = '$DB'")
psql_q "SELECT pg_terminate_backend($old_backend, 5000)" >/dev/null
wait_sql "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'pgcoord/blockers' AND datname = '$DB' AND pid <> $old_backend)"
wait "$watcher"
st=$?
[ "$st" -eq 0 ] || { cat "$TMP/watch.out" "$TMP/watch.err"; fail "--watch after a lost session exited $st"; }
grep -q "terminat\|connection\|server closed" "$TMP/watch.err" || { cat "$TMP/watch.err"; fail "the lost session was not reported"; }
[ "$(grep -c '^no session waits' "$TMP/watch.out")" -ge 2 ] || { cat "$TMP/watch.out"; fail "--watch did not go on after reconnecting"; }

# The DDL queue: A2 reads in an open transaction, B2's ALTER TABLE waits, C2's SELECT waits
# behind B2.
open A2; A2=$(pid A2)
send A2 "BEGIN; SELECT count(*) FROM t;"
state "$A2" "idle in transaction"
open B2; B2=$(pid B2)
send B2 "ALTER TABLE t ADD COLUMN y int;"
waiting "$B2"
open C2; C2=$(pid C2)
send C2 "SELECT * FROM t;"
waiting "$C2"
run 1 "$PG" -d "$DB_DSN" blockers
out_has "^queued DDL: pid $B2 waits for AccessExclusiveLock on relation public.t and blocks 1 session queued behind it$"
out_has "pid $B2 .*\[QUEUED DDL, blocks 1\]"
out_has "queued DDL: 1 session queues behind this AccessExclusiveLock request"
out_has "pid $A2 holds AccessShareLock on it"
out_has "queued behind pid $B2's own AccessExclusiveLock request"
grep -q "pid $C2 " "$TMP/out" || fail "C2 missing"
run 1 "$PG" -d "$DB_DSN" blockers --json
jcheck 'd["queued_ddl"], d["roots"]' "([$B2], [$A2])"
# Terminate the migration first so it never runs.
psql_q "SELECT pg_terminate_backend($B2, 5000)" >/dev/null

# A wait cycle the server has not broken yet (deadlock_timeout raised for the test): reported,
# and the tree ends instead of going round.
open X; X=$(pid X)
open Y; Y=$(pid Y)
send X "SET deadlock_timeout = '20s'; SELECT pg_advisory_lock(5, 1);"
send Y "SET deadlock_timeout = '20s'; SELECT pg_advisory_lock(5, 2);"
wait_sql "SELECT count(*) = 2 FROM pg_locks WHERE locktype = 'advisory' AND classid = 5 AND granted"
send X "SELECT pg_advisory_lock(5, 2);"
send Y "SELECT pg_advisory_lock(5, 1);"
waiting "$X" "$Y"
run 1 timeout 20 "$PG" -d "$DB_DSN" blockers
out_has "^2 sessions wait for locks; 0 root blockers; 1 wait cycle$"
out_has "^wait cycle 1: pids .*$X"
out_has "^wait cycle 1: pids .*$Y"
out_has "(shown above: wait cycle)"
out_has "holds ExclusiveLock on it"
run 1 "$PG" -d "$DB_DSN" blockers --json
jcheck 'sorted(d["cycles"][0]) == sorted(['$X', '$Y']), d["roots"]' "(True, [])"
psql_q "SELECT pg_terminate_backend($X, 5000), pg_terminate_backend($Y, 5000)" >/dev/null

# pgcoord's own lock holder (PGC_LOCK_HOLD_XACT, pgcoord run through a transaction-mode
# pooler): named so inside its transaction, idle in it by design, holding only an advisory
# lock. Blockers labels it and names it worst only while nothing else blocks.
dbq "INSERT INTO pgcoord.lock_names VALUES (4343, 'deploy')"
start H "BEGIN; SELECT set_config('application_name', 'pgcoord/lock-holder', true); SELECT pg_advisory_xact_lock(4343);"
wait_sql "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $H AND application_name = 'pgcoord/lock-holder' AND state = 'idle in transaction')"
start W1 "SELECT pg_advisory_xact_lock(4343);"
waiting "$W1"
start W2 "SELECT pg_advisory_xact_lock(4343);"
waiting "$W2"
run 1 "$PG" -d "$DB_DSN" blockers
out_has "^2 sessions wait for locks; 1 root blocker; worst: pid $H (.*, pgcoord/lock-holder) pgcoord run holding lock deploy (key 4343), by design, for .* blocks 2 sessions$"
out_has "^pid $H .*idle in transaction.*\[ROOT, blocks 2\]"
out_has "^|  pgcoord run holding lock deploy (key 4343), by design$"
run 1 "$PG" -d "$DB_DSN" blockers --json
S='{s["pid"]: s for s in d["sessions"]}'
jcheck 'd["roots"], d["worst_root"]' "([$H], $H)" \
	"$S[$H][\"pgcoord_holder\"], $S[$W1][\"pgcoord_holder\"]" "(True, False)"
# A real problem beside it, blocking fewer sessions: it is the worst root, the holder comes last.
start R "BEGIN; SELECT * FROM t WHERE id = 2 FOR UPDATE;"
state "$R" "idle in transaction"
start V "UPDATE t SET x = 20 WHERE id = 2;"
waiting "$V"
# A session that only calls itself a lock holder but wrote something is an ordinary one.
start N "BEGIN; SELECT set_config('application_name', 'pgcoord/lock-holder', true); SELECT pg_advisory_xact_lock(77); INSERT INTO t VALUES (3, 3);"
wait_sql "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $N AND backend_xid IS NOT NULL AND state = 'idle in transaction')"
run 1 "$PG" -d "$DB_DSN" blockers
out_has "^3 sessions wait for locks; 2 root blockers; worst: pid $R (.*, $APP-R) idle in transaction for .* blocks 1 session$"
run 1 "$PG" -d "$DB_DSN" blockers --json
jcheck 'd["roots"], d["worst_root"]' "([$R, $H], $R)"
# activity marks the holder instead of showing a stuck idle transaction.
run 0 "$PG" -d "$DB_DSN" activity
out_has "^$H .* holding .*pgcoord lock holder: pgcoord run holding lock deploy (key 4343), by design$"
out_has "^$R .* idle-tx "
out_has "^$N .* idle-tx "
run 0 "$PG" -d "$DB_DSN" activity --idle-in-tx
out_has "^$R "
grep -q "^$H " "$TMP/out" && fail "activity --idle-in-tx lists pgcoord's lock holder"
run 0 "$PG" -d "$DB_DSN" activity --json
P='{s["pid"]: s["pgcoord_holder"] for s in d["sessions"]}'
jcheck "$P[$H], $P[$R], $P[$N], $P[$W1]" "(True, False, False, False)"
# terminate says what ending it does.
run 64 "$PG" -d "$DB_DSN" terminate "$H" </dev/null
out_has "^  pgcoord run holding lock deploy (key 4343), by design: ending it takes the lock"
psql_q "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE pid IN ($H, $W1, $W2, $R, $V, $N)" >/dev/null

# A root that holds a session lock outside any transaction: how long it has been idle.
start L "SELECT pg_advisory_lock(5151);"
state "$L" "idle"
start M "SELECT pg_advisory_lock(5151);"
waiting "$M"
run 1 "$PG" -d "$DB_DSN" blockers
out_has "^1 session waits for locks; 1 root blocker; worst: pid $L (.*, $APP-L) idle for [0-9.]*[a-z]* blocks 1 session$"
out_has "^pid $L .* idle [0-9.]*[a-z]*  \[ROOT, blocks 1\]"
psql_q "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE pid IN ($L, $M)" >/dev/null

# Usage errors.
run 64 "$PG" blockers --json --dot
err_has "cannot be combined"
run 64 "$PG" blockers --watch 10ms
err_has "at least 100ms"
run 64 "$PG" blockers --count 2
err_has "--count needs --watch"
run 64 "$PG" blockers extra
err_has 'unexpected argument "extra"'
run 0 "$PG" blockers --help
out_has "^Usage: pgcoord \[-d DSN\] blockers"
run 0 "$PG" help locks
out_has "^Usage: pgcoord \[-d DSN\] locks"
run 0 "$PG" activity --help
# Unreachable database: 69.
run 69 "$PG" -d "postgresql://127.0.0.1:1/x?connect_timeout=3" blockers
run 69 "$PG" -d "postgresql://127.0.0.1:1/x?connect_timeout=3" locks
run 69 "$PG" -d "postgresql://127.0.0.1:1/x?connect_timeout=3" activity
exit 0
