/* test_timeouts.c - a wait the caller asked for is neither cut short nor stretched by the
 * role's statement_timeout and lock_timeout: session and transaction lock waits, the
 * transaction runner's row-lock waits and lease grants, each under a role whose settings are
 * shorter than the caller's deadline.
 *
 * Each case makes a role of its own (pgc_to_<pid>) with statement_timeout 1s, lock_timeout
 * 500ms and idle_in_transaction_session_timeout 1s, connects as it, and drops it at exit. */
#include <libpq-fe.h>
#include <pthread.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "../t.h"

static char role[64], schema[64];

static void exec_or_fail(pgc_conn *c, const char *sql)
{
	pgc_error err;
	if (pgc_exec(c, sql, &err) != PGC_OK)
		T_FAIL("%s: %s", sql, err.message);
}

static void cleanup(void)
{
	pgc_conn *c = t_connect(NULL);
	char sql[256];
	pgc_error err;
	snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
	(void)!pgc_exec(c, sql, &err);
	snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS %s", role);
	(void)!pgc_exec(c, sql, &err);
	pgc_conn_close(c);
}

/* The role with short settings, and a schema it may use; returns a session as the role. */
static pgc_conn *setup(void)
{
	snprintf(role, sizeof role, "pgc_to_%d", (int)getpid());
	snprintf(schema, sizeof schema, "pgc_to_%d", (int)getpid());
	atexit(cleanup);
	pgc_conn *admin = t_connect(NULL);
	char sql[512];
	snprintf(sql, sizeof sql,
	         "CREATE ROLE %s LOGIN SUPERUSER; ALTER ROLE %s SET statement_timeout = '1s';"
	         " ALTER ROLE %s SET lock_timeout = '500ms';"
	         " ALTER ROLE %s SET idle_in_transaction_session_timeout = '1s'",
	         role, role, role, role);
	exec_or_fail(admin, sql);
	pgc_error err;
	if (pgc_schema_init(admin, schema, NULL, NULL, &err) != PGC_OK)
		T_FAIL("init: %s", err.message);
	snprintf(sql, sizeof sql, "CREATE TABLE %s.t (id bigint PRIMARY KEY); INSERT INTO %s.t VALUES (1)",
	         schema, schema);
	exec_or_fail(admin, sql);
	pgc_conn_close(admin);
	/* The test server's DSN with this role as the user. */
	PQconninfoOption *opts = PQconninfoParse(t_dsn(), NULL);
	T_ASSERT(opts != NULL);
	char dsn[1024] = "";
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		if (o->val == NULL || strcmp(o->keyword, "user") == 0)
			continue;
		size_t len = strlen(dsn);
		snprintf(dsn + len, sizeof dsn - len, "%s='%s' ", o->keyword, o->val);
	}
	PQconninfoFree(opts);
	size_t len = strlen(dsn);
	snprintf(dsn + len, sizeof dsn - len, "user='%s'", role);
	pgc_conn_options co = PGC_CONN_OPTIONS_INIT;
	co.application_name = "pgcoord/test-timeouts";
	pgc_conn *c;
	if (pgc_connect(dsn, &co, &c, &err) != PGC_OK)
		T_FAIL("connect as %s: %s", role, err.message);
	PGresult *r = PQexec(pgc_conn_pg(c), "SHOW statement_timeout");
	T_ASSERT_STR_EQ(PQgetvalue(r, 0, 0), "1s");
	PQclear(r);
	return c;
}

/* Another session holds key 1 (a session lock) until release_after_ms, then lets go. */
typedef struct holder_arg {
	pgc_conn *c;
	int release_after_ms;
} holder_arg;

static void *release_later(void *p)
{
	holder_arg *h = p;
	pgc__sleep_ms(h->release_after_ms);
	PQclear(PQexec(pgc_conn_pg(h->c), "SELECT pg_advisory_unlock_all()"));
	return NULL;
}

static pgc_key held_key(void)
{
	return pgc_key_int64(INT64_C(0x7067637400000000) + getpid());
}

static pgc_conn *hold(void)
{
	pgc_conn *h = t_connect("pgcoord/test-timeouts-holder");
	pgc_key k = held_key();
	pgc_lock *l;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(h, &k, PGC_LOCK_TRY, 0, &l, &err), PGC_OK);
	return h;
}

/* A 3 s wait under a role whose statement_timeout is 1 s and lock_timeout 500 ms: the wait
 * lasts 3 s and ends as a timeout, not as a cancelled statement. */
static void timeouts__session_lock_wait(void)
{
	pgc_conn *c = setup(), *h = hold();
	pgc_key k = held_key();
	pgc_lock *l = NULL;
	pgc_error err;
	int64_t t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 3000, &l, &err), PGC_ETIMEDOUT);
	int64_t el = pgc__now_ms() - t0;
	T_ASSERT(el >= 2800);
	T_ASSERT(el < 8000);
	T_ASSERT_CONTAINS(err.message, "timed out after 3000 ms");
	T_ASSERT_NOT_CONTAINS(err.message, "statement timeout");
	/* The session's own settings are untouched. */
	PGresult *r = PQexec(pgc_conn_pg(c), "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')");
	T_ASSERT_STR_EQ(PQgetvalue(r, 0, 0), "1s");
	T_ASSERT_STR_EQ(PQgetvalue(r, 0, 1), "500ms");
	PQclear(r);
	pgc_conn_close(h);
	pgc_conn_close(c);
}

