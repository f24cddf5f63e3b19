/* lab_rows.c - table-lock and row-lock experiments: seed 002 §01 and §03 to §07
 *
 * Conflicts are measured, never assumed: a pair of sessions, the first holding a lock, the
 * second asking with NOWAIT (55P03 means "conflicts"); or a statement sent asynchronously
 * while the observer watches pg_stat_activity for wait_event_type = 'Lock'. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_internal.h"

static const char *tf(bool b)
{
	return b ? "true" : "false";
}

/* Rows of items that session s cannot lock right now (SKIP LOCKED skips exactly those),
 * "1,2", or "" when none. The probe runs in autocommit, so its own locks end with it. */
static bool locked_ids(lab *L, lab_sess *s, char *out, size_t n)
{
	return lab_text(L, s,
	                "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM items"
	                " WHERE id NOT IN (SELECT id FROM items FOR UPDATE SKIP LOCKED)",
	                0, NULL, out, n);
}

static bool make_items(lab *L, lab_sess *s, int rows)
{
	char n[24];
	const char *p[1] = { lab_fmt(n, rows) };
	return lab_exec(L, s, "CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)") &&
	       lab_execp(L, s, "INSERT INTO items SELECT g, g FROM generate_series(1, $1::int) g", 1, p);
}

/* Sends sql on s and reports whether s had to wait for a lock (1), ran through (0), or -1. */
static int waits(lab *L, lab_sess *s, const char *sql)
{
	if (!lab_send(L, s, sql, 0, NULL))
		return -1;
	return lab_await_lock_wait(L, s);
}

/* Collects what was sent on s and expects success. */
static bool done_ok(lab *L, lab_sess *s, PGresult **out)
{
	char state[6];
	if (!lab_finish(L, s, 0, state, out))
		return false;
	if (state[0] != '\0') {
		if (out != NULL && *out != NULL) {
			PQclear(*out);
			*out = NULL;
		}
		lab_fail(L, "session %s: %s (SQLSTATE %s)", s->label, s->lasterr, state);
		return false;
	}
	return true;
}

void lab_exp_mvcc_read(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_items(L, a, 1))
		return;
	if (!lab_exec(L, a, "BEGIN") || !lab_exec(L, a, "UPDATE items SET v = 2 WHERE id = 1"))
		return;
	int w = waits(L, b, "SELECT v FROM items WHERE id = 1");
	PGresult *res = NULL;
	if (w < 0 || !done_ok(L, b, &res))
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

/* ---- oversell: read-then-write against the conditional UPDATE ---- */

#define OVERSELL_SESSIONS 8
#define OVERSELL_STOCK 3

struct oversell {
	int sold;
};

static void read_then_write(lab *L, lab_sess *s, int i, void *arg)
{
	(void)i;
	struct oversell *o = arg;
	long long stock;
	if (!lab_barrier(L) ||
	    !lab_int(L, s, "SELECT stock FROM products WHERE id = 10", 0, NULL, &stock))
		return;
	/* Everyone has read before anyone writes: the race the seed warns about, made certain. */
	if (!lab_barrier(L) || stock <= 0)
		return;
	if (lab_exec(L, s, "UPDATE products SET stock = stock - 1 WHERE id = 10"))
		__atomic_add_fetch(&o->sold, 1, __ATOMIC_SEQ_CST);
}

static void conditional(lab *L, lab_sess *s, int i, void *arg)
{
	(void)i;
	struct oversell *o = arg;
	if (!lab_barrier(L))
		return;
	PGresult *res = lab_query(L, s,
	                          "UPDATE products SET stock = stock - 1 WHERE id = 10 AND stock > 0"
	                          " RETURNING id, stock", 0, NULL);
	if (res == NULL)
		return;
	if (PQntuples(res) == 1)
		__atomic_add_fetch(&o->sold, 1, __ATOMIC_SEQ_CST);
	PQclear(res);
}

