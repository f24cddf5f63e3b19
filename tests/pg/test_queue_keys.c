/* test_queue_keys.c - flow control of the queue against a real server: key limits under
 * concurrent claims and completions, lease expiry and the reaper, rates, fair shares, the
 * settings and figures, bad input, and the upgrade of a schema from before 011_flow.sql */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "schema/migrations.h"
#include "queue/queue_int.h"
#include "../t.h"
#include "pgt.h"

static char schema[64];

static pgc_conn *setup(pgc_queue **q)
{
	return pgt_queue_setup(schema, sizeof schema, "pgc_keys", "pgcoord/test-queue-keys", q);
}

static void teardown(pgc_conn *c, pgc_queue *q)
{
	pgt_queue_teardown(c, q, schema);
}

static int reap(pgc_queue *q, pgc_reap_result *rr, pgc_error *err)
{
	int rc;
	for (int i = 0; i < 500 && (rc = pgc_queue_reap(q, rr, err)) == PGC_EBUSY; i++)
		sleep_ms(10);
	return rc;
}

static void enqueue_n(pgc_queue *q, const char *queue, const char *key, int n, int priority)
{
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.key = key;
	o.priority = priority;
	pgc_error err;
	for (int i = 0; i < n; i++)
		if (pgc_queue_enqueue(q, queue, "{}", &o, NULL, &err) != PGC_OK)
			T_FAIL("enqueue: %s", err.message);
}

static void set_key_limit(pgc_queue *q, const char *queue, int limit)
{
	pgc_queue_flow f = PGC_QUEUE_FLOW_UNCHANGED;
	f.key_limit = limit;
	pgc_error err;
	if (pgc_queue_flow_set(q, queue, &f, &err) != PGC_OK)
		T_FAIL("flow_set: %s", err.message);
}

/* How many jobs the claim gives; they stay claimed (their ids in ids[], tokens in toks[]). */
static size_t claim(pgc_queue *q, const char *queue, int max, int64_t lease_ms, int64_t *ids,
                    int64_t *toks, const char **keys)
{
	pgc_job *jobs;
	size_t n = 0;
	pgc_error err;
	int rc = pgc_queue_claim(q, queue, max, lease_ms, "t", &jobs, &n, &err);
	if (rc == PGC_EEMPTY)
		return 0;
	if (rc != PGC_OK)
		T_FAIL("claim: %s", err.message);
	for (size_t i = 0; i < n; i++) {
		if (ids)
			ids[i] = jobs[i].id;
		if (toks)
			toks[i] = jobs[i].token;
		if (keys) {
			static char kb[64][PGC_QUEUE_KEY_MAX + 1];
			snprintf(kb[i % 64], sizeof kb[0], "%s", jobs[i].key ? jobs[i].key : "");
			keys[i] = kb[i % 64];
		}
	}
	pgc_queue_jobs_free(jobs, n);
	return n;
}

/* A limit of 2: claims stop at it, every way out of running makes room again, the count in
 * job_keys follows, and show and the key figures say why jobs wait. */
