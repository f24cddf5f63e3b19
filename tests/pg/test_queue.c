/* test_queue.c - the job queue against a real server, with real concurrent workers */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "queue/queue_int.h"
#include "../t.h"
#include "pgt.h"

static char schema[64];

/* A fresh schema per test process. */
static pgc_conn *setup(pgc_queue **q)
{
	return pgt_queue_setup(schema, sizeof schema, "pgc_queue", "pgcoord/test-queue", q);
}

static void teardown(pgc_conn *c, pgc_queue *q)
{
	pgt_queue_teardown(c, q, schema);
}

/* Worker options for this process's schema: n queues on K handler threads. */
static pgc_worker_options worker_options(const char *const *queues, size_t n, int concurrency)
{
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = t_dsn();
	o.schema = schema;
	o.queues = queues;
	o.n_queues = n;
	o.concurrency = concurrency;
	return o;
}

/* One reaper pass; the reaper key is shared by every schema on the server, so other tests
 * running in parallel may hold it for a moment. */
static int reap(pgc_queue *q, pgc_reap_result *rr, pgc_error *err)
{
	int rc;
	for (int i = 0; i < 500 && (rc = pgc_queue_reap(q, rr, err)) == PGC_EBUSY; i++)
		sleep_ms(10);
	return rc;
}

static pgc_queue_config no_change(void)
{
	pgc_queue_config cfg = { -1, -1, -1, -1 };
	return cfg;
}

static void queue__basic(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t id = 0;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "mail", "{\"to\":\"a\"}", NULL, &id, &err), PGC_OK);
	T_ASSERT(id > 0);
	pgc_job *jobs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "mail", 10, 5000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT_INT_EQ(jobs[0].id, id);
	T_ASSERT_INT_EQ(jobs[0].attempt, 1);
	T_ASSERT_STR_EQ(jobs[0].queue, "mail");
	T_ASSERT_CONTAINS(jobs[0].payload, "\"to\"");
	int64_t tok = jobs[0].token;
	pgc_queue_jobs_free(jobs, n);
	/* Nothing else to claim. */
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "mail", 10, 5000, "t", &jobs, &n, &err), PGC_EEMPTY);
	T_ASSERT_INT_EQ(n, 0);
	/* A wrong token changes nothing. */
	T_ASSERT_INT_EQ(pgc_queue_complete(q, id, tok + 1000, &err), PGC_ESTALE);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, id, tok, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, id, tok, &err), PGC_ESTALE);
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, id, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "succeeded");
	T_ASSERT(info->finished_at != NULL);
	pgc_free(info);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);

	/* Retry later does not count the attempt. */
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "mail", "{}", NULL, &id, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "mail", 1, 5000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_retry_later(q, id, jobs[0].token, 0, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_retry_later(q, id, jobs[0].token, 0, &err), PGC_ESTALE);
	pgc_queue_jobs_free(jobs, n);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "mail", 1, 5000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(jobs[0].attempt, 1);
	/* Heartbeat keeps it; a fail with attempts left returns it to pending with backoff. */
	bool lost[1];
	T_ASSERT_INT_EQ(pgc_queue_heartbeat(q, 1, &jobs[0].id, &jobs[0].token, 5000, lost, &err), PGC_OK);
	T_ASSERT(!lost[0]);
	bool dead = true;
	pgc_backoff bo = { 60000, 60000 };
	T_ASSERT_INT_EQ(pgc_queue_fail(q, id, jobs[0].token, "boom", &bo, &dead, &err), PGC_OK);
	T_ASSERT(!dead);
	T_ASSERT_INT_EQ(pgc_queue_heartbeat(q, 1, &jobs[0].id, &jobs[0].token, 5000, lost, &err), PGC_OK);
	T_ASSERT(lost[0]);
	pgc_queue_jobs_free(jobs, n);
	/* Backoff between 30 and 60 s: not claimable now. */
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "mail", 1, 5000, "t", &jobs, &n, &err), PGC_EEMPTY);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE run_at > clock_timestamp() + interval '29 s'"
	                           " AND run_at < clock_timestamp() + interval '61 s' AND last_error = 'boom'",
	                        schema), 1);

	/* The maintenance vacuum: only above its threshold, never inside a transaction. */
	bool did = true;
	T_ASSERT_INT_EQ(pgc_queue_vacuum(q, 1000000000L, &did, &err), PGC_OK);
	T_ASSERT(!did);
	T_ASSERT_INT_EQ(pgc_queue_vacuum(q, 0, &did, &err), PGC_OK);
	T_ASSERT(did);
	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_vacuum(q, 0, &did, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_reap(q, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_exec(c, "ROLLBACK", &err), PGC_OK);
	teardown(c, q);
}

/* ---- 4 workers x 8 threads drain 20,000 jobs ---------------------------------------------- */

#define DRAIN_JOBS 20000
static atomic_int drain_count[DRAIN_JOBS];

static void drain_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	const char *p = strstr(job->payload, "\"n\":");
	if (p == NULL)
		return;
	int i = atoi(p + 4);
	if (i >= 0 && i < DRAIN_JOBS)
		atomic_fetch_add(&drain_count[i], 1);
}

static void queue__drain_exactly_once(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	static char buf[DRAIN_JOBS][24];
	static const char *payloads[DRAIN_JOBS];
	for (int i = 0; i < DRAIN_JOBS; i++) {
		snprintf(buf[i], sizeof buf[i], "{\"n\":%d}", i);
		payloads[i] = buf[i];
	}
	pgc_worker *w[4];
	const char *queues[] = { "drain" };
	for (int k = 0; k < 4; k++) {
		pgc_worker_options o = worker_options(queues, 1, 8);
		o.prefetch = 64;
		o.lease_ms = 10000;
		if (pgc_worker_new(&o, drain_handler, NULL, &w[k], &err) != PGC_OK)
			T_FAIL("worker: %s", err.message);
		T_ASSERT_INT_EQ(pgc_worker_start(w[k], &err), PGC_OK);
	}
	/* Enqueue while the workers run, in bulk. */
	for (int i = 0; i < DRAIN_JOBS; i += 5000) {
		size_t ins = 0;
		T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "drain", 5000, payloads + i, NULL, NULL, NULL, &ins,
		                                       NULL, &err), PGC_OK);
		T_ASSERT_INT_EQ(ins, 5000);
	}
	int64_t deadline = pgc__now_ms() + 60000;
	long done = 0;
	while (pgc__now_ms() < deadline) {
		done = 0;
		for (int k = 0; k < 4; k++) {
			pgc_worker_stats st;
			pgc_worker_get_stats(w[k], &st);
			done += st.completed;
		}
		if (done >= DRAIN_JOBS)
			break;
		sleep_ms(50);
	}
	T_ASSERT_INT_EQ(done, DRAIN_JOBS);
	long claimed = 0;
	for (int k = 0; k < 4; k++) {
		pgc_worker_stop(w[k], 1000);
	}
	for (int k = 0; k < 4; k++) {
		T_ASSERT_INT_EQ(pgc_worker_wait(w[k], &err), PGC_OK);
		pgc_worker_stats st;
		pgc_worker_get_stats(w[k], &st);
		claimed += st.claimed;
		T_ASSERT(st.listening);
		pgc_worker_free(w[k]);
	}
	T_ASSERT_INT_EQ(claimed, DRAIN_JOBS);
	for (int i = 0; i < DRAIN_JOBS; i++)
		if (atomic_load(&drain_count[i]) != 1)
			T_FAIL("job n=%d ran %d times", i, atomic_load(&drain_count[i]));
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_history WHERE status = 'succeeded'", schema),
	                DRAIN_JOBS);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(DISTINCT id) FROM %s.job_history", schema), DRAIN_JOBS);
	teardown(c, q);
}

