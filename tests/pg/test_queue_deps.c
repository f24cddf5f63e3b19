/* test_queue_deps.c - job dependencies and groups against a real server: order, both
 * policies on every way a dependency ends, unknown ids, finished dependencies, a race of
 * completions and enqueues, groups' on-complete job, bad input */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "queue/queue_int.h"
#include "../t.h"
#include "pgt.h"

static char schema[64];

static pgc_conn *setup(pgc_queue **q)
{
	return pgt_queue_setup(schema, sizeof schema, "pgc_deps", "pgcoord/test-queue-deps", q);
}

static void teardown(pgc_conn *c, pgc_queue *q)
{
	pgt_queue_teardown(c, q, schema);
}

/* Enqueues one job into queue after the n ids of after (none when n is 0). */
static int64_t enq(pgc_queue *q, const char *queue, const int64_t *after, size_t n, pgc_dep_policy p,
                   const char *group, int max_attempts)
{
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.after = after;
	o.n_after = n;
	o.on_dep_failure = p;
	o.group = group;
	o.max_attempts = max_attempts;
	int64_t id = 0;
	pgc_error err;
	if (pgc_queue_enqueue(q, queue, "{}", &o, &id, &err) != PGC_OK)
		T_FAIL("enqueue: %s", err.message);
	return id;
}

/* The one job a claim of queue gives, or 0 when none; *tok gets its token. */
static int64_t claim1(pgc_queue *q, const char *queue, int64_t lease_ms, int64_t *tok)
{
	pgc_job *jobs;
	size_t n = 0;
	pgc_error err;
	if (tok)
		*tok = 0;
	int rc = pgc_queue_claim(q, queue, 1, lease_ms, "t", &jobs, &n, &err);
	if (rc == PGC_EEMPTY)
		return 0;
	if (rc != PGC_OK)
		T_FAIL("claim: %s", err.message);
	int64_t id = jobs[0].id;
	if (tok)
		*tok = jobs[0].token;
	pgc_queue_jobs_free(jobs, n);
	return id;
}

/* Claims and completes job id (the only runnable one of its queue). */
static void run_ok(pgc_queue *q, const char *queue, int64_t id)
{
	int64_t tok;
	T_ASSERT_INT_EQ(claim1(q, queue, 30000, &tok), id);
	pgc_error err;
	if (pgc_queue_complete(q, id, tok, &err) != PGC_OK)
		T_FAIL("complete: %s", err.message);
}

static void status_is(pgc_queue *q, int64_t id, const char *status, const char *last_error)
{
	pgc_job_info *j;
	pgc_error err;
	if (pgc_queue_show(q, id, &j, &err) != PGC_OK)
		T_FAIL("show %lld: %s", (long long)id, err.message);
	T_ASSERT_STR_EQ(j->status, status);
	if (last_error != NULL)
		T_ASSERT_STR_EQ(j->last_error, last_error);
	pgc_free(j);
}

/* C after B after A: each is claimed only once the one before succeeded; a waiting job says
 * what it waits for. */
static void queue_deps__chain_in_order(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	int64_t a = enq(q, "chain", NULL, 0, PGC_DEP_CANCEL, NULL, 0);
	int64_t b = enq(q, "chain", &a, 1, PGC_DEP_CANCEL, NULL, 0);
	int64_t two[2] = { b, a };
	int64_t cc = enq(q, "chain", two, 2, PGC_DEP_CANCEL, NULL, 0);
	status_is(q, b, "waiting", NULL);
	pgc_job_info *j;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_queue_show(q, cc, &j, &err), PGC_OK);
	char want[64];
	snprintf(want, sizeof want, "waiting for job %lld, and 1 more", (long long)a);
	T_ASSERT_STR_EQ(j->held, want);
	pgc_free(j);
	pgc_queue_stat *st;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_stats(q, "chain", &st, &n, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(st[0].waiting, 2);
	T_ASSERT_INT_EQ(st[0].pending, 1);
	pgc_free(st);
	T_ASSERT_INT_EQ(pgc_queue_stats_capped(q, "chain", 100, &st, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(st[0].waiting, 2);
	pgc_free(st);
	pgc_job_wait w;
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, b, &w, &err), PGC_OK);
	snprintf(want, sizeof want, "waiting for job %lld", (long long)a);
	T_ASSERT_CONTAINS(w.reason, want);
	pgc_job_info **list;
	T_ASSERT_INT_EQ(pgc_queue_list(q, "chain", "waiting", 10, &list, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)n, 2);
	pgc_queue_infos_free(list, n);

	int64_t tok;
	T_ASSERT_INT_EQ(claim1(q, "chain", 30000, &tok), a);
	T_ASSERT_INT_EQ(claim1(q, "chain", 30000, NULL), 0);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, a, tok, &err), PGC_OK);
	status_is(q, b, "pending", NULL);
	status_is(q, cc, "waiting", NULL);
	run_ok(q, "chain", b);
	run_ok(q, "chain", cc);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_deps", schema), 0);
	teardown(c, q);
}