void lab_exp_oversell(lab *L)
{
	lab_sess *s[OVERSELL_SESSIONS];
	for (int i = 0; i < OVERSELL_SESSIONS; i++)
		if ((s[i] = lab_open(L)) == NULL)
			return;
	char st[24];
	const char *p[1] = { lab_fmt(st, OVERSELL_STOCK) };
	struct oversell naive = { 0 }, safe = { 0 };
	long long naive_stock, safe_stock;
	if (!lab_exec(L, s[0], "CREATE TABLE products (id int PRIMARY KEY, stock int NOT NULL)") ||
	    !lab_execp(L, s[0], "INSERT INTO products VALUES (10, $1::int)", 1, p) ||
	    !lab_threads(L, OVERSELL_SESSIONS, s, read_then_write, &naive) ||
	    !lab_int(L, s[0], "SELECT stock FROM products WHERE id = 10", 0, NULL, &naive_stock) ||
	    !lab_execp(L, s[0], "UPDATE products SET stock = $1::int WHERE id = 10", 1, p) ||
	    !lab_threads(L, OVERSELL_SESSIONS, s, conditional, &safe) ||
	    !lab_int(L, s[0], "SELECT stock FROM products WHERE id = 10", 0, NULL, &safe_stock))
		return;
	lab_vint(L, "sessions", OVERSELL_SESSIONS);
	lab_vint(L, "stock", OVERSELL_STOCK);
	lab_vint(L, "read_then_write_sold", naive.sold);
	lab_vint(L, "read_then_write_final_stock", naive_stock);
	lab_vint(L, "conditional_sold", safe.sold);
	lab_vint(L, "conditional_final_stock", safe_stock);
	lab_verdict(L, naive.sold > OVERSELL_STOCK && naive_stock < 0 && safe.sold == OVERSELL_STOCK &&
	                   safe_stock == 0,
	            "%d sessions, stock %d: read-then-write sold %d (stock now %lld); UPDATE ... WHERE"
	            " stock > 0 RETURNING sold %d (stock now %lld)", OVERSELL_SESSIONS, OVERSELL_STOCK,
	            naive.sold, naive_stock, safe.sold, safe_stock);
}

/* ---- table locks ---- */

void lab_exp_table_lock_matrix(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_exec(L, a, "CREATE TABLE t (id int)"))
		return;
	char measured[PGC_TABLE_LOCK_COUNT * 9 + 1] = "";
	int conflicts = 0, mismatches = 0;
	char first_mismatch[128] = "";
	for (int m1 = 1; m1 <= PGC_TABLE_LOCK_COUNT; m1++) {
		for (int m2 = 1; m2 <= PGC_TABLE_LOCK_COUNT; m2++) {
			char sql1[96], sql2[96], state[6];
			snprintf(sql1, sizeof sql1, "BEGIN; LOCK TABLE t IN %s MODE", pgc_table_lock_sql(m1));
			snprintf(sql2, sizeof sql2, "BEGIN; LOCK TABLE t IN %s MODE NOWAIT",
			         pgc_table_lock_sql(m2));
			if (!lab_exec(L, a, sql1) || !lab_try(L, b, sql2, state) ||
			    !lab_exec(L, b, "ROLLBACK") || !lab_exec(L, a, "ROLLBACK"))
				return;
			if (state[0] != '\0' && strcmp(state, "55P03") != 0) {
				lab_fail(L, "session B: %s (SQLSTATE %s) in: %s", b->lasterr, state, sql2);
				return;
			}
			bool c = state[0] != '\0';
			conflicts += c;
			strncat(measured, c ? "X" : ".", 2);
			if (c != pgc_table_lock_conflicts(m1, m2) && mismatches++ == 0)
				snprintf(first_mismatch, sizeof first_mismatch, "%s held, %s %s", pgc_table_lock_sql(m1),
				         pgc_table_lock_sql(m2), c ? "conflicted" : "was granted");
		}
		if (m1 < PGC_TABLE_LOCK_COUNT)
			strncat(measured, "/", 2);
	}
	lab_vint(L, "pairs", PGC_TABLE_LOCK_COUNT * PGC_TABLE_LOCK_COUNT);
	lab_vint(L, "conflicts", conflicts);
	lab_vint(L, "mismatches", mismatches);
	lab_vtext(L, "matrix", measured);
	if (mismatches == 0)
		lab_verdict(L, true, "64 LOCK TABLE ... NOWAIT pairs: %d conflict, %d coexist, equal to the"
		            " documented table", conflicts, 64 - conflicts);
	else
		lab_verdict(L, false, "64 LOCK TABLE ... NOWAIT pairs: %d differ from the documented table,"
		            " first: %s", mismatches, first_mismatch);
}