/* ---- transactional enqueue ------------------------------------------------------------------ */

static void queue__transactional_enqueue(void)
{
	pgc_queue *q, *q2;
	pgc_conn *c = setup(&q);
	pgc_conn *c2 = t_connect("pgcoord/test-queue-2");
	pgc_error err;
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	T_ASSERT_INT_EQ(pgc_queue_open(c2, &qo, &q2, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc__listen(c2, pgc_queue_channel(q2), &err), PGC_OK);

	pgc_job *jobs;
	size_t n;
	int64_t id;
	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "tx", "{\"a\":1}", NULL, &id, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "tx", "{\"a\":2}", NULL, &id, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q2, "tx", 10, 5000, "t", &jobs, &n, &err), PGC_EEMPTY);
	T_ASSERT_INT_EQ(pgc_exec(c, "ROLLBACK", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q2, "tx", 10, 5000, "t", &jobs, &n, &err), PGC_EEMPTY);
	PGnotify *nt = pgc__notify(c2, true);
	T_ASSERT(nt == NULL); /* no wake-up for a rolled-back enqueue */

	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "tx", "{\"a\":3}", NULL, &id, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "tx", "{\"a\":4}", NULL, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q2, "tx", 10, 5000, "t", &jobs, &n, &err), PGC_EEMPTY);
	T_ASSERT_INT_EQ(pgc_exec(c, "COMMIT", &err), PGC_OK);
	/* One notification for the whole transaction. */
	int notes = 0;
	int64_t deadline = pgc__now_ms() + 5000;
	while (pgc__now_ms() < deadline && notes == 0) {
		while ((nt = pgc__notify(c2, true)) != NULL) {
			T_ASSERT_STR_EQ(nt->extra, "tx");
			notes++;
			PQfreemem(nt);
		}
		sleep_ms(10);
	}
	sleep_ms(100);
	while ((nt = pgc__notify(c2, true)) != NULL) {
		notes++;
		PQfreemem(nt);
	}
	T_ASSERT_INT_EQ(notes, 1);
	T_ASSERT_INT_EQ(pgc_queue_claim(q2, "tx", 10, 5000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 2);
	T_ASSERT_INT_EQ(jobs[0].id, id);
	for (size_t i = 0; i < n; i++)
		T_ASSERT_INT_EQ(pgc_queue_complete(q2, jobs[i].id, jobs[i].token, &err), PGC_OK);
	pgc_queue_jobs_free(jobs, n);
	pgc_queue_close(q2);
	pgc_conn_close(c2);
	teardown(c, q);
}

/* ---- stale token after reap and reclaim ------------------------------------------------------ */

static void queue__stale_token_after_reap(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t id;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "r", "{}", NULL, &id, &err), PGC_OK);
	pgc_job *a, *b;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "r", 1, 300, "old", &a, &n, &err), PGC_OK);
	/* Before expiry the reaper leaves it alone. */
	pgc_reap_result rr;
	T_ASSERT_INT_EQ(reap(q, &rr, &err), PGC_OK);
	T_ASSERT_INT_EQ(rr.returned, 0);
	sleep_ms(500);
	int rc;
	/* Another schema's test may hold the reaper key for a moment. */
	rc = reap(q, &rr, &err);
	T_ASSERT_INT_EQ(rc, PGC_OK);
	T_ASSERT_INT_EQ(rr.returned, 1);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "r", 1, 30000, "new", &b, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(b[0].id, id);
	T_ASSERT_INT_EQ(b[0].attempt, 2);
	T_ASSERT(b[0].token != a[0].token);
	/* The old owner is stale everywhere. */
	T_ASSERT_INT_EQ(pgc_queue_complete(q, id, a[0].token, &err), PGC_ESTALE);
	T_ASSERT_CONTAINS(err.message, "not running under token");
	bool dead;
	T_ASSERT_INT_EQ(pgc_queue_fail(q, id, a[0].token, "x", NULL, &dead, &err), PGC_ESTALE);
	T_ASSERT_INT_EQ(pgc_queue_retry_later(q, id, a[0].token, 0, &err), PGC_ESTALE);
	bool lost;
	T_ASSERT_INT_EQ(pgc_queue_heartbeat(q, 1, &id, &a[0].token, 1000, &lost, &err), PGC_OK);
	T_ASSERT(lost);
	/* The new claim's outcome wins. */
	T_ASSERT_INT_EQ(pgc_queue_fail(q, id, b[0].token, "new owner failed", NULL, &dead, &err), PGC_OK);
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, id, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "scheduled");
	T_ASSERT_STR_EQ(info->last_error, "new owner failed");
	T_ASSERT_CONTAINS(info->errors, "lease expired (worker old)");
	T_ASSERT_INT_EQ(info->attempts, 2);
	pgc_free(info);
	pgc_queue_jobs_free(a, 1);
	pgc_queue_jobs_free(b, 1);

	/* A lease that expires with no attempts left ends failed. */
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.max_attempts = 1;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "r1", "{}", &o, &id, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "r1", 1, 200, "w", &a, &n, &err), PGC_OK);
	sleep_ms(400);
	rc = reap(q, &rr, &err);
	T_ASSERT_INT_EQ(rr.dead, 1);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, id, a[0].token, &err), PGC_ESTALE);
	T_ASSERT_INT_EQ(pgc_queue_show(q, id, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "failed");
	pgc_free(info);
	pgc_queue_jobs_free(a, 1);

	/* The reaper never clobbers a job completed in time (it checks status and token). */
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "r2", "{}", NULL, &id, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "r2", 1, 200, "w", &a, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, id, a[0].token, &err), PGC_OK);
	sleep_ms(300);
	rc = reap(q, &rr, &err);
	T_ASSERT_INT_EQ(rr.returned + rr.dead, 0);
	T_ASSERT_INT_EQ(pgc_queue_show(q, id, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "succeeded");
	pgc_free(info);
	pgc_queue_jobs_free(a, 1);
	teardown(c, q);
}

/* ---- retry, backoff, dead letter through a worker ---------------------------------------- */

static atomic_int flaky_runs, bad_runs;

static void flaky_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)arg;
	if (strstr(job->payload, "flaky")) {
		atomic_fetch_add(&flaky_runs, 1);
		if (job->attempt <= 3) {
			res->outcome = PGC_JOB_FAIL;
			snprintf(res->error, sizeof res->error, "flaky failure %d", job->attempt);
		}
	} else {
		atomic_fetch_add(&bad_runs, 1);
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "always fails (attempt %d)", job->attempt);
	}
}

