/* test_queue_result.c - job results: kept with the job, refused over their bound, waited for */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "conn/conn_int.h"
#include "queue/queue_int.h"
#include "../t.h"
#include "pgt.h"

static char schema[64];

static pgc_conn *setup(pgc_queue **q)
{
	return pgt_queue_setup(schema, sizeof schema, "pgc_qres", "pgcoord/test-queue-result", q);
}

static void teardown(pgc_conn *c, pgc_queue *q)
{
	pgt_queue_teardown(c, q, schema);
}

/* Enqueues one job and claims it: its id and token. */
static void enqueue_claim(pgc_queue *q, const char *queue, int max_attempts, int64_t *id, int64_t *token)
{
	pgc_error err;
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.max_attempts = max_attempts;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, queue, "{}", &o, id, &err), PGC_OK);
	pgc_job *jobs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_claim(q, queue, 1, 30000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT_INT_EQ(jobs[0].id, *id);
	*token = jobs[0].token;
	pgc_queue_jobs_free(jobs, n);
}

/* A string of n bytes: a JSON string literal of n - 2 'x's. */
static char *big_json(size_t n)
{
	char *s = malloc(n + 1);
	T_ASSERT(s != NULL);
	memset(s, 'x', n);
	s[0] = s[n - 1] = '"';
	s[n] = '\0';
	return s;
}

static void queue_result__stored_and_returned(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	/* Kept even when succeeded jobs are not: the result is what the job leaves. */
	sql(c, "UPDATE %s.queue_settings SET succeeded_retention = '0'", schema);
	int64_t id, tok;
	enqueue_claim(q, "r", 1, &id, &tok);
	const char *st;
	char *res;
	T_ASSERT_INT_EQ(pgc_queue_job_result(q, id, &st, &res, &err), PGC_OK);
	T_ASSERT_STR_EQ(st, "running");
	T_ASSERT(res == NULL);
	T_ASSERT_INT_EQ(pgc_queue_complete_result(q, id, tok, "{\"sum\": 42, \"s\": \"\\u00e9\"}", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_job_result(q, id, &st, &res, &err), PGC_OK);
	T_ASSERT_STR_EQ(st, "succeeded");
	T_ASSERT(res != NULL);
	T_ASSERT_STR_EQ(res, "{\"s\": \"é\", \"sum\": 42}");
	free(res);
	/* A stale token completes nothing, result or not. */
	T_ASSERT_INT_EQ(pgc_queue_complete_result(q, id, tok, "1", &err), PGC_ESTALE);
	/* Without a result and with no retention, nothing is left of a succeeded job. */
	int64_t id2, tok2;
	enqueue_claim(q, "r", 1, &id2, &tok2);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, id2, tok2, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_job_result(q, id2, &st, &res, &err), PGC_ENOTFOUND);
	T_ASSERT_STR_EQ(err.sqlstate, "P0002");
	T_ASSERT_INT_EQ(pgc_queue_job_result(q, 999999999, &st, &res, &err), PGC_ENOTFOUND);
	/* The protocol's function itself, as another client calls it. */
	T_ASSERT_INT_EQ(sql_int(c, "SELECT (result->>'sum')::int FROM %s.job_result(%lld)", schema, (long long)id), 42);
	teardown(c, q);
}

/* Handlers of the batch test: by payload, a result that is too big, one that is not JSON, a
 * good one, or none. */
static void result_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)arg;
	if (strstr(job->payload, "big") != NULL)
		res->result_json = big_json(PGC_JOB_RESULT_MAX + 1);
	else if (strstr(job->payload, "bad") != NULL)
		res->result_json = strdup("{not json");
	else if (strstr(job->payload, "good") != NULL)
		res->result_json = strdup("[1, 2, 3]");
	else if (strstr(job->payload, "fail") != NULL) {
		res->outcome = PGC_JOB_FAIL;
		res->result_json = strdup("\"dropped: a failure keeps no result\"");
		snprintf(res->error, sizeof res->error, "failed on purpose");
	}
}

