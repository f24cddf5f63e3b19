/* test_security.c - the least-privilege worker role, and hostile names and payloads as data */
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "../t.h"
#include "pgt.h"

static char schema[64];
static char role[64];
static char canary[64];

/* The test DSN with its user replaced by user, as a keyword/value string. */
static char *dsn_as(const char *user)
{
	char *msg = NULL;
	PQconninfoOption *opts = PQconninfoParse(t_dsn(), &msg);
	if (opts == NULL)
		T_FAIL("cannot parse the test DSN: %s", msg ? msg : "out of memory");
	size_t cap = 4096, len = 0;
	char *out = malloc(cap);
	T_ASSERT(out != NULL);
	out[0] = '\0';
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		const char *v = strcmp(o->keyword, "user") == 0 ? user : o->val;
		if (v == NULL)
			continue;
		len += (size_t)snprintf(out + len, cap - len, "%s='", o->keyword);
		for (const char *p = v; *p && len + 4 < cap; p++) {
			if (*p == '\'' || *p == '\\')
				out[len++] = '\\';
			out[len++] = *p;
		}
		len += (size_t)snprintf(out + len, cap - len, "' ");
		T_ASSERT(len + 8 < cap);
	}
	PQconninfoFree(opts);
	return out;
}

static pgc_conn *connect_as(const char *user)
{
	char *dsn = dsn_as(user);
	pgc_conn_options co = PGC_CONN_OPTIONS_INIT;
	co.application_name = "pgcoord/test-security";
	pgc_conn *c = NULL;
	pgc_error err;
	if (pgc_connect(dsn, &co, &c, &err) != PGC_OK)
		T_FAIL("connect as %s: %s", user, err.message);
	free(dsn);
	return c;
}

/* A fresh schema, a canary table in public and a worker role with LOGIN, per test process. */
static pgc_conn *setup(void)
{
	snprintf(schema, sizeof schema, "pgc_sec_%d", (int)getpid());
	snprintf(role, sizeof role, "pgc_sec_worker_%d", (int)getpid());
	snprintf(canary, sizeof canary, "pgc_sec_canary_%d", (int)getpid());
	pgc_conn *c = t_connect("pgcoord/test-security");
	sql(c, "SET client_min_messages = warning");
	sql(c, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
	sql(c, "DROP TABLE IF EXISTS public.%s", canary);
	sql(c, "DROP ROLE IF EXISTS %s", role);
	sql(c, "CREATE TABLE public.%s (secret text)", canary);
	sql(c, "INSERT INTO public.%s VALUES ('canary')", canary);
	pgc_error err;
	if (pgc_schema_init(c, schema, NULL, NULL, &err) != PGC_OK)
		T_FAIL("init: %s", err.message);
	return c;
}

static void teardown(pgc_conn *c)
{
	pgc_error err;
	char sql[256];
	snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
	(void)!pgc_exec(c, sql, &err);
	snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS public.%s", canary);
	(void)!pgc_exec(c, sql, &err);
	snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS %s", role);
	(void)!pgc_exec(c, sql, &err);
	pgc_conn_close(c);
}

static void grant(pgc_conn *c, bool login, bool want_created)
{
	pgc_worker_role_options ro = PGC_WORKER_ROLE_OPTIONS_INIT;
	ro.login = login;
	bool created = !want_created;
	pgc_error err;
	if (pgc_schema_grant_worker(c, schema, role, &ro, &created, &err) != PGC_OK)
		T_FAIL("grant: %s", err.message);
	T_ASSERT(created == want_created);
}

static pgc_queue *open_queue(pgc_conn *c)
{
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	pgc_queue *q;
	pgc_error err;
	if (pgc_queue_open(c, &qo, &q, &err) != PGC_OK)
		T_FAIL("queue open: %s", err.message);
	return q;
}

static atomic_int handled;
static atomic_int log_problems;

static void handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)arg;
	if (strstr(job->payload, "fail") != NULL) {
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "failed on purpose");
	}
	atomic_fetch_add(&handled, 1);
}