static void queue__retry_backoff_dead_letter(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t flaky, bad;
	pgc_job_options jo = PGC_JOB_OPTIONS_INIT;
	jo.max_attempts = 5;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "f", "{\"kind\":\"flaky\"}", &jo, &flaky, &err), PGC_OK);
	jo.max_attempts = 3;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "f", "{\"kind\":\"bad\"}", &jo, &bad, &err), PGC_OK);
	const char *queues[] = { "f" };
	pgc_worker_options o = worker_options(queues, 1, 2);
	o.backoff.base_ms = 50;
	o.backoff.max_ms = 200;
	o.poll_ms = 100;
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, flaky_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	int64_t deadline = pgc__now_ms() + 20000;
	while (pgc__now_ms() < deadline &&
	       sql_int(c, "SELECT count(*) FROM %s.job_history", schema) < 2)
		sleep_ms(50);
	pgc_worker_stop(w, 1000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_free(w);
	T_ASSERT_INT_EQ(atomic_load(&flaky_runs), 4);
	T_ASSERT_INT_EQ(atomic_load(&bad_runs), 3);
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, flaky, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "succeeded");
	T_ASSERT_INT_EQ(info->attempts, 4);
	T_ASSERT_CONTAINS(info->errors, "flaky failure 3");
	pgc_free(info);
	T_ASSERT_INT_EQ(pgc_queue_show(q, bad, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "failed");
	T_ASSERT_INT_EQ(info->attempts, 3);
	T_ASSERT_STR_EQ(info->last_error, "always fails (attempt 3)");
	T_ASSERT_CONTAINS(info->errors, "always fails (attempt 1)");
	pgc_free(info);
	/* A dead letter can be run again. */
	T_ASSERT_INT_EQ(pgc_queue_retry(q, bad, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_retry(q, bad, &err), PGC_ENOTFOUND);
	T_ASSERT_INT_EQ(pgc_queue_show(q, bad, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "pending");
	T_ASSERT_INT_EQ(info->attempts, 0);
	pgc_free(info);
	teardown(c, q);
}

/* ---- priorities, run_at, unique keys, pause, cancel ---------------------------------------- */

static void queue__priorities_schedule_unique_pause_cancel(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	int64_t ids[4];
	int prios[] = { 0, 10, -5, 5 };
	for (int i = 0; i < 4; i++) {
		o.priority = prios[i];
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "p", "{}", &o, &ids[i], &err), PGC_OK);
	}
	pgc_job *jobs;
	size_t n;
	/* Claims one at a time follow priority order. */
	int64_t want[] = { ids[1], ids[3], ids[0], ids[2] };
	for (int i = 0; i < 4; i++) {
		T_ASSERT_INT_EQ(pgc_queue_claim(q, "p", 1, 5000, "t", &jobs, &n, &err), PGC_OK);
		T_ASSERT_INT_EQ(jobs[0].id, want[i]);
		T_ASSERT_INT_EQ(pgc_queue_complete(q, jobs[0].id, jobs[0].token, &err), PGC_OK);
		pgc_queue_jobs_free(jobs, n);
	}

	/* run_at in the future is not claimed early. */
	pgc_job_options later = PGC_JOB_OPTIONS_INIT;
	later.delay_ms = 60000;
	int64_t sid;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "s", "{}", &later, &sid, &err), PGC_OK);
	pgc_job_options at = PGC_JOB_OPTIONS_INIT;
	at.run_at = "2999-01-01 00:00:00+00";
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "s", "{}", &at, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "s", 10, 5000, "t", &jobs, &n, &err), PGC_EEMPTY);
	pgc_job_options soon = PGC_JOB_OPTIONS_INIT;
	soon.delay_ms = 300;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "s", "{}", &soon, &sid, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "s", 10, 5000, "t", &jobs, &n, &err), PGC_EEMPTY);
	sleep_ms(400);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "s", 10, 5000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT_INT_EQ(jobs[0].id, sid);
	pgc_queue_jobs_free(jobs, n);

	/* Unique keys: one pending-or-running job per key and queue. */
	pgc_job_options u = PGC_JOB_OPTIONS_INIT;
	u.unique_key = "report-42";
	int64_t uid, uid2;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "u", "{}", &u, &uid, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "u", "{}", &u, &uid2, &err), PGC_EDUPLICATE);
	T_ASSERT_INT_EQ(uid2, 0);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "other", "{}", &u, &uid2, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "u", 1, 5000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "u", "{}", &u, &uid2, &err), PGC_EDUPLICATE);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, jobs[0].id, jobs[0].token, &err), PGC_OK);
	pgc_queue_jobs_free(jobs, n);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "u", "{}", &u, &uid2, &err), PGC_OK);
	T_ASSERT(uid2 > uid);
	const char *pl[3] = { "{}", "{}", "{}" };
	const char *keys[3] = { "report-42", "k2", "k2" };
	int64_t mids[3];
	size_t ins;
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "u", 3, pl, keys, NULL, mids, &ins, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(ins, 1);
	T_ASSERT_INT_EQ(mids[0], 0);
	T_ASSERT(mids[1] > 0);
	T_ASSERT_INT_EQ(mids[2], 0);

	/* Pause stops claims; resume brings them back. */
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "pz", "{}", NULL, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_pause(q, "pz", true, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "pz", 1, 5000, "t", &jobs, &n, &err), PGC_EEMPTY);
	T_ASSERT_INT_EQ(pgc_queue_pause(q, "pz", false, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "pz", 1, 5000, "t", &jobs, &n, &err), PGC_OK);
	int64_t running = jobs[0].id;
	pgc_queue_jobs_free(jobs, n);

	/* Cancel: pending and running yes, finished says so, unknown not found; a cancelled job
	 * can be retried. */
	int64_t cid;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "cx", "{}", NULL, &cid, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, cid, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, cid, &err), PGC_EFINISHED);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, running, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, 99999999, &err), PGC_ENOTFOUND);
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, cid, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "cancelled");
	pgc_free(info);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "cx", 1, 5000, "t", &jobs, &n, &err), PGC_EEMPTY);
	T_ASSERT_INT_EQ(pgc_queue_retry(q, cid, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "cx", 1, 5000, "t", &jobs, &n, &err), PGC_OK);
	pgc_queue_jobs_free(jobs, n);

	/* Stats and list see it all. */
	pgc_queue_stat *st;
	pgc_queue_health h;
	T_ASSERT_INT_EQ(pgc_queue_stats(q, "u", &st, &n, &h, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT_INT_EQ(st[0].pending, 2);
	T_ASSERT_INT_EQ(st[0].succeeded, 1);
	T_ASSERT_INT_EQ(st[0].completed_1m, 1);
	pgc_free(st);
	pgc_job_info **list;
	T_ASSERT_INT_EQ(pgc_queue_list(q, "u", NULL, 100, &list, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 3);
	pgc_queue_infos_free(list, n);
	T_ASSERT_INT_EQ(pgc_queue_list(q, NULL, "bogus", 100, &list, &n, &err), PGC_EUSAGE);
	long purged;
	T_ASSERT_INT_EQ(pgc_queue_purge(q, "u", NULL, 0, &purged, &err), PGC_OK);
	T_ASSERT_INT_EQ(purged, 1);
	teardown(c, q);
}

/* ---- deferrals: "not now" gives the attempt back, up to max_deferrals ------------------------ */

static void queue__deferral_limit(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.max_attempts = 1;
	o.max_deferrals = 2;
	int64_t id;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "d", "{}", &o, &id, &err), PGC_OK);
	pgc_job *jobs;
	size_t n;
	bool dead = true;
	for (int i = 0; i < 2; i++) {
		T_ASSERT_INT_EQ(pgc_queue_claim(q, "d", 1, 5000, "t", &jobs, &n, &err), PGC_OK);
		T_ASSERT_INT_EQ(jobs[0].attempt, 1);
		T_ASSERT_INT_EQ(pgc_queue_defer(q, id, jobs[0].token, 0, &dead, &err), PGC_OK);
		T_ASSERT(!dead);
		pgc_queue_jobs_free(jobs, n);
	}
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, id, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "pending");
	T_ASSERT_INT_EQ(info->deferrals, 2);
	T_ASSERT_INT_EQ(info->max_deferrals, 2);
	T_ASSERT_INT_EQ(info->attempts, 0);
	pgc_free(info);
	/* The third "not now" is past the limit: a failed attempt that ends the job. */
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "d", 1, 5000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_defer(q, id, jobs[0].token, 0, &dead, &err), PGC_OK);
	T_ASSERT(dead);
	T_ASSERT_INT_EQ(pgc_queue_defer(q, id, jobs[0].token, 0, &dead, &err), PGC_ESTALE);
	pgc_queue_jobs_free(jobs, n);
	T_ASSERT_INT_EQ(pgc_queue_show(q, id, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "failed");
	T_ASSERT_INT_EQ(info->deferrals, 2);
	T_ASSERT_INT_EQ(info->attempts, 1);
	T_ASSERT_CONTAINS(info->last_error, "deferred 2 times, the most its max_deferrals allows");
	T_ASSERT_CONTAINS(info->errors, "max_deferrals");
	pgc_free(info);
	/* A retry starts the count again; the default limit is 100. */
	T_ASSERT_INT_EQ(pgc_queue_retry(q, id, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT deferrals FROM %s.jobs WHERE id = %lld", schema, (long long)id), 0);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "d", "{}", NULL, &id, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT max_deferrals FROM %s.jobs WHERE id = %lld", schema, (long long)id),
	                PGC_QUEUE_MAX_DEFERRALS_DEFAULT);
	o.max_deferrals = -1;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "d", "{}", &o, &id, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "max_deferrals");
	T_ASSERT_INT_EQ(pgc_queue_defer(NULL, 1, 1, 0, &dead, &err), PGC_EUSAGE);
	teardown(c, q);
}

