/* test_diag.c - lock forensics against a real server: wait-for trees built by real sessions,
 * decoded advisory keys and names, cycles, cancel/terminate and the lock probe */
#include <libpq-fe.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "../t.h"

/* This file's advisory keys: the high half spells "diag", the low half is the test's pid. */
#define KEY_BASE INT64_C(0x6469616700000000)

static void exec_ok(pgc_conn *c, const char *sql)
{
	pgc_error err;
	if (pgc_exec(c, sql, &err) != PGC_OK)
		T_FAIL("%s: %s", sql, err.message);
}

/* Runs sql with one text parameter. */
static void exec1(pgc_conn *c, const char *sql, const char *p1)
{
	const char *p[1] = { p1 };
	int rc;
	pgc_error err;
	PGresult *r = pgc__exec(c, sql, 1, p, &rc, &err);
	if (r == NULL)
		T_FAIL("%s: %s", sql, err.message);
	PQclear(r);
}

/* Starts sql (simple protocol: it may be several statements) on c without waiting for it (it
 * is expected to block); pgc__await() collects the answer. */
static void send_async(pgc_conn *c, const char *sql)
{
	pgc__call call = PGC__CALL_INIT;
	call.flags = PGC__SIMPLE;
	pgc_error err;
	if (pgc__send(c, sql, 0, NULL, &call, &err) != PGC_OK)
		T_FAIL("send %s: %s", sql, err.message);
}

/* Runs sql, returning its result (fails the test on error). */
static PGresult *query(pgc_conn *c, const char *sql)
{
	int rc;
	pgc_error err;
	PGresult *r = pgc__exec(c, sql, 0, NULL, &rc, &err);
	if (r == NULL)
		T_FAIL("%s: %s", sql, err.message);
	return r;
}

static char schema[64];
static char qtable[128];

/* A schema of this test's own with the lock_names registry and a table t(id, x). */
static pgc_conn *setup(void)
{
	pgc_conn *c = t_connect("pgcoord/test-diag-setup");
	exec_ok(c, "SET client_min_messages = warning");
	snprintf(schema, sizeof schema, "pgc_diag_%d", (int)getpid());
	snprintf(qtable, sizeof qtable, "%s.t", schema);
	char sql[512];
	snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
	exec_ok(c, sql);
	pgc_error err;
	if (pgc_schema_init(c, schema, NULL, NULL, &err) != PGC_OK)
		T_FAIL("schema init: %s", err.message);
	snprintf(sql, sizeof sql, "CREATE TABLE %s (id int PRIMARY KEY, x int); "
	                          "INSERT INTO %s VALUES (1, 1), (2, 2)", qtable, qtable);
	exec_ok(c, sql);
	return c;
}

static void teardown(pgc_conn *c)
{
	char sql[256];
	snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
	exec_ok(c, sql);
	pgc_conn_close(c);
}

/* A waiting session's lock wait is bounded: it gives up by itself after 30 s. */
static pgc_conn *waiter(const char *app)
{
	pgc_conn *c = t_connect(app);
	exec_ok(c, "SET lock_timeout = '30s'");
	exec_ok(c, "SET statement_timeout = '40s'");
	return c;
}

/* Takes snapshots until every pid in want waits for a lock (at most 10 s). */
static pgc_diag_snapshot *wait_for_waiters(pgc_conn *c, const pgc_diag_options *o, const int *want,
                                           size_t n)
{
	for (int i = 0; i < 200; i++) {
		pgc_diag_snapshot *s = NULL;
		pgc_error err;
		if (pgc_diag_snapshot_take(c, o, &s, &err) != PGC_OK)
			T_FAIL("snapshot: %s", err.message);
		size_t ok = 0;
		for (size_t k = 0; k < n; k++) {
			const pgc_diag_session *x = pgc_diag_session_find(s, want[k]);
			ok += x != NULL && x->wants != NULL && x->nblocked_by > 0;
		}
		if (ok == n)
			return s;
		pgc_diag_snapshot_free(s);
		pgc__sleep_ms(50);
	}
	T_FAIL("the sessions did not all start waiting within 10 s");
	return NULL;
}

static bool has_pid(const int *p, size_t n, int pid)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] == pid)
			return true;
	return false;
}

/* Ends a test session from the server side (so that no backend lingers in a lock wait after
 * its client is gone), then frees the handle. */
static void end_session(pgc_conn *adm, pgc_conn *c)
{
	char pid[16];
	snprintf(pid, sizeof pid, "%d", pgc_conn_backend_pid(c));
	exec1(adm, "SELECT pg_terminate_backend($1::int, 5000)", pid);
	pgc_conn_close(c);
}

/* Waits (at most 10 s) until pid's state is state. */
static void wait_state(pgc_conn *c, int pid, const char *state)
{
	char p[16];
	snprintf(p, sizeof p, "%d", pid);
	const char *params[1] = { p };
	for (int i = 0; i < 200; i++) {
		int rc;
		pgc_error err;
		PGresult *r = pgc__exec(c, "SELECT state FROM pg_stat_activity WHERE pid = $1::int", 1, params,
		                        &rc, &err);
		bool ok = r != NULL && PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), state) == 0;
		PQclear(r);
		if (ok)
			return;
		pgc__sleep_ms(50);
	}
	T_FAIL("pid %d did not become %s within 10 s", pid, state);
}