void lab_exp_lock_table_needs_tx(lab *L)
{
	lab_sess *a = lab_open(L);
	char state[6];
	if (a == NULL || !lab_exec(L, a, "CREATE TABLE t (id int)") ||
	    !lab_try(L, a, "LOCK TABLE t IN ACCESS SHARE MODE", state))
		return;
	lab_vtext(L, "sqlstate", state);
	lab_vtext(L, "message", state[0] ? a->lasterr : "");
	lab_verdict(L, strcmp(state, "25P01") == 0, "LOCK TABLE in autocommit: %s (%s)",
	            state[0] ? a->lasterr : "accepted", state[0] ? state : "no error");
}

void lab_exp_lock_table_default(lab *L)
{
	lab_sess *a = lab_open(L);
	if (a == NULL || !lab_exec(L, a, "CREATE TABLE t (id int)") ||
	    !lab_exec(L, a, "BEGIN; LOCK TABLE t"))
		return;
	char pid[24], mode[64];
	const char *p[2] = { lab_fmt(pid, a->pid), L->schema };
	if (!lab_text(L, L->obs,
	              "SELECT coalesce(string_agg(l.mode, ','), '') FROM pg_locks l"
	              " JOIN pg_class c ON c.oid = l.relation"
	              " JOIN pg_namespace n ON n.oid = c.relnamespace"
	              " WHERE l.pid = $1::int AND n.nspname = $2 AND c.relname = 't'",
	              2, p, mode, sizeof mode) ||
	    !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vtext(L, "mode", mode);
	lab_verdict(L, strcmp(mode, pgc_table_lock_name(PGC_ACCESS_EXCLUSIVE)) == 0,
	            "LOCK TABLE t (no mode) holds %s on t", mode[0] ? mode : "nothing");
}

/* ---- row locks ---- */

void lab_exp_row_lock_matrix(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_items(L, a, 1))
		return;
	char measured[PGC_ROW_LOCK_COUNT * 5 + 1] = "";
	int conflicts = 0, mismatches = 0;
	char first_mismatch[128] = "";
	for (int m1 = 1; m1 <= PGC_ROW_LOCK_COUNT; m1++) {
		for (int m2 = 1; m2 <= PGC_ROW_LOCK_COUNT; m2++) {
			char sql1[96], sql2[96], state[6];
			snprintf(sql1, sizeof sql1, "BEGIN; SELECT id FROM items WHERE id = 1 %s",
			         pgc_row_lock_sql(m1));
			snprintf(sql2, sizeof sql2, "BEGIN; SELECT id FROM items WHERE id = 1 %s NOWAIT",
			         pgc_row_lock_sql(m2));
			if (!lab_exec(L, a, sql1) || !lab_try(L, b, sql2, state) ||
			    !lab_exec(L, b, "ROLLBACK") || !lab_exec(L, a, "ROLLBACK"))
				return;
			if (state[0] != '\0' && strcmp(state, "55P03") != 0) {
				lab_fail(L, "session B: %s (SQLSTATE %s) in: %s", b->lasterr, state, sql2);
				return;
			}
			bool c = state[0] != '\0';
			conflicts += c;
			strncat(measured, c ? "X" : ".", 2);
			if (c != pgc_row_lock_conflicts(m1, m2) && mismatches++ == 0)
				snprintf(first_mismatch, sizeof first_mismatch, "%s held, %s %s", pgc_row_lock_sql(m1),
				         pgc_row_lock_sql(m2), c ? "conflicted" : "was granted");
		}
		if (m1 < PGC_ROW_LOCK_COUNT)
			strncat(measured, "/", 2);
	}
	lab_vint(L, "pairs", PGC_ROW_LOCK_COUNT * PGC_ROW_LOCK_COUNT);
	lab_vint(L, "conflicts", conflicts);
	lab_vint(L, "mismatches", mismatches);
	lab_vtext(L, "matrix", measured);
	if (mismatches == 0)
		lab_verdict(L, true, "16 SELECT ... FOR <mode> NOWAIT pairs: %d conflict, %d coexist, equal"
		            " to the documented table", conflicts, 16 - conflicts);
	else
		lab_verdict(L, false, "16 row-lock pairs: %d differ from the documented table, first: %s",
		            mismatches, first_mismatch);
}

