# diag_dot.sh - blockers --dot on a real wait-for graph is accepted by Graphviz
. "$(dirname "$0")/lib.sh"
if ! command -v dot >/dev/null 2>&1; then
	echo "skipped: Graphviz dot(1) is not installed (install the Debian package graphviz)" >&2
	exit 77
fi
. "$(dirname "$0")/diag_lib.sh"

dbq "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);"
open A; A=$(pid A)
send A "BEGIN; SELECT * FROM t WHERE id = 1 FOR UPDATE; SELECT pg_advisory_lock(7, 7);"
wait_sql "SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $A AND locktype = 'advisory')"
open B; B=$(pid B)
send B "UPDATE t SET id = 1 WHERE id = 1;"
open C; C=$(pid C)
send C "SELECT pg_advisory_lock(7, 7);"
waiting "$B" "$C"

run 1 "$PG" -d "$DB_DSN" blockers --dot
out_has "^digraph pgcoord_blockers {"
out_has "p$A \[label=\"pid $A (root)"
out_has "p$B -> p$A \[label=\"wants ShareLock"
out_has "p$C -> p$A \[label=\"wants ExclusiveLock\\\\non advisory 7,7\""
out_has "penwidth=3"
cp "$TMP/out" "$TMP/graph.dot"
timeout 30 dot -Tsvg "$TMP/graph.dot" >"$TMP/graph.svg" 2>"$TMP/dot.err" || { cat "$TMP/dot.err"; fail "dot rejected the graph"; }
[ -s "$TMP/dot.err" ] && { cat "$TMP/dot.err"; fail "dot warned"; }
grep -q "<svg" "$TMP/graph.svg" || fail "no SVG produced"
grep -q "pid $A" "$TMP/graph.svg" || fail "the SVG lacks pid $A"
# A quiet graph is still a valid graph.
psql_q "SELECT pg_terminate_backend($A, 5000)" >/dev/null
for i in $(seq 1 100); do "$PG" -q -d "$DB_DSN" blockers && break; sleep 0.1; done
run 0 "$PG" -d "$DB_DSN" blockers --dot
timeout 30 dot -Tsvg "$TMP/out" >/dev/null || fail "dot rejected the empty graph"
exit 0