/* A dependency failed for good (by a failure, the reaper's lease pass, a deferral past the
 * limit): cancel-policy dependents are cancelled, their own dependents after them; run-policy
 * ones run. */
static void queue_deps__policy_on_failure(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t a = enq(q, "pf", NULL, 0, PGC_DEP_CANCEL, NULL, 1);
	int64_t b = enq(q, "pf", &a, 1, PGC_DEP_CANCEL, NULL, 0);
	int64_t r = enq(q, "pf", &a, 1, PGC_DEP_RUN, NULL, 0);
	int64_t d = enq(q, "pf", &b, 1, PGC_DEP_CANCEL, NULL, 0);
	int64_t e = enq(q, "pf", &b, 1, PGC_DEP_RUN, NULL, 0);
	int64_t tok;
	T_ASSERT_INT_EQ(claim1(q, "pf", 30000, &tok), a);
	bool dead = false;
	pgc_backoff now = { 0, 0 };
	T_ASSERT_INT_EQ(pgc_queue_fail(q, a, tok, "boom", &now, &dead, &err), PGC_OK);
	T_ASSERT(dead);
	char why[64];
	snprintf(why, sizeof why, "dependency %lld failed", (long long)a);
	status_is(q, b, "cancelled", why);
	snprintf(why, sizeof why, "dependency %lld was cancelled", (long long)b);
	status_is(q, d, "cancelled", why);
	status_is(q, r, "pending", NULL);
	status_is(q, e, "pending", NULL);

	/* The reaper fails a job out of attempts when its lease expires. */
	int64_t f = enq(q, "pr", NULL, 0, PGC_DEP_CANCEL, NULL, 1);
	int64_t g = enq(q, "pr", &f, 1, PGC_DEP_CANCEL, NULL, 0);
	T_ASSERT_INT_EQ(claim1(q, "pr", 50, NULL), f);
	sleep_ms(150);
	pgc_reap_result rr;
	int rc;
	for (int i = 0; i < 500 && (rc = pgc_queue_reap(q, &rr, &err)) == PGC_EBUSY; i++)
		sleep_ms(10);
	T_ASSERT_INT_EQ(rc, PGC_OK);
	T_ASSERT_INT_EQ(rr.dead, 1);
	snprintf(why, sizeof why, "dependency %lld failed", (long long)f);
	status_is(q, g, "cancelled", why);

	/* A deferral past max_deferrals fails the job. */
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.max_deferrals = 1;
	int64_t h, k;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "pd", "{}", &o, &h, &err), PGC_OK);
	k = enq(q, "pd", &h, 1, PGC_DEP_RUN, NULL, 0);
	for (int i = 0; i < 2; i++) {
		T_ASSERT_INT_EQ(claim1(q, "pd", 30000, &tok), h);
		T_ASSERT_INT_EQ(pgc_queue_defer(q, h, tok, 0, &dead, &err), PGC_OK);
	}
	T_ASSERT(dead);
	status_is(q, k, "pending", NULL);
	teardown(c, q);
}

/* A cancelled dependency (pending, running, in bulk): the same rules. A failed dependency
 * retried does not bring back the dependents it cancelled. */