static void diag__chain_tree_and_keys(void)
{
	pgc_conn *adm = setup();
	int64_t key = KEY_BASE | (int64_t)getpid();
	int64_t negkey = -(KEY_BASE | (int64_t)getpid());
	char k[32], nk[32], p2[32], sql[512];
	snprintf(k, sizeof k, "%" PRId64, key);
	snprintf(nk, sizeof nk, "%" PRId64, negkey);
	snprintf(p2, sizeof p2, "%d", (int)getpid());
	snprintf(sql, sizeof sql, "INSERT INTO %s.lock_names (key, name) VALUES ($1::bigint, 'nightly-report')", schema);
	exec1(adm, sql, k);

	/* A: a row lock FOR UPDATE, three advisory locks (bigint, negative bigint, int4 pair),
	 * then idle in transaction. */
	pgc_conn *a = t_connect("pgcoord/test-diag-A");
	exec_ok(a, "SET idle_in_transaction_session_timeout = '60s'");
	exec_ok(a, "BEGIN");
	snprintf(sql, sizeof sql, "SELECT * FROM %s WHERE id = 1 FOR UPDATE", qtable);
	exec_ok(a, sql);
	exec1(a, "SELECT pg_advisory_lock($1::bigint)", k);
	exec1(a, "SELECT pg_advisory_lock($1::bigint)", nk);
	exec1(a, "SELECT pg_advisory_lock(1684627815, $1::int)", p2);

	pgc_conn *b = waiter("pgcoord/test-diag-B");
	snprintf(sql, sizeof sql, "UPDATE %s SET x = 10 WHERE id = 1", qtable);
	send_async(b, sql);
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	o.schema = schema;
	int pb = pgc_conn_backend_pid(b);
	pgc_diag_snapshot_free(wait_for_waiters(adm, &o, &pb, 1));
	/* C waits for B's ROW EXCLUSIVE lock (SHARE does not conflict with A's ROW SHARE). */
	pgc_conn *cc = waiter("pgcoord/test-diag-C");
	snprintf(sql, sizeof sql, "BEGIN; LOCK TABLE %s IN SHARE MODE; COMMIT", qtable);
	send_async(cc, sql);
	pgc_conn *d = waiter("pgcoord/test-diag-D");
	snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%s)", k);
	send_async(d, sql);

	int pa = pgc_conn_backend_pid(a), pc = pgc_conn_backend_pid(cc), pd = pgc_conn_backend_pid(d);
	int want[3] = { pb, pc, pd };
	pgc_diag_snapshot *s = wait_for_waiters(adm, &o, want, 3);

	const pgc_diag_session *A = pgc_diag_session_find(s, pa), *B = pgc_diag_session_find(s, pb);
	const pgc_diag_session *C = pgc_diag_session_find(s, pc), *D = pgc_diag_session_find(s, pd);
	T_ASSERT(A && B && C && D);
	T_ASSERT_STR_EQ(A->state, "idle in transaction");
	T_ASSERT_STR_EQ(A->application, "pgcoord/test-diag-A");
	T_ASSERT(A->root);
	T_ASSERT(A->wants == NULL);
	T_ASSERT_INT_EQ(A->nblocked_by, 0);
	T_ASSERT_INT_EQ(A->blocks_total, 3);
	T_ASSERT_INT_EQ(A->nblocks, 2);
	T_ASSERT(has_pid(A->blocks, A->nblocks, pb));
	T_ASSERT(has_pid(A->blocks, A->nblocks, pd));
	T_ASSERT(A->xact_age_s >= 0);
	/* The root blocking most comes first among the roots; ours is in the list. */
	T_ASSERT(has_pid(s->roots, s->nroots, pa));
	T_ASSERT(!B->root && !C->root && !D->root);

	T_ASSERT_INT_EQ(B->nblocked_by, 1);
	T_ASSERT_INT_EQ(B->blocked_by[0], pa);
	T_ASSERT_STR_EQ(B->wants->locktype, "transactionid");
	T_ASSERT_CONTAINS(B->wants->target, "row (0,1) of ");
	T_ASSERT_CONTAINS(B->wants->target, qtable);
	T_ASSERT_INT_EQ(B->blocks_total, 1);
	T_ASSERT(has_pid(B->blocks, B->nblocks, pc));

	T_ASSERT_INT_EQ(C->nblocked_by, 1);
	T_ASSERT_INT_EQ(C->blocked_by[0], pb);
	T_ASSERT_STR_EQ(C->wants->locktype, "relation");
	T_ASSERT_STR_EQ(C->wants->mode, "ShareLock");
	T_ASSERT_INT_EQ(C->wants->table_mode, PGC_SHARE);
	T_ASSERT_STR_EQ(C->wants->relation, qtable);
	/* Waiting for SHARE with nobody queued behind it: not a queue-head DDL. */
	T_ASSERT(!C->queued_ddl);

	/* Why each waits: A holds the transaction lock B wants, B holds ROW EXCLUSIVE on t. */
	bool queued = true;
	const pgc_diag_lock *why = pgc_diag_blocking_lock(B, A, &queued);
	T_ASSERT(why != NULL && !queued);
	T_ASSERT_STR_EQ(why->locktype, "transactionid");
	T_ASSERT_STR_EQ(why->mode, "ExclusiveLock");
	why = pgc_diag_blocking_lock(C, B, &queued);
	T_ASSERT(why != NULL && !queued);
	T_ASSERT_STR_EQ(why->mode, "RowExclusiveLock");
	T_ASSERT(pgc_diag_blocking_lock(C, A, NULL) == NULL); /* ROW SHARE does not block SHARE */
	T_ASSERT(pgc_diag_blocking_lock(A, B, NULL) == NULL); /* A waits for nothing */
	T_ASSERT(pgc_diag_blocking_lock(NULL, A, NULL) == NULL);

	T_ASSERT_INT_EQ(D->nblocked_by, 1);
	T_ASSERT_INT_EQ(D->blocked_by[0], pa);
	why = pgc_diag_blocking_lock(D, A, &queued);
	T_ASSERT(why != NULL && !queued && why->key != NULL && why->key->id == key);
	const pgc_diag_lock *w = D->wants;
	T_ASSERT_STR_EQ(w->locktype, "advisory");
	T_ASSERT(w->key != NULL);
	T_ASSERT_INT_EQ(w->key->kind, PGC_KEY_INT64);
	T_ASSERT_INT_EQ(w->key->id, key);
	T_ASSERT_STR_EQ(w->key->name, "nightly-report");
	T_ASSERT(s->names_available);
	/* Keys print as pgc_key_format prints them, which is what --key takes. */
	char expect[128];
	snprintf(expect, sizeof expect, "advisory %" PRId64 " \"nightly-report\"", key);
	T_ASSERT_STR_EQ(w->target, expect);

	/* A's locks: the negative bigint and the int4 pair decode too. */
	bool neg = false, pair = false;
	for (size_t i = 0; i < A->nlocks; i++) {
		const pgc_diag_lock *l = &A->locks[i];
		T_ASSERT(l->granted);
		T_ASSERT((l->key != NULL) == (strcmp(l->locktype, "advisory") == 0));
		if (l->key != NULL && l->key->kind == PGC_KEY_INT64 && l->key->id == negkey) {
			neg = true;
			T_ASSERT_STR_EQ(l->key->name, "");
			snprintf(expect, sizeof expect, "advisory %" PRId64, negkey);
			T_ASSERT_STR_EQ(l->target, expect);
		}
		if (l->key != NULL && l->key->kind == PGC_KEY_PAIR) {
			pair = l->key->key1 == 1684627815 && l->key->key2 == getpid();
			snprintf(expect, sizeof expect, "advisory 1684627815,%d", (int)getpid());
			T_ASSERT_STR_EQ(l->target, expect);
			pgc_key back;
			pgc_error kerr;
			T_ASSERT_INT_EQ(pgc_key_parse(expect + strlen("advisory "), &back, &kerr), PGC_OK);
			T_ASSERT(pgc_key_equal(&back, l->key));
		}
	}
	T_ASSERT(neg && pair);
	/* Edges name both ends, every one of ours is there. */
	int found = 0;
	for (size_t e = 0; e < s->nedges; e++)
		found += (s->edges[e].waiter == pb && s->edges[e].blocker == pa) ||
		         (s->edges[e].waiter == pc && s->edges[e].blocker == pb) ||
		         (s->edges[e].waiter == pd && s->edges[e].blocker == pa);
	T_ASSERT_INT_EQ(found, 3);
	/* The reading session is not in the snapshot. */
	T_ASSERT(pgc_diag_session_find(s, pgc_conn_backend_pid(adm)) == NULL);
	pgc_diag_snapshot_free(s);

	/* Without names the key is still decoded. */
	o.names = false;
	s = wait_for_waiters(adm, &o, &pd, 1);
	T_ASSERT_STR_EQ(pgc_diag_session_find(s, pd)->wants->key->name, "");
	T_ASSERT(!s->names_available);
	pgc_diag_snapshot_free(s);

	end_session(adm, a);
	end_session(adm, b);
	end_session(adm, cc);
	end_session(adm, d);
	teardown(adm);
}