/* Waiting without a deadline waits until the lock comes, past both role settings. */
static void timeouts__session_lock_forever(void)
{
	pgc_conn *c = setup(), *h = hold();
	holder_arg ha = { h, 2500 };
	pthread_t th;
	pthread_create(&th, NULL, release_later, &ha);
	pgc_key k = held_key();
	pgc_lock *l = NULL;
	pgc_error err;
	int64_t t0 = pgc__now_ms();
	int rc = pgc_lock_acquire(c, &k, 0, PGC_WAIT_FOREVER, &l, &err);
	if (rc != PGC_OK)
		T_FAIL("forever: %s", err.message);
	T_ASSERT(pgc__now_ms() - t0 >= 2000);
	pthread_join(th, NULL);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	pgc_conn_close(h);
	pgc_conn_close(c);
}

/* The same inside the caller's transaction: a transaction lock waits 3 s, the transaction
 * stays usable and keeps the role's settings. */
static void timeouts__xact_lock_wait(void)
{
	pgc_conn *c = setup(), *h = hold();
	pgc_key k = held_key();
	pgc_error err;
	exec_or_fail(c, "BEGIN");
	int64_t t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_xact_lock(c, &k, 0, 3000, &err), PGC_ETIMEDOUT);
	T_ASSERT(pgc__now_ms() - t0 >= 2800);
	PGresult *r = PQexec(pgc_conn_pg(c), "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')");
	T_ASSERT_INT_EQ(PQresultStatus(r), PGRES_TUPLES_OK);
	T_ASSERT_STR_EQ(PQgetvalue(r, 0, 0), "1s");
	T_ASSERT_STR_EQ(PQgetvalue(r, 0, 1), "500ms");
	PQclear(r);
	exec_or_fail(c, "ROLLBACK");
	pgc_conn_close(h);
	pgc_conn_close(c);
}

/* The transaction runner's lock_timeout bounds its row-lock waits, not the role's
 * statement_timeout. */
typedef struct rows_arg {
	int64_t id;
} rows_arg;

static int lock_row(pgc_conn *c, void *arg, pgc_error *err)
{
	rows_arg *a = arg;
	char table[128];
	snprintf(table, sizeof table, "%s.t", schema);
	return pgc_lock_rows(c, table, "id", &a->id, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, NULL, err);
}

static void timeouts__tx_runner_row_wait(void)
{
	pgc_conn *c = setup(), *h = t_connect(NULL);
	char sql[256];
	snprintf(sql, sizeof sql, "BEGIN; SELECT * FROM %s.t WHERE id = 1 FOR UPDATE", schema);
	exec_or_fail(h, sql);
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.lock_timeout_ms = 3000;
	o.max_attempts = 1;
	rows_arg a = { 1 };
	pgc_error err;
	int64_t t0 = pgc__now_ms();
	int rc = pgc_tx_run(c, &o, lock_row, &a, &err);
	int64_t el = pgc__now_ms() - t0;
	T_ASSERT_INT_EQ(rc, PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "55P03");
	T_ASSERT(el >= 2800);
	T_ASSERT(el < 8000);
	exec_or_fail(h, "ROLLBACK");
	pgc_conn_close(h);
	pgc_conn_close(c);
}

/* A lease grant waits for the transactions that checked the previous token up to the
 * caller's lock_timeout_ms, whatever the role says. */
static void timeouts__lease_grant_wait(void)
{
	pgc_conn *c = setup(), *holder = t_connect(NULL), *writer = t_connect(NULL);
	pgc_lease_options lo = PGC_LEASE_OPTIONS_INIT;
	lo.schema = schema;
	pgc_lease la, lb;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lease_acquire(holder, "guarded", "alpha", 500, &lo, &la, &err), PGC_OK);
	exec_or_fail(writer, "BEGIN");
	T_ASSERT_INT_EQ(pgc_fence_check(writer, "guarded", la.token, &lo, &err), PGC_OK);
	pgc__sleep_ms(700); /* the lease expires; its writer is still open */
	pgc_lease_options o = lo;
	o.lock_timeout_ms = 3000;
	int64_t t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "guarded", "gamma", 5000, &o, &lb, &err), PGC_EBUSY);
	int64_t el = pgc__now_ms() - t0;
	T_ASSERT_CONTAINS(err.message, "still open after 3000 ms");
	T_ASSERT(el >= 2800);
	exec_or_fail(writer, "ROLLBACK");
	pgc_conn_close(writer);
	pgc_conn_close(holder);
	pgc_conn_close(c);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "timeouts__session_lock_wait", timeouts__session_lock_wait },
		{ "timeouts__session_lock_forever", timeouts__session_lock_forever },
		{ "timeouts__xact_lock_wait", timeouts__xact_lock_wait },
		{ "timeouts__tx_runner_row_wait", timeouts__tx_runner_row_wait },
		{ "timeouts__lease_grant_wait", timeouts__lease_grant_wait },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