/* ---- once: a worker that stops by itself when its queues run dry -------------------------- */

static atomic_int once_runs;

static void once_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)arg;
	atomic_fetch_add(&once_runs, 1);
	sleep_ms(20);
	/* The first failure of the "f" job retries at once (no backoff): still runnable. */
	if (strstr(job->payload, "\"f\"") != NULL && job->attempt == 1) {
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "once more");
	}
}

static void queue__worker_once(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	const char *pl[8] = { "{}", "{}", "{}", "{}", "{}", "{}", "{}", "{\"f\":1}" };
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "o", 8, pl, NULL, NULL, NULL, NULL, NULL, &err), PGC_OK);
	pgc_job_options later = PGC_JOB_OPTIONS_INIT;
	later.delay_ms = 3600000;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "o", "{}", &later, NULL, &err), PGC_OK);
	const char *queues[] = { "o" };
	pgc_worker_options o = worker_options(queues, 1, 3);
	o.once = true;
	o.backoff.base_ms = 0;
	o.backoff.max_ms = 0;
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, once_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	/* No stop: it ends by itself (the test's own timeout bounds the wait). */
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_stats st;
	pgc_worker_get_stats(w, &st);
	pgc_worker_free(w);
	T_ASSERT_INT_EQ(atomic_load(&once_runs), 9);
	T_ASSERT_INT_EQ(st.completed, 8);
	T_ASSERT_INT_EQ(st.failed, 1);
	T_ASSERT_INT_EQ(st.released, 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 1); /* the one for later */
	teardown(c, q);
}

/* ---- bulk operations: many jobs in short batches, next to a worker that keeps claiming ---- */

#define BULK_JOBS 12000
static atomic_int bulk_handled;

static void bulk_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)job;
	(void)res;
	(void)arg;
	atomic_fetch_add(&bulk_handled, 1);
	sleep_ms(1);
}

static void bulk_progress(long done, void *arg)
{
	*(long *)arg = done;
}