static void on_log(pgc_log_level level, const char *msg, void *arg)
{
	(void)arg;
	if (level >= PGC_LOG_WARN && (strstr(msg, "permission") || strstr(msg, "42501"))) {
		fprintf(stderr, "worker: %s\n", msg);
		atomic_fetch_add(&log_problems, 1);
	}
}

/* The role can do a worker's whole job through the library: claim, heartbeat, complete, fail
 * with a retry and to the dead letter, retry later, release, reap an expired lease, and run a
 * pgc_worker with LISTEN wake-ups and registration, without a single warning. */
static void security__worker_role_can_work(void)
{
	pgc_conn *owner = setup();
	grant(owner, true, true);
	grant(owner, true, false); /* again: no error, nothing created */
	pgc_queue *oq = open_queue(owner);
	pgc_error err;
	pgc_job_options jo = PGC_JOB_OPTIONS_INIT;
	jo.max_attempts = 2;
	for (int i = 0; i < 5; i++) {
		char p[32];
		snprintf(p, sizeof p, "{\"n\":%d}", i);
		if (pgc_queue_enqueue(oq, "sec", p, &jo, NULL, &err) != PGC_OK)
			T_FAIL("enqueue: %s", err.message);
	}

	pgc_conn *w = connect_as(role);
	pgc_queue *wq = open_queue(w);
	pgc_job *jobs;
	size_t n;
	if (pgc_queue_claim(wq, "sec", 5, 60000, "sec-test", &jobs, &n, &err) != PGC_OK)
		T_FAIL("claim as the worker role: %s (%s)", err.message, err.sqlstate);
	T_ASSERT_INT_EQ((int)n, 5);
	int64_t ids[5], toks[5];
	for (size_t i = 0; i < n; i++) {
		ids[i] = jobs[i].id;
		toks[i] = jobs[i].token;
	}
	bool lost[5];
	if (pgc_queue_heartbeat(wq, n, ids, toks, 60000, lost, &err) != PGC_OK)
		T_FAIL("heartbeat: %s", err.message);
	for (size_t i = 0; i < n; i++)
		T_ASSERT(!lost[i]);
	if (pgc_queue_complete(wq, ids[0], toks[0], &err) != PGC_OK)
		T_FAIL("complete: %s", err.message);
	pgc_backoff bo = { 1, 1 };
	bool dead = true;
	if (pgc_queue_fail(wq, ids[1], toks[1], "boom", &bo, &dead, &err) != PGC_OK)
		T_FAIL("fail: %s", err.message);
	T_ASSERT(!dead); /* retried: attempt 1 of 2 */
	if (pgc_queue_retry_later(wq, ids[2], toks[2], 0, &err) != PGC_OK)
		T_FAIL("retry later: %s", err.message);
	if (pgc_queue_release(wq, 1, &ids[3], &toks[3], false, &err) != PGC_OK)
		T_FAIL("release: %s", err.message);
	bool stale[1] = { true };
	size_t done = 0;
	if (pgc_queue_complete_many(wq, 1, &ids[4], &toks[4], stale, &done, &err) != PGC_OK)
		T_FAIL("complete many: %s", err.message);
	T_ASSERT(!stale[0] && done == 1);
	pgc_queue_jobs_free(jobs, n);

	/* The failed job again, to the dead letter this time. */
	int64_t fid = ids[1];
	for (int tries = 0;; tries++) {
		if (pgc_queue_claim(wq, "sec", 5, 60000, "sec-test", &jobs, &n, &err) != PGC_OK)
			T_FAIL("claim again: %s", err.message);
		bool found = false;
		for (size_t i = 0; i < n; i++) {
			if (jobs[i].id == fid) {
				found = true;
				if (pgc_queue_fail(wq, fid, jobs[i].token, "boom again", &bo, &dead, &err) != PGC_OK)
					T_FAIL("fail again: %s", err.message);
				T_ASSERT(dead);
			} else if (pgc_queue_complete(wq, jobs[i].id, jobs[i].token, &err) != PGC_OK) {
				T_FAIL("complete: %s", err.message);
			}
		}
		pgc_queue_jobs_free(jobs, n);
		if (found)
			break;
		T_ASSERT(tries < 200);
		sleep_ms(10);
	}

	/* An expired lease, returned by the role's reaper. */
	if (pgc_queue_enqueue(oq, "sec", "{\"n\":\"reap\"}", NULL, NULL, &err) != PGC_OK)
		T_FAIL("enqueue: %s", err.message);
	if (pgc_queue_claim(wq, "sec", 1, 1, "sec-test", &jobs, &n, &err) != PGC_OK)
		T_FAIL("claim: %s", err.message);
	pgc_queue_jobs_free(jobs, n);
	sleep_ms(20);
	pgc_reap_result rr = { 0, 0, 0, 0 };
	int rc;
	for (int i = 0; i < 500 && (rc = pgc_queue_reap(wq, &rr, &err)) == PGC_EBUSY; i++)
		sleep_ms(10);
	if (rc != PGC_OK)
		T_FAIL("reap as the worker role: %s (%s)", err.message, err.sqlstate);
	T_ASSERT(rr.returned + rr.dead >= 1);
	pgc_queue_close(wq);
	pgc_conn_close(w);

	/* A real pgc_worker under the role drains the rest (and one that fails for good). */
	if (pgc_queue_enqueue(oq, "sec", "{\"fail\":true}", &jo, NULL, &err) != PGC_OK)
		T_FAIL("enqueue: %s", err.message);
	char *dsn = dsn_as(role);
	const char *queues[1] = { "sec" };
	pgc_worker_options wo = PGC_WORKER_OPTIONS_INIT;
	wo.dsn = dsn;
	wo.schema = schema;
	wo.queues = queues;
	wo.n_queues = 1;
	wo.concurrency = 2;
	wo.backoff.base_ms = 1;
	wo.backoff.max_ms = 1;
	wo.reap_ms = 100;
	wo.vacuum_dead_tuples = 0;
	wo.log = on_log;
	pgc_worker *wk;
	if (pgc_worker_new(&wo, handler, NULL, &wk, &err) != PGC_OK)
		T_FAIL("worker as the role: %s", err.message);
	if (pgc_worker_start(wk, &err) != PGC_OK)
		T_FAIL("worker start: %s", err.message);
	long live = -1;
	for (int i = 0; i < 300; i++) {
		live = sql_int(owner, "SELECT count(*) FROM %s.jobs", schema);
		if (live == 0)
			break;
		sleep_ms(50);
	}
	pgc_worker_stats st;
	pgc_worker_get_stats(wk, &st);
	pgc_worker_stop(wk, 5000);
	if (pgc_worker_wait(wk, &err) != PGC_OK)
		T_FAIL("worker ended with: %s", err.message);
	pgc_worker_free(wk);
	free(dsn);
	if (live != 0) {
		char q2[256];
		snprintf(q2, sizeof q2, "SELECT id, status, attempts, max_attempts, run_at - clock_timestamp(), payload::text FROM %s.jobs", schema);
		PGresult *r = PQexec(pgc_conn_pg(owner), q2);
		for (int i = 0; i < PQntuples(r); i++)
			fprintf(stderr, "left: %s %s %s/%s %s %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5));
		PQclear(r);
	}
	T_ASSERT_INT_EQ((int)live, 0);
	T_ASSERT(st.listening);
	T_ASSERT_INT_EQ(atomic_load(&log_problems), 0);
	T_ASSERT_INT_EQ((int)sql_int(owner, "SELECT count(*) FROM %s.job_history WHERE status = 'failed'", schema), 2);
	T_ASSERT_INT_EQ((int)sql_int(owner, "SELECT count(*) FROM %s.job_history WHERE status = 'succeeded'", schema), 5);
	pgc_queue_close(oq);
	teardown(owner);
}

/* Runs sql as the role and expects insufficient_privilege (42501). */
static void refused(pgc_conn *w, const char *fmt, ...) PGC_PRINTF(2, 3);
static void refused(pgc_conn *w, const char *fmt, ...)
{
	char sql[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(sql, sizeof sql, fmt, ap);
	va_end(ap);
	pgc_error err;
	int rc = pgc_exec(w, sql, &err);
	if (rc == PGC_OK)
		T_FAIL("the worker role was allowed: %s", sql);
	if (strcmp(err.sqlstate, "42501") != 0)
		T_FAIL("%s: expected 42501, got %s: %s", sql, err.sqlstate, err.message);
}

/* Everything beyond a worker's job is refused with 42501, and the tables are intact after. */
static void security__worker_role_refused(void)
{
	pgc_conn *owner = setup();
	grant(owner, true, true);
	pgc_queue *oq = open_queue(owner);
	pgc_error err;
	int64_t id;
	if (pgc_queue_enqueue(oq, "sec", "{\"secret\":1}", NULL, &id, &err) != PGC_OK)
		T_FAIL("enqueue: %s", err.message);
	pgc_lease lease;
	if (pgc_lease_acquire(owner, "sec-lease", "owner", 60000, &(pgc_lease_options){ schema, 0, 0, -1, 0 },
	                      &lease, &err) != PGC_OK)
		T_FAIL("lease: %s", err.message);

	pgc_conn *w = connect_as(role);
	const char *s = schema;
	refused(w, "SELECT * FROM public.%s", canary);
	refused(w, "INSERT INTO public.%s VALUES ('x')", canary);
	refused(w, "DELETE FROM public.%s", canary);
	refused(w, "CREATE TABLE public.pgc_sec_new_%d (x int)", (int)getpid());
	refused(w, "CREATE TABLE %s.evil (x int)", s);
	refused(w, "CREATE FUNCTION %s.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'", s);
	refused(w, "CREATE VIEW %s.evil AS SELECT 1", s);
	refused(w, "SELECT * FROM %s.lock_names", s);
	refused(w, "INSERT INTO %s.lock_names VALUES (1, 'x')", s);
	refused(w, "SELECT * FROM %s.leases", s);
	refused(w, "UPDATE %s.leases SET holder = 'me'", s);
	refused(w, "SELECT * FROM %s.migrations", s);
	refused(w, "DELETE FROM %s.migrations", s);
	refused(w, "SELECT * FROM %s.job_history", s);
	refused(w, "SELECT payload FROM %s.job_history", s);
	refused(w, "UPDATE %s.job_history SET status = 'failed'", s);
	refused(w, "INSERT INTO %s.jobs (id, queue, payload) VALUES (999999, 'x', '{}')", s);
	refused(w, "UPDATE %s.jobs SET payload = '{\"evil\":1}'", s);
	refused(w, "UPDATE %s.jobs SET queue = 'other'", s);
	refused(w, "UPDATE %s.jobs SET max_attempts = 1000000", s);
	refused(w, "UPDATE %s.jobs SET priority = 32767", s);
	refused(w, "TRUNCATE %s.jobs", s);
	refused(w, "ALTER TABLE %s.jobs ADD COLUMN evil int", s);
	refused(w, "ALTER TABLE %s.jobs DISABLE TRIGGER ALL", s);
	refused(w, "CREATE INDEX evil ON %s.jobs (payload)", s);
	refused(w, "DROP TABLE %s.jobs", s);
	refused(w, "DROP TABLE %s.job_history", s);
	refused(w, "DROP SCHEMA %s CASCADE", s);
	refused(w, "DROP TABLE public.%s", canary);
	refused(w, "UPDATE %s.queue_settings SET max_payload_bytes = 1", s);
	refused(w, "INSERT INTO %s.queues (name) VALUES ('evil')", s);
	refused(w, "UPDATE %s.queues SET paused = true", s);
	refused(w, "SELECT nextval('%s.job_id_seq')", s);
	refused(w, "SELECT setval('%s.claim_token_seq', 1)", s);
	refused(w, "GRANT SELECT ON %s.lock_names TO %s", s, role);
	/* The library's admin paths are refused the same way. */
	pgc_queue *wq = open_queue(w);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(wq, "sec", "{}", NULL, NULL, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "42501");
	T_ASSERT_INT_EQ(pgc_queue_pause(wq, "sec", true, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "42501");
	pgc_queue_close(wq);
	pgc_lease wl;
	T_ASSERT_INT_EQ(pgc_lease_acquire(w, "sec-lease-2", "worker", 60000,
	                                  &(pgc_lease_options){ schema, 0, 0, -1, 0 }, &wl, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "42501");
	pgc_conn_close(w);

	/* Intact: the canary, the job with its payload, the lease, the migrations. */
	T_ASSERT_INT_EQ((int)sql_int(owner, "SELECT count(*) FROM public.%s WHERE secret = 'canary'", canary), 1);
	T_ASSERT_INT_EQ((int)sql_int(owner, "SELECT count(*) FROM %s.jobs WHERE payload = '{\"secret\":1}'"
	                                    " AND queue = 'sec' AND status = 'pending'", s), 1);
	T_ASSERT_INT_EQ((int)sql_int(owner, "SELECT count(*) FROM %s.leases WHERE holder = 'owner'", s), 1);
	T_ASSERT_INT_EQ((int)sql_int(owner, "SELECT count(*) FROM %s.migrations", s), pgc_schema_latest());
	T_ASSERT_INT_EQ((int)sql_int(owner, "SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
	                                    " ON n.oid = c.relnamespace WHERE n.nspname = '%s' AND c.relname = 'evil'", s), 0);
	pgc_queue_close(oq);
	teardown(owner);
}

/* Bad arguments and roles that would hold more than a worker's rights are refused, and a
 * refused call creates nothing. */
static void security__grant_worker_bad_arguments(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(NULL, schema, role, NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, schema, NULL, NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, schema, "", NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, schema, "public", NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "reserved");
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, schema, "none", NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, schema, "pg_monitor", NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, "", role, NULL, NULL, &err), PGC_EUSAGE);
	char longname[80];
	memset(longname, 'r', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, schema, longname, NULL, NULL, &err), PGC_EUSAGE);
	/* The current user (a superuser here). */
	PGresult *r = PQexec(pgc_conn_pg(c), "SELECT current_user");
	char me[64];
	snprintf(me, sizeof me, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, schema, me, NULL, NULL, &err), PGC_EUSAGE);
	/* A role that reads every table through pg_read_all_data. */
	sql(c, "CREATE ROLE %s NOLOGIN", role);
	sql(c, "GRANT pg_read_all_data TO %s", role);
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, schema, role, NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "more rights");
	/* ... and nothing was granted by the refused call. */
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM information_schema.role_table_grants"
	                                " WHERE grantee = '%s' AND table_schema = '%s'", role, schema), 0);
	sql(c, "REVOKE pg_read_all_data FROM %s", role);
	sql(c, "DROP ROLE %s", role);
	/* Inside a transaction. */
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, schema, role, NULL, NULL, &err), PGC_EUSAGE);
	sql(c, "ROLLBACK");
	/* A schema that is not installed: nothing created. */
	char other[80];
	snprintf(other, sizeof other, "%s_missing", schema);
	T_ASSERT_INT_EQ(pgc_schema_grant_worker(c, other, role, NULL, NULL, &err), PGC_ENOSCHEMA);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM pg_catalog.pg_roles WHERE rolname = '%s'", role), 0);
	/* NOLOGIN by default. */
	bool created = false;
	if (pgc_schema_grant_worker(c, schema, role, NULL, &created, &err) != PGC_OK)
		T_FAIL("grant: %s", err.message);
	T_ASSERT(created);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM pg_catalog.pg_roles WHERE rolname = '%s'"
	                                " AND NOT rolcanlogin AND NOT rolsuper AND NOT rolcreaterole"
	                                " AND NOT rolcreatedb", role), 1);
	/* A hand-made extra grant is taken back by the next run: the set stays exact. */
	sql(c, "GRANT SELECT ON %s.lock_names TO %s", schema, role);
	grant(c, false, false);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM information_schema.role_table_grants"
	                                " WHERE grantee = '%s' AND table_name = 'lock_names'", role), 0);
	teardown(c);
}

