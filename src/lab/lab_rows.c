/* lab_rows.c - row locks and locking reads: what a reader waits for, the 4x4 conflict
 * matrix, FOR KEY SHARE and foreign keys, NOWAIT, OF, LIMIT/OFFSET, WITH queries, the query
 * shapes that cannot lock, the re-check after a wait, the plan, and where row locks live
 *
 * Conflicts are measured, never assumed: a pair of sessions, the first holding a lock, the
 * second asking with NOWAIT (55P03 means "conflicts"); or a statement sent asynchronously
 * while the observer watches pg_stat_activity for wait_event_type = 'Lock'. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_int.h"

void lab_exp_mvcc_read(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 1))
		return;
	if (!lab_exec(L, a, "BEGIN") || !lab_exec(L, a, "UPDATE items SET v = 2 WHERE id = 1"))
		return;
	int w = lab_waits(L, b, "SELECT v FROM items WHERE id = 1");
	PGresult *res = NULL;
	if (w < 0 || !lab_done_ok(L, b, &res))
		return;
	long long v = PQntuples(res) == 1 ? atoll(PQgetvalue(res, 0, 0)) : -1;
	PQclear(res);
	long long own;
	if (!lab_int(L, a, "SELECT v FROM items WHERE id = 1", 0, NULL, &own) ||
	    !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vbool(L, "reader_waited", w == 1);
	lab_vint(L, "reader_saw", v);
	lab_vint(L, "writer_sees", own);
	lab_verdict(L, w == 0 && v == 1 && own == 2,
	            "A updated v 1 -> 2 without committing; B's plain SELECT %s and read v=%lld (A's own"
	            " transaction sees %lld)", w == 1 ? "waited" : "did not wait", v, own);
}

/* ---- the conflict matrix ---- */

void lab_exp_row_lock_matrix(lab *L)
{
	lab_conflict_matrix(L, LAB_ROW_LOCKS);
}

/* ---- modes, foreign keys, NOWAIT ---- */

void lab_exp_row_lock_self(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 1))
		return;
	char before[6], after[6];
	int self_conflicts = 0;
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items WHERE id = 1 FOR KEY SHARE") ||
	    !lab_try(L, b, "SELECT id FROM items WHERE id = 1 FOR KEY SHARE NOWAIT", before))
		return;
	/* Every mode again, strongest first, in the same transaction: none conflicts with A's own. */
	for (int m = PGC_ROW_LOCK_COUNT; m >= 1; m--) {
		char sql[96], state[6];
		snprintf(sql, sizeof sql, "SELECT id FROM items WHERE id = 1 %s NOWAIT", pgc_row_lock_sql(m));
		if (!lab_try(L, a, sql, state))
			return;
		if (state[0] != '\0') {
			self_conflicts++;
			break; /* the transaction is aborted now */
		}
	}
	if (self_conflicts == 0 &&
	    !lab_try(L, b, "SELECT id FROM items WHERE id = 1 FOR KEY SHARE NOWAIT", after))
		return;
	if (!lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vint(L, "self_conflicts", self_conflicts);
	lab_vtext(L, "other_key_share_before", before[0] ? before : "granted");
	lab_vtext(L, "other_key_share_after", self_conflicts ? "" : after[0] ? after : "granted");
	lab_verdict(L, self_conflicts == 0 && before[0] == '\0' && strcmp(after, "55P03") == 0,
	            "A took FOR KEY SHARE then FOR UPDATE .. FOR KEY SHARE NOWAIT on its own row: %d"
	            " conflicts; B's FOR KEY SHARE NOWAIT: %s before, %s after A strengthened to FOR UPDATE",
	            self_conflicts, before[0] ? before : "granted",
	            self_conflicts ? "-" : after[0] ? after : "granted");
}

void lab_exp_key_share(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 1))
		return;
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items WHERE id = 1 FOR KEY SHARE"))
		return;
	int upd = lab_waits(L, b, "UPDATE items SET v = v + 1 WHERE id = 1");
	if (upd < 0 || !lab_done_ok(L, b, NULL))
		return;
	int del = lab_waits(L, b, "DELETE FROM items WHERE id = 1");
	if (del < 0)
		return;
	if (!lab_exec(L, a, "ROLLBACK") || !lab_done_ok(L, b, NULL))
		return;
	lab_vbool(L, "non_key_update_waited", upd == 1);
	lab_vbool(L, "delete_waited", del == 1);
	lab_verdict(L, upd == 0 && del == 1,
	            "A holds FOR KEY SHARE: B's non-key UPDATE %s, B's DELETE %s",
	            upd ? "waited" : "went through", del ? "waited until A ended" : "went through");
}