static void queue__bulk_cancel_retry_purge(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	/* Bad input changes nothing. */
	pgc_queue_bulk b = PGC_QUEUE_BULK_INIT;
	pgc_queue_bulk_result r;
	long count;
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &b, &r, &err), PGC_EUSAGE); /* cancel without a queue */
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(NULL, &b, &r, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, NULL, &r, &err), PGC_EUSAGE);
	b.queue = "bulk";
	b.status = "running";
	T_ASSERT_INT_EQ(pgc_queue_bulk_count(q, &b, &count, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "pending or scheduled");
	b.status = NULL;
	b.key_prefix = "";
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &b, &r, &err), PGC_EUSAGE);
	b.key_prefix = NULL;
	b.batch_size = 10001;
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &b, &r, &err), PGC_EUSAGE);
	b.batch_size = 0;
	b.older_than_ms = -1;
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &b, &r, &err), PGC_EUSAGE);
	b.older_than_ms = 0;
	b.op = (pgc_queue_bulk_op)7;
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &b, &r, &err), PGC_EUSAGE);
	b.op = PGC_BULK_CANCEL;

	/* Many jobs, a few with keys, and a worker that keeps claiming while the cancel runs. */
	static char *pl[BULK_JOBS], *keys[BULK_JOBS];
	for (int i = 0; i < BULK_JOBS; i++) {
		pl[i] = "{}";
		keys[i] = NULL;
	}
	char kb[20][16];
	for (int i = 0; i < 20; i++) {
		snprintf(kb[i], sizeof kb[i], i < 10 ? "imp_%d" : "impx%d", i);
		keys[i * 7] = kb[i];
	}
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "bulk", BULK_JOBS, (const char *const *)pl,
	                                       (const char *const *)keys, NULL, NULL, NULL, NULL, &err), PGC_OK);
	pgc_job_options later = PGC_JOB_OPTIONS_INIT;
	later.delay_ms = 3600000;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "bulk", "{}", &later, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "other", "{}", NULL, NULL, &err), PGC_OK);
	/* The key prefix is compared as it is: "imp_" is not a LIKE pattern. */
	b.key_prefix = "imp_";
	T_ASSERT_INT_EQ(pgc_queue_bulk_count(q, &b, &count, &err), PGC_OK);
	T_ASSERT_INT_EQ(count, 10);
	b.key_prefix = NULL;
	b.upto_id = 0;

	const char *queues[] = { "bulk" };
	pgc_worker_options o = worker_options(queues, 1, 4);
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, bulk_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	int64_t deadline = pgc__now_ms() + 10000;
	while (atomic_load(&bulk_handled) < 20 && pgc__now_ms() < deadline)
		sleep_ms(5);
	T_ASSERT(atomic_load(&bulk_handled) >= 20);
	T_ASSERT_INT_EQ(pgc_queue_bulk_count(q, &b, &count, &err), PGC_OK);
	T_ASSERT(count > 0);
	T_ASSERT(b.upto_id > 0);
	/* Enqueued after the count: not touched by the run. */
	int64_t late_id;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "bulk", "{}", &later, &late_id, &err), PGC_OK);
	b.batch_size = 500;
	long seen = 0;
	b.progress = bulk_progress;
	b.progress_arg = &seen;
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &b, &r, &err), PGC_OK);
	T_ASSERT(r.done > 0 && r.done <= count);
	T_ASSERT(r.batches >= r.done / 500);
	T_ASSERT_INT_EQ(seen, r.done);
	/* The worker was never blocked: it went on while the batches ran, and stops cleanly. */
	int handled_during = atomic_load(&bulk_handled);
	pgc_worker_stop(w, 5000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_stats st;
	pgc_worker_get_stats(w, &st);
	pgc_worker_free(w);
	T_ASSERT(handled_during >= 20);
	/* Exact counts: every job was either cancelled or completed, none both, none lost. */
	long long cancelled = sql_int(c, "SELECT count(*) FROM %s.job_history WHERE queue = 'bulk'"
	                                 " AND status = 'cancelled'", schema);
	long long left = sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'bulk'", schema);
	T_ASSERT_INT_EQ(cancelled, r.done);
	T_ASSERT_INT_EQ(left, 1 + st.released);       /* the late one, and any released at stop */
	T_ASSERT_INT_EQ(cancelled + st.completed + left, BULK_JOBS + 2);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE id = %lld", schema, (long long)late_id), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'other'", schema), 1);

	/* Retry the cancelled ones whose key starts with "imp": one key is taken again meanwhile. */
	long long with_key = sql_int(c, "SELECT count(*) FROM %s.job_history WHERE status = 'cancelled'"
	                                " AND unique_key LIKE 'imp%%'", schema);
	T_ASSERT(with_key > 0);
	char taken[16] = "";
	PGresult *res = NULL;
	{
		char sqlt[256];
		snprintf(sqlt, sizeof sqlt, "SELECT unique_key FROM %s.job_history WHERE status = 'cancelled'"
		         " AND unique_key LIKE 'imp%%' ORDER BY id LIMIT 1", schema);
		int rc2;
		res = pgc__exec(c, sqlt, 0, NULL, &rc2, &err);
		T_ASSERT(res != NULL);
		snprintf(taken, sizeof taken, "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	pgc_job_options tk = PGC_JOB_OPTIONS_INIT;
	tk.unique_key = taken;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "bulk", "{}", &tk, NULL, &err), PGC_OK);
	pgc_queue_bulk rb = PGC_QUEUE_BULK_INIT;
	rb.op = PGC_BULK_RETRY;
	rb.queue = "bulk";
	rb.status = "cancelled";
	rb.key_prefix = "imp";
	rb.batch_size = 3;
	T_ASSERT_INT_EQ(pgc_queue_bulk_count(q, &rb, &count, &err), PGC_OK);
	T_ASSERT_INT_EQ(count, with_key);
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &rb, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r.done, with_key - 1);
	T_ASSERT_INT_EQ(r.skipped, 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE unique_key LIKE 'imp%%'", schema), with_key);
	/* Retry's default is the failed ones: there are none. */
	rb.status = NULL;
	rb.key_prefix = NULL;
	rb.upto_id = 0;
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &rb, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r.done, 0);

	/* Purge: by status and age, then everything, in batches. */
	pgc_queue_bulk pb = PGC_QUEUE_BULK_INIT;
	pb.op = PGC_BULK_PURGE;
	pb.status = "cancelled";
	pb.older_than_ms = 3600000;
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &pb, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r.done, 0);
	pb.older_than_ms = 0;
	pb.batch_size = 2000;
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &pb, &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r.done, cancelled - (with_key - 1));
	long purged;
	T_ASSERT_INT_EQ(pgc_queue_purge(q, NULL, NULL, 0, &purged, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_history", schema), 0);
	teardown(c, q);
}

/* ---- starvation: aging puts an old low-priority job ahead of newer high-priority work ------ */

static void queue__aging_beats_starvation(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_queue_config cfg = no_change();
	cfg.aging_ms = 400;
	T_ASSERT_INT_EQ(pgc_queue_config_set(q, &cfg, &err), PGC_OK);
	pgc_job_options lo = PGC_JOB_OPTIONS_INIT, hi = PGC_JOB_OPTIONS_INIT;
	lo.priority = -100;
	hi.priority = 100;
	int64_t low;
	int64_t t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "a", "{\"low\":1}", &lo, &low, &err), PGC_OK);
	/* A constant high-priority stream: without aging the low job never runs. */
	pgc_job *jobs;
	size_t n;
	for (int round = 0; round < 12; round++) {
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "a", "{}", &hi, NULL, &err), PGC_OK);
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "a", "{}", &hi, NULL, &err), PGC_OK);
		T_ASSERT_INT_EQ(pgc_queue_claim(q, "a", 1, 5000, "t", &jobs, &n, &err), PGC_OK);
		bool is_low = jobs[0].id == low;
		T_ASSERT_INT_EQ(pgc_queue_complete(q, jobs[0].id, jobs[0].token, &err), PGC_OK);
		pgc_queue_jobs_free(jobs, n);
		if (is_low) {
			/* Not before it waited the aging time, and high-priority work was still waiting. */
			T_ASSERT(pgc__now_ms() - t0 >= 400);
			T_ASSERT(round >= 1);
			T_ASSERT(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE priority = 100", schema) > 0);
			teardown(c, q);
			return;
		}
		sleep_ms(150);
		pgc_reap_result rr;
		int rc;
		rc = reap(q, &rr, &err);
		T_ASSERT_INT_EQ(rc, PGC_OK);
	}
	T_FAIL("the low-priority job was starved");
}

/* Collects auto_explain's notices: the plan of the claim's own statement in claim(). */
static void plan_notice(void *arg, const char *message)
{
	char **plan = arg;
	if (*plan == NULL && strstr(message, "picked AS MATERIALIZED") != NULL)
		*plan = strdup(message);
}

/* The plan claim() runs its plain claim of queue with, as auto_explain shows it, on a session
 * of its own (plans are cached per session), in a transaction rolled back after setup (SQL
 * run first in that transaction, may be NULL). */
static char *claim_plan_of(const char *queue, const char *setup)
{
	PGconn *pg = PQconnectdb(t_dsn());
	T_ASSERT(PQstatus(pg) == CONNECTION_OK);
	char *plan = NULL;
	PQsetNoticeProcessor(pg, plan_notice, &plan);
	char call[256];
	snprintf(call, sizeof call, "SELECT count(*) FROM %s.claim('%s', 10, 30000, 'w')", schema, queue);
	const char *steps[] = { "LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
		                    "SET auto_explain.log_nested_statements = on",
		                    "SET auto_explain.log_level = notice", "BEGIN", setup ? setup : "SELECT 1", call,
		                    "ROLLBACK" };
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		PGresult *r = PQexec(pg, steps[i]);
		if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
			T_FAIL("%s: %s", steps[i], PQresultErrorMessage(r));
		PQclear(r);
	}
	PQfinish(pg);
	if (plan == NULL)
		T_FAIL("auto_explain showed no plan of the plain claim");
	return plan;
}

/* A backlog the statistics have not seen yet (a new queue, a sudden spike) must not change
 * the claim's plan: it walks the claim index in order and stops after LIMIT rows. A plan that
 * sorts the pending set instead costs O(backlog) per claim, just when the backlog is large. */