/* Hostile strings: SQL fragments, quotes, backslashes, template tags, Unicode, NUL-free junk. */
static const char *const hostile[] = {
	"'); DROP TABLE public.@C@; --",
	"\"; DROP TABLE public.@C@; --",
	"x'||(SELECT secret FROM public.@C@)||'",
	"back\\slash \\' \\\" \\\\ end",
	"$1 $$ $pgc$ %s %n %% @S@ @schema@",
	"@schema@.jobs @S@ @R@ tags",
	"ünïcödé 名前 🚀 \u202eevil",
	"\x01\x02\x1f\x7f tab\tnewline\nend",
	"\xff\xfe invalid utf-8 \xc3\x28",
	"E'\\x41' ; COMMIT; DROP SCHEMA public CASCADE; --",
};
#define NHOSTILE (sizeof hostile / sizeof hostile[0])

/* hostile[i] with @C@ replaced by the canary table's name. */
static char *hostile_text(size_t i)
{
	char *out = malloc(512);
	T_ASSERT(out != NULL);
	const char *at = strstr(hostile[i], "@C@");
	if (at == NULL)
		snprintf(out, 512, "%s", hostile[i]);
	else
		snprintf(out, 512, "%.*s%s%s", (int)(at - hostile[i]), hostile[i], canary, at + 3);
	return out;
}