static void queue_result__over_bound_refused(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	/* The library's call: refused, and the job is still running under its token. */
	int64_t id, tok;
	enqueue_claim(q, "direct", 1, &id, &tok);
	char *big = big_json(PGC_JOB_RESULT_MAX + 1);
	T_ASSERT_INT_EQ(pgc_queue_complete_result(q, id, tok, big, &err), PGC_EUSAGE);
	T_ASSERT_STR_EQ(err.sqlstate, "22023");
	T_ASSERT_CONTAINS(err.message, "over the limit of 65536 bytes");
	free(big);
	T_ASSERT_INT_EQ(pgc_queue_complete_result(q, id, tok, "{oops", &err), PGC_EUSAGE);
	/* At the bound exactly, it is kept. */
	big = big_json(PGC_JOB_RESULT_MAX);
	T_ASSERT_INT_EQ(pgc_queue_complete_result(q, id, tok, big, &err), PGC_OK);
	free(big);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT octet_length(result::text) FROM %s.job_history WHERE id = %lld", schema,
	                        (long long)id), PGC_JOB_RESULT_MAX);

	/* The worker: one batch of completions, two refused results among them. */
	const char *payloads[] = { "{\"k\":\"good\"}", "{\"k\":\"big\"}", "{\"k\":\"none\"}", "{\"k\":\"bad\"}",
		                       "{\"k\":\"good\"}", "{\"k\":\"fail\"}" };
	enum { N = 6 };
	int64_t ids[N];
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.max_attempts = 1;
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "batch", N, payloads, NULL, &o, ids, NULL, NULL, &err), PGC_OK);
	const char *queues[] = { "batch" };
	pgc_worker_options wo = PGC_WORKER_OPTIONS_INIT;
	wo.dsn = t_dsn();
	wo.schema = schema;
	wo.queues = queues;
	wo.n_queues = 1;
	wo.concurrency = N;
	wo.flush_ms = 200; /* the completions share one batch */
	wo.once = true;
	wo.reap_ms = 0;
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&wo, result_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_free(w);
	const char *want[N] = { "succeeded", "failed", "succeeded", "failed", "succeeded", "failed" };
	for (int i = 0; i < N; i++) {
		const char *st;
		char *res;
		T_ASSERT_INT_EQ(pgc_queue_job_result(q, ids[i], &st, &res, &err), PGC_OK);
		if (strcmp(st, want[i]) != 0)
			T_FAIL("job %d (%s) is %s, not %s", i, payloads[i], st, want[i]);
		if (i == 0 || i == 4)
			T_ASSERT_STR_EQ(res, "[1, 2, 3]");
		else
			T_ASSERT(res == NULL);
		free(res);
	}
	/* The refused ones say why. */
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, ids[1], &info, &err), PGC_OK);
	T_ASSERT_CONTAINS(info->last_error, "result was refused");
	T_ASSERT_CONTAINS(info->last_error, "65536");
	pgc_free(info);
	T_ASSERT_INT_EQ(pgc_queue_show(q, ids[3], &info, &err), PGC_OK);
	T_ASSERT_CONTAINS(info->last_error, "result was refused");
	T_ASSERT_CONTAINS(info->last_error, "json");
	pgc_free(info);
	teardown(c, q);
}

/* A waiter on a session of its own. */
typedef struct waiter {
	int64_t id, timeout_ms;
	int rc;
	const char *status;
	char *result;
	atomic_llong woke_ms;
	atomic_bool listening;
	pgc_error err;
} waiter;

static void *wait_main(void *arg)
{
	waiter *wt = arg;
	pgc_conn *c = t_connect("pgcoord/test-queue-result-wait");
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	pgc_queue *q;
	T_ASSERT_INT_EQ(pgc_queue_open(c, &qo, &q, &wt->err), PGC_OK);
	atomic_store(&wt->listening, true);
	wt->rc = pgc_queue_result_wait(q, wt->id, wt->timeout_ms, &wt->status, &wt->result, &wt->err);
	atomic_store(&wt->woke_ms, pgc__now_ms());
	pgc_queue_close(q);
	pgc_conn_close(c);
	return NULL;
}

/* Polls until the waiter's session LISTENs on the result channel (at most 10 s). */
static void until_listening(pgc_conn *c)
{
	for (int i = 0; i < 1000; i++) {
		if (sql_int(c, "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
		               "'pgcoord/test-queue-result-wait' AND query LIKE '%%job_result%%'") > 0)
			return;
		sleep_ms(10);
	}
	T_FAIL("the waiter never looked at the job");
}