/* One row of blocking_forest() for pid, or -1. */
static int forest_row(const PGresult *r, int pid)
{
	for (int i = 0; i < PQntuples(r); i++)
		if (atoi(PQgetvalue(r, i, PQfnumber(r, "pid"))) == pid)
			return i;
	return -1;
}

/* "{1,2}" for the pids in p (sorted), as the server prints an integer[]. */
static void pid_array(char *buf, size_t size, const int *p, size_t n)
{
	int v[64];
	size_t m = 0;
	for (size_t i = 0; i < n && m < 64; i++)
		v[m++] = p[i];
	for (size_t i = 1; i < m; i++)
		for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
			int t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	size_t off = (size_t)snprintf(buf, size, "{");
	for (size_t i = 0; i < m && off < size; i++)
		off += (size_t)snprintf(buf + off, size - off, "%s%d", i ? "," : "", v[i]);
	snprintf(buf + off, off < size ? size - off : 0, "}");
}

/* A real blocking chain, read by the SQL functions a client in any language calls and by the
 * C snapshot: the same sessions, edges, roots and waits. A holds a row and an advisory key,
 * B waits for A's row, C for B's table lock, D for A's key. */
static void diag__sql_forest_matches_snapshot(void)
{
	pgc_conn *adm = setup();
	int64_t key = KEY_BASE | (int64_t)getpid();
	char k[32], sql[512];
	snprintf(k, sizeof k, "%" PRId64, key);
	snprintf(sql, sizeof sql, "INSERT INTO %s.lock_names (key, name) VALUES ($1::bigint, 'forest-key')", schema);
	exec1(adm, sql, k);
	pgc_conn *a = t_connect("pgcoord/test-forest-A");
	exec_ok(a, "SET idle_in_transaction_session_timeout = '60s'");
	exec_ok(a, "BEGIN");
	snprintf(sql, sizeof sql, "SELECT * FROM %s WHERE id = 1 FOR UPDATE", qtable);
	exec_ok(a, sql);
	exec1(a, "SELECT pg_advisory_lock($1::bigint)", k);
	pgc_conn *b = waiter("pgcoord/test-forest-B");
	snprintf(sql, sizeof sql, "UPDATE %s SET x = 10 WHERE id = 1", qtable);
	send_async(b, sql);
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	o.schema = schema;
	int pb = pgc_conn_backend_pid(b);
	pgc_diag_snapshot_free(wait_for_waiters(adm, &o, &pb, 1));
	pgc_conn *cc = waiter("pgcoord/test-forest-C");
	snprintf(sql, sizeof sql, "BEGIN; LOCK TABLE %s IN SHARE MODE; COMMIT", qtable);
	send_async(cc, sql);
	pgc_conn *d = waiter("pgcoord/test-forest-D");
	snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%s)", k);
	send_async(d, sql);
	int pa = pgc_conn_backend_pid(a), pc = pgc_conn_backend_pid(cc), pd = pgc_conn_backend_pid(d);
	int ours[4] = { pa, pb, pc, pd };
	pgc_diag_snapshot *s = wait_for_waiters(adm, &o, ours + 1, 3);

	snprintf(sql, sizeof sql, "SELECT pid, blocked_by::text, blocks::text, root, depth, blocks_total, in_cycle,"
	         " wait_locktype, wait_mode, wait_target, waited_ms, state, application_name, xact_age_ms"
	         " FROM %s.blocking_forest()", schema);
	PGresult *r = query(adm, sql);
	for (size_t i = 0; i < 4; i++) {
		const pgc_diag_session *x = pgc_diag_session_find(s, ours[i]);
		int row = forest_row(r, ours[i]);
		T_ASSERT(x != NULL);
		if (row < 0)
			T_FAIL("pid %d is in the snapshot, not in blocking_forest()", ours[i]);
		char want[256];
		pid_array(want, sizeof want, x->blocked_by, x->nblocked_by);
		T_ASSERT_STR_EQ(PQgetvalue(r, row, 1), want);
		pid_array(want, sizeof want, x->blocks, x->nblocks);
		T_ASSERT_STR_EQ(PQgetvalue(r, row, 2), want);
		T_ASSERT_STR_EQ(PQgetvalue(r, row, 3), x->root ? "t" : "f");
		T_ASSERT_INT_EQ(atoi(PQgetvalue(r, row, 5)), (int)x->blocks_total);
		T_ASSERT_STR_EQ(PQgetvalue(r, row, 6), x->cycle ? "t" : "f");
		T_ASSERT_STR_EQ(PQgetvalue(r, row, 11), x->state);
		T_ASSERT_STR_EQ(PQgetvalue(r, row, 12), x->application);
		if (x->wants == NULL) {
			T_ASSERT(PQgetisnull(r, row, 7) && PQgetisnull(r, row, 9));
		} else {
			T_ASSERT_STR_EQ(PQgetvalue(r, row, 7), x->wants->locktype);
			T_ASSERT_STR_EQ(PQgetvalue(r, row, 8), x->wants->mode);
			T_ASSERT_STR_EQ(PQgetvalue(r, row, 9), x->wants->target);
			T_ASSERT(atoll(PQgetvalue(r, row, 10)) >= 0);
		}
	}
	/* The roots and the edges among these sessions are the snapshot's. */
	T_ASSERT(has_pid(s->roots, s->nroots, pa));
	for (int i = 0; i < PQntuples(r); i++)
		if (strcmp(PQgetvalue(r, i, 3), "t") == 0 && has_pid(ours, 4, atoi(PQgetvalue(r, i, 0))))
			T_ASSERT_INT_EQ(atoi(PQgetvalue(r, i, 0)), pa);
	int edges = 0;
	for (size_t e = 0; e < s->nedges; e++)
		if (has_pid(ours, 4, s->edges[e].waiter)) {
			int row = forest_row(r, s->edges[e].waiter);
			char want[24];
			snprintf(want, sizeof want, "%d", s->edges[e].blocker);
			T_ASSERT_CONTAINS(PQgetvalue(r, row, 1), want);
			edges++;
		}
	T_ASSERT_INT_EQ(edges, 3);
	/* Depth: A the root, B and D wait for it, C for B. */
	T_ASSERT_INT_EQ(atoi(PQgetvalue(r, forest_row(r, pa), 4)), 0);
	T_ASSERT_INT_EQ(atoi(PQgetvalue(r, forest_row(r, pb), 4)), 1);
	T_ASSERT_INT_EQ(atoi(PQgetvalue(r, forest_row(r, pc), 4)), 2);
	T_ASSERT_INT_EQ(atoi(PQgetvalue(r, forest_row(r, pd), 4)), 1);
	char expect[128];
	snprintf(expect, sizeof expect, "advisory %" PRId64 " \"forest-key\"", key);
	T_ASSERT_STR_EQ(PQgetvalue(r, forest_row(r, pd), 9), expect);
	T_ASSERT_CONTAINS(PQgetvalue(r, forest_row(r, pb), 9), "row (0,1) of ");
	/* The reading session is not in it. */
	T_ASSERT(forest_row(r, pgc_conn_backend_pid(adm)) < 0);
	PQclear(r);
	pgc_diag_snapshot_free(s);

	/* lock_holders(): A holds the key, D waits, as pgc_lock_holders() sees it. */
	pgc_key pk = pgc_key_int64(key);
	pgc_lock_holder *h = NULL;
	size_t nh = 0;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_holders_recorded(adm, &pk, schema, &h, &nh, &err), PGC_OK);
	snprintf(sql, sizeof sql, "SELECT pid, mode, granted, application_name, is_self, backend_start IS NOT NULL"
	         " FROM %s.lock_holders($1::bigint)", schema);
	const char *pv[1] = { k };
	int rc;
	r = pgc__exec(adm, sql, 1, pv, &rc, &err);
	if (r == NULL)
		T_FAIL("%s: %s", sql, err.message);
	T_ASSERT_INT_EQ(PQntuples(r), 2);
	T_ASSERT_INT_EQ((int)nh, 2);
	for (int i = 0; i < 2; i++) {
		T_ASSERT_INT_EQ(atoi(PQgetvalue(r, i, 0)), h[i].pid);
		T_ASSERT_STR_EQ(PQgetvalue(r, i, 1), h[i].shared ? "ShareLock" : "ExclusiveLock");
		T_ASSERT_STR_EQ(PQgetvalue(r, i, 2), h[i].granted ? "t" : "f");
		T_ASSERT_STR_EQ(PQgetvalue(r, i, 3), h[i].application_name);
		T_ASSERT_STR_EQ(PQgetvalue(r, i, 4), "f");
		T_ASSERT_STR_EQ(PQgetvalue(r, i, 5), "t");
	}
	T_ASSERT_INT_EQ(atoi(PQgetvalue(r, 0, 0)), pa);
	T_ASSERT_INT_EQ(atoi(PQgetvalue(r, 1, 0)), pd);
	PQclear(r);
	pgc_free(h);

	end_session(adm, a);
	end_session(adm, b);
	end_session(adm, cc);
	end_session(adm, d);
	/* Nobody waits any more: none of ours is in the forest. */
	snprintf(sql, sizeof sql, "SELECT pid FROM %s.blocking_forest()", schema);
	r = query(adm, sql);
	for (size_t i = 0; i < 4; i++)
		T_ASSERT(forest_row(r, ours[i]) < 0);
	PQclear(r);
	teardown(adm);
}

