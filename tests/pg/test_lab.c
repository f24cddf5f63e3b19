/* test_lab.c - the lab's experiments and the doctor's checks against a real server */
#include <libpq-fe.h>
#include <pthread.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "../t.h"

/* The five numbered result lines of the advisory-lock experiments, word for word. */
static const char *const numbered[5][2] = {
	{ "singleton", "1. five instances tried a singleton job, instances that ran it: 1" },
	{ "pool-trap", "2. lock taken=true, unlock from another connection=false, locks held after both"
	               " went back to the pool: 1" },
	{ "xact-rollback", "3. xact lock: holder=true, second caller while held=false, after rollback=true" },
	{ "stacked-unlock", "4. locked twice on one session: first unlock=true (locks still held: 1),"
	                    " second unlock=true" },
	{ "session-end", "5. leaked lock rows before the pool closed its idle connections: 1, after: 0" },
};

static long long scalar(pgc_conn *c, const char *sql, const char *param)
{
	const char *p[1] = { param };
	int rc;
	pgc_error err;
	PGresult *res = pgc__exec(c, sql, param ? 1 : 0, p, &rc, &err);
	if (res == NULL)
		T_FAIL("%s: %s", sql, err.message);
	long long v = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

/* Runs a script through the simple protocol, as psql does: nothing of it (no portal, no
 * snapshot) is left on the session but what the statements themselves keep. */
static void exec_ok(pgc_conn *c, const char *sql)
{
	pgc_error err;
	if (pgc__command(c, sql, &err) != PGC_OK)
		T_FAIL("%s: %s", sql, err.message);
}

static bool schema_exists(pgc_conn *c, const char *name)
{
	return scalar(c, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", name) == 1;
}

static void lab__catalogue(void)
{
	size_t n = 0;
	const pgc_lab_info *list = pgc_lab_list(&n);
	T_ASSERT(list != NULL);
	T_ASSERT(n >= 46);
	T_ASSERT(pgc_lab_list(NULL) == list);
	for (size_t i = 0; i < n; i++) {
		T_ASSERT(list[i].name && *list[i].name);
		T_ASSERT(list[i].description && *list[i].description);
		/* The claim is named in words: a manual section or a pattern, never a bare number. */
		T_ASSERT(list[i].reference && strlen(list[i].reference) > 10);
		T_ASSERT(list[i].reference[0] < '0' || list[i].reference[0] > '9');
		T_ASSERT_NOT_CONTAINS(list[i].reference, "\xc2\xa7");
		T_ASSERT(pgc_lab_find(list[i].name) == &list[i]);
		for (size_t j = 0; j < i; j++)
			if (strcmp(list[i].name, list[j].name) == 0)
				T_FAIL("experiment %s listed twice", list[i].name);
	}
	/* The five advisory-lock experiments with numbered result lines come first, in order. */
	for (int i = 0; i < 5; i++)
		T_ASSERT_STR_EQ(list[i].name, numbered[i][0]);
	T_ASSERT(pgc_lab_find("no-such-experiment") == NULL);
	T_ASSERT(pgc_lab_find(NULL) == NULL);
	T_ASSERT(pgc_lab_value_get(NULL, "x") == NULL);
}

static void lab__bad_arguments(void)
{
	pgc_lab_result r;
	pgc_error err;
	pgc_lab_options o = PGC_LAB_OPTIONS_INIT;
	T_ASSERT_INT_EQ(pgc_lab_run(NULL, NULL, NULL, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lab_run(NULL, "singleton", NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lab_run(NULL, "nope", NULL, &r, &err), PGC_ENOTFOUND);
	T_ASSERT_CONTAINS(err.message, "nope");
	o.lock_timeout_ms = 10;
	T_ASSERT_INT_EQ(pgc_lab_run(NULL, "singleton", &o, &r, &err), PGC_EUSAGE);
	o.lock_timeout_ms = 1000;
	o.key_base = -5;
	T_ASSERT_INT_EQ(pgc_lab_run(NULL, "singleton", &o, &r, &err), PGC_EUSAGE);
	/* An unreachable server: an error, not a FAIL, and the password stays hidden. */
	T_ASSERT_INT_EQ(pgc_lab_run("postgresql://u:sekrit@127.0.0.1:1/x?connect_timeout=3", "singleton",
	                            NULL, &r, &err), PGC_ECONNECT);
	T_ASSERT_NOT_CONTAINS(err.message, "sekrit");
	T_ASSERT_CONTAINS(err.message, "u:****@127.0.0.1:1");
}

static void lab__numbered_result_lines(void)
{
	const char *dsn = t_dsn();
	pgc_conn *c = t_connect("pgcoord/test-lab");
	for (int i = 0; i < 5; i++) {
		pgc_lab_result r;
		pgc_error err;
		T_ASSERT_INT_EQ(pgc_lab_run(dsn, numbered[i][0], NULL, &r, &err), PGC_OK);
		if (!r.passed)
			T_FAIL("%s failed: %s", numbered[i][0], r.observation);
		T_ASSERT_STR_EQ(r.observation, numbered[i][1]);
		T_ASSERT(r.info == pgc_lab_find(numbered[i][0]));
		T_ASSERT(!r.schema_kept);
		T_ASSERT(!schema_exists(c, r.schema));
	}
	pgc_conn_close(c);
}

static void lab__every_experiment_passes(void)
{
	const char *dsn = t_dsn();
	pgc_conn *c = t_connect("pgcoord/test-lab");
	size_t n;
	const pgc_lab_info *list = pgc_lab_list(&n);
	pgc_lab_options o = PGC_LAB_OPTIONS_INIT;
	char app[64];
	snprintf(app, sizeof app, "pgcoord/test-lab-%d", (int)getpid());
	o.application_name = app;
	for (size_t i = 0; i < n; i++) {
		pgc_lab_result r;
		pgc_error err;
		int rc = pgc_lab_run(dsn, list[i].name, &o, &r, &err);
		if (rc != PGC_OK)
			T_FAIL("%s: %s", list[i].name, err.message);
		if (!r.passed)
			T_FAIL("%s failed: %s", list[i].name, r.observation);
		T_ASSERT(r.observation[0] != '\0');
		T_ASSERT(strchr(r.observation, '\n') == NULL);
		if (r.nvalues < 1)
			T_FAIL("%s recorded no values", list[i].name);
		for (int v = 0; v < r.nvalues; v++)
			T_ASSERT(pgc_lab_value_get(&r, r.values[v].name) != NULL);
		T_ASSERT(strncmp(r.schema, "pgc_lab_", 8) == 0);
		if (schema_exists(c, r.schema))
			T_FAIL("%s left its schema %s", list[i].name, r.schema);
	}
	/* No session of ours outlives its experiment (a backend exits a moment after its client
	 * hangs up, so allow it a bounded moment). */
	char like[80];
	snprintf(like, sizeof like, "%s/%%", app);
	long long left = -1;
	for (int i = 0; i < 500 && left != 0; i++) {
		left = scalar(c, "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1", like);
		if (left != 0)
			usleep(10000);
	}
	T_ASSERT_INT_EQ(left, 0);
	pgc_conn_close(c);
}

static void lab__keep_leaves_schema(void)
{
	pgc_conn *c = t_connect("pgcoord/test-lab");
	pgc_lab_options o = PGC_LAB_OPTIONS_INIT;
	o.keep = true;
	pgc_lab_result r;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lab_run(t_dsn(), "oversell", &o, &r, &err), PGC_OK);
	T_ASSERT(r.passed);
	T_ASSERT(r.schema_kept);
	T_ASSERT(schema_exists(c, r.schema));
	char sql[128];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.products", r.schema);
	T_ASSERT_INT_EQ(scalar(c, sql, NULL), 1);
	snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", r.schema);
	exec_ok(c, sql);
	pgc_conn_close(c);
}

/* An experiment whose lock is held elsewhere fails within its timeout, with a message. */
static void lab__lock_held_elsewhere_fails_in_time(void)
{
	pgc_conn *holder = t_connect("pgcoord/test-lab-holder");
	int64_t base = ((int64_t)getpid() << 32) + 5000;
	char key[32];
	snprintf(key, sizeof key, "%lld", (long long)(base + 3));
	T_ASSERT_INT_EQ(scalar(holder, "SELECT count(*) FROM (SELECT pg_advisory_lock($1::bigint)) s", key), 1);
	pgc_lab_options o = PGC_LAB_OPTIONS_INIT;
	o.key_base = base;
	o.lock_timeout_ms = 300;
	pgc_lab_result r;
	pgc_error err;
	int64_t t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_lab_run(t_dsn(), "stacked-unlock", &o, &r, &err), PGC_OK);
	int64_t took = pgc__now_ms() - t0;
	T_ASSERT(!r.passed);
	T_ASSERT_CONTAINS(r.observation, "lock timeout");
	T_ASSERT_CONTAINS(r.observation, "55P03");
	T_ASSERT(took < 30000); /* a generous bound: it must end, not be fast */
	/* The lab left nothing behind: its sessions are gone, our lock is still ours. */
	T_ASSERT_INT_EQ(scalar(holder, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
	                               " AND pid = pg_backend_pid()", NULL), 1);
	T_ASSERT(!schema_exists(holder, r.schema));
	pgc_conn_close(holder);
}

static void *run_singleton(void *arg)
{
	pgc_lab_result *r = arg;
	pgc_error err;
	if (pgc_lab_run(t_dsn(), "singleton", NULL, r, &err) != PGC_OK)
		snprintf(r->observation, sizeof r->observation, "error: %s", err.message);
	return NULL;
}

/* Two labs at once on one server do not see each other's keys. */
static void lab__concurrent_runs_do_not_collide(void)
{
	pgc_lab_result r[3];
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		T_ASSERT_INT_EQ(pthread_create(&t[i], NULL, run_singleton, &r[i]), 0);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 3; i++)
		if (!r[i].passed)
			T_FAIL("run %d: %s", i, r[i].observation);
}

/* Runs one experiment on the test server; it must PASS. */
static void run_passing(const char *name, const pgc_lab_options *o, pgc_lab_result *r)
{
	pgc_error err;
	int rc = pgc_lab_run(t_dsn(), name, o, r, &err);
	if (rc != PGC_OK)
		T_FAIL("%s: %s", name, err.message);
	if (!r->passed)
		T_FAIL("%s failed: %s", name, r->observation);
}

static const char *value(const pgc_lab_result *r, const char *name)
{
	const pgc_lab_value *v = pgc_lab_value_get(r, name);
	if (v == NULL)
		T_FAIL("%s: no value %s", r->info->name, name);
	return v->text;
}

static long long ivalue(const pgc_lab_result *r, const char *name)
{
	return atoll(value(r, name));
}

static void lab__write_skew(void)
{
	pgc_lab_result r;
	run_passing("write-skew", NULL, &r);
	T_ASSERT_STR_EQ(value(&r, "read_committed_both_committed"), "true");
	T_ASSERT_INT_EQ(ivalue(&r, "read_committed_on_call_after"), 0);
	T_ASSERT_INT_EQ(ivalue(&r, "serialization_failures"), 1);
	T_ASSERT(strcmp(value(&r, "serializable_a_commit"), "40001") == 0 ||
	         strcmp(value(&r, "serializable_b_commit"), "40001") == 0);
	T_ASSERT(ivalue(&r, "siread_locks_a") > 0 && ivalue(&r, "siread_locks_b") > 0);
	T_ASSERT_INT_EQ(ivalue(&r, "sessions_waiting_or_blocked"), 0);
	T_ASSERT_STR_EQ(value(&r, "any_update_waited"), "false");
	T_ASSERT_STR_EQ(value(&r, "retry_commit"), "ok");
	T_ASSERT_INT_EQ(ivalue(&r, "retry_saw_on_call"), 1);
	T_ASSERT_STR_EQ(value(&r, "retry_went_off"), "false");
	T_ASSERT_INT_EQ(ivalue(&r, "serializable_on_call_after"), 1);
}

static void lab__optimistic_version(void)
{
	pgc_lab_result r;
	run_passing("optimistic-version", NULL, &r);
	T_ASSERT_INT_EQ(ivalue(&r, "first_writer_rows"), 1);
	T_ASSERT_INT_EQ(ivalue(&r, "second_writer_rows"), 0);
	T_ASSERT_STR_EQ(value(&r, "second_writer_waited"), "true");
	T_ASSERT_STR_EQ(value(&r, "final_body"), "written by A");
	T_ASSERT_INT_EQ(ivalue(&r, "final_version"), 2);
}

static void lab__hot_upsert(void)
{
	pgc_lab_result r;
	run_passing("hot-upsert", NULL, &r);
	T_ASSERT_INT_EQ(ivalue(&r, "sessions"), 8);
	T_ASSERT(ivalue(&r, "hot_upserts") > 0);
	T_ASSERT_INT_EQ(ivalue(&r, "hot_n"), ivalue(&r, "hot_upserts"));
	T_ASSERT_INT_EQ(ivalue(&r, "distinct_n"), ivalue(&r, "distinct_upserts"));
	T_ASSERT(ivalue(&r, "hot_lock_waits_seen") > 0);
	T_ASSERT_INT_EQ(ivalue(&r, "distinct_lock_waits_seen"), 0);
	/* The ratio is reported, never judged: the machine may be busy. */
	T_ASSERT(strchr(value(&r, "distinct_to_hot_ratio"), '.') != NULL);
	T_ASSERT(r.elapsed_ms < 30000);
}

static void lab__nowait_table_lock(void)
{
	pgc_lab_result r;
	run_passing("nowait-table-lock", NULL, &r);
	long long t = ivalue(&r, "lock_timeout_ms");
	/* The row-lock clauses wait for the table lock until lock_timeout ends them. */
	T_ASSERT_STR_EQ(value(&r, "for_update_nowait_sqlstate"), "55P03");
	T_ASSERT_CONTAINS(value(&r, "for_update_nowait_message"), "lock timeout");
	T_ASSERT_STR_EQ(value(&r, "for_update_nowait_waited"), "true");
	T_ASSERT(ivalue(&r, "for_update_nowait_ms") >= t);
	T_ASSERT_STR_EQ(value(&r, "skip_locked_sqlstate"), "55P03");
	T_ASSERT_CONTAINS(value(&r, "skip_locked_message"), "lock timeout");
	T_ASSERT(ivalue(&r, "skip_locked_ms") >= t);
	/* LOCK TABLE ... NOWAIT is refused by NOWAIT itself, without a wait. */
	T_ASSERT_STR_EQ(value(&r, "lock_table_nowait_sqlstate"), "55P03");
	T_ASSERT_CONTAINS(value(&r, "lock_table_nowait_message"), "could not obtain lock");
	T_ASSERT_STR_EQ(value(&r, "lock_table_nowait_waited"), "false");
}

static void lab__deadlock_timeout(void)
{
	pgc_lab_result r;
	run_passing("deadlock-timeout", NULL, &r);
	T_ASSERT_STR_EQ(value(&r, "may_set_deadlock_timeout"), "true");
	T_ASSERT_INT_EQ(ivalue(&r, "deadlock_timeout_1_ms"), 200);
	T_ASSERT_INT_EQ(ivalue(&r, "deadlock_timeout_2_ms"), 1000);
	T_ASSERT(ivalue(&r, "victim_1_after_ms") >= 200);
	T_ASSERT(ivalue(&r, "victim_2_after_ms") >= 1000);
	T_ASSERT_STR_EQ(value(&r, "victim_1"), "B");
	T_ASSERT_STR_EQ(value(&r, "victim_2"), "B");
}

static void lab__idle_in_tx_timeout(void)
{
	pgc_lab_result r;
	run_passing("idle-in-tx-timeout", NULL, &r);
	T_ASSERT_STR_EQ(value(&r, "waiter_waited"), "true");
	T_ASSERT_STR_EQ(value(&r, "waiter_sqlstate"), "ok");
	T_ASSERT(ivalue(&r, "waiter_got_row_after_ms") >= ivalue(&r, "idle_in_transaction_session_timeout_ms"));
	T_ASSERT_INT_EQ(ivalue(&r, "holder_backend_rows"), 0);
	const char *next = value(&r, "holder_next_statement");
	T_ASSERT(strcmp(next, "conn") == 0 || strcmp(next, "25P03") == 0);
}

/* On the shared test server advisory-exhaust stops short: by default, and even when allowed
 * while another client (this test's own session) is connected. The real exhaustion runs on
 * a scratch server of its own (tests/cli/lab_exhaust.sh). */
static void lab__advisory_exhaust_bounded(void)
{
	pgc_conn *c = t_connect("pgcoord/test-lab");
	pgc_lab_result r;
	run_passing("advisory-exhaust", NULL, &r);
	T_ASSERT_STR_EQ(value(&r, "exhausted"), "false");
	T_ASSERT_CONTAINS(value(&r, "not_exhausted_because"), "allow_exhaust");
	T_ASSERT_INT_EQ(ivalue(&r, "advisory_locks_held"), 150);
	T_ASSERT_INT_EQ(ivalue(&r, "advisory_locks_after_release"), 0);
	T_ASSERT_INT_EQ(ivalue(&r, "lock_table_slots"),
	                ivalue(&r, "max_locks_per_transaction") *
	                        (ivalue(&r, "max_connections") + ivalue(&r, "max_prepared_transactions")));
	T_ASSERT(ivalue(&r, "rows_locked") >= 10000);
	T_ASSERT_INT_EQ(ivalue(&r, "row_lock_tuple_rows"), 0);
	T_ASSERT(pgc_lab_value_get(&r, "sqlstate") == NULL);
	pgc_lab_options o = PGC_LAB_OPTIONS_INIT;
	char app[64], like[80];
	snprintf(app, sizeof app, "pgcoord/test-exhaust-%d", (int)getpid());
	snprintf(like, sizeof like, "%s/%%", app);
	o.application_name = app;
	o.allow_exhaust = true;
	run_passing("advisory-exhaust", &o, &r);
	T_ASSERT_STR_EQ(value(&r, "exhausted"), "false");
	T_ASSERT_STR_EQ(value(&r, "not_exhausted_because"), "other client sessions are connected");
	T_ASSERT(ivalue(&r, "other_client_sessions") >= 1);
	T_ASSERT_INT_EQ(ivalue(&r, "advisory_locks_held"), 150);
	/* The server's lock table is as it was: nothing of ours is left in it. */
	T_ASSERT_INT_EQ(scalar(c, "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
	                          " WHERE l.locktype = 'advisory' AND a.application_name LIKE $1", like), 0);
	pgc_conn_close(c);
}

/* ---- doctor ---- */

/* conninfo for the test server with another user (the test server trusts local users). */
static char *dsn_as(const char *user)
{
	char *errmsg = NULL;
	PQconninfoOption *opts = PQconninfoParse(t_dsn(), &errmsg);
	if (opts == NULL)
		T_FAIL("cannot parse the test DSN: %s", errmsg ? errmsg : "?");
	size_t cap = 2048, len = 0;
	char *s = calloc(1, cap);
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		const char *v = strcmp(o->keyword, "user") == 0 ? user : o->val;
		if (v == NULL || strcmp(o->keyword, "password") == 0)
			continue;
		len += snprintf(s + len, cap - len, "%s='", o->keyword);
		for (const char *p = v; *p && len + 4 < cap; p++) {
			if (*p == '\'' || *p == '\\')
				s[len++] = '\\';
			s[len++] = *p;
		}
		len += snprintf(s + len, cap - len, "' ");
	}
	PQconninfoFree(opts);
	return s;
}