static void queue_keys__limit_and_every_way_out(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	set_key_limit(q, "k", 2);
	enqueue_n(q, "k", "A", 8, 0);
	int64_t ids[16], toks[16];
	const char *keys[16];
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, ids, toks, keys), 2);
	T_ASSERT_STR_EQ(keys[0], "A");
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, NULL, NULL, NULL), 0);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT running FROM %s.job_keys WHERE key = 'A'", schema), 2);
	/* Why the others wait. */
	int64_t waiting = sql_int(c, "SELECT min(id) FROM %s.jobs WHERE status = 'pending'", schema);
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, waiting, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info->key, "A");
	T_ASSERT(info->held != NULL);
	T_ASSERT_STR_EQ(info->held, "its key A is at its limit 2");
	pgc_free(info);
	pgc_queue_key_info *ki;
	size_t nk;
	T_ASSERT_INT_EQ(pgc_queue_keys(q, "k", "A", &ki, &nk, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)nk, 1);
	T_ASSERT_INT_EQ((int)ki[0].running, 2);
	T_ASSERT_INT_EQ((int)ki[0].pending, 6);
	T_ASSERT_INT_EQ(ki[0].limit, 2);
	T_ASSERT(ki[0].at_limit);
	pgc_free(ki);
	/* Completion. */
	T_ASSERT_INT_EQ(pgc_queue_complete(q, ids[0], toks[0], &err), PGC_OK);
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, ids, toks, NULL), 1);
	/* Failure (back to pending at once), deferral, release, cancel: each gives room for one. */
	pgc_backoff now = { 0, 0 };
	T_ASSERT_INT_EQ(pgc_queue_fail(q, ids[0], toks[0], "boom", &now, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, ids, toks, NULL), 1);
	T_ASSERT_INT_EQ(pgc_queue_defer(q, ids[0], toks[0], 0, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, ids, toks, NULL), 1);
	T_ASSERT_INT_EQ(pgc_queue_release(q, 1, ids, toks, false, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, ids, toks, NULL), 1);
	/* Cancelling a running job gives room too; its worker's completion comes too late. */
	bool was_running = false;
	T_ASSERT_INT_EQ(pgc_queue_cancel_job(q, ids[0], &was_running, &err), PGC_OK);
	T_ASSERT(was_running);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, ids[0], toks[0], &err), PGC_ESTALE);
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, ids, toks, NULL), 1);
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, NULL, NULL, NULL), 0);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.jobs WHERE status = 'running'", schema), 2);
	/* A key of its own with a higher limit; another key is not held by A's. */
	pgc_queue_key_settings ks = PGC_QUEUE_KEY_UNCHANGED;
	ks.limit = 3;
	T_ASSERT_INT_EQ(pgc_queue_key_set(q, "k", "A", &ks, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, NULL, NULL, NULL), 1);
	enqueue_n(q, "k", "B", 3, 0);
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, NULL, NULL, keys), 2);
	T_ASSERT_STR_EQ(keys[0], "B");
	/* Unkeyed jobs of a flow queue are claimed too. */
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "k", "{}", NULL, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)claim(q, "k", 10, 30000, NULL, NULL, keys), 1);
	T_ASSERT_STR_EQ(keys[0], "");
	/* Back to the queue's limit; removing settings of an unknown key is not found. */
	T_ASSERT_INT_EQ(pgc_queue_key_reset(q, "k", "A", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_key_reset(q, "k", "nobody", &err), PGC_ENOTFOUND);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT lim FROM %s.job_keys WHERE key = 'A'", schema), 2);
	/* The history keeps the key (the completed job and the cancelled one). */
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_history WHERE key = 'A'", schema), 2);
	teardown(c, q);
}

/* Eight sessions claim, complete, fail and release under a limit of 2 on 3 keys while a ninth
 * samples the running jobs of each key: never more than 2, the guard never trips, and at the
 * end every count is back to 0. */
#define RACE_KEYS 3
#define RACE_LIMIT 2
#define RACE_JOBS 300
static atomic_int race_done, race_errors, race_over;
static atomic_bool race_stop;