static void queue_deps__policy_on_cancel(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t a = enq(q, "pc", NULL, 0, PGC_DEP_CANCEL, NULL, 1);
	int64_t b = enq(q, "pc", &a, 1, PGC_DEP_CANCEL, NULL, 0);
	int64_t r = enq(q, "pc", &a, 1, PGC_DEP_RUN, NULL, 0);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, a, &err), PGC_OK);
	char why[64];
	snprintf(why, sizeof why, "dependency %lld was cancelled", (long long)a);
	status_is(q, b, "cancelled", why);
	status_is(q, r, "pending", NULL);

	/* Running: the cancel resolves its dependents too. */
	int64_t x = enq(q, "pc2", NULL, 0, PGC_DEP_CANCEL, NULL, 0);
	int64_t y = enq(q, "pc2", &x, 1, PGC_DEP_CANCEL, NULL, 0);
	T_ASSERT_INT_EQ(claim1(q, "pc2", 30000, NULL), x);
	bool was = false;
	T_ASSERT_INT_EQ(pgc_queue_cancel_job(q, x, &was, &err), PGC_OK);
	T_ASSERT(was);
	status_is(q, y, "cancelled", NULL);

	/* Bulk: the waiting jobs of a queue are cancelled too, and so are their dependents
	 * elsewhere. */
	int64_t m = enq(q, "pb", NULL, 0, PGC_DEP_CANCEL, NULL, 0);
	int64_t wdep = enq(q, "pb", &m, 1, PGC_DEP_CANCEL, NULL, 0);
	int64_t other = enq(q, "pb_other", &wdep, 1, PGC_DEP_CANCEL, NULL, 0);
	pgc_queue_bulk bk = PGC_QUEUE_BULK_INIT;
	bk.op = PGC_BULK_CANCEL;
	bk.queue = "pb";
	pgc_queue_bulk_result br;
	T_ASSERT_INT_EQ(pgc_queue_bulk_run(q, &bk, &br, &err), PGC_OK);
	T_ASSERT_INT_EQ(br.done, 2);
	status_is(q, other, "cancelled", NULL);
	/* A waiting job cancelled by hand takes its edges with it. */
	int64_t live = enq(q, "pe", NULL, 0, PGC_DEP_CANCEL, NULL, 0);
	int64_t waiter = enq(q, "pe", &live, 1, PGC_DEP_CANCEL, NULL, 0);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, waiter, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_deps WHERE job = %lld", schema,
	                        (long long)waiter), 0);
	run_ok(q, "pe", live);

	/* Retry of the cancelled dependency: its cancelled dependent stays cancelled. */
	run_ok(q, "pc", r);
	T_ASSERT_INT_EQ(pgc_queue_retry(q, a, &err), PGC_OK);
	run_ok(q, "pc", a);
	status_is(q, b, "cancelled", NULL);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_deps", schema), 0);
	teardown(c, q);
}

/* Unknown ids are refused, nothing enqueued (a batch too, also for ids the batch itself is
 * about to take); finished dependencies resolve at once, whatever their outcome; a job
 * others wait for keeps its history row when succeeded jobs are not retained. */
static void queue_deps__unknown_and_finished(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t a = enq(q, "u", NULL, 0, PGC_DEP_CANCEL, NULL, 0);
	long long before = sql_int(c, "SELECT count(*) FROM %s.jobs", schema);
	long long next = sql_int(c, "SELECT last_value + 1 FROM %s.job_id_seq", schema);
	int64_t bad[2] = { a, 999999 };
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.after = bad;
	o.n_after = 2;
	const char *p[3] = { "{}", "{}", "{}" };
	int64_t ids[3];
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "u", 3, p, NULL, &o, ids, NULL, NULL, &err), PGC_ENOTFOUND);
	T_ASSERT_CONTAINS(err.message, "999999");
	int64_t ahead[2] = { a, (int64_t)next + 1 };
	o.after = ahead;
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "u", 3, p, NULL, &o, ids, NULL, NULL, &err), PGC_ENOTFOUND);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "u", "{}", &o, NULL, &err), PGC_ENOTFOUND);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), before);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_deps", schema), 0);

	/* Finished: succeeded satisfies at once; failed cancels at once or runs. */
	pgc_queue_config cfg = { -1, 0, -1, -1 };
	T_ASSERT_INT_EQ(pgc_queue_config_set(q, &cfg, &err), PGC_OK);
	int64_t w = enq(q, "u", &a, 1, PGC_DEP_CANCEL, NULL, 0);
	run_ok(q, "u", a);
	/* succeeded_retention is 0, and yet the row that resolves w is there. */
	status_is(q, w, "pending", NULL);
	status_is(q, a, "succeeded", NULL);
	int64_t s = enq(q, "u", &a, 1, PGC_DEP_CANCEL, NULL, 0);
	status_is(q, s, "pending", NULL);
	run_ok(q, "u", w);
	run_ok(q, "u", s);
	int64_t f = enq(q, "uf", NULL, 0, PGC_DEP_CANCEL, NULL, 1);
	int64_t tok;
	T_ASSERT_INT_EQ(claim1(q, "uf", 30000, &tok), f);
	pgc_backoff now = { 0, 0 };
	T_ASSERT_INT_EQ(pgc_queue_fail(q, f, tok, "no", &now, NULL, &err), PGC_OK);
	int64_t both[2] = { a, f };
	int64_t x = enq(q, "uf", both, 2, PGC_DEP_CANCEL, NULL, 0);
	char why[64];
	snprintf(why, sizeof why, "dependency %lld failed", (long long)f);
	status_is(q, x, "cancelled", why);
	int64_t y = enq(q, "uf", both, 2, PGC_DEP_RUN, NULL, 0);
	status_is(q, y, "pending", NULL);
	teardown(c, q);
}