void lab_exp_fk_insert(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL)
		return;
	if (!lab_exec(L, a, "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL)") ||
	    !lab_exec(L, a, "CREATE TABLE orders (id serial PRIMARY KEY,"
	                    " customer_id int NOT NULL REFERENCES customers (id))") ||
	    !lab_exec(L, a, "INSERT INTO customers VALUES (1, 'ada')"))
		return;
	if (!lab_exec(L, a, "BEGIN; UPDATE customers SET name = 'ada lovelace' WHERE id = 1"))
		return;
	int under_update = lab_waits(L, b, "INSERT INTO orders (customer_id) VALUES (1)");
	if (under_update < 0 || !lab_done_ok(L, b, NULL) || !lab_exec(L, a, "ROLLBACK"))
		return;
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM customers WHERE id = 1 FOR UPDATE"))
		return;
	int under_for_update = lab_waits(L, b, "INSERT INTO orders (customer_id) VALUES (1)");
	if (under_for_update < 0 || !lab_exec(L, a, "ROLLBACK") || !lab_done_ok(L, b, NULL))
		return;
	lab_vbool(L, "insert_waited_for_non_key_update", under_update == 1);
	lab_vbool(L, "insert_waited_for_for_update", under_for_update == 1);
	lab_verdict(L, under_update == 0 && under_for_update == 1,
	            "child INSERT while the parent row is updated on a non-key column: %s; while it is"
	            " locked FOR UPDATE: %s", under_update ? "waited" : "no wait",
	            under_for_update ? "waited" : "no wait");
}

void lab_exp_nowait(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 1))
		return;
	char nowait[6], next[6], sp_nowait[6], after_sp[6];
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items WHERE id = 1 FOR UPDATE") ||
	    !lab_exec(L, b, "BEGIN") ||
	    !lab_try(L, b, "SELECT id FROM items WHERE id = 1 FOR UPDATE NOWAIT", nowait) ||
	    !lab_try(L, b, "SELECT 1", next) || !lab_exec(L, b, "ROLLBACK"))
		return;
	char nowait_msg[256];
	snprintf(nowait_msg, sizeof nowait_msg, "%s", b->lasterr);
	if (!lab_exec(L, b, "BEGIN; SAVEPOINT probe") ||
	    !lab_try(L, b, "SELECT id FROM items WHERE id = 1 FOR UPDATE NOWAIT", sp_nowait) ||
	    !lab_exec(L, b, "ROLLBACK TO SAVEPOINT probe") || !lab_try(L, b, "SELECT 1", after_sp) ||
	    !lab_exec(L, b, "COMMIT") || !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vtext(L, "nowait_sqlstate", nowait);
	lab_vtext(L, "next_statement_sqlstate", next);
	lab_vtext(L, "savepoint_nowait_sqlstate", sp_nowait);
	lab_vbool(L, "usable_after_rollback_to", after_sp[0] == '\0');
	lab_verdict(L, strcmp(nowait, "55P03") == 0 && strcmp(next, "25P02") == 0 &&
	                   strcmp(sp_nowait, "55P03") == 0 && after_sp[0] == '\0',
	            "FOR UPDATE NOWAIT on a locked row: %s, next statement: %s (aborted); under a"
	            " savepoint: %s, then ROLLBACK TO and SELECT 1: %s", nowait[0] ? nowait : "granted",
	            next[0] ? next : "ok", sp_nowait[0] ? sp_nowait : "granted",
	            after_sp[0] ? after_sp : "ok");
}

/* ---- what a locking read locks ---- */

