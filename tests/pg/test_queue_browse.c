/* test_queue_browse.c - the dashboard's bounded reads: capped counts, keyset pages with
 * filters and a scan bound, why a job waits, the registered workers */
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pgcoord.h"
#include "../t.h"
#include "pgt.h"

static char schema[64];

static pgc_conn *setup(pgc_queue **q)
{
	return pgt_queue_setup(schema, sizeof schema, "pgc_browse", "pgcoord/test-browse", q);
}

static void teardown(pgc_conn *c, pgc_queue *q)
{
	pgt_queue_teardown(c, q, schema);
}

/* 30 jobs in "a" (10 of them finished: 5 succeeded, 5 failed with an error naming "boom"),
 * 5 in "b" with unique keys k-0..k-4. */
static void fill(pgc_conn *c, pgc_queue *q)
{
	pgc_error err;
	for (int i = 0; i < 30; i++) {
		char p[64];
		snprintf(p, sizeof p, "{\"n\":%d,\"tag\":\"%s\"}", i, i % 3 == 0 ? "needle" : "hay");
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "a", p, NULL, NULL, &err), PGC_OK);
	}
	for (int i = 0; i < 5; i++) {
		char k[16];
		snprintf(k, sizeof k, "k-%d", i);
		pgc_job_options o = PGC_JOB_OPTIONS_INIT;
		o.unique_key = k;
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &o, NULL, &err), PGC_OK);
	}
	pgc_job *jobs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "a", 10, 60000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ((long long)n, 10);
	for (size_t i = 0; i < n; i++) {
		if (i < 5) {
			T_ASSERT_INT_EQ(pgc_queue_complete(q, jobs[i].id, jobs[i].token, &err), PGC_OK);
		} else {
			sql(c, "UPDATE %s.jobs SET max_attempts = 1 WHERE id = %lld", schema, (long long)jobs[i].id);
			bool dead = false;
			T_ASSERT_INT_EQ(pgc_queue_fail(q, jobs[i].id, jobs[i].token, "boom <b>", NULL, &dead, &err), PGC_OK);
			T_ASSERT(dead);
		}
	}
	pgc_queue_jobs_free(jobs, n);
}