/* Sessions complete dependencies while others enqueue dependents of them: no dependent
 * stays waiting once its dependencies have ended. */
#define RACE_DEPS 300
static atomic_int race_errors, race_made, race_stop;
static _Atomic int64_t race_ids[RACE_DEPS];

static pgc_queue *race_open(pgc_conn **c)
{
	*c = t_connect("pgcoord/test-deps-race");
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	pgc_queue *q;
	pgc_error err;
	if (pgc_queue_open(*c, &qo, &q, &err) != PGC_OK) {
		atomic_fetch_add(&race_errors, 1);
		return NULL;
	}
	return q;
}

static void *race_completer(void *arg)
{
	(void)arg;
	pgc_conn *c;
	pgc_queue *q = race_open(&c);
	while (q != NULL && !atomic_load(&race_stop)) {
		pgc_job *jobs;
		size_t n;
		pgc_error err;
		int rc = pgc_queue_claim(q, "deps", 4, 30000, "race", &jobs, &n, &err);
		if (rc == PGC_EEMPTY) {
			sleep_ms(1);
			continue;
		}
		if (rc != PGC_OK) {
			fprintf(stderr, "claim: %s\n", err.message);
			atomic_fetch_add(&race_errors, 1);
			continue;
		}
		int64_t ids[4], toks[4];
		for (size_t i = 0; i < n; i++) {
			ids[i] = jobs[i].id;
			toks[i] = jobs[i].token;
		}
		pgc_queue_jobs_free(jobs, n);
		/* Odd ones fail for good, the rest succeed, in one batch. */
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			pgc_backoff now = { 0, 0 };
			if (ids[i] % 7 == 0)
				rc = pgc_queue_fail(q, ids[i], toks[i], "x", &now, NULL, &err);
			else {
				ids[k] = ids[i];
				toks[k++] = toks[i];
				rc = PGC_OK;
			}
			if (rc != PGC_OK) {
				fprintf(stderr, "fail: %s\n", err.message);
				atomic_fetch_add(&race_errors, 1);
			}
		}
		if (k > 0 && pgc_queue_complete_many(q, k, ids, toks, NULL, NULL, &err) != PGC_OK) {
			fprintf(stderr, "complete: %s\n", err.message);
			atomic_fetch_add(&race_errors, 1);
		}
	}
	pgc_queue_close(q);
	pgc_conn_close(c);
	return NULL;
}

