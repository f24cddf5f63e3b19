/* test_queue_cancel.c - cancelling jobs, running ones included, against a real server: the
 * handler is told, what it returns afterwards is ignored, a worker that missed the
 * notification finds out at its next lease renewal, and a cancel racing a completion has
 * exactly one outcome */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "../t.h"
#include "pgt.h"

static char schema[64];

static pgc_conn *setup(pgc_queue **q)
{
	return pgt_queue_setup(schema, sizeof schema, "pgc_qcancel", "pgcoord/test-queue-cancel", q);
}

static void teardown(pgc_conn *c, pgc_queue *q)
{
	pgt_queue_teardown(c, q, schema);
}

/* The status of job id in the history ('' when it is not there), as a small integer code for
 * sql_int: 1 succeeded, 2 failed, 3 cancelled, 0 none. */
static long long history_status(pgc_conn *c, int64_t id)
{
	return sql_int(c, "SELECT coalesce((SELECT CASE status WHEN 'succeeded' THEN 1 WHEN 'failed' THEN 2"
	               " WHEN 'cancelled' THEN 3 END FROM %s.job_history WHERE id = %lld), 0)",
	               schema, (long long)id);
}

/* ---- a running C job -------------------------------------------------------------------- */

static atomic_int long_started, long_saw_cancel, long_saw_lost, quick_done;

/* {"long":true} runs until it is cancelled (10 s at most), then claims success, which must be
 * ignored; anything else completes at once. */
static void handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)arg;
	if (strstr(job->payload, "long") == NULL) {
		atomic_fetch_add(&quick_done, 1);
		return;
	}
	atomic_fetch_add(&long_started, 1);
	for (int i = 0; i < 1000 && !pgc_job_cancelled(job); i++)
		sleep_ms(10);
	if (pgc_job_cancelled(job))
		atomic_fetch_add(&long_saw_cancel, 1);
	if (pgc_job_lost(job))
		atomic_fetch_add(&long_saw_lost, 1);
	res->outcome = PGC_JOB_COMPLETE;
}

static bool wait_int(atomic_int *v, int want, int ms)
{
	int64_t deadline = pgc__now_ms() + ms;
	while (atomic_load(v) < want && pgc__now_ms() < deadline)
		sleep_ms(10);
	return atomic_load(v) >= want;
}

/* listen: told by the notification; otherwise (no LISTEN at all) by the lease renewal. */
static void cancel_running(bool listen)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	atomic_store(&long_started, 0);
	atomic_store(&long_saw_cancel, 0);
	atomic_store(&long_saw_lost, 0);
	atomic_store(&quick_done, 0);
	const char *queues[] = { "c" };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = t_dsn();
	o.schema = schema;
	o.queues = queues;
	o.n_queues = 1;
	o.concurrency = 2;
	o.listen = listen;
	o.poll_ms = 100;
	o.lease_ms = listen ? 30000 : 1500; /* without LISTEN: renewed every 500 ms */
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	int64_t id;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "c", "{\"long\": true}", NULL, &id, &err), PGC_OK);
	T_ASSERT(wait_int(&long_started, 1, 10000));
	bool was_running = false;
	T_ASSERT_INT_EQ(pgc_queue_cancel_job(q, id, &was_running, &err), PGC_OK);
	T_ASSERT(was_running);
	T_ASSERT_INT_EQ(history_status(c, id), 3);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	/* The handler is told (well before its own 10 s are up), and sees the job lost too. */
	T_ASSERT(wait_int(&long_saw_cancel, 1, 8000));
	T_ASSERT_INT_EQ(atomic_load(&long_saw_lost), 1);
	/* The worker goes on with other jobs. */
	int64_t id2;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "c", "{}", NULL, &id2, &err), PGC_OK);
	int64_t deadline = pgc__now_ms() + 10000;
	while (history_status(c, id2) != 1 && pgc__now_ms() < deadline)
		sleep_ms(20);
	T_ASSERT_INT_EQ(history_status(c, id2), 1);
	/* The handler's success came after the cancel: the job stays cancelled. */
	pgc_worker_stats st;
	deadline = pgc__now_ms() + 5000;
	do {
		sleep_ms(20);
		pgc_worker_get_stats(w, &st);
	} while (st.cancelled < 1 && pgc__now_ms() < deadline);
	T_ASSERT_INT_EQ(st.cancelled, 1);
	T_ASSERT_INT_EQ(st.completed, 1);
	T_ASSERT_INT_EQ(st.stale, 0);
	T_ASSERT_INT_EQ(history_status(c, id), 3);
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, id, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->status, "cancelled");
	T_ASSERT(info->last_error != NULL);
	T_ASSERT_CONTAINS(info->last_error, "cancelled while running on ");
	pgc_free(info);
	pgc_worker_stop(w, 1000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_free(w);
	teardown(c, q);
}