static void browse__capped_counts(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	fill(c, q);
	pgc_error err;
	pgc_queue_stat *st;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_stats_capped(q, NULL, 1000, &st, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ((long long)n, 2);
	T_ASSERT_STR_EQ(st[0].queue, "a");
	T_ASSERT_INT_EQ(st[0].pending, 20);
	T_ASSERT_INT_EQ(st[0].succeeded, 5);
	T_ASSERT_INT_EQ(st[0].failed, 5);
	T_ASSERT_INT_EQ(st[0].completed_1m, 5);
	T_ASSERT_INT_EQ(st[0].failed_1m, 5);
	T_ASSERT_INT_EQ(st[1].pending, 5);
	pgc_free(st);
	/* Stopped at the cap; past it the last minute's figures are a rate: 3 jobs in the
	 * moments they took, far more than 5 a minute. */
	T_ASSERT_INT_EQ(pgc_queue_stats_capped(q, "a", 3, &st, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ((long long)n, 1);
	T_ASSERT_INT_EQ(st[0].pending, 3);
	T_ASSERT_INT_EQ(st[0].succeeded, 3);
	T_ASSERT(st[0].completed_1m > 5);
	pgc_free(st);
	/* A queue with none of a status beside a long history of another queue: 0, not its count. */
	sql(c, "INSERT INTO %s.job_history (id, queue, status, priority, run_at, attempts, max_attempts, created_at,"
	       " payload) SELECT 100000 + i, 'a', 'succeeded', 0, now(), 1, 1, now(), '{}' FROM generate_series(1, 20000) i",
	    schema);
	sql(c, "ANALYZE %s.job_history", schema);
	T_ASSERT_INT_EQ(pgc_queue_stats_capped(q, "b", 10, &st, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(st[0].succeeded, 0);
	pgc_free(st);
	/* Keyed pending jobs count too, each index read up to the cap; an aged keyed job is the
	 * oldest runnable one. */
	pgc_job_options ko = PGC_JOB_OPTIONS_INIT;
	ko.key = "tenant";
	for (int i = 0; i < 4; i++)
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "b", "{}", &ko, NULL, &err), PGC_OK);
	sql(c, "UPDATE %s.jobs SET eff_priority = 32768, run_at = now() - interval '1 hour'"
	       " WHERE id = (SELECT max(id) FROM %s.jobs WHERE key = 'tenant')", schema, schema);
	T_ASSERT_INT_EQ(pgc_queue_stats_capped(q, "b", 100, &st, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(st[0].pending, 9);
	T_ASSERT(st[0].oldest_pending_s > 3500);
	pgc_free(st);
	T_ASSERT_INT_EQ(pgc_queue_stats_capped(q, "b", 7, &st, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(st[0].pending, 7);
	pgc_free(st);
	T_ASSERT_INT_EQ(pgc_queue_stats(q, "b", &st, &n, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(st[0].pending, 9);
	T_ASSERT(st[0].oldest_pending_s > 3500);
	pgc_free(st);
	T_ASSERT_INT_EQ(pgc_queue_stats_capped(q, "nope", 3, &st, &n, &err), PGC_ENOTFOUND);
	T_ASSERT_INT_EQ(pgc_queue_stats_capped(q, NULL, 0, &st, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_stats_capped(NULL, NULL, 5, &st, &n, &err), PGC_EUSAGE);
	teardown(c, q);
}

/* Pages through f until the cursor says the end, counting each id; fails on a repeat. */
static size_t page_all(pgc_queue *q, pgc_queue_browse_filter f, char *seen, size_t seen_n,
                       size_t *pages)
{
	size_t total = 0;
	*pages = 0;
	for (int guard = 0; guard < 1000; guard++) {
		pgc_job_info **js;
		size_t n;
		int64_t next;
		pgc_error err;
		if (pgc_queue_browse(q, &f, &js, &n, &next, &err) != PGC_OK)
			T_FAIL("browse: %s", err.message);
		(*pages)++;
		for (size_t i = 0; i < n; i++) {
			T_ASSERT(js[i]->id > 0 && (size_t)js[i]->id < seen_n);
			if (seen[js[i]->id])
				T_FAIL("job %lld seen twice", (long long)js[i]->id);
			seen[js[i]->id] = 1;
			if (i > 0)
				T_ASSERT(js[i]->id < js[i - 1]->id);
			if (f.before_id > 0)
				T_ASSERT(js[i]->id < f.before_id);
		}
		total += n;
		pgc_queue_infos_free(js, n);
		if (next == 0)
			return total;
		f.before_id = next;
	}
	T_FAIL("the cursor never ended");
}

static void browse__keyset_pages(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	fill(c, q);
	long long maxid = sql_int(c, "SELECT greatest((SELECT max(id) FROM %s.jobs), (SELECT max(id) FROM %s.job_history))",
	                          schema, schema);
	size_t seen_n = (size_t)maxid + 1, pages;
	char *seen = calloc(seen_n, 1);
	pgc_queue_browse_filter f = PGC_QUEUE_BROWSE_FILTER_INIT;
	f.limit = 4;
	T_ASSERT_INT_EQ((long long)page_all(q, f, seen, seen_n, &pages), 35);
	T_ASSERT(pages >= 9);
	/* A scan bound smaller than the page: pages may be short or empty, every job still once. */
	memset(seen, 0, seen_n);
	f.limit = 10;
	f.max_scan = 3;
	f.queue = "a";
	T_ASSERT_INT_EQ((long long)page_all(q, f, seen, seen_n, &pages), 30);
	T_ASSERT(pages >= 12);
	/* Filters: status, key prefix, text in the payload and in the error. */
	struct { const char *queue, *status, *key, *text; long want; } cases[] = {
		{ NULL, "failed", NULL, NULL, 5 },
		{ NULL, "succeeded", NULL, NULL, 5 },
		{ "a", "pending", NULL, NULL, 20 },
		{ NULL, NULL, "k-", NULL, 5 },
		{ NULL, NULL, "k-3", NULL, 1 },
		{ "a", NULL, NULL, "needle", 10 },
		{ NULL, NULL, NULL, "boom <b>", 5 },
		{ NULL, "running", NULL, NULL, 0 },
		{ "b", NULL, NULL, "needle", 0 },
		{ NULL, NULL, "k_", NULL, 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(seen, 0, seen_n);
		pgc_queue_browse_filter g = PGC_QUEUE_BROWSE_FILTER_INIT;
		g.queue = cases[i].queue;
		g.status = cases[i].status;
		g.key_prefix = cases[i].key;
		g.text = cases[i].text;
		g.limit = 3;
		g.max_scan = 7;
		size_t got = page_all(q, g, seen, seen_n, &pages);
		if ((long)got != cases[i].want)
			T_FAIL("case %zu: %zu jobs, expected %ld", i, got, cases[i].want);
	}
	/* The concurrency key: exact, live and finished alike, with the other filters. */
	{
		pgc_error e;
		pgc_job_options o = PGC_JOB_OPTIONS_INIT;
		o.key = "tenant-1";
		for (int i = 0; i < 3; i++)
			T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "c", "{}", &o, NULL, &e), PGC_OK);
		o.key = "tenant-10";
		T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "c", "{}", &o, NULL, &e), PGC_OK);
		pgc_job *cj;
		size_t cn;
		T_ASSERT_INT_EQ(pgc_queue_claim(q, "c", 1, 60000, "t", &cj, &cn, &e), PGC_OK);
		T_ASSERT_INT_EQ((long long)cn, 1);
		T_ASSERT_INT_EQ(pgc_queue_complete(q, cj[0].id, cj[0].token, &e), PGC_OK);
		bool t1 = strcmp(cj[0].key, "tenant-1") == 0;
		pgc_queue_jobs_free(cj, cn);
		struct { const char *key, *status; long want; } kc[] = {
			{ "tenant-1", NULL, 3 },
			{ "tenant-10", NULL, 1 },
			{ "tenant-", NULL, 0 },
			{ "tenant-1", "succeeded", t1 ? 1 : 0 },
			{ "tenant-1", "pending", t1 ? 2 : 3 },
		};
		for (size_t i = 0; i < sizeof kc / sizeof kc[0]; i++) {
			pgc_queue_browse_filter g = PGC_QUEUE_BROWSE_FILTER_INIT;
			g.job_key = kc[i].key;
			g.status = kc[i].status;
			pgc_job_info **kj;
			size_t kn;
			int64_t knext;
			T_ASSERT_INT_EQ(pgc_queue_browse(q, &g, &kj, &kn, &knext, &e), PGC_OK);
			if ((long)kn != kc[i].want)
				T_FAIL("key case %zu: %zu jobs, expected %ld", i, kn, kc[i].want);
			for (size_t k = 0; k < kn; k++)
				T_ASSERT_STR_EQ(kj[k]->key, kc[i].key);
			pgc_queue_infos_free(kj, kn);
		}
	}
	/* Errors only: the payload's text is not looked at. */
	memset(seen, 0, seen_n);
	pgc_queue_browse_filter h = PGC_QUEUE_BROWSE_FILTER_INIT;
	h.text = "needle";
	h.text_in_errors_only = true;
	T_ASSERT_INT_EQ((long long)page_all(q, h, seen, seen_n, &pages), 0);
	memset(seen, 0, seen_n);
	h.text = "boom";
	T_ASSERT_INT_EQ((long long)page_all(q, h, seen, seen_n, &pages), 5);
	/* The finished ones come back with their error history. */
	pgc_queue_browse_filter g = PGC_QUEUE_BROWSE_FILTER_INIT;
	g.status = "failed";
	pgc_job_info **js;
	size_t n;
	int64_t next;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &g, &js, &n, &next, &err), PGC_OK);
	T_ASSERT_INT_EQ((long long)n, 5);
	T_ASSERT_INT_EQ((long long)next, 0);
	T_ASSERT_STR_EQ(js[0]->last_error, "boom <b>");
	T_ASSERT_CONTAINS(js[0]->errors, "boom");
	pgc_queue_infos_free(js, n);
	free(seen);
	teardown(c, q);
}

static void browse__bad_input(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	pgc_job_info **js;
	size_t n;
	pgc_queue_browse_filter f = PGC_QUEUE_BROWSE_FILTER_INIT;
	T_ASSERT_INT_EQ(pgc_queue_browse(NULL, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_browse(q, NULL, &js, &n, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, NULL, &n, NULL, &err), PGC_EUSAGE);
	f.status = "done";
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "unknown status");
	f = (pgc_queue_browse_filter)PGC_QUEUE_BROWSE_FILTER_INIT;
	f.limit = 1001;
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	f.limit = 0;
	f.max_scan = -1;
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	f.max_scan = 0;
	f.before_id = -5;
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	f.before_id = 0;
	f.text = "";
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	f.text = NULL;
	f.key_prefix = "";
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	f.key_prefix = NULL;
	f.job_key = "";
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "job_key");
	char longkey[PGC_QUEUE_KEY_MAX + 2];
	memset(longkey, 'k', sizeof longkey - 1);
	longkey[sizeof longkey - 1] = '\0';
	f.job_key = longkey;
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	f.job_key = NULL;
	f.queue = "";
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_EUSAGE);
	/* Hostile text is a value, never SQL. */
	f.queue = NULL;
	f.text = "'); DROP TABLE jobs; --";
	T_ASSERT_INT_EQ(pgc_queue_browse(q, &f, &js, &n, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ((long long)n, 0);
	pgc_queue_infos_free(js, n);
	pgc_job_wait w;
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, 0, &w, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, 1, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, 999999999, &w, &err), PGC_ENOTFOUND);
	pgc_queue_worker *ws;
	T_ASSERT_INT_EQ(pgc_queue_workers(NULL, &ws, &n, &err), PGC_EUSAGE);
	teardown(c, q);
}

static void browse__why_waiting(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	int64_t first, second, later;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "w", "{}", NULL, &first, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "w", "{}", NULL, &second, &err), PGC_OK);
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.delay_ms = 3600000;
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "w", "{}", &o, &later, &err), PGC_OK);
	pgc_job_wait w;
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, second, &w, &err), PGC_OK);
	T_ASSERT(w.live && !w.running && !w.scheduled && !w.paused);
	T_ASSERT_INT_EQ(w.ahead, 1);
	T_ASSERT_INT_EQ(w.workers, 0);
	T_ASSERT_CONTAINS(w.reason, "no listening worker");
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, later, &w, &err), PGC_OK);
	T_ASSERT(w.scheduled && w.run_in_s > 3000);
	T_ASSERT_CONTAINS(w.reason, "scheduled for later");
	/* A registered worker with free slots: then the jobs ahead are the reason. */
	sql(c, "INSERT INTO %s.workers (channel, queues, free) VALUES ('pgc_w_test', '{w}', 2)", schema);
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, second, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(w.workers, 1);
	T_ASSERT_INT_EQ(w.free_slots, 2);
	T_ASSERT_CONTAINS(w.reason, "1 job ahead");
	pgc_queue_worker *ws;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_workers(q, &ws, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ((long long)n, 1);
	T_ASSERT_STR_EQ(ws[0].channel, "pgc_w_test");
	T_ASSERT_STR_EQ(ws[0].queues, "{w}");
	pgc_free(ws);
	T_ASSERT_INT_EQ(pgc_queue_pause(q, "w", true, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, first, &w, &err), PGC_OK);
	T_ASSERT(w.paused);
	T_ASSERT_CONTAINS(w.reason, "paused");
	/* Running and finished jobs have no reason. */
	T_ASSERT_INT_EQ(pgc_queue_pause(q, "w", false, &err), PGC_OK);
	pgc_job *jobs;
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "w", 1, 60000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, jobs[0].id, &w, &err), PGC_OK);
	T_ASSERT(w.running);
	T_ASSERT_STR_EQ(w.reason, "");
	T_ASSERT_INT_EQ(pgc_queue_complete(q, jobs[0].id, jobs[0].token, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, jobs[0].id, &w, &err), PGC_OK);
	T_ASSERT(!w.live);
	pgc_queue_jobs_free(jobs, n);
	/* Keyed jobs: those ahead are of its key; a key at its limit is the reason. */
	pgc_queue_flow fl = PGC_QUEUE_FLOW_UNCHANGED;
	fl.key_limit = 1;
	T_ASSERT_INT_EQ(pgc_queue_flow_set(q, "k", &fl, &err), PGC_OK);
	sql(c, "INSERT INTO %s.workers (channel, queues, free) VALUES ('pgc_w_test_k', '{k}', 2)", schema);
	pgc_job_options ko = PGC_JOB_OPTIONS_INIT;
	int64_t a1, a2, a3, b1;
	ko.key = "A";
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "k", "{}", &ko, &a1, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "k", "{}", &ko, &a2, &err), PGC_OK);
	ko.key = "B";
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "k", "{}", &ko, &b1, &err), PGC_OK);
	ko.key = "A";
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "k", "{}", &ko, &a3, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, a3, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(w.ahead, 2);
	T_ASSERT_CONTAINS(w.reason, "2 jobs ahead of it in its key");
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, b1, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(w.ahead, 0);
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "k", 10, 60000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ((long long)n, 2); /* one of A (its limit), one of B */
	T_ASSERT_INT_EQ(pgc_queue_job_wait(q, a2, &w, &err), PGC_OK);
	T_ASSERT_STR_EQ(w.reason, "its key A is at its limit 1");
	pgc_queue_jobs_free(jobs, n);
	(void)a1;
	teardown(c, q);
}