static void *race_producer(void *arg)
{
	(void)arg;
	pgc_conn *c;
	pgc_queue *q = race_open(&c);
	unsigned seed = (unsigned)(uintptr_t)&seed ^ (unsigned)getpid();
	for (int made; q != NULL && (made = atomic_fetch_add(&race_made, 1)) < RACE_DEPS;) {
		pgc_job_options o = PGC_JOB_OPTIONS_INIT;
		o.max_attempts = 1;
		pgc_error err;
		int64_t id;
		if (pgc_queue_enqueue(q, "deps", "{}", &o, &id, &err) != PGC_OK) {
			atomic_fetch_add(&race_errors, 1);
			continue;
		}
		atomic_store(&race_ids[made], id);
		/* Dependents of this one and of a random earlier one, while completers run them. */
		int64_t after[2] = { id, atomic_load(&race_ids[rand_r(&seed) % (unsigned)(made + 1)]) };
		if (after[1] == 0)
			after[1] = id;
		o.after = after;
		o.n_after = 2;
		o.on_dep_failure = made % 2 ? PGC_DEP_RUN : PGC_DEP_CANCEL;
		if (pgc_queue_enqueue(q, "dependents", "{}", &o, NULL, &err) != PGC_OK) {
			fprintf(stderr, "enqueue dependent: %s\n", err.message);
			atomic_fetch_add(&race_errors, 1);
		}
	}
	pgc_queue_close(q);
	pgc_conn_close(c);
	return NULL;
}

static void queue_deps__race_none_left_waiting(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pthread_t comp[3], prod[3];
	for (int i = 0; i < 3; i++) {
		pthread_create(&comp[i], NULL, race_completer, NULL);
		pthread_create(&prod[i], NULL, race_producer, NULL);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(prod[i], NULL);
	int64_t deadline = pgc__now_ms() + 30000;
	while (pgc__now_ms() < deadline &&
	       sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'deps'", schema) > 0)
		sleep_ms(20);
	atomic_store(&race_stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(comp[i], NULL);
	T_ASSERT_INT_EQ(atomic_load(&race_errors), 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'deps'", schema), 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE status = 'waiting'", schema), 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_deps", schema), 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_ends", schema), 0);
	/* Each dependent was released or cancelled by the right rule. */
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'dependents'", schema)
	                + sql_int(c, "SELECT count(*) FROM %s.job_history WHERE queue = 'dependents'", schema),
	                RACE_DEPS);
	teardown(c, q);
}

/* A group's on-complete job comes once, with the counts, when it is closed and its members
 * have ended; members may end before or after the close. */
static void queue_deps__group_on_complete_once(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "g", "after_g", "{\"batch\": 7}", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "g", "after_g", NULL, &err), PGC_EDUPLICATE);
	int64_t ids[10];
	for (int i = 0; i < 10; i++)
		ids[i] = enq(q, i < 5 ? "ga" : "gb", NULL, 0, PGC_DEP_CANCEL, "g", 1);
	/* A member waiting for a member that fails is cancelled, and counted so. */
	int64_t w = enq(q, "gb", &ids[9], 1, PGC_DEP_CANCEL, "g", 1);
	for (int i = 0; i < 3; i++)
		run_ok(q, "ga", ids[i]);
	int64_t fired = -1;
	T_ASSERT_INT_EQ(pgc_queue_group_close(q, "g", &fired, &err), PGC_OK);
	T_ASSERT_INT_EQ(fired, 0);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "ga", "{}", &(pgc_job_options){ .group = "g" }, NULL, &err),
	                PGC_EFINISHED);
	T_ASSERT_INT_EQ(pgc_queue_group_remove(q, "g", &err), PGC_EBUSY);
	run_ok(q, "ga", ids[3]);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, ids[4], &err), PGC_OK);
	for (int i = 5; i < 9; i++)
		run_ok(q, "gb", ids[i]);
	pgc_job_group *g;
	T_ASSERT_INT_EQ(pgc_queue_group_show(q, "g", &g, &err), PGC_OK);
	T_ASSERT_INT_EQ(g->members, 11);
	T_ASSERT(g->sealed && !g->done);
	pgc_free(g);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'after_g'", schema), 0);
	int64_t tok;
	T_ASSERT_INT_EQ(claim1(q, "gb", 30000, &tok), ids[9]);
	pgc_backoff now = { 0, 0 };
	T_ASSERT_INT_EQ(pgc_queue_fail(q, ids[9], tok, "no", &now, NULL, &err), PGC_OK);
	status_is(q, w, "cancelled", NULL);
	T_ASSERT_INT_EQ(pgc_queue_group_show(q, "g", &g, &err), PGC_OK);
	T_ASSERT(g->done);
	T_ASSERT_INT_EQ(g->succeeded, 8);
	T_ASSERT_INT_EQ(g->failed, 1);
	T_ASSERT_INT_EQ(g->cancelled, 2);
	int64_t oc = g->on_complete_job;
	pgc_free(g);
	T_ASSERT(oc > 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'after_g'"
	                           " AND payload = '{\"batch\": 7, \"group\": {\"name\": \"g\", \"failed\": 1,"
	                           " \"cancelled\": 2, \"succeeded\": 8}}'", schema), 1);
	/* Closing again, retrying a member: nothing more. */
	T_ASSERT_INT_EQ(pgc_queue_group_close(q, "g", &fired, &err), PGC_OK);
	T_ASSERT_INT_EQ(fired, oc);
	T_ASSERT_INT_EQ(pgc_queue_retry(q, ids[9], &err), PGC_OK);
	run_ok(q, "gb", ids[9]);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'after_g'", schema), 1);
	pgc_job_group *all;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_group_list(q, &all, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)n, 1);
	T_ASSERT_INT_EQ(all[0].succeeded, 8);
	pgc_free(all);
	T_ASSERT_INT_EQ(pgc_queue_group_remove(q, "g", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_group_show(q, "g", &g, &err), PGC_ENOTFOUND);
	teardown(c, q);
}