static void queue__cancel_running_c_job(void)
{
	cancel_running(true);
}

static void queue__cancel_seen_at_lease_renewal(void)
{
	cancel_running(false);
}

/* ---- finished, unknown and bad ids ------------------------------------------------------ */

static void queue__cancel_finished_job(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t ok_id, fail_id, pend_id;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "f", "{}", NULL, &ok_id, &err), PGC_OK);
	pgc_job_options jo = PGC_JOB_OPTIONS_INIT;
	jo.max_attempts = 1;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "f", "{}", &jo, &fail_id, &err), PGC_OK);
	pgc_job *jobs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "f", 2, 30000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 2);
	for (size_t i = 0; i < n; i++) {
		bool dead = false;
		if (jobs[i].id == ok_id)
			T_ASSERT_INT_EQ(pgc_queue_complete(q, jobs[i].id, jobs[i].token, &err), PGC_OK);
		else
			T_ASSERT_INT_EQ(pgc_queue_fail(q, jobs[i].id, jobs[i].token, "no", NULL, &dead, &err), PGC_OK);
	}
	pgc_queue_jobs_free(jobs, n);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, ok_id, &err), PGC_EFINISHED);
	T_ASSERT_CONTAINS(err.message, "has already finished (succeeded)");
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_USAGE);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, fail_id, &err), PGC_EFINISHED);
	T_ASSERT_CONTAINS(err.message, "(failed)");
	/* A pending job: cancelled, not running; a second cancel finds it finished. */
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "f", "{}", NULL, &pend_id, &err), PGC_OK);
	bool was_running = true;
	T_ASSERT_INT_EQ(pgc_queue_cancel_job(q, pend_id, &was_running, &err), PGC_OK);
	T_ASSERT(!was_running);
	T_ASSERT_INT_EQ(pgc_queue_cancel_job(q, pend_id, &was_running, &err), PGC_EFINISHED);
	T_ASSERT_CONTAINS(err.message, "(cancelled)");
	T_ASSERT(!was_running);
	/* The history keeps what it had: nothing was changed by the refused cancels. */
	T_ASSERT_INT_EQ(history_status(c, ok_id), 1);
	T_ASSERT_INT_EQ(history_status(c, fail_id), 2);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, 99999999, &err), PGC_ENOTFOUND);
	T_ASSERT_CONTAINS(err.message, "no job with id 99999999");
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, 0, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_cancel_job(NULL, 1, NULL, &err), PGC_EUSAGE);
	T_ASSERT_STR_EQ(pgc_strerror(PGC_EFINISHED), "the job has finished already");
	teardown(c, q);
}

/* ---- the race with a completion --------------------------------------------------------- */

typedef struct racer {
	pgc_conn *c;
	pgc_queue *q;
	pthread_barrier_t *go;
	int64_t id, token;
	int rc;
	pgc_error err;
} racer;

static void *race_complete(void *arg)
{
	racer *r = arg;
	pthread_barrier_wait(r->go);
	r->rc = pgc_queue_complete(r->q, r->id, r->token, &r->err);
	return NULL;
}

static void *race_cancel(void *arg)
{
	racer *r = arg;
	pthread_barrier_wait(r->go);
	r->rc = pgc_queue_cancel(r->q, r->id, &r->err);
	return NULL;
}

static racer racer_open(pthread_barrier_t *go)
{
	racer r;
	memset(&r, 0, sizeof r);
	r.c = t_connect("pgcoord/test-queue-cancel-race");
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	if (pgc_queue_open(r.c, &qo, &r.q, &r.err) != PGC_OK)
		T_FAIL("open: %s", r.err.message);
	r.go = go;
	return r;
}

/* A completion and a cancel of the same running job sent at the same moment from two sessions,
 * many times: each time exactly one of them takes effect, the other says so, and the history
 * agrees (succeeded and "already finished", or cancelled and a stale completion). */
