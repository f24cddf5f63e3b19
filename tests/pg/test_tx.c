/* test_tx.c - the transaction runner, savepoints and explicit locks against a real server,
 * with real concurrent sessions (one pgc_conn per thread) and real faults */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "tx/tx_int.h"
#include "../t.h"
#include "pgt.h"

/* ---- fixtures ---- */

static char S[64]; /* this process's schema */

/* The test DSN with extra server settings (-c name=value ...) for every session opened from
 * it, reconnects included. In a buffer of the calling thread's own: threads open sessions at
 * the same time. */
static char *dsn_with(const char *settings)
{
	static _Thread_local char buf[2048];
	const char *base = t_dsn();
	if (strncmp(base, "postgres", 8) == 0) {
		char enc[512];
		size_t j = 0;
		for (const char *p = settings; *p && j + 4 < sizeof enc; p++) {
			if (*p == ' ')
				j += (size_t)snprintf(enc + j, sizeof enc - j, "%%20");
			else if (*p == '=')
				j += (size_t)snprintf(enc + j, sizeof enc - j, "%%3D");
			else
				enc[j++] = *p;
		}
		enc[j] = '\0';
		snprintf(buf, sizeof buf, "%s%soptions=%s", base, strchr(base, '?') ? "&" : "?", enc);
	} else {
		snprintf(buf, sizeof buf, "%s options='%s'", base, settings);
	}
	return buf;
}

static pgc_conn *connect_dsn(const char *dsn, const char *app)
{
	pgc_conn_options opts = PGC_CONN_OPTIONS_INIT;
	opts.application_name = app;
	pgc_conn *c = NULL;
	pgc_error err;
	if (pgc_connect(dsn, &opts, &c, &err) != PGC_OK)
		T_FAIL("connect: %s", err.message);
	return c;
}

/* A session whose deadlock checks run after 50ms instead of 1s, so that tests stay fast. */
static pgc_conn *connect_fast(const char *app)
{
	return connect_dsn(dsn_with("-c deadlock_timeout=50ms"), app);
}

static pgc_conn *setup(void)
{
	snprintf(S, sizeof S, "pgc_tx_%d", (int)getpid());
	pgc_conn *c = t_connect("pgcoord/test-tx");
	sql(c, "SET client_min_messages = warning");
	sql(c, "CREATE SCHEMA %s", S);
	return c;
}

static void teardown(pgc_conn *c)
{
	sql(c, "DROP SCHEMA %s CASCADE", S);
	pgc_conn_close(c);
}

/* Runs a parameterised statement inside a body and reports its error through err. */
static int run_params(pgc_conn *c, pgc_error *err, const char *text, int n, const char *const *vals)
{
	PGresult *r = PQexecParams(pgc_conn_pg(c), text, n, NULL, vals, NULL, NULL, 0);
	int rc = pgc_tx_check_result(c, r, err);
	PQclear(r);
	return rc;
}

/* A meeting point for two threads with a bound: wait() returns when both arrived or after
 * timeout_ms; pass() arrives without waiting (used by a thread whose first attempt failed
 * before it got there, so that its partner is not held up). */
typedef struct rendezvous {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int arrived;
	int need;
} rendezvous;

static void rv_init(rendezvous *rv, int need)
{
	pthread_mutex_init(&rv->mu, NULL);
	pthread_cond_init(&rv->cv, NULL);
	rv->arrived = 0;
	rv->need = need;
}

static bool rv_wait(rendezvous *rv, int timeout_ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&rv->mu);
	rv->arrived++;
	pthread_cond_broadcast(&rv->cv);
	int rc = 0;
	while (rv->arrived < rv->need && rc == 0)
		rc = pthread_cond_timedwait(&rv->cv, &rv->mu, &dl);
	bool met = rv->arrived >= rv->need;
	pthread_mutex_unlock(&rv->mu);
	return met;
}

static void rv_pass(rendezvous *rv)
{
	pthread_mutex_lock(&rv->mu);
	rv->arrived++;
	pthread_cond_broadcast(&rv->cv);
	pthread_mutex_unlock(&rv->mu);
}

/* ---- bodies ---- */

typedef struct xfer {
	char table[96];
	int64_t from, to;
	int amount;
	bool ordered;      /* lock both rows first with pgc_lock_rows, ascending */
	rendezvous *rv;    /* first attempt only: meet the partner between the two updates */
	int calls;
} xfer;

static int transfer_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	xfer *x = arg;
	x->calls++;
	if (x->ordered) {
		int64_t ids[2] = { x->from, x->to };
		bool locked[2];
		int rc = pgc_lock_rows(c, x->table, "id", ids, 2, PGC_FOR_UPDATE, PGC_ROWS_WAIT, locked, err);
		if (rc != PGC_OK)
			return rc;
		if (!locked[0] || !locked[1])
			return pgc__err(err, PGC_EINTERNAL, "account missing");
	}
	char from[24], to[24], amount[24], upd[160];
	snprintf(from, sizeof from, "%lld", (long long)x->from);
	snprintf(to, sizeof to, "%lld", (long long)x->to);
	snprintf(amount, sizeof amount, "%d", x->amount);
	snprintf(upd, sizeof upd, "UPDATE %s SET balance = balance + $2 WHERE id = $1", x->table);
	char neg[24];
	snprintf(neg, sizeof neg, "%d", -x->amount);
	const char *v1[2] = { from, neg };
	int rc = run_params(c, err, upd, 2, v1);
	if (rc != PGC_OK)
		return rc;
	if (x->rv != NULL) {
		if (x->calls == 1)
			rv_wait(x->rv, x->ordered ? 300 : 10000);
	}
	const char *v2[2] = { to, amount };
	return run_params(c, err, upd, 2, v2);
}

static void make_accounts(pgc_conn *c, int n, int balance)
{
	sql(c, "CREATE TABLE %s.accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)", S);
	sql(c, "INSERT INTO %s.accounts SELECT g, %d FROM generate_series(1, %d) g", S, balance, n);
}

/* ---- cases ---- */

static int noop_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)c, (void)arg, (void)err;
	return 0;
}