/* A role that may not SET deadlock_timeout gets a result that says so, not an obscure error. */
static void lab__deadlock_timeout_needs_privilege(void)
{
	pgc_conn *admin = t_connect("pgcoord/test-lab");
	char role[64], sql[256];
	snprintf(role, sizeof role, "pgc_lab_plain_%d", (int)getpid());
	snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS %s; CREATE ROLE %s LOGIN; DO $$ BEGIN EXECUTE"
	         " format('GRANT CREATE ON DATABASE %%I TO %s', current_database()); END $$", role,
	         role, role);
	exec_ok(admin, sql);
	char *dsn = dsn_as(role);
	pgc_lab_result r;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lab_run(dsn, "deadlock-timeout", NULL, &r, &err), PGC_OK);
	T_ASSERT(!r.passed);
	T_ASSERT_CONTAINS(r.observation, "not checked");
	T_ASSERT_CONTAINS(r.observation, "may not SET deadlock_timeout");
	T_ASSERT_CONTAINS(r.observation, "42501");
	T_ASSERT_STR_EQ(pgc_lab_value_get(&r, "may_set_deadlock_timeout")->text, "false");
	T_ASSERT(!r.schema_kept);
	T_ASSERT(!schema_exists(admin, r.schema));
	free(dsn);
	for (int i = 0; i < 500 && scalar(admin, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role) != 0; i++)
		usleep(10000);
	snprintf(sql, sizeof sql, "DO $$ BEGIN EXECUTE format('REVOKE CREATE ON DATABASE %%I FROM %s',"
	         " current_database()); END $$; DROP ROLE %s", role, role);
	exec_ok(admin, sql);
	pgc_conn_close(admin);
}