/* Closing a group whose members have all ended (or that has none) enqueues at once; a group
 * may be used from SQL, inside the caller's transaction. */
static void queue_deps__group_close_when_done(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "done", "oc", NULL, &err), PGC_OK);
	int64_t a = enq(q, "m", NULL, 0, PGC_DEP_CANCEL, "done", 0);
	int64_t b = enq(q, "m", NULL, 0, PGC_DEP_CANCEL, "done", 0);
	run_ok(q, "m", a);
	run_ok(q, "m", b);
	int64_t fired = 0;
	T_ASSERT_INT_EQ(pgc_queue_group_close(q, "done", &fired, &err), PGC_OK);
	T_ASSERT(fired > 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT (payload->'group'->>'succeeded')::int FROM %s.jobs WHERE id = %lld",
	                        schema, (long long)fired), 2);
	/* From SQL: group_add, enqueue's p_group, group_close, in one transaction. */
	sql(c, "BEGIN");
	sql(c, "SELECT %s.group_add('sqlg', 'oc2', '{\"x\": 1}')", schema);
	sql(c, "SELECT %s.enqueue('m', ARRAY['{}'], NULL, NULL, NULL, NULL, p_group => 'sqlg')", schema);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.group_close('sqlg') x WHERE x IS NULL", schema), 1);
	sql(c, "COMMIT");
	int64_t m = claim1(q, "m", 30000, NULL);
	T_ASSERT(m > 0);
	T_ASSERT_INT_EQ(pgc_queue_cancel(q, m, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT (payload->'group'->>'cancelled')::int + (payload->>'x')::int"
	                           " FROM %s.jobs WHERE queue = 'oc2'", schema), 2);
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "empty", "oc3", NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_group_close(q, "empty", &fired, &err), PGC_OK);
	T_ASSERT(fired > 0);
	teardown(c, q);
}

/* A least-privilege worker role ends jobs others wait for: it releases their dependents and
 * fires a group's on-complete job, which it could not enqueue itself. */
static void queue_deps__worker_role_resolves(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	char role[64];
	snprintf(role, sizeof role, "pgc_deps_worker_%d", (int)getpid());
	if (pgc_schema_grant_worker(c, schema, role, NULL, NULL, &err) != PGC_OK)
		T_FAIL("grant: %s", err.message);
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "rg", "rg_done", NULL, &err), PGC_OK);
	int64_t a = enq(q, "wr", NULL, 0, PGC_DEP_CANCEL, "rg", 0);
	int64_t b = enq(q, "wr", &a, 1, PGC_DEP_CANCEL, NULL, 0);
	T_ASSERT_INT_EQ(pgc_queue_group_close(q, "rg", NULL, &err), PGC_OK);
	sql(c, "SET ROLE %s", role);
	run_ok(q, "wr", a);
	sql(c, "RESET ROLE");
	status_is(q, b, "pending", NULL);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs WHERE queue = 'rg_done'", schema), 1);
	pgc_queue_close(q);
	(void)!pgc_exec(c, "SET client_min_messages = warning", &err);
	sql(c, "DROP SCHEMA %s CASCADE", schema);
	sql(c, "DROP ROLE %s", role);
	pgc_conn_close(c);
}