static void tx__usage(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_tx_run(NULL, NULL, noop_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_tx_run(c, NULL, NULL, NULL, &err), PGC_EUSAGE);
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.max_attempts = 0;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, noop_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "max_attempts");
	o = (pgc_tx_options)PGC_TX_OPTIONS_INIT;
	o.isolation = (pgc_isolation)7;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, noop_fn, NULL, &err), PGC_EUSAGE);
	o = (pgc_tx_options)PGC_TX_OPTIONS_INIT;
	o.deferrable = true;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, noop_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "deferrable");
	o = (pgc_tx_options)PGC_TX_OPTIONS_INIT;
	o.lock_timeout_ms = -1;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, noop_fn, NULL, &err), PGC_EUSAGE);
	o = (pgc_tx_options)PGC_TX_OPTIONS_INIT;
	o.statement_timeout_ms = INT64_C(1) << 40;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, noop_fn, NULL, &err), PGC_EUSAGE);
	o = (pgc_tx_options)PGC_TX_OPTIONS_INIT;
	o.backoff_base_ms = -5;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, noop_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_USAGE);
	/* already inside a transaction */
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_tx_run(c, NULL, noop_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "pgc_savepoint");
	sql(c, "ROLLBACK");
	/* savepoint and locks outside a transaction, and their own argument checks */
	T_ASSERT_INT_EQ(pgc_savepoint(c, noop_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "not inside a transaction");
	T_ASSERT_INT_EQ(pgc_savepoint(NULL, noop_fn, NULL, &err), PGC_EUSAGE);
	int64_t id = 1;
	T_ASSERT_INT_EQ(pgc_lock_rows(c, "t", "id", &id, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "not inside a transaction");
	T_ASSERT_INT_EQ(pgc_lock_table(c, "t", PGC_SHARE, false, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "not inside a transaction");
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_rows(c, "t", "id", NULL, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_rows(c, "t", "", &id, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_rows(c, "t", "id", &id, 1, (pgc_row_lock)0, PGC_ROWS_WAIT, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_rows(c, "t", "id", &id, 1, PGC_FOR_UPDATE, (pgc_wait_policy)3, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_rows(c, "t", "id", NULL, 0, PGC_FOR_UPDATE, PGC_ROWS_WAIT, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_rows(c, ".t", "id", &id, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_table(c, "t", (pgc_table_lock)0, false, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "explicit");
	T_ASSERT_INT_EQ(pgc_lock_table(c, "t", (pgc_table_lock)9, false, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_table(c, "", PGC_SHARE, false, &err), PGC_EUSAGE);
	/* an aborted transaction is refused, not made worse */
	T_ASSERT(pgc_exec(c, "SELECT no_such_column", &err) == PGC_ESQL);
	T_ASSERT_INT_EQ(pgc_lock_table(c, "t", PGC_SHARE, false, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "aborted");
	T_ASSERT_INT_EQ(pgc_savepoint(c, noop_fn, NULL, &err), PGC_EUSAGE);
	sql(c, "ROLLBACK");
	T_ASSERT_INT_EQ(pgc_tx_check_result(NULL, NULL, &err), PGC_EUSAGE);
	pgc_isolation lvl;
	T_ASSERT(pgc_isolation_parse("Repeatable-Read", &lvl) && lvl == PGC_ISOLATION_REPEATABLE_READ);
	T_ASSERT(pgc_isolation_parse("read committed", &lvl) && lvl == PGC_ISOLATION_READ_COMMITTED);
	T_ASSERT(pgc_isolation_parse("SERIALIZABLE", &lvl) && lvl == PGC_ISOLATION_SERIALIZABLE);
	T_ASSERT(!pgc_isolation_parse("snapshot", &lvl));
	T_ASSERT(!pgc_isolation_parse(NULL, &lvl));
	T_ASSERT_STR_EQ(pgc_isolation_name(PGC_ISOLATION_SERIALIZABLE), "serializable");
	T_ASSERT(pgc_isolation_name((pgc_isolation)9) == NULL);
	teardown(c);
}

typedef struct seen_settings {
	char v[6][64];
} seen_settings;

static int settings_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	seen_settings *s = arg;
	PGresult *r = PQexec(pgc_conn_pg(c),
	        "SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only'),"
	        " current_setting('transaction_deferrable'), current_setting('lock_timeout'),"
	        " current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout')");
	int rc = pgc_tx_check_result(c, r, err);
	if (rc == PGC_OK)
		for (int i = 0; i < 6; i++)
			snprintf(s->v[i], sizeof s->v[i], "%s", PQgetvalue(r, 0, i));
	PQclear(r);
	return rc;
}

static int insert_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	const char *value = arg;
	char q[160];
	snprintf(q, sizeof q, "INSERT INTO %s.t (v) VALUES ($1)", S);
	const char *vals[1] = { value };
	return run_params(c, err, q, 1, vals);
}

static int insert_then_rollback_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	int rc = insert_fn(c, arg, err);
	return rc != PGC_OK ? rc : PGC_TX_ROLLBACK;
}

static void tx__commit_rollback_and_settings(void)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.t (v text PRIMARY KEY)", S);
	pgc_tx_stats st;
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.stats = &st;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, insert_fn, "a", &err), PGC_OK);
	T_ASSERT_INT_EQ(st.attempts, 1);
	T_ASSERT_INT_EQ(st.nsqlstates, 0);
	T_ASSERT_INT_EQ(st.backoff_ms, 0);
	T_ASSERT_INT_EQ(err.code, PGC_OK);
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, insert_then_rollback_fn, "b", &err), PGC_TX_ROLLBACK);
	T_ASSERT_INT_EQ(err.code, PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.t", S), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.t WHERE v = 'a'", S), 1);
	/* NULL err and NULL opts are fine */
	T_ASSERT_INT_EQ(pgc_tx_run(c, NULL, insert_fn, "c", NULL), PGC_OK);

	seen_settings s;
	o.isolation = PGC_ISOLATION_SERIALIZABLE;
	o.read_only = true;
	o.deferrable = true;
	o.lock_timeout_ms = 250;
	o.statement_timeout_ms = 2000;
	o.idle_in_transaction_timeout_ms = 60000;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, settings_fn, &s, &err), PGC_OK);
	T_ASSERT_STR_EQ(s.v[0], "serializable");
	T_ASSERT_STR_EQ(s.v[1], "on");
	T_ASSERT_STR_EQ(s.v[2], "on");
	T_ASSERT_STR_EQ(s.v[3], "250ms");
	T_ASSERT_STR_EQ(s.v[4], "2s");
	T_ASSERT_STR_EQ(s.v[5], "1min");
	/* SET LOCAL: gone after the transaction */
	T_ASSERT_INT_EQ(sql_int(c, "SELECT (current_setting('lock_timeout') = '0')::int"), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT (current_setting('statement_timeout') = '0')::int"), 1);
	/* read only is enforced */
	o = (pgc_tx_options)PGC_TX_OPTIONS_INIT;
	o.read_only = true;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, insert_fn, "d", &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "25006");
	o = (pgc_tx_options)PGC_TX_OPTIONS_INIT;
	o.isolation = PGC_ISOLATION_REPEATABLE_READ;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, settings_fn, &s, &err), PGC_OK);
	T_ASSERT_STR_EQ(s.v[0], "repeatable read");
	T_ASSERT_STR_EQ(s.v[1], "off");
	o.isolation = PGC_ISOLATION_READ_COMMITTED;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, settings_fn, &s, &err), PGC_OK);
	T_ASSERT_STR_EQ(s.v[0], "read committed");
	teardown(c);
}

/* Two sessions update rows 1 and 2 in opposite orders and meet in between: a real deadlock. */
typedef struct worker {
	xfer x;
	pgc_tx_options o;
	pgc_tx_stats st;
	int rc;
	pgc_error err;
	int backend_pid;
	rendezvous *finished; /* counts workers whose transaction ended */
} worker;

static void *worker_main(void *arg)
{
	worker *w = arg;
	pgc_conn *c = connect_fast("pgcoord/test-tx-worker");
	w->backend_pid = pgc_conn_backend_pid(c);
	w->o.stats = &w->st;
	w->rc = pgc_tx_run(c, &w->o, transfer_fn, &w->x, &w->err);
	if (w->finished != NULL)
		rv_pass(w->finished);
	pgc_conn_close(c);
	return NULL;
}