static void queue__claim_plan_ignores_stale_stats(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	char sql[256];
	snprintf(sql, sizeof sql, "ALTER TABLE %s.jobs SET (autovacuum_enabled = off)", schema);
	T_ASSERT_INT_EQ(pgc_exec(c, sql, &err), PGC_OK);
	enum { OLD = 200, NEW = 20000, CHUNK = 5000 };
	const char **p = malloc(CHUNK * sizeof *p);
	T_ASSERT(p != NULL);
	for (int i = 0; i < CHUNK; i++)
		p[i] = "{}";
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "old", OLD, (const char *const *)p, NULL, NULL, NULL, NULL, NULL, &err), PGC_OK);
	snprintf(sql, sizeof sql, "ANALYZE %s.jobs", schema);
	T_ASSERT_INT_EQ(pgc_exec(c, sql, &err), PGC_OK);
	for (int i = 0; i < NEW / CHUNK; i++)
		T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "new", CHUNK, (const char *const *)p, NULL, NULL, NULL, NULL, NULL, &err), PGC_OK);
	free(p);
	char *plan = claim_plan_of("new", NULL);
	if (strstr(plan, "jobs_claim") == NULL || strstr(plan, "Sort") != NULL)
		T_FAIL("the claim does not walk the claim index in order:\n%s", plan);
	free(plan);
	/* Which plan the planner picks among near-equal costs depends on index sizes; what makes
	 * the claim safe is that no other index can serve it. Hide the claim index (in a
	 * transaction rolled back) and look: no other index over the pending set may appear. */
	snprintf(sql, sizeof sql, "UPDATE pg_index SET indisvalid = false WHERE indexrelid = '%s.jobs_claim'::regclass",
	         schema);
	plan = claim_plan_of("new", sql);
	if (strstr(plan, "jobs_waiting") != NULL || strstr(plan, "jobs_scheduled") != NULL)
		T_FAIL("another index could serve the claim:\n%s", plan);
	free(plan);
	teardown(c, q);
}

static void slow_handler(const pgc_job *job, pgc_job_result *res, void *arg);

/* ---- bad input ---------------------------------------------------------------------------- */

static void queue__bad_input(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t id = 7;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "", "{}", NULL, &id, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "queue name is empty");
	T_ASSERT_INT_EQ(id, 0);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, NULL, "{}", NULL, &id, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "x", NULL, NULL, &id, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(NULL, "x", "{}", NULL, &id, &err), PGC_EUSAGE);
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.max_attempts = -1;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "x", "{}", &o, &id, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "max_attempts");
	o.max_attempts = 0;
	o.priority = 40000;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "x", "{}", &o, &id, &err), PGC_EUSAGE);
	o.priority = 0;
	o.delay_ms = -5;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "x", "{}", &o, &id, &err), PGC_EUSAGE);
	o.delay_ms = 10;
	o.run_at = "2030-01-01";
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "x", "{}", &o, &id, &err), PGC_EUSAGE);
	o.delay_ms = 0;
	o.run_at = "not a time";
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "x", "{}", &o, &id, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "22007");
	char longname[200];
	memset(longname, 'q', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, longname, "{}", NULL, &id, &err), PGC_EUSAGE);

	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "x", "{not json", NULL, &id, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "22P02");
	T_ASSERT_CONTAINS(err.message, "payload 1 is not valid JSON");
	/* A batch with one bad payload enqueues nothing and names it. */
	const char *pl[4] = { "{\"a\":1}", "{\"a\":2}", "[1,2", "{}" };
	long bad = 0;
	size_t ins = 99;
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "x", 4, pl, NULL, NULL, NULL, &ins, &bad, &err), PGC_ESQL);
	T_ASSERT_INT_EQ(bad, 2);
	T_ASSERT_INT_EQ(ins, 0);
	T_ASSERT_CONTAINS(err.message, "payload 3");
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	/* Over the payload limit. */
	pgc_queue_config cfg = no_change();
	cfg.max_payload_bytes = 50;
	T_ASSERT_INT_EQ(pgc_queue_config_set(q, &cfg, &err), PGC_OK);
	pl[2] = "{\"big\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}";
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "x", 4, pl, NULL, NULL, NULL, &ins, &bad, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "22023");
	T_ASSERT_CONTAINS(err.message, "over the limit of 50 bytes");
	T_ASSERT_INT_EQ(bad, 2);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	/* Inside a transaction, the failure leaves the caller's transaction to roll back. */
	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "x", "{}", NULL, &id, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "x", "{", NULL, &id, &err), PGC_ESQL);
	T_ASSERT_INT_EQ(pgc_exec(c, "ROLLBACK", &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);

	pgc_queue_stat *st;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_stats(q, "nosuch", &st, &n, NULL, &err), PGC_ENOTFOUND);
	T_ASSERT_CONTAINS(err.message, "no queue named \"nosuch\"");
	pgc_job *jobs;
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "x", 0, 1000, NULL, &jobs, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "x", 1, 0, NULL, &jobs, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_heartbeat(q, 1, NULL, NULL, 1000, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_purge(q, NULL, "pending", 0, NULL, &err), PGC_EUSAGE);
	cfg = no_change();
	cfg.aging_ms = 0;
	T_ASSERT_INT_EQ(pgc_queue_config_set(q, &cfg, &err), PGC_EUSAGE);

	/* A schema without the queue tables. */
	pgc_queue *q2;
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = "pgc_queue_nonexistent";
	T_ASSERT_INT_EQ(pgc_queue_open(c, &qo, &q2, &err), PGC_ENOSCHEMA);
	T_ASSERT_CONTAINS(err.message, "pgcoord init");

	pgc_worker *w;
	pgc_worker_options wo = PGC_WORKER_OPTIONS_INIT;
	T_ASSERT_INT_EQ(pgc_worker_new(&wo, slow_handler, NULL, &w, &err), PGC_EUSAGE);
	teardown(c, q);
}

/* ---- graceful stop and wake-ups ------------------------------------------------------------ */

static atomic_int slow_started;

static void slow_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	atomic_fetch_add(&slow_started, 1);
	for (int i = 0; i < 300 && !pgc_job_lost(job); i++)
		sleep_ms(10);
}

static void queue__worker_graceful_stop(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	const char *pl[6] = { "{}", "{}", "{}", "{}", "{}", "{}" };
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "g", 6, pl, NULL, NULL, NULL, NULL, NULL, &err), PGC_OK);
	const char *queues[] = { "g" };
	pgc_worker_options o = worker_options(queues, 1, 2);
	o.prefetch = 2;
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, slow_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	int64_t deadline = pgc__now_ms() + 10000;
	while (atomic_load(&slow_started) < 2 && pgc__now_ms() < deadline)
		sleep_ms(10);
	T_ASSERT_INT_EQ(atomic_load(&slow_started), 2);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE status = 'running'", schema), 4);
	int64_t t0 = pgc__now_ms();
	pgc_worker_stop(w, 200);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	T_ASSERT(pgc__now_ms() - t0 < 2500); /* the handlers saw pgc_job_lost and returned */
	pgc_worker_stats st;
	pgc_worker_get_stats(w, &st);
	T_ASSERT_INT_EQ(st.released, 4);
	pgc_worker_free(w);
	/* Everything is back to pending, and a release is not an attempt: neither the two that
	 * never started nor the two stopped in their handler used one; those two say why. */
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE status = 'pending'", schema), 6);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE attempts = 0", schema), 6);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE last_error LIKE"
	                           " 'released unfinished when worker %% stopped%%'", schema), 2);
	teardown(c, q);
}

static atomic_llong woke_at;

static void stamp_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)job;
	(void)res;
	(void)arg;
	atomic_store(&woke_at, pgc__now_ms());
}