static void diag__queued_ddl(void)
{
	pgc_conn *adm = setup();
	char sql[256];
	pgc_conn *a = t_connect("pgcoord/test-diag-reader");
	exec_ok(a, "SET idle_in_transaction_session_timeout = '60s'");
	exec_ok(a, "BEGIN");
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", qtable);
	exec_ok(a, sql);
	pgc_conn *b = waiter("pgcoord/test-diag-migration");
	snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN y int", qtable);
	send_async(b, sql);
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	int pb = pgc_conn_backend_pid(b);
	pgc_diag_snapshot_free(wait_for_waiters(adm, &o, &pb, 1));
	pgc_conn *c = waiter("pgcoord/test-diag-web");
	snprintf(sql, sizeof sql, "SELECT * FROM %s", qtable);
	send_async(c, sql);
	int pc = pgc_conn_backend_pid(c), pa = pgc_conn_backend_pid(a);
	int want[2] = { pb, pc };
	pgc_diag_snapshot *s = wait_for_waiters(adm, &o, want, 2);
	const pgc_diag_session *A = pgc_diag_session_find(s, pa), *B = pgc_diag_session_find(s, pb);
	const pgc_diag_session *C = pgc_diag_session_find(s, pc);
	T_ASSERT(A->root);
	T_ASSERT(B->queued_ddl);
	T_ASSERT_STR_EQ(B->wants->mode, "AccessExclusiveLock");
	T_ASSERT_INT_EQ(B->nblocked_by, 1);
	T_ASSERT_INT_EQ(B->blocked_by[0], pa);
	/* C's plain SELECT does not conflict with A; it waits behind B in the queue. */
	T_ASSERT_INT_EQ(C->nblocked_by, 1);
	T_ASSERT_INT_EQ(C->blocked_by[0], pb);
	T_ASSERT_STR_EQ(C->wants->mode, "AccessShareLock");
	T_ASSERT(!C->queued_ddl);
	bool queued = false;
	const pgc_diag_lock *why = pgc_diag_blocking_lock(C, B, &queued);
	T_ASSERT(why != NULL && queued);
	T_ASSERT_STR_EQ(why->mode, "AccessExclusiveLock");
	why = pgc_diag_blocking_lock(B, A, &queued);
	T_ASSERT(why != NULL && !queued);
	T_ASSERT_STR_EQ(why->mode, "AccessShareLock");
	T_ASSERT_INT_EQ(A->blocks_total, 2);
	pgc_diag_snapshot_free(s);
	/* End the migration before A, so that it never runs. */
	end_session(adm, b);
	end_session(adm, c);
	end_session(adm, a);
	teardown(adm);
}