static void *race_worker(void *arg)
{
	(void)arg;
	pgc_conn *c = t_connect("pgcoord/test-keys-race");
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	pgc_queue *q;
	pgc_error err;
	if (pgc_queue_open(c, &qo, &q, &err) != PGC_OK) {
		atomic_fetch_add(&race_errors, 1);
		pgc_conn_close(c);
		return NULL;
	}
	unsigned seed = (unsigned)(uintptr_t)&seed ^ (unsigned)getpid();
	while (!atomic_load(&race_stop) && atomic_load(&race_done) < RACE_JOBS) {
		pgc_job *jobs;
		size_t n;
		int rc = pgc_queue_claim(q, "race", 1 + (int)(rand_r(&seed) % 3), 30000, "race", &jobs, &n, &err);
		if (rc == PGC_EEMPTY) {
			sleep_ms(2);
			continue;
		}
		if (rc != PGC_OK) {
			fprintf(stderr, "claim: %s\n", err.message);
			atomic_fetch_add(&race_errors, 1);
			continue;
		}
		sleep_ms(rand_r(&seed) % 4);
		for (size_t i = 0; i < n; i++) {
			int what = (int)(rand_r(&seed) % 10);
			pgc_backoff now = { 0, 0 };
			if (what == 0)
				rc = pgc_queue_release(q, 1, &jobs[i].id, &jobs[i].token, false, &err);
			else if (what == 1 && jobs[i].attempt < 3)
				rc = pgc_queue_fail(q, jobs[i].id, jobs[i].token, "again", &now, NULL, &err);
			else if ((rc = pgc_queue_complete(q, jobs[i].id, jobs[i].token, &err)) == PGC_OK)
				atomic_fetch_add(&race_done, 1);
			if (rc != PGC_OK) {
				fprintf(stderr, "settle: %s\n", err.message);
				atomic_fetch_add(&race_errors, 1);
			}
		}
		pgc_queue_jobs_free(jobs, n);
	}
	pgc_queue_close(q);
	pgc_conn_close(c);
	return NULL;
}

static void *race_sampler(void *arg)
{
	(void)arg;
	pgc_conn *c = t_connect("pgcoord/test-keys-sampler");
	char s[256];
	snprintf(s, sizeof s, "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM %s.jobs"
	         " WHERE status = 'running' GROUP BY key) x", schema);
	while (!atomic_load(&race_stop)) {
		PGresult *r = PQexec(pgc_conn_pg(c), s);
		if (PQresultStatus(r) == PGRES_TUPLES_OK && atoi(PQgetvalue(r, 0, 0)) > RACE_LIMIT)
			atomic_fetch_add(&race_over, 1);
		PQclear(r);
	}
	pgc_conn_close(c);
	return NULL;
}