static void queue__wakeup_notify_and_timer(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	const char *queues[] = { "wk" };
	pgc_worker_options o = worker_options(queues, 1, 1);
	o.poll_ms = 30000; /* the fallback poll cannot explain a wake-up within the bound */
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, stamp_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	sleep_ms(300); /* idle */
	int64_t t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "wk", "{}", NULL, NULL, &err), PGC_OK);
	while (atomic_load(&woke_at) == 0 && pgc__now_ms() - t0 < 10000)
		sleep_ms(2);
	T_ASSERT(atomic_load(&woke_at) != 0);
	/* A scheduled job is picked up by the run_at timer, not early. */
	atomic_store(&woke_at, 0);
	pgc_job_options later = PGC_JOB_OPTIONS_INIT;
	later.delay_ms = 700;
	t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "wk", "{}", &later, NULL, &err), PGC_OK);
	while (atomic_load(&woke_at) == 0 && pgc__now_ms() - t0 < 10000)
		sleep_ms(2);
	T_ASSERT(atomic_load(&woke_at) != 0);
	T_ASSERT(atomic_load(&woke_at) - t0 >= 600);
	pgc_worker_stop(w, 1000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_free(w);
	teardown(c, q);
}

/* ---- the worker's session is killed: it reconnects and goes on -------------------------- */

static atomic_int reconnected;

static void watch_log(pgc_log_level level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	if (strcmp(msg, "reconnected") == 0)
		atomic_store(&reconnected, 1);
}

static void queue__worker_reconnects(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	const char *queues[] = { "rc" };
	pgc_worker_options o = worker_options(queues, 1, 2);
	o.poll_ms = 200;
	char app[64];
	snprintf(app, sizeof app, "pgcoord/test-rc-%d", (int)getpid());
	o.application_name = app;
	o.log = watch_log;
	atomic_store(&woke_at, 0);
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, stamp_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "rc", "{}", NULL, NULL, &err), PGC_OK);
	int64_t deadline = pgc__now_ms() + 10000;
	while (atomic_load(&woke_at) == 0 && pgc__now_ms() < deadline)
		sleep_ms(5);
	T_ASSERT(atomic_load(&woke_at) != 0);
	/* Kill the worker's session. */
	T_ASSERT(sql_int(c, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
	                    " WHERE application_name = '%s'", app) >= 1);
	atomic_store(&woke_at, 0);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "rc", "{}", NULL, NULL, &err), PGC_OK);
	deadline = pgc__now_ms() + 15000;
	while (atomic_load(&woke_at) == 0 && pgc__now_ms() < deadline)
		sleep_ms(5);
	T_ASSERT(atomic_load(&woke_at) != 0);
	deadline = pgc__now_ms() + 10000;
	while (sql_int(c, "SELECT count(*) FROM %s.job_history WHERE status = 'succeeded'", schema) < 2 &&
	       pgc__now_ms() < deadline)
		sleep_ms(20);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_history WHERE status = 'succeeded'", schema),
	                2);
	T_ASSERT(atomic_load(&reconnected));
	/* The new session listens again, and its registration replaced the old one. */
	pgc_worker_stats st;
	pgc_worker_get_stats(w, &st);
	long wakeups = st.wakeups;
	T_ASSERT(st.listening);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.workers", schema), 1);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "rc", "{}", NULL, NULL, &err), PGC_OK);
	deadline = pgc__now_ms() + 10000;
	while (st.wakeups == wakeups && pgc__now_ms() < deadline) {
		sleep_ms(5);
		pgc_worker_get_stats(w, &st);
	}
	T_ASSERT(st.wakeups > wakeups);
	pgc_worker_stop(w, 1000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_free(w);
	teardown(c, q);
}

/* ---- several queues share one worker's slots ------------------------------------------- */

static atomic_int per_queue[2];

static void count_queue(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	atomic_fetch_add(&per_queue[strcmp(job->queue, "qa") == 0 ? 0 : 1], 1);
}

static void queue__worker_two_queues(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	static const char *pl[300];
	for (int i = 0; i < 300; i++)
		pl[i] = "{}";
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "qa", 300, pl, NULL, NULL, NULL, NULL, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "qb", 300, pl, NULL, NULL, NULL, NULL, NULL, &err), PGC_OK);
	const char *queues[] = { "qa", "qb" };
	pgc_worker_options o = worker_options(queues, 2, 3);
	o.prefetch = 5;
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, count_queue, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	int64_t deadline = pgc__now_ms() + 20000;
	while (atomic_load(&per_queue[0]) + atomic_load(&per_queue[1]) < 600 && pgc__now_ms() < deadline)
		sleep_ms(10);
	pgc_worker_stop(w, 1000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_free(w);
	T_ASSERT_INT_EQ(atomic_load(&per_queue[0]), 300);
	T_ASSERT_INT_EQ(atomic_load(&per_queue[1]), 300);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	teardown(c, q);
}

/* ---- no thundering herd: an enqueue wakes one idle worker, not all of them ---------------- */

static atomic_int herd_runs;

static void herd_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)job;
	(void)res;
	(void)arg;
	atomic_fetch_add(&herd_runs, 1);
}

/* Starts n workers on this test's queue qname, each running one job at a time, with no jobs
 * held ready and a fallback poll of 30 s: only a notification wakes them in time. */
static void start_lone_workers(pgc_worker **w, int n, const char *qname, pgc_job_handler fn)
{
	const char *queues[] = { qname };
	for (int i = 0; i < n; i++) {
		pgc_worker_options o = worker_options(queues, 1, 1);
		o.prefetch = 0;
		o.poll_ms = 30000;
		pgc_error err;
		T_ASSERT_INT_EQ(pgc_worker_new(&o, fn, NULL, &w[i], &err), PGC_OK);
		T_ASSERT_INT_EQ(pgc_worker_start(w[i], &err), PGC_OK);
	}
}

/* Stops the n workers, each with grace_ms for its running jobs, then waits for and frees them. */
static void stop_workers(pgc_worker **w, int n, int64_t grace_ms)
{
	for (int i = 0; i < n; i++)
		pgc_worker_stop(w[i], grace_ms);
	for (int i = 0; i < n; i++) {
		pgc_error err;
		T_ASSERT_INT_EQ(pgc_worker_wait(w[i], &err), PGC_OK);
		pgc_worker_free(w[i]);
	}
}

static void queue__wakeup_one_worker(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_worker *w[3];
	start_lone_workers(w, 3, "h", herd_handler);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.workers WHERE free > 0", schema), 3);
	for (int round = 1; round <= 3; round++) {
		T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "h", "{}", NULL, NULL, &err), PGC_OK);
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "h", "{}", NULL, NULL, &err), PGC_OK);
		T_ASSERT_INT_EQ(pgc_exec(c, "COMMIT", &err), PGC_OK);
		int64_t deadline = pgc__now_ms() + 10000;
		while (atomic_load(&herd_runs) < 2 * round && pgc__now_ms() < deadline)
			sleep_ms(5);
		T_ASSERT_INT_EQ(atomic_load(&herd_runs), 2 * round);
	}
	sleep_ms(100);
	long wakeups = 0;
	for (int i = 0; i < 3; i++) {
		pgc_worker_stats st;
		pgc_worker_get_stats(w[i], &st);
		wakeups += st.wakeups;
	}
	/* One notification per transaction, delivered to one worker. */
	T_ASSERT_INT_EQ(wakeups, 3);
	stop_workers(w, 3, 1000);
	/* Stopped workers leave the registry. */
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.workers", schema), 0);
	teardown(c, q);
}