/* A before_retry hook that lets the other transaction finish first. Without it, the victim's
 * retry can take its first row again before the survivor (woken by the rollback) gets to it,
 * and the same cycle forms a second time: which is why retries back off with jitter, but a
 * test that counts deadlocks exactly must not depend on the draw. */
static int wait_for_partner(const pgc_tx_retry_info *info, void *arg)
{
	rendezvous *finished = arg;
	T_ASSERT_STR_EQ(info->error->sqlstate, "40P01");
	pthread_mutex_lock(&finished->mu);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 10;
	while (finished->arrived < 1)
		if (pthread_cond_timedwait(&finished->cv, &finished->mu, &dl) != 0)
			break;
	pthread_mutex_unlock(&finished->mu);
	return 0;
}

static void tx__deadlock_retried(void)
{
	pgc_conn *c = setup();
	make_accounts(c, 2, 100);
	rendezvous rv, finished;
	rv_init(&rv, 2);
	rv_init(&finished, 2);
	worker w[2];
	memset(w, 0, sizeof w);
	for (int i = 0; i < 2; i++) {
		w[i].o = (pgc_tx_options)PGC_TX_OPTIONS_INIT;
		w[i].o.before_retry = wait_for_partner;
		w[i].o.hook_arg = &finished;
		w[i].finished = &finished;
		snprintf(w[i].x.table, sizeof w[i].x.table, "%s.accounts", S);
		w[i].x.from = i == 0 ? 1 : 2;
		w[i].x.to = i == 0 ? 2 : 1;
		w[i].x.amount = i == 0 ? 10 : 20;
		w[i].x.rv = &rv;
	}
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 2; i++)
		if (w[i].rc != PGC_OK)
			T_FAIL("transfer %d: rc %d: %s", i, w[i].rc, w[i].err.message);
	/* exactly one victim, retried once, and both transfers applied */
	T_ASSERT_INT_EQ(w[0].st.deadlocks + w[1].st.deadlocks, 1);
	int victim = w[0].st.deadlocks ? 0 : 1;
	T_ASSERT_INT_EQ(w[victim].st.attempts, 2);
	T_ASSERT_INT_EQ(w[victim].x.calls, 2);
	T_ASSERT_INT_EQ(w[1 - victim].st.attempts, 1);
	T_ASSERT_INT_EQ(w[victim].st.nsqlstates, 1);
	T_ASSERT_STR_EQ(w[victim].st.sqlstates[0], "40P01");
	T_ASSERT(w[victim].st.backoff_ms >= 0 && w[victim].st.backoff_ms <= 10);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT balance FROM %s.accounts WHERE id = 1", S), 100 - 10 + 20);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT balance FROM %s.accounts WHERE id = 2", S), 100 + 10 - 20);
	teardown(c);
}

/* Two on-call doctors both try to go off duty under SERIALIZABLE: write skew. */
typedef struct doctor {
	int id;
	rendezvous *read, *wrote;
	int calls;
	pgc_tx_stats st;
	int rc;
	pgc_error err;
} doctor;

static int off_duty_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	doctor *d = arg;
	d->calls++;
	if (d->calls == 2)
		rv_pass(d->wrote); /* the first attempt may have failed before meeting its partner */
	char q[200];
	snprintf(q, sizeof q, "SELECT count(*) FROM %s.doctors WHERE on_call", S);
	PGresult *r = PQexec(pgc_conn_pg(c), q);
	int rc = pgc_tx_check_result(c, r, err);
	long on_call = rc == PGC_OK ? atol(PQgetvalue(r, 0, 0)) : 0;
	PQclear(r);
	if (rc != PGC_OK)
		return rc;
	if (d->calls == 1)
		rv_wait(d->read, 10000);
	if (on_call < 2)
		return PGC_TX_ROLLBACK; /* someone must stay on call: refuse */
	char id[16];
	snprintf(id, sizeof id, "%d", d->id);
	snprintf(q, sizeof q, "UPDATE %s.doctors SET on_call = false WHERE id = $1", S);
	const char *vals[1] = { id };
	rc = run_params(c, err, q, 1, vals);
	if (rc != PGC_OK)
		return rc;
	if (d->calls == 1)
		rv_wait(d->wrote, 10000);
	return PGC_OK;
}

static void *doctor_main(void *arg)
{
	doctor *d = arg;
	pgc_conn *c = connect_fast("pgcoord/test-tx-doctor");
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.isolation = PGC_ISOLATION_SERIALIZABLE;
	o.stats = &d->st;
	d->rc = pgc_tx_run(c, &o, off_duty_fn, d, &d->err);
	pgc_conn_close(c);
	return NULL;
}

static void tx__write_skew_serializable(void)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.doctors (id int PRIMARY KEY, on_call bool NOT NULL)", S);
	sql(c, "INSERT INTO %s.doctors VALUES (1, true), (2, true)", S);
	rendezvous read, wrote;
	rv_init(&read, 2);
	rv_init(&wrote, 2);
	doctor d[2];
	memset(d, 0, sizeof d);
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		d[i].id = i + 1;
		d[i].read = &read;
		d[i].wrote = &wrote;
		pthread_create(&th[i], NULL, doctor_main, &d[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 2; i++)
		if (d[i].rc != PGC_OK && d[i].rc != PGC_TX_ROLLBACK)
			T_FAIL("doctor %d: rc %d: %s", i + 1, d[i].rc, d[i].err.message);
	/* one went off duty, the other was told no after its retry saw the change */
	T_ASSERT_INT_EQ((d[0].rc == PGC_OK) + (d[1].rc == PGC_OK), 1);
	int loser = d[0].rc == PGC_TX_ROLLBACK ? 0 : 1;
	T_ASSERT(d[loser].st.attempts >= 2);
	T_ASSERT(d[loser].st.serialization_failures >= 1);
	T_ASSERT_STR_EQ(d[loser].st.sqlstates[0], "40001");
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.doctors WHERE on_call", S), 1);
	teardown(c);
}

/* The transfer workload: 8 threads, random pairs, ordered or in arrival order. */
enum { XFER_THREADS = 8, XFER_ACCOUNTS = 10, XFER_EACH = 40 };

typedef struct xfer_thread {
	bool ordered;
	unsigned seed;
	int deadlocks, retries, failures;
	char fail[PGC_ERROR_MESSAGE_MAX];
} xfer_thread;