static bool valid_utf8_ok(const pgc_error *err)
{
	/* The only acceptable refusal of a string is the server's encoding check. */
	return strcmp(err->sqlstate, "22021") == 0;
}

/* Reads one text value back by a parameterised query. */
static char *read_back(pgc_conn *c, const char *sql, const char *param)
{
	const char *v[1] = { param };
	PGresult *r = PQexecParams(pgc_conn_pg(c), sql, 1, NULL, v, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		T_FAIL("%s: %s", sql, PQerrorMessage(pgc_conn_pg(c)));
	char *out = PQntuples(r) == 1 ? strdup(PQgetvalue(r, 0, 0)) : NULL;
	PQclear(r);
	return out;
}

static void security__injection_library(void)
{
	pgc_conn *c = setup();
	pgc_queue *q = open_queue(c);
	pgc_error err;
	char query[512];
	int stored = 0, rejected = 0;
	for (size_t i = 0; i < NHOSTILE; i++) {
		char *h = hostile_text(i);
		/* As a queue name, a unique key and a JSON string inside the payload. */
		char *esc = malloc(strlen(h) * 6 + 16), *o = esc;
		T_ASSERT(esc != NULL);
		o += sprintf(o, "{\"v\":\"");
		for (const unsigned char *p = (const unsigned char *)h; *p; p++) {
			if (*p == '"' || *p == '\\')
				o += sprintf(o, "\\%c", *p);
			else if (*p < 0x20)
				o += sprintf(o, "\\u%04x", *p);
			else
				*o++ = (char)*p;
		}
		sprintf(o, "\"}");
		pgc_job_options jo = PGC_JOB_OPTIONS_INIT;
		jo.unique_key = h;
		int64_t id = 0;
		int rc = pgc_queue_enqueue(q, h, esc, &jo, &id, &err);
		if (rc == PGC_OK) {
			stored++;
			char ids[24];
			snprintf(ids, sizeof ids, "%lld", (long long)id);
			snprintf(query, sizeof query, "SELECT queue FROM %s.jobs WHERE id = $1", schema);
			char *got = read_back(c, query, ids);
			T_ASSERT(got != NULL);
			T_ASSERT_STR_EQ(got, h);
			free(got);
			snprintf(query, sizeof query, "SELECT unique_key FROM %s.jobs WHERE id = $1", schema);
			got = read_back(c, query, ids);
			T_ASSERT_STR_EQ(got, h);
			free(got);
			snprintf(query, sizeof query, "SELECT payload->>'v' FROM %s.jobs WHERE id = $1", schema);
			got = read_back(c, query, ids);
			T_ASSERT_STR_EQ(got, h);
			free(got);
			/* Claimed back by its name, payload intact. */
			pgc_job *jobs;
			size_t n;
			if (pgc_queue_claim(q, h, 1, 60000, h, &jobs, &n, &err) != PGC_OK)
				T_FAIL("claim %zu: %s", i, err.message);
			T_ASSERT_INT_EQ((int)n, 1);
			T_ASSERT(jobs[0].id == id);
			T_ASSERT_STR_EQ(jobs[0].queue, h);
			if (pgc_queue_fail(q, id, jobs[0].token, h, NULL, NULL, &err) != PGC_OK)
				T_FAIL("fail %zu: %s", i, err.message);
			pgc_queue_jobs_free(jobs, n);
			snprintf(query, sizeof query, "SELECT last_error FROM %s.jobs WHERE id = $1", schema);
			got = read_back(c, query, ids);
			T_ASSERT_STR_EQ(got, h);
			free(got);
		} else {
			rejected++;
			/* A queue name that is not UTF-8 is refused before it is sent (pgc_name_check). */
			if (rc == PGC_EUSAGE) {
				T_ASSERT_CONTAINS(err.message, "not valid UTF-8");
			} else {
				T_ASSERT_INT_EQ(rc, PGC_ESQL);
				if (!valid_utf8_ok(&err))
					T_FAIL("hostile %zu refused with %s: %s", i, err.sqlstate, err.message);
			}
			T_ASSERT_NOT_CONTAINS(err.message, "\n");
		}
		free(esc);

		/* As a lock name: recorded in the registry exactly. */
		pgc_key key;
		if (pgc_key_from_name(h, &key, &err) == PGC_OK) {
			pgc_lock_options lo = PGC_LOCK_OPTIONS_INIT;
			lo.schema = schema;
			pgc_lock *lk;
			rc = pgc_lock_acquire_ex(c, &key, &lo, &lk, &err);
			if (rc == PGC_OK) {
				T_ASSERT_INT_EQ(pgc_lock_release(lk, &err), PGC_OK);
				snprintf(query, sizeof query, "SELECT name FROM %s.lock_names WHERE name = $1", schema);
				char *got = read_back(c, query, h);
				if (got == NULL)
					T_FAIL("lock name %zu was not recorded", i);
				T_ASSERT_STR_EQ(got, h);
				free(got);
			} else if (!valid_utf8_ok(&err)) {
				T_FAIL("lock %zu: %s (%s)", i, err.message, err.sqlstate);
			}
		}

		/* As a lease name and holder. */
		pgc_lease_options lo = PGC_LEASE_OPTIONS_INIT;
		lo.schema = schema;
		pgc_lease lease;
		rc = pgc_lease_acquire(c, h, h, 60000, &lo, &lease, &err);
		if (rc == PGC_OK) {
			T_ASSERT_STR_EQ(lease.name, h);
			T_ASSERT_STR_EQ(lease.holder, h);
			snprintf(query, sizeof query, "SELECT holder FROM %s.leases WHERE name = $1", schema);
			char *got = read_back(c, query, h);
			T_ASSERT(got != NULL);
			T_ASSERT_STR_EQ(got, h);
			free(got);
		} else if (rc != PGC_EUSAGE && !valid_utf8_ok(&err)) {
			T_FAIL("lease %zu: %s (%s)", i, err.message, err.sqlstate);
		}

		/* As a schema name: created under exactly that name, or refused as a whole. */
		char sname[64];
		snprintf(sname, sizeof sname, "%.40s%d", h, (int)getpid());
		int applied = 0, version = 0;
		long before = sql_int(c, "SELECT count(*) FROM pg_catalog.pg_namespace");
		rc = pgc_schema_init(c, sname, &applied, &version, &err);
		char *got = NULL;
		if (rc == PGC_OK) {
			got = read_back(c, "SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = $1", sname);
			T_ASSERT_INT_EQ(version, pgc_schema_latest());
			T_ASSERT_STR_EQ(got, "1");
			/* Its queue works through the quoted name. */
			pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
			qo.schema = sname;
			pgc_queue *hq;
			if (pgc_queue_open(c, &qo, &hq, &err) != PGC_OK)
				T_FAIL("open %zu: %s", i, err.message);
			if (pgc_queue_enqueue(hq, "q", "{}", NULL, NULL, &err) != PGC_OK)
				T_FAIL("enqueue in schema %zu: %s", i, err.message);
			pgc_queue_close(hq);
			char *qs = pgc__quote_ident(c, sname, &err);
			T_ASSERT(qs != NULL);
			sql(c, "DROP SCHEMA %s CASCADE", qs);
			PQfreemem(qs);
		} else {
			if (!(rc == PGC_EUSAGE || (rc == PGC_ESQL && valid_utf8_ok(&err))))
				T_FAIL("schema %zu: %d %s (%s)", i, rc, err.message, err.sqlstate);
			/* Refused before anything was created (other tests may add schemas meanwhile,
			 * but none of ours). */
			T_ASSERT(sql_int(c, "SELECT count(*) FROM pg_catalog.pg_namespace") >= before);
			char pat[96];
			snprintf(pat, sizeof pat, "%%%d", (int)getpid());
			got = read_back(c, "SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname LIKE $1"
			                   " AND nspname NOT LIKE 'pgc_sec_%'", pat);
			T_ASSERT_STR_EQ(got, "0");
		}
		free(got);
		free(h);
	}
	T_ASSERT(stored >= 7);
	(void)rejected;
	/* Intact afterwards. */
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM public.%s WHERE secret = 'canary'", canary), 1);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.migrations", schema), pgc_schema_latest());
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.jobs", schema), stored);
	pgc_queue_close(q);
	teardown(c);
}