static _Atomic long long claimed_seen = -2;

static void note_claimed(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	claimed_seen = pgc_job_claimed_ms(job);
}

/* How long ago a worker's job was claimed: known inside its handler, -1 elsewhere; the
 * worker's reconnects are counted. */
static void browse__job_claimed_ms(void)
{
	pgc_queue *q;
	pgc_conn *c = setup(&q);
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_job_claimed_ms(NULL), -1);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "cl", "{}", NULL, NULL, &err), PGC_OK);
	pgc_job *jobs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_queue_claim(q, "cl", 1, 60000, "t", &jobs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_job_claimed_ms(&jobs[0]), -1);
	T_ASSERT_INT_EQ(pgc_queue_complete(q, jobs[0].id, jobs[0].token, &err), PGC_OK);
	pgc_queue_jobs_free(jobs, n);
	T_ASSERT_INT_EQ(pgc_queue_enqueue(q, "cl", "{}", NULL, NULL, &err), PGC_OK);
	const char *qs[1] = { "cl" };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = t_dsn();
	o.schema = schema;
	o.queues = qs;
	o.n_queues = 1;
	o.once = true;
	pgc_worker *w;
	T_ASSERT_INT_EQ(pgc_worker_new(&o, note_claimed, NULL, &w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_start(w, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_worker_wait(w, &err), PGC_OK);
	T_ASSERT(claimed_seen >= 0 && claimed_seen < 60000);
	pgc_worker_stats st;
	pgc_worker_get_stats(w, &st);
	T_ASSERT_INT_EQ(st.reconnects, 0);
	pgc_worker_free(w);
	teardown(c, q);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "browse__capped_counts", browse__capped_counts },
		{ "browse__keyset_pages", browse__keyset_pages },
		{ "browse__bad_input", browse__bad_input },
		{ "browse__why_waiting", browse__why_waiting },
		{ "browse__job_claimed_ms", browse__job_claimed_ms },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