static void *xfer_main(void *arg)
{
	xfer_thread *t = arg;
	pgc_conn *c = connect_fast("pgcoord/test-tx-xfer");
	for (int i = 0; i < XFER_EACH; i++) {
		xfer x;
		memset(&x, 0, sizeof x);
		snprintf(x.table, sizeof x.table, "%s.accounts", S);
		x.from = 1 + rand_r(&t->seed) % XFER_ACCOUNTS;
		do
			x.to = 1 + rand_r(&t->seed) % XFER_ACCOUNTS;
		while (x.to == x.from);
		x.amount = 1 + rand_r(&t->seed) % 50;
		x.ordered = t->ordered;
		pgc_tx_stats st;
		pgc_tx_options o = PGC_TX_OPTIONS_INIT;
		o.max_attempts = 100;
		o.stats = &st;
		pgc_error err;
		int rc = pgc_tx_run(c, &o, transfer_fn, &x, &err);
		t->deadlocks += st.deadlocks;
		t->retries += st.attempts - 1;
		if (rc != PGC_OK && t->failures++ == 0)
			snprintf(t->fail, sizeof t->fail, "rc %d: %s", rc, err.message);
	}
	pgc_conn_close(c);
	return NULL;
}

/* Forces one meeting of two opposite transfers, then runs the random workload; returns the
 * deadlocks seen (forced pair included). */
static int transfer_workload(pgc_conn *c, bool ordered)
{
	make_accounts(c, XFER_ACCOUNTS, 1000);
	rendezvous rv;
	rv_init(&rv, 2);
	worker w[2];
	memset(w, 0, sizeof w);
	for (int i = 0; i < 2; i++) {
		w[i].o = (pgc_tx_options)PGC_TX_OPTIONS_INIT;
		snprintf(w[i].x.table, sizeof w[i].x.table, "%s.accounts", S);
		w[i].x.from = i == 0 ? 3 : 4;
		w[i].x.to = i == 0 ? 4 : 3;
		w[i].x.amount = 5;
		w[i].x.ordered = ordered;
		w[i].x.rv = &rv;
	}
	pthread_t th[XFER_THREADS];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	int forced = 0;
	for (int i = 0; i < 2; i++) {
		if (w[i].rc != PGC_OK)
			T_FAIL("forced transfer %d: rc %d: %s", i, w[i].rc, w[i].err.message);
		forced += w[i].st.deadlocks;
	}

	xfer_thread t[XFER_THREADS];
	memset(t, 0, sizeof t);
	for (int i = 0; i < XFER_THREADS; i++) {
		t[i].ordered = ordered;
		t[i].seed = (unsigned)(getpid() * 31 + i);
		pthread_create(&th[i], NULL, xfer_main, &t[i]);
	}
	int deadlocks = 0, retries = 0;
	for (int i = 0; i < XFER_THREADS; i++) {
		pthread_join(th[i], NULL);
		if (t[i].failures)
			T_FAIL("thread %d: %d transfers failed, first: %s", i, t[i].failures, t[i].fail);
		deadlocks += t[i].deadlocks;
		retries += t[i].retries;
	}
	fprintf(stderr, "%s order: forced pair %d deadlock(s); %d threads x %d random transfers: %d deadlocks, %d retries\n",
	        ordered ? "ascending" : "arrival", forced, XFER_THREADS, XFER_EACH, deadlocks, retries);
	/* money is neither created nor destroyed */
	T_ASSERT_INT_EQ(sql_int(c, "SELECT sum(balance) FROM %s.accounts", S), XFER_ACCOUNTS * 1000);
	return forced + deadlocks;
}

static void tx__transfer_ordered_no_deadlocks(void)
{
	pgc_conn *c = setup();
	T_ASSERT_INT_EQ(transfer_workload(c, true), 0);
	teardown(c);
}

static void tx__transfer_arrival_order_deadlocks(void)
{
	pgc_conn *c = setup();
	/* The forced pair deadlocks by construction; the random part may add more. */
	T_ASSERT(transfer_workload(c, false) >= 1);
	teardown(c);
}

/* pg_terminate_backend on the runner's own session while the body runs. */
typedef struct killer {
	pgc_conn *killer;
	bool statement_after; /* run a statement after the kill (else return 0 at once) */
	int calls;
	int first_pid;
} killer;

static void terminate_and_wait(pgc_conn *killer_conn, int pid)
{
	char q[160];
	snprintf(q, sizeof q, "SELECT pg_terminate_backend(%d)::int", pid);
	T_ASSERT_INT_EQ(sql_int(killer_conn, "%s", q), 1);
	for (int i = 0; i < 500; i++) {
		if (sql_int(killer_conn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %d", pid) == 0)
			return;
		usleep(10000);
	}
	T_FAIL("backend %d still alive 5s after pg_terminate_backend", pid);
}

static int killed_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	killer *k = arg;
	k->calls++;
	/* a statement pgc_lock_rows prepared on the old session is prepared again on the new */
	char table[96];
	snprintf(table, sizeof table, "%s.accounts", S);
	int64_t one = 1;
	int rc = pgc_lock_rows(c, table, "id", &one, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, NULL, err);
	if (rc != PGC_OK)
		return rc;
	rc = insert_fn(c, "row", err);
	if (rc != PGC_OK)
		return rc;
	if (k->calls == 1) {
		k->first_pid = pgc_conn_backend_pid(c);
		terminate_and_wait(k->killer, k->first_pid);
		if (k->statement_after)
			return insert_fn(c, "second", err);
	}
	return PGC_OK;
}

static void terminate_case(bool statement_after)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.t (v text PRIMARY KEY)", S);
	make_accounts(c, 1, 0);
	pgc_conn *victim = t_connect("pgcoord/test-tx-victim");
	killer k = { c, statement_after, 0, 0 };
	pgc_tx_stats st;
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.stats = &st;
	pgc_error err;
	int rc = pgc_tx_run(victim, &o, killed_fn, &k, &err);
	if (rc != PGC_OK)
		T_FAIL("rc %d: %s", rc, err.message);
	T_ASSERT_INT_EQ(k.calls, 2);
	T_ASSERT_INT_EQ(st.attempts, 2);
	T_ASSERT_INT_EQ(st.reconnects, 1);
	T_ASSERT_INT_EQ(st.nsqlstates, 1);
	/* Seen before COMMIT, the server's FATAL carries 57P01; a statement sent to the dead
	 * session may only learn that the connection is gone (no SQLSTATE, never invented). */
	if (statement_after)
		T_ASSERT(strcmp(st.sqlstates[0], "57P01") == 0 || st.sqlstates[0][0] == '\0');
	else
		T_ASSERT_STR_EQ(st.sqlstates[0], "57P01");
	T_ASSERT(pgc_conn_backend_pid(victim) != k.first_pid);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.t", S), 1);
	/* the replaced session keeps working, with the same libpq handle */
	T_ASSERT_INT_EQ(sql_int(victim, "SELECT pg_backend_pid()"), pgc_conn_backend_pid(victim));
	pgc_conn_close(victim);
	teardown(c);
}

static void tx__terminate_during_statement_reconnects(void)
{
	terminate_case(true);
}

static void tx__terminate_while_idle_retried_not_unknown(void)
{
	terminate_case(false);
}

/* Stands for session state the library tracks (a session lock, a LISTEN). */
static int held_state;
static bool held_state_holds(const void *state)
{
	(void)state;
	return true;
}
static const pgc__attach_ops held_state_ops = { "test", NULL, NULL, held_state_holds, NULL };