static void queue_keys__race_never_over_limit(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	set_key_limit(q, "race", RACE_LIMIT);
	const char *keys[RACE_KEYS] = { "r0", "r1", "r2" };
	for (int k = 0; k < RACE_KEYS; k++)
		enqueue_n(q, "race", keys[k], RACE_JOBS / RACE_KEYS, 0);
	pthread_t w[8], s;
	pthread_create(&s, NULL, race_sampler, NULL);
	for (int i = 0; i < 8; i++)
		pthread_create(&w[i], NULL, race_worker, NULL);
	int64_t deadline = pgc__now_ms() + 60000;
	while (atomic_load(&race_done) < RACE_JOBS && pgc__now_ms() < deadline)
		sleep_ms(20);
	atomic_store(&race_stop, true);
	for (int i = 0; i < 8; i++)
		pthread_join(w[i], NULL);
	pthread_join(s, NULL);
	T_ASSERT_INT_EQ(atomic_load(&race_errors), 0);
	T_ASSERT_INT_EQ(atomic_load(&race_over), 0);
	T_ASSERT_INT_EQ(atomic_load(&race_done), RACE_JOBS);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	/* The reaper folds what no claim folded: every count is 0, then the idle keys go. */
	pgc_reap_result rr;
	T_ASSERT_INT_EQ(reap(q, &rr, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_keys WHERE running <> 0", schema), 0);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_key_done", schema), 0);
	T_ASSERT_INT_EQ(reap(q, &rr, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_keys", schema), 0);
	teardown(c, q);
}

/* A lease that expires: the job counts until the reaper returns it, then another claim takes
 * it, the old holder's completion is stale, and the count stays right. */
static void queue_keys__lease_expiry_and_reap(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	set_key_limit(q, "lx", 1);
	enqueue_n(q, "lx", "A", 2, 0);
	int64_t ids[4], toks[4], ids2[4], toks2[4];
	T_ASSERT_INT_EQ((int)claim(q, "lx", 5, 200, ids, toks, NULL), 1);
	sleep_ms(400);
	/* Expired but not reaped: still counted. */
	T_ASSERT_INT_EQ((int)claim(q, "lx", 5, 30000, NULL, NULL, NULL), 0);
	pgc_reap_result rr;
	T_ASSERT_INT_EQ(reap(q, &rr, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)rr.returned, 1);
	T_ASSERT_INT_EQ((int)claim(q, "lx", 5, 30000, ids2, toks2, NULL), 1);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, ids[0], toks[0], &err), PGC_ESTALE);
	T_ASSERT_INT_EQ((int)claim(q, "lx", 5, 30000, NULL, NULL, NULL), 0);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT running FROM %s.job_keys WHERE key = 'A'", schema), 1);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, ids2[0], toks2[0], &err), PGC_OK);
	T_ASSERT_INT_EQ((int)claim(q, "lx", 5, 30000, NULL, NULL, NULL), 1);
	/* The guard: a count pushed over the limit by hand is refused by the database. */
	char s[256];
	snprintf(s, sizeof s, "UPDATE %s.job_keys SET running = running + 1 WHERE key = 'A'", schema);
	T_ASSERT_INT_EQ(pgc_exec(c, s, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "23514");
	T_ASSERT_CONTAINS(err.message, "over its limit of 1");
	teardown(c, q);
}

/* A key's rate: starts are spaced, another key is served meanwhile, the wait is reported. */
static void queue_keys__rate(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_queue_flow f = PGC_QUEUE_FLOW_UNCHANGED;
	T_ASSERT_INT_EQ(pgc_rate_parse("2/1s", &f.key_rate, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_flow_set(q, "rt", &f, &err), PGC_OK);
	enqueue_n(q, "rt", "A", 5, 0);
	T_ASSERT_INT_EQ((int)claim(q, "rt", 10, 30000, NULL, NULL, NULL), 1);
	T_ASSERT_INT_EQ((int)claim(q, "rt", 10, 30000, NULL, NULL, NULL), 0);
	enqueue_n(q, "rt", "B", 1, 0);
	const char *keys[4];
	T_ASSERT_INT_EQ((int)claim(q, "rt", 10, 30000, NULL, NULL, keys), 1);
	T_ASSERT_STR_EQ(keys[0], "B");
	pgc_queue_key_info *ki;
	size_t nk;
	T_ASSERT_INT_EQ(pgc_queue_keys(q, "rt", "A", &ki, &nk, &err), PGC_OK);
	T_ASSERT(ki[0].rate_wait_ms > 0 && ki[0].rate_wait_ms <= 500);
	T_ASSERT(ki[0].next_start_at[0] != '\0');
	pgc_free(ki);
	int64_t waiting = sql_int(c, "SELECT min(id) FROM %s.jobs WHERE status = 'pending'", schema);
	pgc_job_info *info;
	T_ASSERT_INT_EQ(pgc_queue_show(q, waiting, &info, &err), PGC_OK);
	T_ASSERT(info->held != NULL);
	T_ASSERT_CONTAINS(info->held, "its key A is rate-limited until ");
	pgc_free(info);
	/* The next start comes half a second after the first (bounded wait). */
	int64_t t0 = pgc__now_ms();
	size_t got = 0;
	while (got == 0 && pgc__now_ms() - t0 < 5000) {
		got = claim(q, "rt", 10, 30000, NULL, NULL, NULL);
		if (got == 0)
			sleep_ms(20);
	}
	T_ASSERT_INT_EQ((int)got, 1);
	/* The queue's own rate holds for unkeyed jobs too. */
	pgc_queue_flow g = PGC_QUEUE_FLOW_UNCHANGED;
	T_ASSERT_INT_EQ(pgc_rate_parse("1/1m", &g.rate, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_flow_set(q, "rq", &g, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "rq", "{}", NULL, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "rq", "{}", NULL, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)claim(q, "rq", 10, 30000, NULL, NULL, NULL), 1);
	T_ASSERT_INT_EQ((int)claim(q, "rq", 10, 30000, NULL, NULL, NULL), 0);
	T_ASSERT_INT_EQ(pgc_queue_flow_get(q, "rq", &g, &err), PGC_OK);
	T_ASSERT(g.rate_wait_ms > 50000);
	teardown(c, q);
}

/* Fair shares: a key with 10 jobs beside one with 1000 is served in turn, not after; a key of
 * weight 3 gets three turns for one. */
static void queue_keys__fair_shares(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_queue_flow f = PGC_QUEUE_FLOW_UNCHANGED;
	f.fair = 1;
	T_ASSERT_INT_EQ(pgc_queue_flow_set(q, "fq", &f, &err), PGC_OK);
	enqueue_n(q, "fq", "big", 1000, 5); /* higher priority does not jump the turns */
	enqueue_n(q, "fq", "small", 10, 0);
	int small = 0, claims = 0;
	const char *keys[8];
	while (small < 10 && claims < 40) {
		size_t n = claim(q, "fq", 2, 30000, NULL, NULL, keys);
		claims++;
		for (size_t i = 0; i < n; i++)
			small += strcmp(keys[i], "small") == 0;
	}
	T_ASSERT_INT_EQ(small, 10);
	T_ASSERT(claims <= 12);
	pgc_queue_key_settings ks = PGC_QUEUE_KEY_UNCHANGED;
	ks.weight = 3;
	T_ASSERT_INT_EQ(pgc_queue_key_set(q, "fq", "heavy", &ks, &err), PGC_OK);
	enqueue_n(q, "fq", "heavy", 100, 0);
	enqueue_n(q, "fq", "light", 100, 0);
	/* From where both stand now, count 40 claims of one job. */
	sql(c, "UPDATE %s.job_keys SET vtime = 0 WHERE key IN ('heavy', 'light')", schema);
	sql(c, "UPDATE %s.jobs SET status = 'scheduled', run_at = now() + interval '1 hour'"
	    " WHERE key = 'big' AND status = 'pending'", schema);
	int heavy = 0, light = 0;
	for (int i = 0; i < 40; i++) {
		T_ASSERT_INT_EQ((int)claim(q, "fq", 1, 30000, NULL, NULL, keys), 1);
		heavy += strcmp(keys[0], "heavy") == 0;
		light += strcmp(keys[0], "light") == 0;
	}
	/* 3 to 1, give or take the tie broken at the end. */
	T_ASSERT(heavy >= 29 && heavy <= 31);
	T_ASSERT_INT_EQ(heavy + light, 40);
	teardown(c, q);
}

static void queue_keys__bad_input(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_rate r;
	const char *bad[] = { "0/1s", "5/0s", "x/1s", "5/", "5", "/1s", "-1/1s", "5/1y", "" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (pgc_rate_parse(bad[i], &r, &err) != PGC_EUSAGE)
			T_FAIL("rate \"%s\" was accepted", bad[i]);
	}
	T_ASSERT_INT_EQ(pgc_rate_parse("1000/1m", &r, &err), PGC_OK);
	T_ASSERT_INT_EQ(r.n, 1000);
	T_ASSERT_INT_EQ((int)r.per_ms, 60000);
	char big[200];
	memset(big, 'k', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.key = big;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &o, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "longer than 128");
	o.key = "";
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &o, NULL, &err), PGC_EUSAGE);
	/* The server says the same to SQL callers. */
	char s[512];
	snprintf(s, sizeof s, "SELECT * FROM %s.enqueue('b', ARRAY['{}'], NULL, 0, NULL, NULL, NULL, repeat('k', 129))", schema);
	T_ASSERT_INT_EQ(pgc_exec(c, s, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "22023");
	pgc_queue_flow f = PGC_QUEUE_FLOW_UNCHANGED;
	f.key_limit = -2;
	T_ASSERT_INT_EQ(pgc_queue_flow_set(q, "b", &f, &err), PGC_EUSAGE);
	f.key_limit = -1;
	f.rate.n = 5;
	f.rate.per_ms = 0;
	T_ASSERT_INT_EQ(pgc_queue_flow_set(q, "b", &f, &err), PGC_EUSAGE);
	pgc_queue_key_settings ks = PGC_QUEUE_KEY_UNCHANGED;
	ks.weight = PGC_QUEUE_WEIGHT_MAX + 1;
	T_ASSERT_INT_EQ(pgc_queue_key_set(q, "b", "K", &ks, &err), PGC_EUSAGE);
	ks.weight = -1;
	T_ASSERT_INT_EQ(pgc_queue_key_set(q, "b", NULL, &ks, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_key_set(q, "b", big, &ks, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_keys(q, "b", "none", NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_flow_get(q, "nosuch", &f, &err), PGC_ENOTFOUND);
	/* Nothing was enqueued or changed. */
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.queues WHERE flow", schema), 0);
	teardown(c, q);
}

/* A schema from before flow control, with jobs in it (one running), upgraded by init: the jobs
 * and the running job's token are kept, and keyed work runs. */
static void queue_keys__upgrade_keeps_jobs(void)
{
	snprintf(schema, sizeof schema, "pgc_keys_up_%d", (int)getpid());
	pgc_conn *c = t_connect("pgcoord/test-queue-keys");
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_exec(c, "SET client_min_messages = warning", &err), PGC_OK);
	sql(c, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
	sql(c, "CREATE SCHEMA %s", schema);
	sql(c, "CREATE TABLE %s.migrations (version integer PRIMARY KEY, name text NOT NULL,"
	    " applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
	    " applied_by text NOT NULL DEFAULT current_user)", schema);
	int upto = 0;
	for (int i = 0; i < pgc__migration_count && strcmp(pgc__migrations[i].name, "flow") != 0; i++) {
		char *body = pgc__sql_schema(pgc__migrations[i].sql, schema);
		T_ASSERT(body != NULL);
		if (pgc_exec(c, body, &err) != PGC_OK)
			T_FAIL("migration %d: %s", pgc__migrations[i].version, err.message);
		free(body);
		sql(c, "INSERT INTO %s.migrations (version, name) VALUES (%d, '%s')", schema,
		    pgc__migrations[i].version, pgc__migrations[i].name);
		upto = pgc__migrations[i].version;
	}
	T_ASSERT(upto >= 9);
	/* Two jobs as the enqueue() of that version wrote them (the migrations hold no functions:
	 * those are created after the last one, from src/schema/functions/). */
	sql(c, "INSERT INTO %s.queues (name) VALUES ('old')", schema);
	sql(c, "INSERT INTO %s.jobs (id, queue, payload) SELECT nextval('%s.job_id_seq'), 'old', p"
	    " FROM unnest(ARRAY['{\"n\":1}', '{\"n\":2}']::jsonb[]) AS p", schema, schema);
	sql(c, "UPDATE %s.jobs SET status = 'running', token = 77, lease_until = now() + interval '1 hour'"
	    " WHERE id = (SELECT min(id) FROM %s.jobs)", schema, schema);
	int applied = 0, version = 0;
	T_ASSERT_INT_EQ(pgc_schema_init(c, schema, &applied, &version, &err), PGC_OK);
	T_ASSERT_INT_EQ(version, pgc_schema_latest());
	T_ASSERT(applied >= 1);
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	pgc_queue *q;
	T_ASSERT_INT_EQ(pgc_queue_open(c, &qo, &q, &err), PGC_OK);
	int64_t first = sql_int(c, "SELECT min(id) FROM %s.jobs", schema);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, first, 77, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)claim(q, "old", 5, 30000, NULL, NULL, NULL), 1);
	set_key_limit(q, "old", 1);
	enqueue_n(q, "old", "K", 2, 0);
	T_ASSERT_INT_EQ((int)claim(q, "old", 5, 30000, NULL, NULL, NULL), 1);
	T_ASSERT_INT_EQ((int)claim(q, "old", 5, 30000, NULL, NULL, NULL), 0);
	teardown(c, q);
}

/* A worker on a queue without keys leaves the flow claim out of its round trips; when the
 * queue's first keyed job comes, it claims it at once (not after its poll). */
static atomic_int flip_handled;

static void flip_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)job;
	(void)res;
	(void)arg;
	atomic_fetch_add(&flip_handled, 1);
}

static void queue_keys__worker_follows_a_queue_into_flow(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	const char *queues[] = { "flip" };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = t_dsn();
	o.schema = schema;
	o.queues = queues;
	o.n_queues = 1;
	o.poll_ms = 60000;
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, flip_handler, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "flip", "{}", NULL, NULL, &err), PGC_OK);
	int64_t t0 = pgc__now_ms();
	while (atomic_load(&flip_handled) < 1 && pgc__now_ms() - t0 < 10000)
		sleep_ms(10);
	T_ASSERT_INT_EQ(atomic_load(&flip_handled), 1);
	/* One statement, so one notification: the wake-up finds the queue changed. */
	const char *three[3] = { "{}", "{}", "{}" };
	pgc_job_options ko = PGC_JOB_OPTIONS_INIT;
	ko.key = "K";
	T_ASSERT_INT_EQ(pgc_queue_enqueue_many(q, "flip", 3, three, NULL, &ko, NULL, NULL, NULL, &err), PGC_OK);
	t0 = pgc__now_ms();
	while (atomic_load(&flip_handled) < 4 && pgc__now_ms() - t0 < 10000)
		sleep_ms(10);
	int64_t took = pgc__now_ms() - t0;
	pgc_worker_stop(w, 1000);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	pgc_worker_free(w);
	T_ASSERT_INT_EQ(atomic_load(&flip_handled), 4);
	T_ASSERT(took < 10000);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_history WHERE key = 'K'", schema), 3);
	teardown(c, q);
}