static void diag__cycle_found_not_followed(void)
{
	pgc_conn *adm = t_connect(NULL);
	pgc_conn *a = waiter("pgcoord/test-diag-cycle-a");
	pgc_conn *b = waiter("pgcoord/test-diag-cycle-b");
	/* Long enough for the snapshot to see the deadlock before the server breaks it. */
	exec_ok(a, "SET deadlock_timeout = '20s'");
	exec_ok(b, "SET deadlock_timeout = '20s'");
	char k1[32], k2[32], sql[128];
	snprintf(k1, sizeof k1, "%" PRId64, KEY_BASE | (int64_t)getpid() | INT64_C(0x1000000));
	snprintf(k2, sizeof k2, "%" PRId64, KEY_BASE | (int64_t)getpid() | INT64_C(0x2000000));
	exec1(a, "SELECT pg_advisory_lock($1::bigint)", k1);
	exec1(b, "SELECT pg_advisory_lock($1::bigint)", k2);
	snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%s)", k2);
	send_async(a, sql);
	snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%s)", k1);
	send_async(b, sql);
	int pa = pgc_conn_backend_pid(a), pb = pgc_conn_backend_pid(b);
	int want[2] = { pa, pb };
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	pgc_diag_snapshot *s = wait_for_waiters(adm, &o, want, 2);
	const pgc_diag_session *A = pgc_diag_session_find(s, pa), *B = pgc_diag_session_find(s, pb);
	T_ASSERT(A->cycle > 0);
	T_ASSERT_INT_EQ(A->cycle, B->cycle);
	const pgc_diag_cycle *cy = &s->cycles[A->cycle - 1];
	T_ASSERT_INT_EQ(cy->npids, 2);
	T_ASSERT(has_pid(cy->pids, cy->npids, pa) && has_pid(cy->pids, cy->npids, pb));
	T_ASSERT(!A->root && !B->root);
	T_ASSERT(!has_pid(s->roots, s->nroots, pa) && !has_pid(s->roots, s->nroots, pb));
	/* Each waits for the other: one session blocked each, counted once, not forever. */
	T_ASSERT_INT_EQ(A->blocks_total, 1);
	T_ASSERT_INT_EQ(B->blocks_total, 1);
	pgc_diag_snapshot_free(s);
	end_session(adm, a);
	end_session(adm, b);
	pgc_conn_close(adm);
}

/* The DSN of the test server with another database name. */
static void dsn_with_db(char *buf, size_t size, const char *db)
{
	const char *base = t_dsn();
	if (strncmp(base, "postgres", 8) == 0)
		snprintf(buf, size, "%s%sdbname=%s", base, strchr(base, '?') ? "&" : "?", db);
	else
		snprintf(buf, size, "%s dbname=%s", base, db);
}