static void tx__reconnect_refused(void)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.t (v text PRIMARY KEY)", S);
	make_accounts(c, 1, 0);
	pgc_conn *victim = t_connect("pgcoord/test-tx-victim");
	killer k = { c, true, 0, 0 };
	pgc_tx_stats st;
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.stats = &st;
	o.reconnect = false;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_tx_run(victim, &o, killed_fn, &k, &err), PGC_ECONNLOST);
	T_ASSERT_CONTAINS(err.message, "not reconnecting");
	T_ASSERT_INT_EQ(k.calls, 1);
	T_ASSERT_INT_EQ(st.attempts, 1);
	T_ASSERT_INT_EQ(st.reconnects, 0);
	/* session state the library tracks is never pretended to survive */
	T_ASSERT_INT_EQ(pgc__attach(victim, &held_state_ops, &held_state, &err), PGC_OK);
	o.reconnect = true;
	T_ASSERT_INT_EQ(pgc_tx_run(victim, &o, insert_fn, "x", &err), PGC_ECONNLOST);
	T_ASSERT_CONTAINS(err.message, "session-scoped state");
	T_ASSERT_INT_EQ(st.reconnects, 0);
	pgc__detach(victim, &held_state_ops);
	/* and without it, the dead session is replaced before the first attempt */
	T_ASSERT_INT_EQ(pgc_tx_run(victim, &o, insert_fn, "x", &err), PGC_OK);
	T_ASSERT_INT_EQ(st.reconnects, 1);
	T_ASSERT_INT_EQ(st.attempts, 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.t", S), 1);
	pgc_conn_close(victim);
	teardown(c);
}

/* Drops the connection right after COMMIT went out: the socket is shut down and replaced,
 * under libpq, by an unconnected one, so that even an answer already received is lost. */
static void drop_after_commit(pgc_conn *conn)
{
	int fd = PQsocket(pgc_conn_pg(conn));
	shutdown(fd, SHUT_RDWR);
	int dead = socket(AF_UNIX, SOCK_STREAM, 0);
	T_ASSERT(dead >= 0);
	T_ASSERT(dup2(dead, fd) == fd);
	close(dead);
}

static int counting_insert_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	int *calls = arg;
	(*calls)++;
	return insert_fn(c, "maybe", err);
}

static void tx__commit_unknown_not_retried(void)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.t (v text PRIMARY KEY)", S);
	pgc_conn *victim = t_connect("pgcoord/test-tx-victim");
	pgc_tx_stats st;
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.stats = &st;
	int calls = 0;
	pgc_error err;
	pgc__tx_commit_sent_hook = drop_after_commit;
	int rc = pgc_tx_run(victim, &o, counting_insert_fn, &calls, &err);
	pgc__tx_commit_sent_hook = NULL;
	T_ASSERT_INT_EQ(rc, PGC_ECOMMIT_UNKNOWN);
	T_ASSERT_INT_EQ(err.code, PGC_ECOMMIT_UNKNOWN);
	T_ASSERT_CONTAINS(err.message, "after COMMIT was sent");
	T_ASSERT_INT_EQ(calls, 1);
	T_ASSERT_INT_EQ(st.attempts, 1);
	T_ASSERT_INT_EQ(st.reconnects, 0);
	/* Either outcome is possible; the caller finds out. Here the server got the COMMIT. */
	long long n = 0;
	for (int i = 0; i < 200 && n == 0; i++) {
		n = sql_int(c, "SELECT count(*) FROM %s.t", S);
		if (n == 0)
			usleep(10000);
	}
	fprintf(stderr, "outcome after the dropped connection: %s\n", n ? "committed" : "not committed");
	/* The next transaction on the conn starts on a new session. */
	calls = 0;
	T_ASSERT_INT_EQ(pgc_tx_run(victim, &o, insert_fn, "next", &err), PGC_OK);
	T_ASSERT_INT_EQ(st.reconnects, 1);
	T_ASSERT_INT_EQ(st.attempts, 1);
	pgc_conn_close(victim);
	teardown(c);
}

static void tx__commit_raises_40001_retried(void)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.t (v text PRIMARY KEY)", S);
	sql(c, "CREATE SEQUENCE %s.once", S);
	/* A deferred constraint trigger raises serialization_failure at COMMIT, the first time. */
	sql(c, "CREATE FUNCTION %s.fail_once() RETURNS trigger LANGUAGE plpgsql AS $f$BEGIN "
	       "IF nextval('%s.once') = 1 THEN RAISE EXCEPTION 'could not serialize access (raised at commit)' "
	       "USING ERRCODE = 'serialization_failure'; END IF; RETURN NULL; END$f$", S, S);
	sql(c, "CREATE CONSTRAINT TRIGGER t_check AFTER INSERT ON %s.t DEFERRABLE INITIALLY DEFERRED "
	       "FOR EACH ROW EXECUTE FUNCTION %s.fail_once()", S, S);
	pgc_tx_stats st;
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.stats = &st;
	int calls = 0;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, counting_insert_fn, &calls, &err), PGC_OK);
	T_ASSERT_INT_EQ(calls, 2);
	T_ASSERT_INT_EQ(st.attempts, 2);
	T_ASSERT_INT_EQ(st.serialization_failures, 1);
	T_ASSERT_STR_EQ(st.sqlstates[0], "40001");
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.t", S), 1);
	teardown(c);
}

static int dup_u_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	(*(int *)arg)++;
	char q[160];
	snprintf(q, sizeof q, "INSERT INTO %s.u VALUES (1)", S);
	return pgc_exec(c, q, err);
}

static void tx__constraint_not_retried(void)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.u (k int PRIMARY KEY)", S);
	sql(c, "INSERT INTO %s.u VALUES (1)", S);
	pgc_tx_stats st;
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.stats = &st;
	int calls = 0;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, dup_u_fn, &calls, &err), PGC_ESQL);
	T_ASSERT_INT_EQ(calls, 1);
	T_ASSERT_INT_EQ(st.attempts, 1);
	T_ASSERT_STR_EQ(err.sqlstate, "23505");
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_FATAL);
	T_ASSERT_CONTAINS(err.message, "duplicate key value violates unique constraint");
	T_ASSERT_CONTAINS(err.detail, "Key (k)=(1) already exists");
	T_ASSERT_INT_EQ(st.nsqlstates, 1);
	T_ASSERT_STR_EQ(st.sqlstates[0], "23505");
	/* the session is usable: the runner rolled back */
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(c)), PQTRANS_IDLE);

	/* the same violation raised by COMMIT (deferred constraint) */
	sql(c, "CREATE TABLE %s.d (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)", S);
	sql(c, "INSERT INTO %s.d VALUES (1)", S);
	sql(c, "DROP TABLE %s.u", S);
	sql(c, "ALTER TABLE %s.d RENAME TO u", S);
	calls = 0;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, dup_u_fn, &calls, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "23505");
	T_ASSERT_INT_EQ(calls, 1);
	T_ASSERT_INT_EQ(st.attempts, 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.u", S), 1);
	teardown(c);
}

typedef struct hook_log {
	int calls;
	int stop_at;
	int64_t slept[16];
	int attempts[16];
} hook_log;