static void queue__cancel_races_completion(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, 2);
	racer a = racer_open(&go), b = racer_open(&go);
	int cancelled = 0, completed = 0;
	for (int i = 0; i < 300; i++) {
		int64_t id;
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "r", "{}", NULL, &id, &err), PGC_OK);
		pgc_job *jobs;
		size_t n;
		T_ASSERT_INT_EQ(pgc_queue_claim(q, "r", 1, 30000, "t", &jobs, &n, &err), PGC_OK);
		T_ASSERT_INT_EQ(jobs[0].id, id);
		a.id = b.id = id;
		a.token = jobs[0].token;
		pgc_queue_jobs_free(jobs, n);
		pthread_t ta, tb;
		/* Alternate who starts first, so that both orders are tried. */
		if (i % 2 == 0) {
			pthread_create(&ta, NULL, race_complete, &a);
			pthread_create(&tb, NULL, race_cancel, &b);
		} else {
			pthread_create(&tb, NULL, race_cancel, &b);
			pthread_create(&ta, NULL, race_complete, &a);
		}
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		long long hs = history_status(c, id);
		if (b.rc == PGC_OK) {
			if (a.rc != PGC_ESTALE || hs != 3)
				T_FAIL("iteration %d: cancel took effect, but complete gave %d (%s) and the history %lld",
				       i, a.rc, a.err.message, hs);
			cancelled++;
		} else if (b.rc == PGC_EFINISHED) {
			if (a.rc != PGC_OK || hs != 1 || strstr(b.err.message, "(succeeded)") == NULL)
				T_FAIL("iteration %d: cancel said \"%s\", but complete gave %d and the history %lld",
				       i, b.err.message, a.rc, hs);
			completed++;
		} else {
			T_FAIL("iteration %d: cancel gave %d: %s", i, b.rc, b.err.message);
		}
		T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE id = %lld", schema, (long long)id), 0);
		T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_history WHERE id = %lld", schema, (long long)id), 1);
	}
	fprintf(stderr, "race: %d cancelled, %d completed first\n", cancelled, completed);
	pgc_queue_close(a.q);
	pgc_conn_close(a.c);
	pgc_queue_close(b.q);
	pgc_conn_close(b.c);
	pthread_barrier_destroy(&go);
	teardown(c, q);
}

/* The same race through a worker whose handler returns at once: cancels sent while the job is
 * pending, running or being completed end either cancelled or succeeded, never both, and the
 * cancel's answer says which. */
static void noop_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)job;
	(void)res;
	(void)arg;
}

static void queue__cancel_races_worker(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	const char *queues[] = { "rw" };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = t_dsn();
	o.schema = schema;
	o.queues = queues;
	o.n_queues = 1;
	o.concurrency = 2;
	o.flush_ms = 0;
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, noop_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	int cancelled = 0, finished = 0;
	for (int i = 0; i < 200; i++) {
		int64_t id;
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "rw", "{}", NULL, &id, &err), PGC_OK);
		/* From at once to a few milliseconds: before the claim, during the handler, during
		 * the completion's round trip. */
		if (i % 4 != 0)
			usleep((useconds_t)(i % 7) * 300);
		int rc = pgc_queue_cancel(q, id, &err);
		int64_t deadline = pgc__now_ms() + 10000;
		while (history_status(c, id) == 0 && pgc__now_ms() < deadline)
			sleep_ms(5);
		long long hs = history_status(c, id);
		if (rc == PGC_OK && hs == 3)
			cancelled++;
		else if (rc == PGC_EFINISHED && hs == 1 && strstr(err.message, "(succeeded)") != NULL)
			finished++;
		else
			T_FAIL("iteration %d: cancel gave %d (%s), history %lld", i, rc, rc ? err.message : "", hs);
		T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_history WHERE id = %lld", schema, (long long)id), 1);
	}
	pgc_worker_stop(w, 1000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_stats st;
	pgc_worker_get_stats(w, &st);
	/* Every job the worker held and did not complete was counted as cancelled. */
	T_ASSERT_INT_EQ(st.completed, finished);
	T_ASSERT_INT_EQ(st.stale, 0);
	fprintf(stderr, "worker race: %d cancelled, %d finished first (%ld cancelled while held)\n", cancelled,
	        finished, st.cancelled);
	pgc_worker_free(w);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	teardown(c, q);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "queue__cancel_running_c_job", queue__cancel_running_c_job },
		{ "queue__cancel_seen_at_lease_renewal", queue__cancel_seen_at_lease_renewal },
		{ "queue__cancel_finished_job", queue__cancel_finished_job },
		{ "queue__cancel_races_completion", queue__cancel_races_completion },
		{ "queue__cancel_races_worker", queue__cancel_races_worker },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