void lab_exp_for_update_of(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL)
		return;
	if (!lab_exec(L, a, "CREATE TABLE customers (id int PRIMARY KEY, display_name text NOT NULL)") ||
	    !lab_exec(L, a, "CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL"
	                    " REFERENCES customers (id), status text NOT NULL)") ||
	    !lab_exec(L, a, "INSERT INTO customers VALUES (1, 'ada'); INSERT INTO orders VALUES"
	                    " (7001, 1, 'new')"))
		return;
	static const char *const join =
	        "SELECT o.id, o.status, c.display_name FROM orders AS o"
	        " JOIN customers AS c ON c.id = o.customer_id WHERE o.id = 7001 FOR UPDATE";
	char sql[256], with_of_o[6], with_of_c[6], without_o[6], without_c[6];
	snprintf(sql, sizeof sql, "BEGIN; %s OF o", join);
	if (!lab_exec(L, a, sql) ||
	    !lab_try(L, b, "SELECT id FROM orders WHERE id = 7001 FOR UPDATE NOWAIT", with_of_o) ||
	    !lab_try(L, b, "SELECT id FROM customers WHERE id = 1 FOR UPDATE NOWAIT", with_of_c) ||
	    !lab_exec(L, a, "ROLLBACK"))
		return;
	snprintf(sql, sizeof sql, "BEGIN; %s", join);
	if (!lab_exec(L, a, sql) ||
	    !lab_try(L, b, "SELECT id FROM orders WHERE id = 7001 FOR UPDATE NOWAIT", without_o) ||
	    !lab_try(L, b, "SELECT id FROM customers WHERE id = 1 FOR UPDATE NOWAIT", without_c) ||
	    !lab_exec(L, a, "ROLLBACK"))
		return;
	bool of_o = strcmp(with_of_o, "55P03") == 0, of_c = strcmp(with_of_c, "55P03") == 0;
	bool all_o = strcmp(without_o, "55P03") == 0, all_c = strcmp(without_c, "55P03") == 0;
	lab_vbool(L, "of_o_orders_locked", of_o);
	lab_vbool(L, "of_o_customers_locked", of_c);
	lab_vbool(L, "no_of_orders_locked", all_o);
	lab_vbool(L, "no_of_customers_locked", all_c);
	lab_verdict(L, of_o && !of_c && all_o && all_c,
	            "FOR UPDATE OF o locked orders=%s customers=%s; without OF orders=%s customers=%s",
	            lab_tf(of_o), lab_tf(of_c), lab_tf(all_o), lab_tf(all_c));
}

void lab_exp_limit_offset(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 5))
		return;
	char lim[32], off[32];
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items ORDER BY id LIMIT 2 FOR UPDATE") ||
	    !lab_locked_ids(L, b, lim, sizeof lim) || !lab_exec(L, a, "ROLLBACK") ||
	    !lab_exec(L, a, "BEGIN; SELECT id FROM items ORDER BY id OFFSET 2 LIMIT 1 FOR UPDATE") ||
	    !lab_locked_ids(L, b, off, sizeof off) || !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vtext(L, "locked_by_limit_2", lim);
	lab_vtext(L, "locked_by_offset_2_limit_1", off);
	lab_verdict(L, strcmp(lim, "1,2") == 0 && strcmp(off, "1,2,3") == 0,
	            "rows 1..5: ORDER BY id LIMIT 2 FOR UPDATE locked {%s}; OFFSET 2 LIMIT 1 (returns 3)"
	            " locked {%s}", lim, off);
}

void lab_exp_cte_lock(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 5))
		return;
	char top[32], inside[32];
	if (!lab_exec(L, a, "BEGIN; WITH picked AS (SELECT id FROM items WHERE id <= 2)"
	                    " SELECT id FROM picked FOR UPDATE") ||
	    !lab_locked_ids(L, b, top, sizeof top) || !lab_exec(L, a, "ROLLBACK") ||
	    !lab_exec(L, a, "BEGIN; WITH picked AS (SELECT id FROM items WHERE id <= 2 FOR UPDATE)"
	                    " SELECT id FROM picked") ||
	    !lab_locked_ids(L, b, inside, sizeof inside) || !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vtext(L, "locked_top_level_clause", top);
	lab_vtext(L, "locked_clause_inside_cte", inside);
	lab_verdict(L, top[0] == '\0' && strcmp(inside, "1,2") == 0,
	            "WITH picked AS (... id <= 2) SELECT ... FOR UPDATE locked {%s}; FOR UPDATE inside"
	            " the WITH query locked {%s}", top, inside);
}