/* A claim folds the ended runs of no more keys than twice the jobs it asks for (at least 16)
 * before it looks for jobs, so that its cost does not grow with the ledger; the keys it
 * folds are claimable at once, and claim after claim the ledger empties and the queue drains. */
static void queue_keys__claim_folds_a_few_keys(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	set_key_limit(q, "fold", 1);
	sql(c, "SELECT count(*) FROM generate_series(1, 100) k, %s.enqueue('fold',"
	       " array_fill('{}'::text, array[3]), NULL, NULL, NULL, NULL, NULL, 'k' || lpad(k::text, 3, '0'))",
	    schema);
	int64_t ids[100], toks[100];
	T_ASSERT_INT_EQ((int)claim(q, "fold", 100, 30000, ids, toks, NULL), 100);
	T_ASSERT_INT_EQ(pgc_queue_complete_many(q, 100, ids, toks, NULL, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_key_done", schema), 100);
	/* A claim of 4 folds 16 keys, the first in the ledger's index, and takes 4 of them. */
	const char *keys[4];
	T_ASSERT_INT_EQ((int)claim(q, "fold", 4, 30000, ids, toks, keys), 4);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_key_done", schema), 84);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_keys WHERE running = 0", schema), 12);
	for (int i = 0; i < 4; i++)
		T_ASSERT(strcmp(keys[i], "k016") <= 0);
	T_ASSERT_INT_EQ(pgc_queue_complete_many(q, 4, ids, toks, NULL, NULL, &err), PGC_OK);
	/* Claim after claim, everything is folded and run. */
	int rounds = 0, ran = 104;
	for (size_t n; (n = claim(q, "fold", 4, 30000, ids, toks, NULL)) > 0 && rounds < 200; rounds++) {
		T_ASSERT_INT_EQ(pgc_queue_complete_many(q, n, ids, toks, NULL, NULL, &err), PGC_OK);
		ran += (int)n;
	}
	T_ASSERT_INT_EQ(ran, 300);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.jobs", schema), 0);
	/* The last completions are the reaper's to fold, as for any key no claim looks at. */
	pgc_reap_result rr;
	T_ASSERT_INT_EQ(reap(q, &rr, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_key_done", schema), 0);
	teardown(c, q);
}

/* A run ended by a statement that leaves no ledger row (a DELETE by hand) leaves the key's
 * bound too high; the reaper's recount puts it right. */
static void queue_keys__recount_after_delete_by_hand(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	set_key_limit(q, "hand", 1);
	enqueue_n(q, "hand", "A", 2, 0);
	int64_t ids[2], toks[2];
	T_ASSERT_INT_EQ((int)claim(q, "hand", 5, 30000, ids, toks, NULL), 1);
	sql(c, "DELETE FROM %s.jobs WHERE id = %lld", schema, (long long)ids[0]);
	T_ASSERT_INT_EQ((int)claim(q, "hand", 5, 30000, NULL, NULL, NULL), 0);
	/* Keys claimed within the last second are left to their claims. */
	sleep_ms(1100);
	pgc_reap_result rr;
	T_ASSERT_INT_EQ(reap(q, &rr, &err), PGC_OK);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT running FROM %s.job_keys WHERE key = 'A'", schema), 0);
	T_ASSERT_INT_EQ((int)claim(q, "hand", 5, 30000, NULL, NULL, NULL), 1);
	teardown(c, q);
}

/* The reaper's tidy finds the keys with no live job by probing the key indexes, never by
 * reading the whole jobs table (a scan per pass, or per key, once cost it a second beside a
 * large backlog). */
static void queue_keys__tidy_reads_no_jobs_table(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	set_key_limit(q, "tidy", 1);
	sql(c, "SELECT count(*) FROM generate_series(1, 200) k, %s.enqueue('tidy',"
	       " array_fill('{}'::text, array[20]), NULL, NULL, NULL, NULL, NULL, 'k' || k)", schema);
	sql(c, "DELETE FROM %s.jobs WHERE key IN (SELECT 'k' || k FROM generate_series(1, 100) k)", schema);
	sql(c, "ANALYZE %s.jobs, %s.job_keys", schema, schema);
	sql(c, "BEGIN");
	long long before = sql_int(c, "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = '%s.jobs'::regclass",
	                         schema);
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT %s.job_keys_tidy()", schema), 100);
	T_ASSERT_INT_EQ((int)(sql_int(c, "SELECT seq_scan FROM pg_stat_xact_user_tables"
	                                 " WHERE relid = '%s.jobs'::regclass", schema) - before), 0);
	sql(c, "COMMIT");
	T_ASSERT_INT_EQ((int)sql_int(c, "SELECT count(*) FROM %s.job_keys", schema), 100);
	teardown(c, q);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "queue_keys__limit_and_every_way_out", queue_keys__limit_and_every_way_out },
		{ "queue_keys__race_never_over_limit", queue_keys__race_never_over_limit },
		{ "queue_keys__lease_expiry_and_reap", queue_keys__lease_expiry_and_reap },
		{ "queue_keys__rate", queue_keys__rate },
		{ "queue_keys__fair_shares", queue_keys__fair_shares },
		{ "queue_keys__bad_input", queue_keys__bad_input },
		{ "queue_keys__upgrade_keeps_jobs", queue_keys__upgrade_keeps_jobs },
		{ "queue_keys__worker_follows_a_queue_into_flow", queue_keys__worker_follows_a_queue_into_flow },
		{ "queue_keys__claim_folds_a_few_keys", queue_keys__claim_folds_a_few_keys },
		{ "queue_keys__recount_after_delete_by_hand", queue_keys__recount_after_delete_by_hand },
		{ "queue_keys__tidy_reads_no_jobs_table", queue_keys__tidy_reads_no_jobs_table },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