/* Schema names go into the migrations' SQL as quoted identifiers. A line break in one used to
 * end the line comment that named the placeholder, so that the rest of the name ran as SQL
 * (init --schema $'x\nDROP TABLE t;--' dropped t); a '$' ended the dollar-quoted function
 * bodies early. Both are refused now, before anything is created. */
static void security__schema_name_injection_refused(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	char name[64];
	const char *fmts[] = { "x\nDROP TABLE public.%s;--", "x\rDROP TABLE public.%s;--",
	                       "x$pgc$;DROP TABLE public.%s;--", "x$$;DROP TABLE public.%s;--" };
	for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
		snprintf(name, sizeof name, fmts[i], canary);
		T_ASSERT_INT_EQ(pgc_schema_init(c, name, NULL, NULL, &err), PGC_EUSAGE);
		T_ASSERT_INT_EQ(pgc_schema_version(c, name, &(int){ 0 }, &err), PGC_EUSAGE);
	}
	T_ASSERT_CONTAINS(err.message, "'$'");
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname LIKE 'x%%DROP TABLE public.%s;--'", canary), 0);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM public.%s", canary), 1);
	teardown(c);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "security__worker_role_can_work", security__worker_role_can_work },
		{ "security__worker_role_refused", security__worker_role_refused },
		{ "security__grant_worker_bad_arguments", security__grant_worker_bad_arguments },
		{ "security__injection_library", security__injection_library },
		{ "security__schema_name_injection_refused", security__schema_name_injection_refused },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