void lab_exp_row_lock_self(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_items(L, a, 1))
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
	if (b == NULL || !make_items(L, a, 1))
		return;
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items WHERE id = 1 FOR KEY SHARE"))
		return;
	int upd = waits(L, b, "UPDATE items SET v = v + 1 WHERE id = 1");
	if (upd < 0 || !done_ok(L, b, NULL))
		return;
	int del = waits(L, b, "DELETE FROM items WHERE id = 1");
	if (del < 0)
		return;
	if (!lab_exec(L, a, "ROLLBACK") || !done_ok(L, b, NULL))
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
	int under_update = waits(L, b, "INSERT INTO orders (customer_id) VALUES (1)");
	if (under_update < 0 || !done_ok(L, b, NULL) || !lab_exec(L, a, "ROLLBACK"))
		return;
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM customers WHERE id = 1 FOR UPDATE"))
		return;
	int under_for_update = waits(L, b, "INSERT INTO orders (customer_id) VALUES (1)");
	if (under_for_update < 0 || !lab_exec(L, a, "ROLLBACK") || !done_ok(L, b, NULL))
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
	if (b == NULL || !make_items(L, a, 1))
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
	            tf(of_o), tf(of_c), tf(all_o), tf(all_c));
}

void lab_exp_limit_offset(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_items(L, a, 5))
		return;
	char lim[32], off[32];
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items ORDER BY id LIMIT 2 FOR UPDATE") ||
	    !locked_ids(L, b, lim, sizeof lim) || !lab_exec(L, a, "ROLLBACK") ||
	    !lab_exec(L, a, "BEGIN; SELECT id FROM items ORDER BY id OFFSET 2 LIMIT 1 FOR UPDATE") ||
	    !locked_ids(L, b, off, sizeof off) || !lab_exec(L, a, "ROLLBACK"))
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
	if (b == NULL || !make_items(L, a, 5))
		return;
	char top[32], inside[32];
	if (!lab_exec(L, a, "BEGIN; WITH picked AS (SELECT id FROM items WHERE id <= 2)"
	                    " SELECT id FROM picked FOR UPDATE") ||
	    !locked_ids(L, b, top, sizeof top) || !lab_exec(L, a, "ROLLBACK") ||
	    !lab_exec(L, a, "BEGIN; WITH picked AS (SELECT id FROM items WHERE id <= 2 FOR UPDATE)"
	                    " SELECT id FROM picked") ||
	    !locked_ids(L, b, inside, sizeof inside) || !lab_exec(L, a, "ROLLBACK"))
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
	if (a == NULL || !make_items(L, a, 3))
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
	if (b == NULL || !make_items(L, a, 3))
		return;
	/* READ COMMITTED, row updated while B waits: B gets the new version. */
	if (!lab_exec(L, a, "BEGIN; UPDATE items SET v = v + 10 WHERE id = 1"))
		return;
	int w1 = waits(L, b, "SELECT v FROM items WHERE id = 1 FOR UPDATE");
	PGresult *res = NULL;
	if (w1 < 0 || !lab_exec(L, a, "COMMIT") || !done_ok(L, b, &res))
		return;
	long long v = PQntuples(res) == 1 ? atoll(PQgetvalue(res, 0, 0)) : -1;
	PQclear(res);
	/* READ COMMITTED, row deleted while B waits: no row. */
	if (!lab_exec(L, a, "BEGIN; DELETE FROM items WHERE id = 2"))
		return;
	int w2 = waits(L, b, "SELECT v FROM items WHERE id = 2 FOR UPDATE");
	if (w2 < 0 || !lab_exec(L, a, "COMMIT") || !done_ok(L, b, &res))
		return;
	int rows = PQntuples(res);
	PQclear(res);
	/* REPEATABLE READ: the row changed after B's snapshot: serialization failure. */
	char state[6];
	if (!lab_exec(L, b, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM items") ||
	    !lab_exec(L, a, "BEGIN; UPDATE items SET v = v + 10 WHERE id = 3"))
		return;
	int w3 = waits(L, b, "SELECT v FROM items WHERE id = 3 FOR UPDATE");
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

void lab_exp_savepoint_locks(lab *L)
{
	char k[24];
	const char *kp[1] = { lab_fmt(k, lab_key(L, 20)) };
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_items(L, a, 3))
		return;
	char before[32], after[32];
	long long adv_before, adv_after;
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items WHERE id = 1 FOR UPDATE; SAVEPOINT s;"
	                    " SELECT id FROM items WHERE id = 2 FOR UPDATE") ||
	    !lab_execp(L, a, "SELECT pg_advisory_xact_lock($1::bigint)", 1, kp) ||
	    !locked_ids(L, b, before, sizeof before) || !lab_adv_count(L, lab_key(L, 20), &adv_before) ||
	    !lab_exec(L, a, "ROLLBACK TO SAVEPOINT s") ||
	    !locked_ids(L, b, after, sizeof after) || !lab_adv_count(L, lab_key(L, 20), &adv_after) ||
	    !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vtext(L, "rows_locked_before", before);
	lab_vtext(L, "rows_locked_after_rollback_to", after);
	lab_vint(L, "advisory_before", adv_before);
	lab_vint(L, "advisory_after_rollback_to", adv_after);
	lab_verdict(L, strcmp(before, "1,2") == 0 && strcmp(after, "1") == 0 && adv_before == 1 &&
	                   adv_after == 0,
	            "row 1 locked before SAVEPOINT, row 2 and an xact advisory lock after it: locked rows"
	            " {%s} -> {%s} and advisory %lld -> %lld at ROLLBACK TO", before, after, adv_before,
	            adv_after);
}