static const pgc_doctor_finding *finding(const pgc_doctor_report *r, const char *check)
{
	for (int i = 0; i < r->count; i++)
		if (strcmp(r->findings[i].check, check) == 0)
			return &r->findings[i];
	T_FAIL("no finding %s", check);
	return NULL;
}

static void doctor_as(const char *dsn, const char *schema, pgc_doctor_report *rep)
{
	pgc_conn *c = NULL;
	pgc_error err;
	if (pgc_connect(dsn, NULL, &c, &err) != PGC_OK)
		T_FAIL("connect as the test role: %s", err.message);
	pgc_doctor_options o = PGC_DOCTOR_OPTIONS_INIT;
	o.schema = schema;
	if (pgc_doctor_run(c, &o, rep, &err) != PGC_OK)
		T_FAIL("doctor: %s", err.message);
	pgc_conn_close(c);
}

static void doctor__role_timeouts(void)
{
	pgc_conn *admin = t_connect("pgcoord/test-doctor");
	char role[64], schema[64], sql[256];
	snprintf(role, sizeof role, "pgc_doctor_%d", (int)getpid());
	snprintf(schema, sizeof schema, "pgc_doctor_none_%d", (int)getpid());
	snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS %s; CREATE ROLE %s LOGIN", role, role);
	exec_ok(admin, sql);
	char *dsn = dsn_as(role);

	pgc_doctor_report rep;
	doctor_as(dsn, schema, &rep);
	const char *checks[] = { "lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout" };
	for (int i = 0; i < 3; i++) {
		const pgc_doctor_finding *f = finding(&rep, checks[i]);
		T_ASSERT_INT_EQ(f->severity, PGC_DOCTOR_WARNING);
		T_ASSERT_STR_EQ(f->value, "0");
		T_ASSERT_CONTAINS(f->fix, "ALTER ROLE");
		T_ASSERT_CONTAINS(f->fix, role);
	}
	T_ASSERT_INT_EQ(finding(&rep, "pooler")->severity, PGC_DOCTOR_OK);
	T_ASSERT_INT_EQ(finding(&rep, "schema")->severity, PGC_DOCTOR_INFO);
	T_ASSERT(rep.worst >= PGC_DOCTOR_WARNING);

	snprintf(sql, sizeof sql,
	         "ALTER ROLE %s SET lock_timeout = '5s'; ALTER ROLE %s SET statement_timeout = '1min';"
	         " ALTER ROLE %s SET idle_in_transaction_session_timeout = '1min';"
	         " ALTER ROLE %s SET log_lock_waits = on", role, role, role, role);
	exec_ok(admin, sql);
	doctor_as(dsn, schema, &rep);
	for (int i = 0; i < 3; i++) {
		const pgc_doctor_finding *f = finding(&rep, checks[i]);
		T_ASSERT_INT_EQ(f->severity, PGC_DOCTOR_OK);
		T_ASSERT_CONTAINS(f->message, "source: user");
	}
	T_ASSERT_STR_EQ(finding(&rep, "lock_timeout")->value, "5s");
	T_ASSERT_INT_EQ(finding(&rep, "log_lock_waits")->severity, PGC_DOCTOR_OK);
	/* Nothing left to fix for this role: the schema being absent is only information. */
	T_ASSERT_INT_EQ(rep.worst, PGC_DOCTOR_INFO);

	/* A session of the role idle in transaction now is reported, with its pid. */
	pgc_conn *idle = NULL;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_connect(dsn, NULL, &idle, &err), PGC_OK);
	exec_ok(idle, "BEGIN; SELECT 1");
	doctor_as(dsn, schema, &rep);
	const pgc_doctor_finding *f = finding(&rep, "idle_in_transaction");
	T_ASSERT_INT_EQ(f->severity, PGC_DOCTOR_WARNING);
	T_ASSERT_STR_EQ(f->value, "1");
	char pid[32];
	snprintf(pid, sizeof pid, "pid %d", pgc_conn_backend_pid(idle));
	T_ASSERT_CONTAINS(f->message, pid);
	pgc_conn_close(idle);

	free(dsn);
	snprintf(sql, sizeof sql, "DROP ROLE %s", role);
	exec_ok(admin, sql);
	pgc_conn_close(admin);
}