void lab_exp_lock_shape(lab *L)
{
	static const struct {
		const char *name, *sql;
	} shapes[] = {
		{ "group_by", "SELECT v, count(*) FROM items GROUP BY v FOR UPDATE" },
		{ "distinct", "SELECT DISTINCT v FROM items FOR UPDATE" },
		{ "aggregate", "SELECT count(*) FROM items FOR UPDATE" },
		{ "window", "SELECT id, row_number() OVER () FROM items FOR UPDATE" },
		{ "union", "SELECT id FROM items UNION SELECT id FROM items FOR UPDATE" },
	};
	lab_sess *a = lab_open(L);
	if (a == NULL || !lab_make_items(L, a, 3))
		return;
	int rejected = 0;
	char first[200] = "";
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		char state[6];
		if (!lab_try(L, a, shapes[i].sql, state))
			return;
		lab_vtext(L, shapes[i].name, state[0] ? state : "accepted");
		if (strcmp(state, "0A000") == 0)
			rejected++;
		if (i == 0)
			snprintf(first, sizeof first, "%s", state[0] ? a->lasterr : "accepted");
	}
	lab_verdict(L, rejected == 5,
	            "%d of 5 shapes (GROUP BY, DISTINCT, aggregate, window, UNION) rejected with 0A000,"
	            " e.g. \"%s\"", rejected, first);
}

void lab_exp_recheck(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 3))
		return;
	/* READ COMMITTED, row updated while B waits: B gets the new version. */
	if (!lab_exec(L, a, "BEGIN; UPDATE items SET v = v + 10 WHERE id = 1"))
		return;
	int w1 = lab_waits(L, b, "SELECT v FROM items WHERE id = 1 FOR UPDATE");
	PGresult *res = NULL;
	if (w1 < 0 || !lab_exec(L, a, "COMMIT") || !lab_done_ok(L, b, &res))
		return;
	long long v = PQntuples(res) == 1 ? atoll(PQgetvalue(res, 0, 0)) : -1;
	PQclear(res);
	/* READ COMMITTED, row deleted while B waits: no row. */
	if (!lab_exec(L, a, "BEGIN; DELETE FROM items WHERE id = 2"))
		return;
	int w2 = lab_waits(L, b, "SELECT v FROM items WHERE id = 2 FOR UPDATE");
	if (w2 < 0 || !lab_exec(L, a, "COMMIT") || !lab_done_ok(L, b, &res))
		return;
	int rows = PQntuples(res);
	PQclear(res);
	/* REPEATABLE READ: the row changed after B's snapshot: serialization failure. */
	char state[6];
	if (!lab_exec(L, b, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM items") ||
	    !lab_exec(L, a, "BEGIN; UPDATE items SET v = v + 10 WHERE id = 3"))
		return;
	int w3 = lab_waits(L, b, "SELECT v FROM items WHERE id = 3 FOR UPDATE");
	if (w3 < 0 || !lab_exec(L, a, "COMMIT") || !lab_finish(L, b, 0, state, NULL) ||
	    !lab_exec(L, b, "ROLLBACK"))
		return;
	lab_vbool(L, "read_committed_waited", w1 == 1 && w2 == 1);
	lab_vint(L, "read_committed_updated_value", v);
	lab_vint(L, "read_committed_deleted_rows", rows);
	lab_vbool(L, "repeatable_read_waited", w3 == 1);
	lab_vtext(L, "repeatable_read_sqlstate", state[0] ? state : "ok");
	lab_verdict(L, w1 == 1 && w2 == 1 && v == 11 && rows == 0 && w3 == 1 &&
	                   strcmp(state, "40001") == 0,
	            "after waiting at READ COMMITTED: updated row returned with v=%lld, deleted row gave %d"
	            " rows; at REPEATABLE READ: %s", v, rows, state[0] ? state : "no error");
}

/* ---- plans, and where row locks live ---- */

static bool plan_has(lab *L, lab_sess *s, const char *sql, const char *node, bool *out,
                     char *top, size_t n)
{
	PGresult *res = lab_query(L, s, sql, 0, NULL);
	if (res == NULL)
		return false;
	*out = false;
	for (int i = 0; i < PQntuples(res); i++)
		if (strstr(PQgetvalue(res, i, 0), node) != NULL)
			*out = true;
	snprintf(top, n, "%s", PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "");
	PQclear(res);
	return true;
}