/* ---- absence: check-then-insert against a unique constraint ---- */

#define EMAIL_SESSIONS 4

struct email {
	int inserted;
	int winners;
};

static void check_then_insert(lab *L, lab_sess *s, int i, void *arg)
{
	(void)i;
	struct email *e = arg;
	static const char *const p[1] = { "a@example.com" };
	if (!lab_barrier(L) || !lab_exec(L, s, "BEGIN"))
		return;
	PGresult *res = lab_query(L, s, "SELECT email FROM users WHERE email = $1 FOR UPDATE", 1, p);
	if (res == NULL)
		return;
	int found = PQntuples(res);
	PQclear(res);
	/* Every session has checked (and locked nothing: there is no row) before any inserts. */
	if (!lab_barrier(L))
		return;
	if (found == 0) {
		if (!lab_execp(L, s, "INSERT INTO users (email) VALUES ($1)", 1, p))
			return;
		__atomic_add_fetch(&e->inserted, 1, __ATOMIC_SEQ_CST);
	}
	lab_exec(L, s, "COMMIT");
}

static void insert_on_conflict(lab *L, lab_sess *s, int i, void *arg)
{
	(void)i;
	struct email *e = arg;
	static const char *const p[1] = { "a@example.com" };
	if (!lab_barrier(L))
		return;
	PGresult *res = lab_query(L, s,
	                          "INSERT INTO claims (email) VALUES ($1) ON CONFLICT (email) DO NOTHING"
	                          " RETURNING email", 1, p);
	if (res == NULL)
		return;
	if (PQntuples(res) == 1)
		__atomic_add_fetch(&e->winners, 1, __ATOMIC_SEQ_CST);
	PQclear(res);
}

void lab_exp_unique_email(lab *L)
{
	lab_sess *s[EMAIL_SESSIONS];
	for (int i = 0; i < EMAIL_SESSIONS; i++)
		if ((s[i] = lab_open(L)) == NULL)
			return;
	struct email e = { 0, 0 };
	long long dup_rows, claim_rows;
	if (!lab_exec(L, s[0], "CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL)") ||
	    !lab_exec(L, s[0], "CREATE TABLE claims (email text PRIMARY KEY)") ||
	    !lab_threads(L, EMAIL_SESSIONS, s, check_then_insert, &e) ||
	    !lab_int(L, s[0], "SELECT count(*) FROM users WHERE email = 'a@example.com'", 0, NULL,
	             &dup_rows) ||
	    !lab_threads(L, EMAIL_SESSIONS, s, insert_on_conflict, &e) ||
	    !lab_int(L, s[0], "SELECT count(*) FROM claims", 0, NULL, &claim_rows))
		return;
	lab_vint(L, "sessions", EMAIL_SESSIONS);
	lab_vint(L, "check_then_insert_rows", dup_rows);
	lab_vint(L, "on_conflict_winners", e.winners);
	lab_vint(L, "on_conflict_rows", claim_rows);
	lab_verdict(L, dup_rows > 1 && e.winners == 1 && claim_rows == 1,
	            "%d sessions, one email: SELECT ... FOR UPDATE then INSERT stored it %lld times;"
	            " INSERT ... ON CONFLICT DO NOTHING: %d winner, %lld row", EMAIL_SESSIONS, dup_rows,
	            e.winners, claim_rows);
}