static int hook_fn(const pgc_tx_retry_info *info, void *arg)
{
	hook_log *h = arg;
	if (h->calls < 16) {
		h->slept[h->calls] = info->sleep_ms;
		h->attempts[h->calls] = info->attempt;
	}
	h->calls++;
	if (info->error == NULL || strcmp(info->error->sqlstate, "40P01") != 0)
		return 2;
	return h->stop_at && h->calls >= h->stop_at;
}

static int always_deadlock_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	return pgc_exec(c, "DO $$BEGIN RAISE EXCEPTION 'deadlock (raised by the test)' USING ERRCODE = 'deadlock_detected'; END$$", err);
}

static void tx__retry_exhausted_and_hook(void)
{
	pgc_conn *c = setup();
	pgc_tx_stats st;
	hook_log h;
	memset(&h, 0, sizeof h);
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.stats = &st;
	o.max_attempts = 5;
	o.backoff_base_ms = 4;
	o.backoff_max_ms = 10;
	o.before_retry = hook_fn;
	o.hook_arg = &h;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, always_deadlock_fn, NULL, &err), PGC_ERETRY_EXHAUSTED);
	T_ASSERT_INT_EQ(err.code, PGC_ERETRY_EXHAUSTED);
	T_ASSERT_STR_EQ(err.sqlstate, "40P01");
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_RETRY_TX);
	T_ASSERT_CONTAINS(err.message, "5 times");
	T_ASSERT_CONTAINS(err.message, "deadlock (raised by the test)");
	T_ASSERT_INT_EQ(st.attempts, 5);
	T_ASSERT_INT_EQ(st.deadlocks, 5);
	T_ASSERT_INT_EQ(st.nsqlstates, 5);
	T_ASSERT_INT_EQ(h.calls, 4);
	/* capped exponential ceilings 4, 8, 10, 10; the total is what was slept */
	const int64_t ceiling[4] = { 4, 8, 10, 10 };
	int64_t total = 0;
	for (int i = 0; i < 4; i++) {
		T_ASSERT_INT_EQ(h.attempts[i], i + 1);
		if (h.slept[i] < 0 || h.slept[i] > ceiling[i])
			T_FAIL("sleep %d: %lld ms outside [0, %lld]", i, (long long)h.slept[i], (long long)ceiling[i]);
		total += h.slept[i];
	}
	T_ASSERT_INT_EQ(st.backoff_ms, total);

	/* the hook stops the retries */
	memset(&h, 0, sizeof h);
	h.stop_at = 2;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, always_deadlock_fn, NULL, &err), PGC_EINTR);
	T_ASSERT_STR_EQ(err.sqlstate, "40P01");
	T_ASSERT_INT_EQ(st.attempts, 2);
	T_ASSERT_INT_EQ(h.calls, 2);

	/* no backoff with a zero base; more failures than the stats keep */
	o.before_retry = NULL;
	o.max_attempts = 40;
	o.backoff_base_ms = 0;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, always_deadlock_fn, NULL, &err), PGC_ERETRY_EXHAUSTED);
	T_ASSERT_INT_EQ(st.backoff_ms, 0);
	T_ASSERT_INT_EQ(st.nsqlstates, 40);
	T_ASSERT_STR_EQ(st.sqlstates[PGC_TX_SQLSTATES_MAX - 1], "40P01");
	teardown(c);
}

/* Holds a row lock in its own session for hold_ms, then rolls back. */
typedef struct holder {
	pgc_conn *c;
	int hold_ms;
} holder;

static void *holder_release(void *arg)
{
	holder *h = arg;
	usleep((useconds_t)h->hold_ms * 1000);
	sql(h->c, "ROLLBACK");
	return NULL;
}

static int update_row1_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	char q[160];
	snprintf(q, sizeof q, "UPDATE %s.accounts SET balance = balance + 1 WHERE id = 1", S);
	return pgc_exec(c, q, err);
}

static void tx__lock_timeout_retry_is_opt_in(void)
{
	pgc_conn *c = setup();
	make_accounts(c, 2, 0);
	pgc_conn *h = t_connect("pgcoord/test-tx-holder");
	sql(h, "BEGIN");
	sql(h, "SELECT * FROM %s.accounts WHERE id = 1 FOR UPDATE", S);
	pgc_tx_stats st;
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.stats = &st;
	o.lock_timeout_ms = 100;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, update_row1_fn, NULL, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "55P03");
	T_ASSERT_INT_EQ(st.attempts, 1);
	T_ASSERT_INT_EQ(st.lock_not_available, 1);

	holder hd = { h, 400 };
	pthread_t th;
	pthread_create(&th, NULL, holder_release, &hd);
	o.retry_lock_not_available = true;
	o.max_attempts = 200;
	o.backoff_base_ms = 20;
	o.backoff_max_ms = 50;
	int rc = pgc_tx_run(c, &o, update_row1_fn, NULL, &err);
	pthread_join(th, NULL);
	if (rc != PGC_OK)
		T_FAIL("rc %d: %s", rc, err.message);
	T_ASSERT(st.attempts >= 2);
	T_ASSERT_INT_EQ(st.lock_not_available, st.attempts - 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT balance FROM %s.accounts WHERE id = 1", S), 1);
	pgc_conn_close(h);
	teardown(c);
}

/* The seed's NOWAIT case: a row being edited elsewhere is reported, the transaction goes on. */
typedef struct nowait_arg {
	char table[96];
	int sp_rc;
	pgc_error sp_err;
} nowait_arg;

static int nowait_lock_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	nowait_arg *a = arg;
	int64_t id = 2;
	bool locked = true;
	int rc = pgc_lock_rows(c, a->table, "id", &id, 1, PGC_FOR_UPDATE, PGC_ROWS_NOWAIT, &locked, err);
	return rc;
}

static int outer_nowait_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	nowait_arg *a = arg;
	int rc = insert_fn(c, "before", err);
	if (rc != PGC_OK)
		return rc;
	a->sp_rc = pgc_savepoint(c, nowait_lock_fn, a, &a->sp_err);
	return insert_fn(c, "after", err);
}

static void tx__savepoint_nowait_outer_commits(void)
{
	pgc_conn *c = setup();
	make_accounts(c, 2, 0);
	sql(c, "CREATE TABLE %s.t (v text PRIMARY KEY)", S);
	pgc_conn *h = t_connect("pgcoord/test-tx-holder");
	sql(h, "BEGIN");
	sql(h, "SELECT * FROM %s.accounts WHERE id = 2 FOR UPDATE", S);
	nowait_arg a;
	memset(&a, 0, sizeof a);
	snprintf(a.table, sizeof a.table, "%s.accounts", S);
	pgc_tx_stats st;
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.stats = &st;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_tx_run(c, &o, outer_nowait_fn, &a, &err), PGC_OK);
	T_ASSERT_INT_EQ(a.sp_rc, PGC_ESQL);
	T_ASSERT_STR_EQ(a.sp_err.sqlstate, "55P03");
	T_ASSERT_INT_EQ(a.sp_err.klass, PGC_CLASS_RETRY_LATER);
	T_ASSERT_INT_EQ(st.attempts, 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.t", S), 2);
	T_ASSERT_INT_EQ(pgc__tx_state_of(c)->savepoint_depth, 0);
	sql(h, "ROLLBACK");
	pgc_conn_close(h);
	teardown(c);
}