static void queue_result__wait_woken_by_notify(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t id, tok;
	enqueue_claim(q, "w", 1, &id, &tok);
	/* The bound is long, and the slow look comes every second: a wake within that is the
	 * notification's, measured below. */
	waiter wt = { .id = id, .timeout_ms = 20000 };
	pthread_t th;
	T_ASSERT_INT_EQ(pthread_create(&th, NULL, wait_main, &wt), 0);
	until_listening(c);
	sleep_ms(300); /* past the first look, waiting */
	T_ASSERT_INT_EQ(pgc_queue_complete_result(q, id, tok, "{\"ok\": true}", &err), PGC_OK);
	int64_t done_ms = pgc__now_ms();
	pthread_join(th, NULL);
	if (wt.rc != PGC_OK)
		T_FAIL("wait: %d %s", wt.rc, wt.err.message);
	T_ASSERT_STR_EQ(wt.status, "succeeded");
	T_ASSERT_STR_EQ(wt.result, "{\"ok\": true}");
	free(wt.result);
	fprintf(stderr, "wake latency after the completion's commit: %lld ms\n",
	        (long long)(atomic_load(&wt.woke_ms) - done_ms));
	/* A bound that passes: PGC_ETIMEDOUT with the live status. */
	int64_t id2;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "w", "{}", NULL, &id2, &err), PGC_OK);
	const char *st;
	char *res;
	T_ASSERT_INT_EQ(pgc_queue_result_wait(q, id2, 200, &st, &res, &err), PGC_ETIMEDOUT);
	T_ASSERT_STR_EQ(st, "pending");
	T_ASSERT(res == NULL);
	T_ASSERT_INT_EQ(pgc_queue_result_wait(q, 999999999, 200, &st, &res, &err), PGC_ENOTFOUND);
	/* Not inside a transaction: its LISTEN would only start at commit. */
	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_result_wait(q, id2, 200, &st, &res, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_exec(c, "ROLLBACK", &err), PGC_OK);
	teardown(c, q);
}

static void queue_result__wait_sees_failure(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t id, tok;
	enqueue_claim(q, "f", 1, &id, &tok);
	waiter wt = { .id = id, .timeout_ms = 10000 };
	pthread_t th;
	T_ASSERT_INT_EQ(pthread_create(&th, NULL, wait_main, &wt), 0);
	until_listening(c);
	bool dead = false;
	T_ASSERT_INT_EQ(pgc_queue_fail(q, id, tok, "broken", NULL, &dead, &err), PGC_OK);
	T_ASSERT(dead);
	int64_t done_ms = pgc__now_ms();
	pthread_join(th, NULL);
	if (wt.rc != PGC_OK)
		T_FAIL("wait: %d %s", wt.rc, wt.err.message);
	T_ASSERT_STR_EQ(wt.status, "failed");
	T_ASSERT(wt.result == NULL);
	fprintf(stderr, "failure seen %lld ms after it was recorded (no notification: the slow look)\n",
	        (long long)(atomic_load(&wt.woke_ms) - done_ms));
	teardown(c, q);
}

/* The protocol's outcomes, as a client that is not the C library sees them. */
static void queue_result__protocol_outcomes(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	int64_t id, tok;
	enqueue_claim(q, "p", 2, &id, &tok);
	sql(c, "SELECT 1"); /* the session is idle */
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.renew('{%lld}', '{%lld}', 1000) WHERE status = 'held'",
	                        schema, (long long)id, (long long)tok), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.renew('{%lld}', '{%lld}', 1000) WHERE status = 'lost'",
	                        schema, (long long)id, (long long)tok + 1), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT (%s.fail(%lld, %lld, 'x', 0, 0, NULL, NULL, 60000) = 'retried')::int",
	                        schema, (long long)id, (long long)tok), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT (%s.fail(%lld, %lld, 'x', 0, 0, NULL, NULL) = 'stale')::int",
	                        schema, (long long)id, (long long)tok), 1);
	/* p_retry_in_ms: the job waits exactly that long. */
	T_ASSERT_INT_EQ(sql_int(c, "SELECT (run_at - clock_timestamp() BETWEEN interval '50 s' AND interval '61 s')::int"
	                           " FROM %s.jobs WHERE id = %lld", schema, (long long)id), 1);
	teardown(c, q);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "queue_result__stored_and_returned", queue_result__stored_and_returned },
		{ "queue_result__over_bound_refused", queue_result__over_bound_refused },
		{ "queue_result__wait_woken_by_notify", queue_result__wait_woken_by_notify },
		{ "queue_result__wait_sees_failure", queue_result__wait_sees_failure },
		{ "queue_result__protocol_outcomes", queue_result__protocol_outcomes },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