static void diag__other_database_blocker_in_scope(void)
{
	/* A session of another database that blocks one of ours is part of our snapshot, and
	 * sessions of other databases that are not involved are not. The block is on a shared
	 * catalog nothing else needs, so that no other test is held up. */
	pgc_conn *adm = t_connect(NULL);
	exec_ok(adm, "SET client_min_messages = warning");
	char db[64], sql[256], dsn[1024];
	snprintf(db, sizeof db, "pgc_diag_other_%d", (int)getpid());
	snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", db);
	exec_ok(adm, sql);
	snprintf(sql, sizeof sql, "CREATE DATABASE %s TEMPLATE template0", db);
	exec_ok(adm, sql);
	dsn_with_db(dsn, sizeof dsn, db);
	pgc_conn_options co = PGC_CONN_OPTIONS_INIT;
	pgc_conn *other = NULL, *bystander = NULL;
	pgc_error err;
	co.application_name = "pgcoord/test-diag-other";
	T_ASSERT_INT_EQ(pgc_connect(dsn, &co, &other, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_connect(dsn, &co, &bystander, &err), PGC_OK);
	exec_ok(other, "SET idle_in_transaction_session_timeout = '60s'");
	exec_ok(other, "BEGIN");
	exec_ok(other, "LOCK TABLE pg_catalog.pg_shdescription IN ACCESS EXCLUSIVE MODE");
	pgc_conn *w = waiter("pgcoord/test-diag-here");
	send_async(w, "SELECT count(*) FROM pg_catalog.pg_shdescription");
	int pw = pgc_conn_backend_pid(w), po = pgc_conn_backend_pid(other);
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	pgc_diag_snapshot *s = wait_for_waiters(adm, &o, &pw, 1);
	const pgc_diag_session *W = pgc_diag_session_find(s, pw), *O = pgc_diag_session_find(s, po);
	T_ASSERT(O != NULL);
	T_ASSERT_STR_EQ(O->database, db);
	T_ASSERT(O->root);
	T_ASSERT_INT_EQ(W->blocked_by[0], po);
	T_ASSERT_STR_EQ(W->wants->relation, "pg_catalog.pg_shdescription");
	T_ASSERT(W->wants->database == NULL); /* a shared catalog */
	T_ASSERT(pgc_diag_session_find(s, pgc_conn_backend_pid(bystander)) == NULL);
	T_ASSERT(!s->all_databases);
	pgc_diag_snapshot_free(s);
	/* With all databases, the bystander is there too. */
	o.all_databases = true;
	s = wait_for_waiters(adm, &o, &pw, 1);
	T_ASSERT(pgc_diag_session_find(s, pgc_conn_backend_pid(bystander)) != NULL);
	pgc_diag_snapshot_free(s);
	end_session(adm, w);
	end_session(adm, other);
	end_session(adm, bystander);
	snprintf(sql, sizeof sql, "DROP DATABASE %s WITH (FORCE)", db);
	exec_ok(adm, sql);
	pgc_conn_close(adm);
}

static void diag__snapshot_bad_args(void)
{
	pgc_diag_snapshot *s = (pgc_diag_snapshot *)0x1;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_diag_snapshot_take(NULL, NULL, &s, &err), PGC_EUSAGE);
	T_ASSERT(s == NULL);
	T_ASSERT_INT_EQ(pgc_diag_snapshot_take(NULL, NULL, NULL, &err), PGC_EUSAGE);
	pgc_conn *c = t_connect(NULL);
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	o.schema = "";
	T_ASSERT_INT_EQ(pgc_diag_snapshot_take(c, &o, &s, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "schema");
	/* A schema without the registry: names are simply absent. */
	o.schema = "no_such_schema_pgcoord";
	T_ASSERT_INT_EQ(pgc_diag_snapshot_take(c, &o, &s, &err), PGC_OK);
	T_ASSERT(s->taken_at != NULL && s->database != NULL);
	T_ASSERT_INT_EQ(s->self_pid, pgc_conn_backend_pid(c));
	pgc_diag_snapshot_free(s);
	/* include_self keeps the reading session. */
	o.include_self = true;
	T_ASSERT_INT_EQ(pgc_diag_snapshot_take(c, &o, &s, &err), PGC_OK);
	T_ASSERT(pgc_diag_session_find(s, pgc_conn_backend_pid(c)) != NULL);
	pgc_diag_snapshot_free(s);
	/* Inside a transaction block each snapshot is still current: a session that connects
	 * between two snapshots shows up in the second. */
	exec_ok(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_diag_snapshot_take(c, &o, &s, &err), PGC_OK);
	pgc_diag_snapshot_free(s);
	pgc_conn *late = t_connect("pgcoord/test-diag-late");
	T_ASSERT_INT_EQ(pgc_diag_snapshot_take(c, &o, &s, &err), PGC_OK);
	T_ASSERT(pgc_diag_session_find(s, pgc_conn_backend_pid(late)) != NULL);
	pgc_diag_snapshot_free(s);
	exec_ok(c, "ROLLBACK");
	pgc_conn_close(late);
	pgc_diag_snapshot_free(NULL);
	T_ASSERT(pgc_diag_session_find(NULL, 1) == NULL);
	/* A dead session reports the loss. */
	exec_ok(c, "SELECT 1");
	pgc_conn *k = t_connect(NULL);
	char pid[16];
	snprintf(pid, sizeof pid, "%d", pgc_conn_backend_pid(c));
	exec1(k, "SELECT pg_terminate_backend($1::int, 5000)", pid);
	T_ASSERT_INT_EQ(pgc_diag_snapshot_take(c, NULL, &s, &err), PGC_ECONNLOST);
	T_ASSERT(s == NULL);
	pgc_conn_close(k);
	pgc_conn_close(c);
}

static void diag__signal(void)
{
	pgc_conn *c = t_connect(NULL);
	pgc_diag_signal_result r;
	pgc_error err;
	/* Bad arguments and our own backend are refused before anything is sent. */
	T_ASSERT_INT_EQ(pgc_diag_signal(NULL, 1, PGC_DIAG_CANCEL, 0, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_diag_signal(c, 1, PGC_DIAG_CANCEL, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_diag_signal(c, 0, PGC_DIAG_CANCEL, 0, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_diag_signal(c, -3, PGC_DIAG_TERMINATE, 0, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_diag_signal(c, 5, 7, 0, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_diag_signal(c, 5, PGC_DIAG_CANCEL, -1, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_diag_signal(c, pgc_conn_backend_pid(c), PGC_DIAG_TERMINATE, 0, &r, &err),
	                PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "own backend");
	exec_ok(c, "SELECT 1"); /* still alive */
	/* No such backend: pids above the kernel's pid_max cannot exist. */
	T_ASSERT_INT_EQ(pgc_diag_signal(c, 2147483000, PGC_DIAG_TERMINATE, 0, &r, &err), PGC_ENOTFOUND);
	T_ASSERT_CONTAINS(err.message, "no session with pid 2147483000");

	/* The server's functions answer false, with a warning, for a process that is not a
	 * backend: reported, not hidden. */
	PGresult *cp = query(c, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
	if (PQntuples(cp) == 1) {
		int ckpt = atoi(PQgetvalue(cp, 0, 0));
		T_ASSERT_INT_EQ(pgc_diag_signal(c, ckpt, PGC_DIAG_CANCEL, 0, &r, &err), PGC_OK);
		T_ASSERT(!r.done);
		T_ASSERT(!r.gone);
		T_ASSERT_CONTAINS(r.warning, "not a PostgreSQL");
	}
	PQclear(cp);

	/* Cancel stops a running query and leaves the session. */
	pgc_conn *v = waiter("pgcoord/test-diag-victim");
	send_async(v, "SELECT pg_sleep(30)");
	int pv = pgc_conn_backend_pid(v);
	wait_state(c, pv, "active");
	T_ASSERT_INT_EQ(pgc_diag_signal(c, pv, PGC_DIAG_CANCEL, 5000, &r, &err), PGC_OK);
	T_ASSERT(r.done);
	T_ASSERT(!r.gone);
	T_ASSERT_STR_EQ(r.state, "idle");
	int rc;
	T_ASSERT(pgc__await(v, NULL, &rc, &err) == NULL);
	T_ASSERT_INT_EQ(rc, PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "57014");
	exec_ok(v, "SELECT 1");

	/* Terminate ends it, and we wait until it is gone. */
	T_ASSERT_INT_EQ(pgc_diag_signal(c, pv, PGC_DIAG_TERMINATE, 5000, &r, &err), PGC_OK);
	T_ASSERT(r.done);
	T_ASSERT(r.gone);
	T_ASSERT_STR_EQ(r.warning, "");
	T_ASSERT_INT_EQ(pgc_exec(v, "SELECT 1", &err), PGC_ECONNLOST);
	T_ASSERT_INT_EQ(pgc_diag_signal(c, pv, PGC_DIAG_TERMINATE, 0, &r, &err), PGC_ENOTFOUND);
	pgc_conn_close(v);
	pgc_conn_close(c);
}

/* The checked signal names a session by pid and start: a wrong start hits nothing, the
 * snapshot's start hits it. */
static void diag__signal_session_checks_start(void)
{
	pgc_conn *c = t_connect(NULL);
	pgc_diag_signal_result r;
	pgc_error err;
	pgc_conn *v = waiter("pgcoord/test-diag-victim2");
	int pv = pgc_conn_backend_pid(v);
	T_ASSERT_INT_EQ(pgc_diag_signal_session(c, pv, NULL, PGC_DIAG_CANCEL, 0, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_diag_signal_session(c, pv, "", PGC_DIAG_CANCEL, 0, &r, &err), PGC_EUSAGE);
	pgc_diag_snapshot *s;
	T_ASSERT_INT_EQ(pgc_diag_snapshot_take(c, NULL, &s, &err), PGC_OK);
	const pgc_diag_session *vs = pgc_diag_session_find(s, pv);
	T_ASSERT(vs != NULL && vs->backend_start != NULL);
	T_ASSERT_INT_EQ((long long)strlen(vs->backend_start), 27);
	char start[64];
	snprintf(start, sizeof start, "%s", vs->backend_start);
	pgc_diag_snapshot_free(s);
	/* Another start: the session that has the pid now is not the one named. */
	T_ASSERT_INT_EQ(pgc_diag_signal_session(c, pv, "2000-01-01T00:00:00.000000Z", PGC_DIAG_TERMINATE, 1000,
	                                        &r, &err), PGC_ENOTFOUND);
	T_ASSERT_CONTAINS(err.message, "started at 2000-01-01");
	exec_ok(v, "SELECT 1");
	T_ASSERT_INT_EQ(pgc_diag_signal_session(c, pv, start, PGC_DIAG_TERMINATE, 5000, &r, &err), PGC_OK);
	T_ASSERT(r.done);
	T_ASSERT(r.gone);
	T_ASSERT_INT_EQ(pgc_exec(v, "SELECT 1", &err), PGC_ECONNLOST);
	T_ASSERT_INT_EQ(pgc_diag_signal_session(c, pv, start, PGC_DIAG_CANCEL, 0, &r, &err), PGC_ENOTFOUND);
	pgc_conn_close(v);
	pgc_conn_close(c);
}

static void diag__probe_reports_locks_and_changes_nothing(void)
{
	pgc_conn *adm = setup();
	pgc_conn *c = t_connect("pgcoord/test-diag-probe");
	char sql[256];
	pgc_probe_result *r = NULL;
	pgc_error err;
	snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN c int", qtable);
	T_ASSERT_INT_EQ(pgc_probe(c, sql, NULL, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r->outcome, PGC_PROBE_RAN);
	T_ASSERT_STR_EQ(r->command_tag, "ALTER TABLE");
	T_ASSERT_INT_EQ(r->rows_locked, 0);
	T_ASSERT(r->nlocks >= 1);
	T_ASSERT_STR_EQ(r->locks[0].relation, qtable);
	T_ASSERT_STR_EQ(r->locks[0].mode, "AccessExclusiveLock");
	T_ASSERT_STR_EQ(r->locks[0].relkind, "table");
	T_ASSERT(!r->observed);
	T_ASSERT(r->waited_for == NULL);
	pgc_probe_result_free(r);

	snprintf(sql, sizeof sql, "SELECT * FROM %s FOR UPDATE", qtable);
	T_ASSERT_INT_EQ(pgc_probe(c, sql, NULL, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r->outcome, PGC_PROBE_RAN);
	T_ASSERT_STR_EQ(r->command_tag, "SELECT 2");
	T_ASSERT_INT_EQ(r->rows_locked, 2);
	bool seen = false;
	for (size_t i = 0; i < r->nlocks; i++)
		if (strcmp(r->locks[i].relation, qtable) == 0) {
			T_ASSERT_STR_EQ(r->locks[i].mode, "RowShareLock");
			seen = true;
		}
	T_ASSERT(seen);
	pgc_probe_result_free(r);

	snprintf(sql, sizeof sql, "CREATE INDEX ON %s (x)", qtable);
	T_ASSERT_INT_EQ(pgc_probe(c, sql, NULL, &r, &err), PGC_OK);
	seen = false;
	for (size_t i = 0; i < r->nlocks; i++)
		if (strcmp(r->locks[i].relation, qtable) == 0) {
			T_ASSERT_STR_EQ(r->locks[i].mode, "ShareLock");
			seen = true;
		}
	T_ASSERT(seen);
	pgc_probe_result_free(r);

	snprintf(sql, sizeof sql, "UPDATE %s SET x = x + 1 WHERE id = 2", qtable);
	T_ASSERT_INT_EQ(pgc_probe(c, sql, NULL, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r->rows_locked, 1);
	pgc_probe_result_free(r);
	snprintf(sql, sizeof sql, "SELECT * FROM %s WHERE note = 'for update'", qtable);
	/* A locking clause only in a string is not one (and the column does not exist). */
	T_ASSERT_INT_EQ(pgc_probe(c, sql, NULL, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r->outcome, PGC_PROBE_FAILED);
	pgc_probe_result_free(r);
	snprintf(sql, sizeof sql, "SELECT 'for update' FROM %s", qtable);
	T_ASSERT_INT_EQ(pgc_probe(c, sql, NULL, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r->rows_locked, 0);
	pgc_probe_result_free(r);

	/* Refused before anything runs; the server's own refusal is caught too. */
	T_ASSERT_INT_EQ(pgc_probe(c, "VACUUM", NULL, &r, &err), PGC_EUSAGE);
	T_ASSERT(r == NULL);
	T_ASSERT_CONTAINS(err.message, "cannot run inside a transaction block");
	T_ASSERT_INT_EQ(pgc_probe(c, "DISCARD ALL", NULL, &r, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "DISCARD ALL cannot run inside a transaction block");
	T_ASSERT_INT_EQ(pgc__tx_status(c), PQTRANS_IDLE);
	/* A failing statement: outcome FAILED with the server's error, session usable. */
	T_ASSERT_INT_EQ(pgc_probe(c, "SELECT * FROM pgcoord_no_such_table", NULL, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r->outcome, PGC_PROBE_FAILED);
	T_ASSERT_STR_EQ(r->error.sqlstate, "42P01");
	pgc_probe_result_free(r);
	/* Bad arguments. */
	pgc_probe_options po = PGC_PROBE_OPTIONS_INIT;
	po.lock_timeout_ms = 0;
	T_ASSERT_INT_EQ(pgc_probe(c, "SELECT 1", &po, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_probe(NULL, "SELECT 1", NULL, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_probe(c, NULL, NULL, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_probe(c, "SELECT 1", NULL, NULL, &err), PGC_EUSAGE);
	exec_ok(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_probe(c, "SELECT 1", NULL, &r, &err), PGC_EUSAGE);
	exec_ok(c, "ROLLBACK");

	/* Nothing changed: no column c, no new index, the same rows. */
	PGresult *q;
	snprintf(sql, sizeof sql, "SELECT (SELECT count(*) FROM pg_attribute WHERE attrelid = '%s'::regclass AND attnum > 0 AND NOT attisdropped), "
	                          "(SELECT count(*) FROM pg_index WHERE indrelid = '%s'::regclass), (SELECT count(*) FROM %s)",
	         qtable, qtable, qtable);
	q = query(adm, sql);
	T_ASSERT_STR_EQ(PQgetvalue(q, 0, 0), "2");
	T_ASSERT_STR_EQ(PQgetvalue(q, 0, 1), "1");
	T_ASSERT_STR_EQ(PQgetvalue(q, 0, 2), "2");
	PQclear(q);
	pgc_conn_close(c);
	teardown(adm);
}

static void diag__probe_lock_timeout_names_blocker(void)
{
	pgc_conn *adm = setup();
	char sql[256];
	pgc_conn *a = t_connect("pgcoord/test-diag-holder");
	exec_ok(a, "SET idle_in_transaction_session_timeout = '60s'");
	exec_ok(a, "BEGIN");
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", qtable);
	exec_ok(a, sql);
	pgc_conn *c = t_connect("pgcoord/test-diag-probe");
	pgc_probe_options po = PGC_PROBE_OPTIONS_INIT;
	po.lock_timeout_ms = 2000;
	pgc_probe_result *r = NULL;
	pgc_error err;
	snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN c int", qtable);
	T_ASSERT_INT_EQ(pgc_probe(c, sql, &po, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r->outcome, PGC_PROBE_LOCK_TIMEOUT);
	T_ASSERT_STR_EQ(r->error.sqlstate, "55P03");
	T_ASSERT(r->waited_for != NULL);
	T_ASSERT_STR_EQ(r->waited_for->mode, "AccessExclusiveLock");
	T_ASSERT_STR_EQ(r->waited_for->relation, qtable);
	const pgc_diag_session *me = pgc_diag_session_find(r->wait_snapshot, r->probe_pid);
	T_ASSERT(me != NULL);
	T_ASSERT(has_pid(me->blocked_by, me->nblocked_by, pgc_conn_backend_pid(a)));
	pgc_probe_result_free(r);
	T_ASSERT_INT_EQ(pgc__tx_status(c), PQTRANS_IDLE);
	pgc_conn_close(a);
	pgc_conn_close(c);
	teardown(adm);
}

static void diag__probe_refusal_scanner(void)
{
	/* What cannot run in BEGIN ... ROLLBACK, whatever the case and comments around it. */
	const char *refused[] = {
		"VACUUM", "vacuum full t", "  /* x */ -- y\n VACUUM ANALYZE t", "/* a /* nested */ b */ vacuum",
		"CREATE INDEX CONCURRENTLY i ON t (x)", "create unique index concurrently on t(x)",
		"DROP INDEX CONCURRENTLY i", "REINDEX TABLE CONCURRENTLY t", "REINDEX DATABASE d",
		"CREATE DATABASE d", "DROP DATABASE d", "ALTER SYSTEM SET work_mem = '1MB'",
		"COMMIT", "rollback", "BEGIN", "START TRANSACTION", "END", "ABORT", "SAVEPOINT s",
		"RELEASE s", "PREPARE TRANSACTION 'x'", "COPY t FROM STDIN", "CLUSTER", "SELECT 1; SELECT 2",
		"SELECT 1; COMMIT", "", "   ", "-- only a comment", "ALTER TABLE p DETACH PARTITION c CONCURRENTLY",
		/* WHERE'\' is WHERE and a plain string, not an escape string that hides the COMMIT. */
		"SELECT 1 WHERE'\\' = ''; COMMIT",
		NULL,
	};
	for (const char **s = refused; *s; s++)
		if (pgc_probe_refusal(*s) == NULL)
			T_FAIL("\"%s\" should be refused", *s);
	const char *allowed[] = {
		"SELECT 'VACUUM'", "SELECT 1;", "SELECT 1; -- COMMIT", "UPDATE t SET note = 'COMMIT; VACUUM'",
		"SELECT $$ ; COMMIT $$", "SELECT $tag$ ; VACUUM $tag$ FROM t", "CREATE INDEX ON t (x)",
		"ALTER TABLE t ADD COLUMN c int", "SELECT * FROM \"VACUUM\"", "CLUSTER t USING i",
		"LOCK TABLE t IN SHARE MODE", "DROP INDEX i", "COPY t TO STDOUT", "SELECT E'it\\'s; COMMIT'",
		"(SELECT 1)", "WITH x AS (SELECT 1) SELECT * FROM x",
		"CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END",
		"COPY (SELECT * FROM stdin) TO STDOUT", NULL,
	};
	for (const char **s = allowed; *s; s++)
		if (pgc_probe_refusal(*s) != NULL)
			T_FAIL("\"%s\" should be allowed, got: %s", *s, pgc_probe_refusal(*s));
	T_ASSERT(pgc_probe_refusal(NULL) != NULL);
	T_ASSERT_CONTAINS(pgc_probe_refusal("VACUUM"), "cannot run inside a transaction block");
	T_ASSERT_CONTAINS(pgc_probe_refusal("COMMIT"), "transaction control");
}

static void diag__blocks_on_words(void)
{
	char buf[256];
	T_ASSERT(pgc_table_lock_blocks_on(PGC_ACCESS_EXCLUSIVE, "orders", buf, sizeof buf) > 0);
	T_ASSERT_STR_EQ(buf, "blocks every read and write of orders until the transaction ends");
	for (int m = 1; m <= PGC_TABLE_LOCK_COUNT; m++) {
		T_ASSERT(pgc_table_lock_blocks_on(m, "t", buf, sizeof buf) > 0);
		T_ASSERT_CONTAINS(buf, " t");
	}
	T_ASSERT_INT_EQ(pgc_table_lock_blocks_on(0, "t", buf, sizeof buf), -1);
	T_ASSERT_INT_EQ(pgc_table_lock_blocks_on(9, "t", buf, sizeof buf), -1);
	T_ASSERT_INT_EQ(pgc_table_lock_blocks_on(1, NULL, buf, sizeof buf), -1);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "diag__chain_tree_and_keys", diag__chain_tree_and_keys },
		{ "diag__sql_forest_matches_snapshot", diag__sql_forest_matches_snapshot },
		{ "diag__queued_ddl", diag__queued_ddl },
		{ "diag__cycle_found_not_followed", diag__cycle_found_not_followed },
		{ "diag__other_database_blocker_in_scope", diag__other_database_blocker_in_scope },
		{ "diag__snapshot_bad_args", diag__snapshot_bad_args },
		{ "diag__signal", diag__signal },
		{ "diag__signal_session_checks_start", diag__signal_session_checks_start },
		{ "diag__probe_reports_locks_and_changes_nothing", diag__probe_reports_locks_and_changes_nothing },
		{ "diag__probe_lock_timeout_names_blocker", diag__probe_lock_timeout_names_blocker },
		{ "diag__probe_refusal_scanner", diag__probe_refusal_scanner },
		{ "diag__blocks_on_words", diag__blocks_on_words },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