static int ins(pgc_conn *c, const char *v, pgc_error *err)
{
	return insert_fn(c, (void *)v, err);
}

static int sp_insert_ok(pgc_conn *c, void *arg, pgc_error *err)
{
	return ins(c, arg, err);
}

static int sp_insert_rollback(pgc_conn *c, void *arg, pgc_error *err)
{
	int rc = ins(c, arg, err);
	return rc ? rc : PGC_TX_ROLLBACK;
}

static int sp_outer_keep(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	int rc = ins(c, "1", err);
	if (rc)
		return rc;
	pgc_error e2;
	if (pgc_savepoint(c, sp_insert_rollback, "2", &e2) != PGC_TX_ROLLBACK)
		return pgc__err(err, PGC_EINTERNAL, "inner rollback: %s", e2.message);
	if (pgc__tx_state_of(c)->savepoint_depth != 1)
		return pgc__err(err, PGC_EINTERNAL, "depth %d inside one level", pgc__tx_state_of(c)->savepoint_depth);
	/* a real error in a nested level: reported, the levels above go on */
	rc = pgc_savepoint(c, sp_insert_ok, "1", &e2);
	if (rc != PGC_ESQL || strcmp(e2.sqlstate, "23505") != 0)
		return pgc__err(err, PGC_EINTERNAL, "duplicate in savepoint: rc %d %s", rc, e2.sqlstate);
	if (pgc_savepoint(c, sp_insert_ok, "3", &e2) != PGC_OK)
		return pgc__err(err, PGC_EINTERNAL, "inner ok: %s", e2.message);
	return PGC_OK;
}

static int sp_outer_drop(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	int rc = ins(c, "4", err);
	if (rc)
		return rc;
	pgc_error e2;
	if (pgc_savepoint(c, sp_insert_ok, "5", &e2) != PGC_OK)
		return pgc__err(err, PGC_EINTERNAL, "inner: %s", e2.message);
	return PGC_TX_ROLLBACK;
}

static int sp_two_levels(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	int rc = pgc_savepoint(c, sp_outer_keep, NULL, err);
	if (rc != PGC_OK)
		return rc;
	rc = pgc_savepoint(c, sp_outer_drop, NULL, err);
	if (rc != PGC_TX_ROLLBACK)
		return rc < 0 ? rc : pgc__err(err, PGC_EINTERNAL, "outer drop returned %d", rc);
	return ins(c, "6", err);
}

static int sp_swallow(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	pgc_error ignored;
	if (pgc_exec(c, "SELECT no_such_column", &ignored) == PGC_OK)
		return pgc__err(err, PGC_EINTERNAL, "expected an error");
	(void)err;
	return PGC_OK;
}

static int sp_release_itself(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	char q[64];
	snprintf(q, sizeof q, "RELEASE SAVEPOINT pgcoord_sp_%d", pgc__tx_state_of(c)->savepoint_depth);
	return pgc_exec(c, q, err);
}

static int sp_misuse(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	pgc_error e2;
	/* a body that swallows its error is rolled back to the savepoint, and the caller told */
	if (pgc_savepoint(c, sp_swallow, NULL, &e2) != PGC_EUSAGE)
		return pgc__err(err, PGC_EINTERNAL, "swallowed error not reported");
	if (PQtransactionStatus(pgc_conn_pg(c)) != PQTRANS_INTRANS)
		return pgc__err(err, PGC_EINTERNAL, "transaction not usable after the swallowed error");
	/* a body that releases the savepoint itself: RELEASE fails loudly (3B001) */
	int rc = pgc_savepoint(c, sp_release_itself, NULL, err);
	if (rc != PGC_OK)
		return rc;
	return ins(c, "7", err);
}

static void tx__savepoint_nested(void)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.t (v text PRIMARY KEY)", S);
	pgc_error err;
	int rc = pgc_tx_run(c, NULL, sp_two_levels, NULL, &err);
	if (rc != PGC_OK)
		T_FAIL("rc %d: %s", rc, err.message);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.t", S), 3);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.t WHERE v IN ('1', '3', '6')", S), 3);
	T_ASSERT_INT_EQ(pgc__tx_state_of(c)->savepoint_depth, 0);
	rc = pgc_tx_run(c, NULL, sp_misuse, NULL, &err);
	if (rc != PGC_ESQL)
		T_FAIL("rc %d: %s", rc, err.message);
	T_ASSERT_STR_EQ(err.sqlstate, "3B001");
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.t WHERE v = '7'", S), 0);
	T_ASSERT_INT_EQ(pgc__tx_state_of(c)->savepoint_depth, 0);
	teardown(c);
}