void lab_exp_lockrows_plan(lab *L)
{
	lab_sess *a = lab_open(L);
	if (a == NULL || !lab_make_items(L, a, 3))
		return;
	bool with, without;
	char top_with[128], top_without[128];
	if (!plan_has(L, a, "EXPLAIN (COSTS OFF) SELECT * FROM items WHERE id = 1 FOR UPDATE",
	              "LockRows", &with, top_with, sizeof top_with) ||
	    !plan_has(L, a, "EXPLAIN (COSTS OFF) SELECT * FROM items WHERE id = 1", "LockRows",
	              &without, top_without, sizeof top_without))
		return;
	lab_vbool(L, "for_update_has_lockrows", with);
	lab_vbool(L, "plain_has_lockrows", without);
	lab_vtext(L, "for_update_top_node", top_with);
	lab_vtext(L, "plain_top_node", top_without);
	lab_verdict(L, with && !without,
	            "EXPLAIN ... FOR UPDATE: top node \"%s\" (LockRows %s); plain SELECT: \"%s\" (LockRows"
	            " %s)", top_with, with ? "present" : "absent", top_without,
	            without ? "present" : "absent");
}

void lab_exp_row_locks_memory(lab *L)
{
	lab_sess *a = lab_open(L);
	if (a == NULL || !lab_exec(L, a, "CREATE TABLE big (id int NOT NULL)") ||
	    !lab_exec(L, a, "INSERT INTO big SELECT g FROM generate_series(1, 100000) g"))
		return;
	long long locked, rows, tuples, mlpt;
	char pa[24], kinds[160];
	const char *p[1] = { lab_fmt(pa, a->pid) };
	if (!lab_exec(L, a, "BEGIN") ||
	    !lab_int(L, a, "SELECT count(*) FROM (SELECT id FROM big FOR UPDATE) AS s", 0, NULL, &locked) ||
	    !lab_int(L, L->obs, "SELECT count(*) FROM pg_locks WHERE pid = $1::int", 1, p, &rows) ||
	    !lab_int(L, L->obs, "SELECT count(*) FROM pg_locks WHERE pid = $1::int AND locktype = 'tuple'",
	             1, p, &tuples) ||
	    !lab_text(L, L->obs,
	              "SELECT string_agg(DISTINCT locktype, ',') FROM pg_locks WHERE pid = $1::int", 1, p,
	              kinds, sizeof kinds) ||
	    !lab_int(L, L->obs, "SELECT current_setting('max_locks_per_transaction')::bigint", 0, NULL,
	             &mlpt) ||
	    !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vint(L, "rows_locked", locked);
	lab_vint(L, "pg_locks_rows", rows);
	lab_vint(L, "tuple_rows", tuples);
	lab_vtext(L, "locktypes", kinds);
	lab_vint(L, "max_locks_per_transaction", mlpt);
	lab_verdict(L, locked == 100000 && rows < 20 && tuples == 0,
	            "one transaction locked %lld rows FOR UPDATE; pg_locks shows %lld rows for it (%s),"
	            " %lld of them tuple locks", locked, rows, kinds, tuples);
}

void lab_exp_row_wait_xid(lab *L)
{
	lab_sess *a, *b;
	if (!lab_row_waiter(L, "BEGIN; SELECT id FROM items WHERE id = 1 FOR UPDATE", &a, &b))
		return;
	char pa[24], pb[24], wait[160], axid[32];
	const char *p[1] = { lab_fmt(pa, a->pid) }, *q[1] = { lab_fmt(pb, b->pid) };
	if (!lab_text(L, L->obs,
	              "SELECT coalesce(max(transactionid::text), '') FROM pg_locks"
	              " WHERE pid = $1::int AND locktype = 'transactionid' AND mode = 'ExclusiveLock'",
	              1, p, axid, sizeof axid) ||
	    !lab_text(L, L->obs,
	              "SELECT coalesce(string_agg(format('%s %s %s granted=%s', locktype, mode,"
	              " transactionid, granted), '; '), '') FROM pg_locks"
	              " WHERE pid = $1::int AND NOT granted", 1, q, wait, sizeof wait) ||
	    !lab_exec(L, a, "ROLLBACK") || !lab_done_ok(L, b, NULL))
		return;
	char want[96];
	snprintf(want, sizeof want, "transactionid ShareLock %s granted=f", axid);
	lab_vtext(L, "holder_xid", axid);
	lab_vtext(L, "waiter_request", wait);
	lab_verdict(L, axid[0] != '\0' && strcmp(wait, want) == 0,
	            "B waits for A's row lock; B's ungranted pg_locks row: %s (A's transaction id %s)",
	            wait[0] ? wait : "none", axid[0] ? axid : "none");
}