/* A worker picked for a wake-up while it is full passes the wake-up on. */
static atomic_int busy_started;
static atomic_llong second_started;

static void busy_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	if (atomic_fetch_add(&busy_started, 1) == 1)
		atomic_store(&second_started, pgc__now_ms());
	for (int i = 0; i < 300 && !pgc_job_lost(job); i++)
		sleep_ms(10);
}

static void queue__wakeup_passed_on_when_full(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_worker *w[2];
	start_lone_workers(w, 2, "f", busy_handler);
	/* Both registered as free; one of them takes the first job and is full. */
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "f", "{}", NULL, NULL, &err), PGC_OK);
	int64_t deadline = pgc__now_ms() + 10000;
	while (atomic_load(&busy_started) < 1 && pgc__now_ms() < deadline)
		sleep_ms(2);
	/* Whichever worker the next wake-up picks, the free one starts the job long before the busy
	 * one is done (3 s) or the fallback poll (30 s). Several tries so that the busy worker's
	 * stale registration is picked at least sometimes. */
	int64_t t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "f", "{}", NULL, NULL, &err), PGC_OK);
	deadline = t0 + 10000;
	while (atomic_load(&second_started) == 0 && pgc__now_ms() < deadline)
		sleep_ms(2);
	T_ASSERT(atomic_load(&second_started) != 0);
	T_ASSERT(atomic_load(&second_started) - t0 < 2500);
	stop_workers(w, 2, 0);
	teardown(c, q);
}

/* A handler's error text the server refuses (not UTF-8) still fails the job. */
static void junk_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)job;
	(void)arg;
	res->outcome = PGC_JOB_FAIL;
	snprintf(res->error, sizeof res->error, "bad bytes \xff\xfe here");
}

static void queue__worker_bad_error_text(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_job_options jo = PGC_JOB_OPTIONS_INIT;
	jo.max_attempts = 1;
	int64_t id;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "j", "{}", &jo, &id, &err), PGC_OK);
	const char *queues[] = { "j" };
	pgc_worker_options o = worker_options(queues, 1, 1);
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, junk_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	int64_t deadline = pgc__now_ms() + 10000;
	while (sql_int(c, "SELECT count(*) FROM %s.job_history", schema) < 1 && pgc__now_ms() < deadline)
		sleep_ms(20);
	pgc_worker_stop(w, 1000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_free(w);
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, id, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "failed");
	T_ASSERT_CONTAINS(info->last_error, "error text was rejected");
	pgc_free(info);
	teardown(c, q);
}

/* ---- a handle whose connection was closed first ------------------------------------------- */

static void queue__handle_after_conn_closed(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_conn *c2 = t_connect("pgcoord/test-queue-2");
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	pgc_queue *a, *b, *d;
	T_ASSERT_INT_EQ(pgc_queue_open(c2, &qo, &a, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_open(c2, &qo, &b, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_open(c2, &qo, &d, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(b, "hc", "{}", NULL, NULL, &err), PGC_OK);
	pgc_queue_close(b); /* one of several: the others stay usable */
	int64_t id;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(a, "hc", "{}", NULL, &id, &err), PGC_OK);
	pgc_conn_close(c2);
	/* Every call on a handle of the closed connection is refused; close still works. */
	T_ASSERT_INT_EQ(pgc_queue_enqueue(a, "hc", "{}", NULL, &id, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "was closed");
	pgc_job *jobs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_claim(d, "hc", 1, 1000, NULL, &jobs, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_complete(d, id, 1, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_reap(d, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_pause(d, "hc", true, &err), PGC_EUSAGE);
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(d, id, &info, &err), PGC_EUSAGE);
	T_ASSERT_STR_EQ(pgc_queue_channel(d), pgc_queue_channel(q));
	pgc_queue_close(a);
	pgc_queue_close(d);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'hc'", schema), 2);
	teardown(c, q);
}

/* ---- the server's warnings on the worker's session reach the worker's log ------------------ */

static atomic_int warned;

static void warning_log(pgc_log_level level, const char *msg, void *arg)
{
	(void)arg;
	if (level == PGC_LOG_WARN && strstr(msg, "done (pgcoord test)") != NULL)
		atomic_store(&warned, 1);
}

static void queue__worker_logs_server_notices(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	/* A completion deletes the job: the trigger warns on the worker's own session. */
	char sql[512];
	snprintf(sql, sizeof sql,
	         "CREATE FUNCTION %s.warn_done() RETURNS trigger LANGUAGE plpgsql AS"
	         " $$BEGIN RAISE WARNING 'job %% done (pgcoord test)', OLD.id; RETURN OLD; END$$;"
	         " CREATE TRIGGER warn_done AFTER DELETE ON %s.jobs FOR EACH ROW EXECUTE FUNCTION %s.warn_done()",
	         schema, schema, schema);
	T_ASSERT_INT_EQ(pgc_exec(c, sql, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "nt", "{}", NULL, NULL, &err), PGC_OK);
	const char *queues[] = { "nt" };
	pgc_worker_options o = worker_options(queues, 1, 1);
	o.log = warning_log;
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, herd_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	int64_t deadline = pgc__now_ms() + 10000;
	while ((sql_int(c, "SELECT count(*) FROM %s.job_history", schema) < 1 || !atomic_load(&warned)) &&
	       pgc__now_ms() < deadline)
		sleep_ms(20);
	pgc_worker_stop(w, 1000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_free(w);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_history WHERE status = 'succeeded'", schema), 1);
	T_ASSERT(atomic_load(&warned));
	teardown(c, q);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "queue__basic", queue__basic },
		{ "queue__drain_exactly_once", queue__drain_exactly_once },
		{ "queue__transactional_enqueue", queue__transactional_enqueue },
		{ "queue__stale_token_after_reap", queue__stale_token_after_reap },
		{ "queue__retry_backoff_dead_letter", queue__retry_backoff_dead_letter },
		{ "queue__priorities_schedule_unique_pause_cancel", queue__priorities_schedule_unique_pause_cancel },
		{ "queue__deferral_limit", queue__deferral_limit },
		{ "queue__worker_once", queue__worker_once },
		{ "queue__bulk_cancel_retry_purge", queue__bulk_cancel_retry_purge },
		{ "queue__aging_beats_starvation", queue__aging_beats_starvation },
		{ "queue__claim_plan_ignores_stale_stats", queue__claim_plan_ignores_stale_stats },
		{ "queue__bad_input", queue__bad_input },
		{ "queue__worker_graceful_stop", queue__worker_graceful_stop },
		{ "queue__wakeup_notify_and_timer", queue__wakeup_notify_and_timer },
		{ "queue__worker_reconnects", queue__worker_reconnects },
		{ "queue__worker_two_queues", queue__worker_two_queues },
		{ "queue__wakeup_one_worker", queue__wakeup_one_worker },
		{ "queue__wakeup_passed_on_when_full", queue__wakeup_passed_on_when_full },
		{ "queue__worker_bad_error_text", queue__worker_bad_error_text },
		{ "queue__worker_logs_server_notices", queue__worker_logs_server_notices },
		{ "queue__handle_after_conn_closed", queue__handle_after_conn_closed },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