static void tx__lock_rows_modes_and_names(void)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.\"Acct \"\"Q\"\"\" (\"Key Col\" int PRIMARY KEY, v int)", S);
	sql(c, "INSERT INTO %s.\"Acct \"\"Q\"\"\" SELECT g, 0 FROM generate_series(1, 5) g", S);
	char table[128];
	snprintf(table, sizeof table, "%s.Acct \"Q\"", S);
	pgc_conn *o = t_connect("pgcoord/test-tx-other");
	pgc_error err;
	sql(c, "BEGIN");
	int64_t ids[5] = { 5, 3, 3, 99, 1 };
	bool locked[5];
	T_ASSERT_INT_EQ(pgc_lock_rows(c, table, "Key Col", ids, 5, PGC_FOR_KEY_SHARE, PGC_ROWS_WAIT, locked, &err), PGC_OK);
	T_ASSERT(locked[0] && locked[1] && locked[2] && !locked[3] && locked[4]);

	/* FOR KEY SHARE lets others take FOR NO KEY UPDATE, not FOR UPDATE */
	int64_t three = 3;
	bool l1 = false;
	sql(o, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_rows(o, table, "Key Col", &three, 1, PGC_FOR_NO_KEY_UPDATE, PGC_ROWS_NOWAIT, &l1, &err), PGC_OK);
	T_ASSERT(l1);
	sql(o, "ROLLBACK");
	sql(o, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_rows(o, table, "Key Col", &three, 1, PGC_FOR_UPDATE, PGC_ROWS_NOWAIT, &l1, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "55P03");
	sql(o, "ROLLBACK");
	/* SKIP LOCKED returns what it could lock: 2 and 4 are free, 1 and 3 are not */
	sql(o, "BEGIN");
	int64_t four[4] = { 4, 3, 2, 1 };
	bool l4[4];
	T_ASSERT_INT_EQ(pgc_lock_rows(o, table, "Key Col", four, 4, PGC_FOR_UPDATE, PGC_ROWS_SKIP_LOCKED, l4, &err), PGC_OK);
	T_ASSERT(l4[0] && !l4[1] && l4[2] && !l4[3]);
	/* FOR SHARE: shared with other sharers */
	sql(o, "ROLLBACK");
	sql(c, "ROLLBACK");
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_rows(c, table, "Key Col", &three, 1, PGC_FOR_SHARE, PGC_ROWS_WAIT, NULL, &err), PGC_OK);
	sql(o, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_rows(o, table, "Key Col", &three, 1, PGC_FOR_SHARE, PGC_ROWS_NOWAIT, &l1, &err), PGC_OK);
	T_ASSERT(l1);
	T_ASSERT_INT_EQ(pgc_lock_rows(o, table, "Key Col", &three, 1, PGC_FOR_NO_KEY_UPDATE, PGC_ROWS_NOWAIT, &l1, &err), PGC_ESQL);
	sql(o, "ROLLBACK");
	sql(c, "ROLLBACK");

	/* names are quoted, never interpreted */
	sql(c, "BEGIN");
	char evil[128];
	snprintf(evil, sizeof evil, "%s.accounts; DROP TABLE x", S);
	T_ASSERT_INT_EQ(pgc_lock_rows(c, evil, "id", &three, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, NULL, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "42P01");
	sql(c, "ROLLBACK");
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_rows(c, table, "id) OR (true", &three, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, NULL, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "42703");
	sql(c, "ROLLBACK");
	/* large batches and negative keys */
	sql(c, "BEGIN");
	enum { BIG = 5000 };
	int64_t *big = malloc(BIG * sizeof *big);
	bool *bl = malloc(BIG * sizeof *bl);
	for (int i = 0; i < BIG; i++)
		big[i] = (i % 2 ? -1 : 1) * (int64_t)i * 1000003;
	big[7] = 2;
	T_ASSERT_INT_EQ(pgc_lock_rows(c, table, "Key Col", big, BIG, PGC_FOR_UPDATE, PGC_ROWS_WAIT, bl, &err), PGC_OK);
	int n = 0;
	for (int i = 0; i < BIG; i++)
		n += bl[i];
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT(bl[7]);
	free(big);
	free(bl);
	sql(c, "ROLLBACK");
	/* statements are prepared once per session and survive rolled-back transactions */
	T_ASSERT(pgc__stmt_count(c) >= 2);
	int before = pgc__stmt_count(c);
	for (int i = 0; i < 3; i++) {
		sql(c, "BEGIN");
		T_ASSERT_INT_EQ(pgc_lock_rows(c, table, "Key Col", &three, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, &l1, &err), PGC_OK);
		T_ASSERT(l1);
		sql(c, "ROLLBACK");
	}
	T_ASSERT_INT_EQ(pgc__stmt_count(c), before);
	/* deallocated behind the library's back: one failure, then prepared again */
	sql(c, "DEALLOCATE ALL");
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_rows(c, table, "Key Col", &three, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, &l1, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "26000");
	sql(c, "ROLLBACK");
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_rows(c, table, "Key Col", &three, 1, PGC_FOR_UPDATE, PGC_ROWS_WAIT, &l1, &err), PGC_OK);
	sql(c, "ROLLBACK");
	pgc_conn_close(o);
	teardown(c);
}

static void tx__lock_table(void)
{
	pgc_conn *c = setup();
	sql(c, "CREATE TABLE %s.\"daily totals\" (d date)", S);
	char table[128];
	snprintf(table, sizeof table, "%s.daily totals", S);
	pgc_conn *o = t_connect("pgcoord/test-tx-other");
	pgc_error err;
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_table(c, table, PGC_SHARE_ROW_EXCLUSIVE, true, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND relation = '%s.\"daily totals\"'::regclass AND mode = 'ShareRowExclusiveLock' AND granted", S), 1);
	sql(o, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_table(o, table, PGC_ROW_EXCLUSIVE, true, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "55P03");
	sql(o, "ROLLBACK");
	sql(o, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_table(o, table, PGC_ACCESS_SHARE, true, &err), PGC_OK);
	sql(o, "ROLLBACK");
	sql(c, "COMMIT");
	/* released with the transaction */
	sql(o, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_table(o, table, PGC_ACCESS_EXCLUSIVE, true, &err), PGC_OK);
	sql(o, "ROLLBACK");
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_lock_table(c, "no_such_table_here", PGC_SHARE, false, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "42P01");
	sql(c, "ROLLBACK");
	pgc_conn_close(o);
	teardown(c);
}

static int commits_itself_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	return pgc_exec(c, "COMMIT", err);
}

static int swallows_error_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg, (void)err;
	pgc_error ignored;
	if (pgc_exec(c, "SELECT 1/0", &ignored) == PGC_OK)
		return pgc__err(err, PGC_EINTERNAL, "expected an error");
	return PGC_OK;
}

static int odd_return_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)c, (void)arg, (void)err;
	return 5;
}

static int nested_run_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)arg;
	return pgc_tx_run(c, NULL, noop_fn, NULL, err);
}

static int silent_fail_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	(void)c, (void)arg, (void)err;
	return PGC_EBUSY;
}

static void tx__body_misbehaves(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_tx_run(c, NULL, commits_itself_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "ended the transaction itself");
	T_ASSERT_INT_EQ(pgc_tx_run(c, NULL, swallows_error_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "after a statement failed");
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(c)), PQTRANS_IDLE);
	T_ASSERT_INT_EQ(pgc_tx_run(c, NULL, odd_return_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(c)), PQTRANS_IDLE);
	T_ASSERT_INT_EQ(pgc_tx_run(c, NULL, nested_run_fn, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "already inside a transaction");
	T_ASSERT_INT_EQ(pgc_tx_run(c, NULL, silent_fail_fn, NULL, &err), PGC_EBUSY);
	T_ASSERT_CONTAINS(err.message, "without details");
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(c)), PQTRANS_IDLE);
	teardown(c);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "tx__usage", tx__usage },
		{ "tx__commit_rollback_and_settings", tx__commit_rollback_and_settings },
		{ "tx__deadlock_retried", tx__deadlock_retried },
		{ "tx__write_skew_serializable", tx__write_skew_serializable },
		{ "tx__transfer_ordered_no_deadlocks", tx__transfer_ordered_no_deadlocks },
		{ "tx__transfer_arrival_order_deadlocks", tx__transfer_arrival_order_deadlocks },
		{ "tx__terminate_during_statement_reconnects", tx__terminate_during_statement_reconnects },
		{ "tx__terminate_while_idle_retried_not_unknown", tx__terminate_while_idle_retried_not_unknown },
		{ "tx__reconnect_refused", tx__reconnect_refused },
		{ "tx__commit_unknown_not_retried", tx__commit_unknown_not_retried },
		{ "tx__commit_raises_40001_retried", tx__commit_raises_40001_retried },
		{ "tx__constraint_not_retried", tx__constraint_not_retried },
		{ "tx__retry_exhausted_and_hook", tx__retry_exhausted_and_hook },
		{ "tx__lock_timeout_retry_is_opt_in", tx__lock_timeout_retry_is_opt_in },
		{ "tx__savepoint_nowait_outer_commits", tx__savepoint_nowait_outer_commits },
		{ "tx__savepoint_nested", tx__savepoint_nested },
		{ "tx__lock_rows_modes_and_names", tx__lock_rows_modes_and_names },
		{ "tx__lock_table", tx__lock_table },
		{ "tx__body_misbehaves", tx__body_misbehaves },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