/* A session of dsn's that opens a transaction the way pgcoord run holds a lock through a
 * transaction-mode pooler (named locally, an advisory lock taken in it), then runs extra
 * (may be NULL) in it, and stays idle in it. */
static pgc_conn *lock_holder(const char *dsn, const char *begin, int64_t key, const char *extra)
{
	pgc_conn *c = NULL;
	pgc_error err;
	if (pgc_connect(dsn, NULL, &c, &err) != PGC_OK)
		T_FAIL("connect as the test role: %s", err.message);
	char sql[512];
	snprintf(sql, sizeof sql,
	         "%s; SELECT set_config('application_name', 'pgcoord/lock-holder', true);"
	         " SELECT pg_advisory_xact_lock(%lld)%s%s", begin, (long long)key, extra ? "; " : "",
	         extra ? extra : "");
	exec_ok(c, sql);
	return c;
}

/* pgcoord's own lock holders are idle in transaction by design and hold no snapshot: counted
 * apart, not warned about. One that holds a snapshot, a relation lock or an xid is a problem
 * like any other idle transaction. */
static void doctor__lock_holders(void)
{
	pgc_conn *admin = t_connect("pgcoord/test-doctor");
	char role[64], none[64], schema[64], sql[512];
	int pid = (int)getpid();
	snprintf(role, sizeof role, "pgc_doctor_holder_%d", pid);
	snprintf(none, sizeof none, "pgc_doctor_none_%d", pid);
	snprintf(schema, sizeof schema, "pgc_doctor_holders_%d", pid);
	snprintf(sql, sizeof sql,
	         "DROP ROLE IF EXISTS %s; CREATE ROLE %s LOGIN; CREATE SCHEMA %s;"
	         " CREATE TABLE %s.t (id int); INSERT INTO %s.t VALUES (1);"
	         " GRANT USAGE ON SCHEMA %s TO %s; GRANT SELECT, UPDATE ON %s.t TO %s",
	         role, role, schema, schema, schema, schema, role, schema, role);
	exec_ok(admin, sql);
	char *dsn = dsn_as(role);
	int64_t key = ((int64_t)pid << 32) + 7001;

	pgc_conn *holder = lock_holder(dsn, "BEGIN", key, NULL);
	pgc_doctor_report rep;
	doctor_as(dsn, none, &rep);
	const pgc_doctor_finding *f = finding(&rep, "idle_in_transaction");
	T_ASSERT_INT_EQ(f->severity, PGC_DOCTOR_INFO);
	T_ASSERT_STR_EQ(f->value, "0");
	T_ASSERT_CONTAINS(f->message,
	                  "1 pgcoord lock holder(s) idle in transaction by design; they hold no snapshot");
	T_ASSERT_CONTAINS(f->message, "no other session is idle in transaction");

	/* The same name holding a snapshot, a relation lock or a row lock (an xid) is a problem,
	 * and so is any other idle transaction. */
	pgc_conn *snapshot = lock_holder(dsn, "BEGIN ISOLATION LEVEL REPEATABLE READ", key + 1, "SELECT 1");
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.t", schema);
	pgc_conn *relation = lock_holder(dsn, "BEGIN", key + 2, sql);
	snprintf(sql, sizeof sql, "SELECT id FROM %s.t FOR UPDATE", schema);
	pgc_conn *row = lock_holder(dsn, "BEGIN", key + 3, sql);
	pgc_conn *plain = NULL;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_connect(dsn, NULL, &plain, &err), PGC_OK);
	exec_ok(plain, "BEGIN; SELECT 1");
	doctor_as(dsn, none, &rep);
	f = finding(&rep, "idle_in_transaction");
	T_ASSERT_INT_EQ(f->severity, PGC_DOCTOR_WARNING);
	T_ASSERT_STR_EQ(f->value, "4");
	T_ASSERT_CONTAINS(f->message, "4 session(s) idle in transaction now");
	T_ASSERT_CONTAINS(f->message, "3 of them named pgcoord/lock-holder but holding an xid, a snapshot or a relation lock");
	T_ASSERT_CONTAINS(f->message,
	                  "1 pgcoord lock holder(s) idle in transaction by design; they hold no snapshot");
	char oldest[32];
	snprintf(oldest, sizeof oldest, "pid %d", pgc_conn_backend_pid(snapshot));
	T_ASSERT_CONTAINS(f->message, oldest);
	T_ASSERT(rep.worst >= PGC_DOCTOR_WARNING);

	pgc_conn_close(plain);
	pgc_conn_close(row);
	pgc_conn_close(relation);
	pgc_conn_close(snapshot);
	pgc_conn_close(holder);
	free(dsn);
	/* The backends end a moment after their clients hang up; DROP ROLE waits for nothing. */
	for (int i = 0; i < 500 && scalar(admin, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role) != 0; i++)
		usleep(10000);
	snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE; DROP ROLE %s", schema, role);
	exec_ok(admin, sql);
	pgc_conn_close(admin);
}