/* A keyed job that waits keeps its key: the reaper's tidy-up does not take the key's row
 * while the job waits, so once released it is claimed with its key's limit. */
static void queue_deps__keyed_job_keeps_its_key(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t a = enq(q, "kd", NULL, 0, PGC_DEP_CANCEL, NULL, 0);
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.after = &a;
	o.n_after = 1;
	o.key = "tenant";
	int64_t b = 0;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "kd", "{}", &o, &b, &err), PGC_OK);
	status_is(q, b, "waiting", NULL);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM (SELECT %s.job_keys_tidy()) t", schema), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.job_keys WHERE key = 'tenant'", schema), 1);
	run_ok(q, "kd", a);
	status_is(q, b, "pending", NULL);
	run_ok(q, "kd", b);
	teardown(c, q);
}

static void queue_deps__bad_input(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.n_after = 1;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &o, NULL, &err), PGC_EUSAGE);
	int64_t zero = 0, many[PGC_QUEUE_AFTER_MAX + 1];
	o.after = &zero;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &o, NULL, &err), PGC_EUSAGE);
	for (int i = 0; i <= PGC_QUEUE_AFTER_MAX; i++)
		many[i] = i + 1;
	o.after = many;
	o.n_after = PGC_QUEUE_AFTER_MAX + 1;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &o, NULL, &err), PGC_EUSAGE);
	o = (pgc_job_options)PGC_JOB_OPTIONS_INIT;
	o.on_dep_failure = (pgc_dep_policy)7;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &o, NULL, &err), PGC_EUSAGE);
	o = (pgc_job_options)PGC_JOB_OPTIONS_INIT;
	o.group = "";
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &o, NULL, &err), PGC_EUSAGE);
	o.group = "nosuch";
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &o, NULL, &err), PGC_ENOTFOUND);
	char longname[PGC_QUEUE_GROUP_MAX + 2];
	memset(longname, 'g', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	T_ASSERT_INT_EQ(pgc_queue_group_add(NULL, "g", "q", NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, NULL, "q", NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "", "q", NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, longname, "q", NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "g", NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "g", "", NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "g", "q", "[1]", &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "22023");
	T_ASSERT_INT_EQ(pgc_queue_group_add(q, "g", "q", "{nope", &err), PGC_ESQL);
	T_ASSERT_INT_EQ(pgc_queue_group_close(NULL, "g", NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_close(q, NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_close(q, "nosuch", NULL, &err), PGC_ENOTFOUND);
	T_ASSERT_INT_EQ(pgc_queue_group_remove(NULL, "g", &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_remove(q, "", &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_remove(q, "nosuch", &err), PGC_ENOTFOUND);
	pgc_job_group *g = (pgc_job_group *)&err;
	T_ASSERT_INT_EQ(pgc_queue_group_show(q, "g", NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_show(NULL, "g", &g, &err), PGC_EUSAGE);
	T_ASSERT(g == NULL);
	T_ASSERT_INT_EQ(pgc_queue_group_show(q, NULL, &g, &err), PGC_EUSAGE);
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_group_list(NULL, &g, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_list(q, NULL, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_group_list(q, &g, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	teardown(c, q);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "queue_deps__chain_in_order", queue_deps__chain_in_order },
		{ "queue_deps__policy_on_failure", queue_deps__policy_on_failure },
		{ "queue_deps__policy_on_cancel", queue_deps__policy_on_cancel },
		{ "queue_deps__unknown_and_finished", queue_deps__unknown_and_finished },
		{ "queue_deps__race_none_left_waiting", queue_deps__race_none_left_waiting },
		{ "queue_deps__group_on_complete_once", queue_deps__group_on_complete_once },
		{ "queue_deps__group_close_when_done", queue_deps__group_close_when_done },
		{ "queue_deps__worker_role_resolves", queue_deps__worker_role_resolves },
		{ "queue_deps__bad_input", queue_deps__bad_input },
		{ "queue_deps__keyed_job_keeps_its_key", queue_deps__keyed_job_keeps_its_key },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