static void doctor__bad_arguments(void)
{
	pgc_doctor_report rep;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_doctor_run(NULL, NULL, &rep, &err), PGC_EUSAGE);
	pgc_conn *c = t_connect("pgcoord/test-doctor");
	T_ASSERT_INT_EQ(pgc_doctor_run(c, NULL, NULL, &err), PGC_EUSAGE);
	pgc_doctor_options o = PGC_DOCTOR_OPTIONS_INIT;
	o.schema = "";
	T_ASSERT_INT_EQ(pgc_doctor_run(c, &o, &rep, &err), PGC_EUSAGE);
	o.schema = NULL;
	o.pooler_wait_ms = 1;
	T_ASSERT_INT_EQ(pgc_doctor_run(c, &o, &rep, &err), PGC_EUSAGE);
	o.pooler_wait_ms = 2000;
	o.advisory_age_ms = 999;
	T_ASSERT_INT_EQ(pgc_doctor_run(c, &o, &rep, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "advisory_age_ms");
	exec_ok(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_doctor_run(c, NULL, &rep, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "inside a transaction");
	exec_ok(c, "ROLLBACK");
	/* And a normal run on the superuser's connection works and names every check once. */
	T_ASSERT_INT_EQ(pgc_doctor_run(c, NULL, &rep, &err), PGC_OK);
	T_ASSERT_INT_EQ(rep.count, 18);
	T_ASSERT_STR_EQ(rep.findings[0].check, "server");
	T_ASSERT_STR_EQ(pgc_doctor_severity_name(PGC_DOCTOR_ERROR), "error");
	T_ASSERT_STR_EQ(pgc_doctor_severity_name((pgc_doctor_severity)42), "unknown");
	pgc_conn_close(c);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "lab__catalogue", lab__catalogue },
		{ "lab__bad_arguments", lab__bad_arguments },
		{ "lab__numbered_result_lines", lab__numbered_result_lines },
		{ "lab__every_experiment_passes", lab__every_experiment_passes },
		{ "lab__keep_leaves_schema", lab__keep_leaves_schema },
		{ "lab__lock_held_elsewhere_fails_in_time", lab__lock_held_elsewhere_fails_in_time },
		{ "lab__concurrent_runs_do_not_collide", lab__concurrent_runs_do_not_collide },
		{ "lab__write_skew", lab__write_skew },
		{ "lab__optimistic_version", lab__optimistic_version },
		{ "lab__hot_upsert", lab__hot_upsert },
		{ "lab__nowait_table_lock", lab__nowait_table_lock },
		{ "lab__deadlock_timeout", lab__deadlock_timeout },
		{ "lab__deadlock_timeout_needs_privilege", lab__deadlock_timeout_needs_privilege },
		{ "lab__idle_in_tx_timeout", lab__idle_in_tx_timeout },
		{ "lab__advisory_exhaust_bounded", lab__advisory_exhaust_bounded },
		{ "doctor__role_timeouts", doctor__role_timeouts },
		{ "doctor__lock_holders", doctor__lock_holders },
		{ "doctor__bad_arguments", doctor__bad_arguments },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
