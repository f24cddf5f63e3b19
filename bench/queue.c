/* queue.c - the job queue beside its references, on one server, in one run
 *
 * References (pgbench on the same server, same client count): the seed's raw claim/complete
 * SQL at batch 1 and batch 100, and the lightest possible queue (insert 1,000, then DELETE ...
 * SKIP LOCKED ... RETURNING 1,000, no acknowledgement) as the ceiling. Then pgcoord: bulk
 * enqueue, drain with no-op C handlers at K = 1, 4, 16, end-to-end (a producer and workers
 * together), wake-up latency (enqueue commit -> handler start) at a steady rate, starvation
 * under a constant high-priority stream, the RSS of an idle `pgcoord worker`, and with --soak
 * the throughput of the last 100,000 of 1,000,000 jobs against the first 100,000.
 *
 * Usage: bench_queue [SECONDS] [--jobs N] [--concurrency K] [--workers W] [--clients C]
 *                    [--rate R] [--soak [N]] [--only LIST] [--json]
 * Prints a table; appends one JSON line per figure to $BENCH_JSON (and to stdout with --json).
 * Needs PGCOORD_TEST_DSN (scripts/bench or scripts/with-pg set it). */
#include <fcntl.h>
#include <getopt.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pgcoord.h>

#include "bench.h"

#ifndef BENCH_QUEUE_DIR
#define BENCH_QUEUE_DIR "bench/queue"
#endif

#define SCHEMA "pgc_bench_queue"

static int seconds = 5;
static long n_jobs = 100000;
static int only_k = 0;       /* --concurrency: one K instead of 1, 4, 16 */
static int n_workers = 2;
static int clients = 4;
static int rate = 200;
static long soak = 0;
static bool json_stdout = false;
static const char *only = NULL;
static FILE *json_out;
static double ceiling = 0, seed1 = 0, seed100 = 0;
static long vacuum_threshold = -1; /* --vacuum N: the workers' vacuum_dead_tuples; -1: default */

static bool want(const char *name)
{
	if (only == NULL)
		return true;
	const char *p = strstr(only, name);
	size_t n = strlen(name);
	return p != NULL && (p == only || p[-1] == ',') && (p[n] == '\0' || p[n] == ',');
}

static void die(const char *what, const pgc_error *e)
{
	fprintf(stderr, "bench_queue: %s: %s\n", what, e ? e->message : "");
	exit(1);
}

static void emit(const char *fmt, ...) PGC_PRINTF(1, 2);
static void emit(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (json_out)
		fprintf(json_out, "%s\n", buf);
	if (json_stdout)
		printf("%s\n", buf);
}

static void row(const char *label, double per_s, const char *note)
{
	char c[16] = "", s1[16] = "", s100[16] = "";
	if (ceiling > 0 && per_s > 0)
		snprintf(c, sizeof c, "%.2f", per_s / ceiling);
	if (seed1 > 0 && per_s > 0)
		snprintf(s1, sizeof s1, "%.1f", per_s / seed1);
	if (seed100 > 0 && per_s > 0)
		snprintf(s100, sizeof s100, "%.2f", per_s / seed100);
	printf("%-50s %10.0f %8s %8s %9s  %s\n", label, per_s, c, s1, s100, note ? note : "");
	fflush(stdout);
}

static char *slurp(const char *name)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", BENCH_QUEUE_DIR, name);
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		fprintf(stderr, "bench_queue: cannot open %s\n", path);
		exit(1);
	}
	static char buf[65536];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strdup(buf);
}

static pgc_conn *connect_or_die(void)
{
	pgc_conn *c;
	pgc_error e;
	if (pgc_connect(bench_dsn(), NULL, &c, &e) != PGC_OK)
		die("connect", &e);
	return c;
}

static void exec_or_die(pgc_conn *c, const char *sql)
{
	pgc_error e;
	if (pgc_exec(c, sql, &e) != PGC_OK)
		die(sql, &e);
}

/* ---- references ------------------------------------------------------------------------- */

static void references(pgc_conn *c)
{
	char *setup = slurp("setup.sql");
	exec_or_die(c, "SET client_min_messages = warning");
	exec_or_die(c, setup);
	free(setup);
	struct { const char *file, *label, *key; int per_tx; double *out; } refs[] = {
		{ "seed_batch1.sql", "seed SQL, batch 1 (insert, claim, complete)", "seed_batch1", 1, &seed1 },
		{ "seed_batch100.sql", "seed SQL, batch 100", "seed_batch100", 100, &seed100 },
		{ "lightest.sql", "ceiling: insert 1000 + DELETE SKIP LOCKED RETURNING", "lightest", 1000, &ceiling },
	};
	for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
		if (!want(refs[i].key))
			continue;
		exec_or_die(c, "TRUNCATE pgc_bench_ref.jobs, pgc_bench_ref.light");
		char *script = slurp(refs[i].file);
		double tps = bench_pgbench(script, clients, seconds);
		free(script);
		double per_s = tps > 0 ? tps * refs[i].per_tx : 0;
		*refs[i].out = per_s;
		char label[128];
		snprintf(label, sizeof label, "reference: %s", refs[i].label);
		char note[64];
		snprintf(note, sizeof note, "pgbench -c %d -T %d", clients, seconds);
		row(label, per_s, note);
		emit("{\"bench\":\"queue\",\"case\":\"reference\",\"script\":\"%s\",\"clients\":%d,"
		     "\"seconds\":%d,\"jobs_per_s\":%.0f}", refs[i].key, clients, seconds, per_s);
	}
	exec_or_die(c, "DROP SCHEMA pgc_bench_ref CASCADE");
}

/* ---- pgcoord ----------------------------------------------------------------------------- */

static void reset_queue(pgc_conn *c)
{
	char sql[512];
	snprintf(sql, sizeof sql, "TRUNCATE %s.jobs, %s.job_history, %s.queues", SCHEMA, SCHEMA, SCHEMA);
	exec_or_die(c, sql);
	snprintf(sql, sizeof sql, "VACUUM ANALYZE %s.jobs", SCHEMA);
	exec_or_die(c, sql);
}

static pgc_queue *open_q(pgc_conn *c)
{
	pgc_queue_options o = PGC_QUEUE_OPTIONS_INIT;
	o.schema = SCHEMA;
	pgc_queue *q;
	pgc_error e;
	if (pgc_queue_open(c, &o, &q, &e) != PGC_OK)
		die("queue open", &e);
	return q;
}

static const char **payloads(long n)
{
	static const char **p;
	static long have;
	if (have < n) {
		free(p);
		p = malloc((size_t)n * sizeof *p);
		for (long i = 0; i < n; i++)
			p[i] = "{\"task\":\"noop\"}";
		have = n;
	}
	return p;
}

static void enqueue_n(pgc_queue *q, const char *queue, long n, int chunk)
{
	const char **p = payloads(chunk);
	pgc_error e;
	for (long done = 0; done < n; done += chunk) {
		size_t k = (size_t)(n - done < chunk ? n - done : chunk);
		if (pgc_queue_enqueue_many(q, queue, k, p, NULL, NULL, NULL, NULL, NULL, &e) != PGC_OK)
			die("enqueue", &e);
	}
}

static atomic_long handled;

static void noop(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)job;
	(void)res;
	(void)arg;
	atomic_fetch_add(&handled, 1);
}

static pgc_worker *start_worker(const char *queue, int k, int prefetch, pgc_job_handler h, void *arg)
{
	const char **qs = malloc(sizeof *qs);
	qs[0] = queue;
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = bench_dsn();
	o.schema = SCHEMA;
	o.queues = qs;
	o.n_queues = 1;
	o.concurrency = k;
	o.prefetch = prefetch;
	if (vacuum_threshold >= 0)
		o.vacuum_dead_tuples = vacuum_threshold;
	pgc_worker *w;
	pgc_error e;
	if (pgc_worker_new(&o, h, arg, &w, &e) != PGC_OK || pgc_worker_start(w, &e) != PGC_OK)
		die("worker", &e);
	free(qs);
	return w;
}

static long completed(pgc_worker **w, int n)
{
	long s = 0;
	for (int i = 0; i < n; i++) {
		pgc_worker_stats st;
		pgc_worker_get_stats(w[i], &st);
		s += st.completed;
	}
	return s;
}

static void stop_all(pgc_worker **w, int n)
{
	for (int i = 0; i < n; i++)
		pgc_worker_stop(w[i], 1000);
	for (int i = 0; i < n; i++) {
		pgc_error e;
		if (pgc_worker_wait(w[i], &e) != PGC_OK)
			fprintf(stderr, "bench_queue: worker: %s\n", e.message);
		pgc_worker_free(w[i]);
	}
}

static void bench_enqueue(pgc_conn *c, pgc_queue *q)
{
	reset_queue(c);
	double t0 = bench_now();
	enqueue_n(q, "enq", n_jobs, 5000);
	double per_s = n_jobs / (bench_now() - t0);
	row("pgcoord enqueue, bulk (5000 per call, 1 connection)", per_s, NULL);
	emit("{\"bench\":\"queue\",\"case\":\"enqueue_bulk\",\"jobs\":%ld,\"chunk\":5000,\"jobs_per_s\":%.0f,"
	     "\"ratio_ceiling\":%.3f}", n_jobs, per_s, ceiling > 0 ? per_s / ceiling : 0);
}

static void bench_drain(pgc_conn *c, pgc_queue *q, int workers, int k, bool history);

/* The same drain with 100,000 jobs of the same queue scheduled for tomorrow: they wait outside
 * the claim index, so the claims should not slow down. */
static long later_jobs;

static void bench_drain(pgc_conn *c, pgc_queue *q, int workers, int k, bool history)
{
	pgc_queue_config cfg = { -1, history ? 86400000 : 0, -1, -1 };
	pgc_error ce;
	if (pgc_queue_config_set(q, &cfg, &ce) != PGC_OK)
		die("config", &ce);
	reset_queue(c);
	if (later_jobs > 0) {
		pgc_job_options later = PGC_JOB_OPTIONS_INIT;
		later.delay_ms = 86400000;
		const char **p = payloads(5000);
		pgc_error le;
		for (long d = 0; d < later_jobs; d += 5000)
			if (pgc_queue_enqueue_many(q, "drain", 5000, p, NULL, &later, NULL, NULL, NULL, &le) != PGC_OK)
				die("enqueue", &le);
	}
	enqueue_n(q, "drain", n_jobs, 5000);
	atomic_store(&handled, 0);
	pgc_worker *w[64];
	int prefetch = 512;
	double t0 = bench_now();
	for (int i = 0; i < workers; i++)
		w[i] = start_worker("drain", k, prefetch, noop, NULL);
	double deadline = t0 + 600;
	while (completed(w, workers) < n_jobs && bench_now() < deadline)
		usleep(1000);
	double el = bench_now() - t0;
	long done = completed(w, workers);
	stop_all(w, workers);
	double per_s = done / el;
	char label[128];
	snprintf(label, sizeof label, "pgcoord drain, no-op handlers, %d worker%s x K=%d%s%s", workers,
	         workers == 1 ? "" : "s", k, history ? "" : ", no history",
	         later_jobs ? ", +100k for later" : "");
	char note[64];
	snprintf(note, sizeof note, "prefetch %d, %ld jobs", prefetch, done);
	row(label, per_s, note);
	emit("{\"bench\":\"queue\",\"case\":\"drain\",\"workers\":%d,\"k\":%d,\"prefetch\":%d,"
	     "\"history\":%s,\"scheduled_for_later\":%ld,\"jobs\":%ld,\"jobs_per_s\":%.0f,"
	     "\"ratio_ceiling\":%.3f,\"ratio_seed_batch100\":%.3f}", workers, k, prefetch,
	     history ? "true" : "false", later_jobs, done,
	     per_s, ceiling > 0 ? per_s / ceiling : 0, seed100 > 0 ? per_s / seed100 : 0);
	cfg.succeeded_retention_ms = 86400000;
	if (pgc_queue_config_set(q, &cfg, &ce) != PGC_OK)
		die("config", &ce);
}

typedef struct producer {
	long n;
	int chunk;
	double done_at;
} producer;

static void *produce(void *arg)
{
	producer *p = arg;
	pgc_conn *c = connect_or_die();
	pgc_queue *q = open_q(c);
	enqueue_n(q, "e2e", p->n, p->chunk);
	p->done_at = bench_now();
	pgc_queue_close(q);
	pgc_conn_close(c);
	return NULL;
}

static void bench_e2e(pgc_conn *c, int workers, int k)
{
	reset_queue(c);
	pgc_worker *w[64];
	for (int i = 0; i < workers; i++)
		w[i] = start_worker("e2e", k, 512, noop, NULL);
	producer p = { n_jobs, 1000, 0 };
	pthread_t th;
	double t0 = bench_now();
	pthread_create(&th, NULL, produce, &p);
	double deadline = t0 + 600;
	while (completed(w, workers) < n_jobs && bench_now() < deadline)
		usleep(1000);
	double el = bench_now() - t0;
	pthread_join(th, NULL);
	long done = completed(w, workers);
	stop_all(w, workers);
	double per_s = done / el;
	char label[128];
	snprintf(label, sizeof label, "pgcoord end-to-end, 1 producer + %d workers x K=%d", workers, k);
	row(label, per_s, "enqueue 1000/call while draining");
	emit("{\"bench\":\"queue\",\"case\":\"end_to_end\",\"producers\":1,\"workers\":%d,\"k\":%d,"
	     "\"jobs\":%ld,\"jobs_per_s\":%.0f,\"ratio_ceiling\":%.3f}", workers, k, done, per_s,
	     ceiling > 0 ? per_s / ceiling : 0);
}

/* ---- wake-up latency ------------------------------------------------------------------------ */

static double *lat_commit, *lat_start;
static long lat_n;

static void stamp(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	double now = bench_now();
	const char *p = strstr(job->payload, "\"i\":");
	if (p == NULL)
		return;
	long i = atol(p + 4);
	if (i >= 0 && i < lat_n)
		lat_start[i] = now;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void bench_latency(pgc_conn *c, pgc_queue *q)
{
	reset_queue(c);
	lat_n = (long)rate * seconds;
	lat_commit = calloc((size_t)lat_n, sizeof *lat_commit);
	lat_start = calloc((size_t)lat_n, sizeof *lat_start);
	pgc_worker *w = start_worker("lat", 4, 0, stamp, NULL);
	usleep(300000); /* let it go idle: every job must be a wake-up */
	double t0 = bench_now(), step = 1.0 / rate;
	pgc_error e;
	for (long i = 0; i < lat_n; i++) {
		double at = t0 + i * step, now = bench_now();
		if (at > now)
			usleep((useconds_t)((at - now) * 1e6));
		char payload[64];
		snprintf(payload, sizeof payload, "{\"i\":%ld}", i);
		if (pgc_queue_enqueue(q, "lat", payload, NULL, NULL, &e) != PGC_OK)
			die("enqueue", &e);
		lat_commit[i] = bench_now();
	}
	double deadline = bench_now() + 10;
	while (completed(&w, 1) < lat_n && bench_now() < deadline)
		usleep(1000);
	pgc_worker_stats st;
	pgc_worker_get_stats(w, &st);
	stop_all(&w, 1);
	double *d = calloc((size_t)lat_n, sizeof *d);
	long k = 0;
	for (long i = 0; i < lat_n; i++)
		if (lat_start[i] > 0) {
			double v = (lat_start[i] - lat_commit[i]) * 1000;
			d[k++] = v < 0 ? 0 : v; /* the notification can beat the commit's reply */
		}
	if (getenv("BENCH_DEBUG")) for (long i = 0; i < lat_n; i++) if (lat_start[i] > 0 && (lat_start[i] - lat_commit[i]) * 1000 > 20) fprintf(stderr, "slow %ld at %.3f: %.1f ms\n", i, lat_commit[i] - t0, (lat_start[i] - lat_commit[i]) * 1000);
	qsort(d, (size_t)k, sizeof *d, cmp_double);
	double p50 = k ? d[k / 2] : -1, p99 = k ? d[(long)(k * 0.99)] : -1, mx = k ? d[k - 1] : -1;
	printf("%-50s %10s  p50 %.2f ms, p99 %.2f ms, max %.2f ms (%ld of %ld jobs, %s)\n",
	       "pgcoord wake-up latency, enqueue commit -> start", "", p50, p99, mx, k, lat_n,
	       st.listening ? "LISTEN/NOTIFY" : "polling");
	emit("{\"bench\":\"queue\",\"case\":\"wakeup_latency\",\"rate_per_s\":%d,\"jobs\":%ld,"
	     "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"listening\":%s}", rate, k, p50, p99, mx,
	     st.listening ? "true" : "false");
	free(d);
	free(lat_commit);
	free(lat_start);
}

/* ---- starvation -------------------------------------------------------------------------- */

static atomic_int low_seen;
static double low_started;

static void busy(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	if (strstr(job->payload, "low") != NULL && !atomic_exchange(&low_seen, 1))
		low_started = bench_now();
	usleep(1000); /* capacity: about 2 x 1000 jobs/s */
}

static void bench_starvation(pgc_conn *c, pgc_queue *q)
{
	reset_queue(c);
	pgc_queue_config cfg = { 2000, -1, -1, -1 };
	pgc_error e;
	if (pgc_queue_config_set(q, &cfg, &e) != PGC_OK)
		die("config", &e);
	pgc_job_options lo = PGC_JOB_OPTIONS_INIT, hi = PGC_JOB_OPTIONS_INIT;
	lo.priority = -10;
	hi.priority = 10;
	/* One low-priority job, then a backlog of newer high-priority work and a stream of it
	 * faster than the worker's capacity: without aging the low job would never run. */
	const char **p = payloads(2000);
	double t0 = bench_now();
	if (pgc_queue_enqueue(q, "starve", "{\"low\":true}", &lo, NULL, &e) != PGC_OK)
		die("enqueue", &e);
	if (pgc_queue_enqueue_many(q, "starve", 2000, p, NULL, &hi, NULL, NULL, NULL, &e) != PGC_OK)
		die("enqueue", &e);
	atomic_store(&low_seen, 0);
	pgc_worker *w = start_worker("starve", 2, 0, busy, NULL);
	double limit = t0 + 30;
	while (!atomic_load(&low_seen) && bench_now() < limit) {
		if (pgc_queue_enqueue_many(q, "starve", 300, p, NULL, &hi, NULL, NULL, NULL, &e) != PGC_OK)
			die("enqueue", &e);
		usleep(100000); /* 3000 high-priority jobs/s */
	}
	stop_all(&w, 1);
	double waited = atomic_load(&low_seen) ? low_started - t0 : -1;
	long left = 0;
	pgc_queue_stat *st;
	size_t n;
	if (pgc_queue_stats(q, "starve", &st, &n, NULL, &e) == PGC_OK) {
		left = st[0].pending;
		pgc_free(st);
	}
	printf("%-50s %10s  low-priority job started after %.2f s (aging 2 s), %ld newer high-priority jobs still waiting\n",
	       "pgcoord aging under a constant high-priority stream", "", waited, left);
	emit("{\"bench\":\"queue\",\"case\":\"starvation\",\"aging_s\":2,\"low_waited_s\":%.3f,"
	     "\"high_pending_after\":%ld}", waited, left);
	cfg.aging_ms = 300000;
	if (pgc_queue_config_set(q, &cfg, &e) != PGC_OK)
		die("config", &e);
}

/* ---- worker RSS ---------------------------------------------------------------------------- */

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kb = -1;
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static void bench_rss(pgc_conn *c, pgc_queue *q)
{
	reset_queue(c);
	char exe[1024];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (slash == NULL)
		return;
	*slash = '\0';
	char bin[1100];
	snprintf(bin, sizeof bin, "%s/../pgcoord", exe);
	if (access(bin, X_OK) != 0)
		return;
	enqueue_n(q, "rss", 2000, 1000);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("PGCOORD_DSN", bench_dsn(), 1);
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		execl(bin, bin, "-q", "worker", "--schema", SCHEMA, "--queue", "rss", "-c", "16", "--", "true",
		      (char *)NULL);
		_exit(127);
	}
	/* Let it work through the jobs, then measure while idle. */
	double deadline = bench_now() + 60;
	pgc_queue_stat *st;
	size_t k;
	pgc_error e;
	long pending = 1;
	while (pending > 0 && bench_now() < deadline) {
		usleep(200000);
		if (pgc_queue_stats(q, "rss", &st, &k, NULL, &e) == PGC_OK) {
			pending = st[0].pending + st[0].running;
			pgc_free(st);
		}
	}
	usleep(300000);
	long kb = rss_kb(pid);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	printf("%-50s %10s  %.1f MB after 2000 jobs (pgcoord worker -c 16 -- true)\n",
	       "pgcoord worker RSS", "", kb / 1024.0);
	emit("{\"bench\":\"queue\",\"case\":\"worker_rss\",\"k\":16,\"rss_kb\":%ld}", kb);
}

/* ---- soak ------------------------------------------------------------------------------------ */

static void bench_soak(pgc_conn *c, pgc_queue *q)
{
	reset_queue(c);
	pgc_worker *w[64];
	for (int i = 0; i < n_workers; i++)
		w[i] = start_worker("soak", 8, 512, noop, NULL);
	const char **p = payloads(1000);
	pgc_error e;
	long enq = 0, window = soak / 10;
	double t_first = 0, t_last_start = 0, t0 = bench_now(), t_end = 0;
	while (completed(w, n_workers) < soak) {
		long done = completed(w, n_workers);
		if (t_first == 0 && done >= window)
			t_first = bench_now();
		if (t_last_start == 0 && done >= soak - window)
			t_last_start = bench_now();
		/* Keep a bounded backlog, as a steady producer would. */
		if (enq < soak && enq - done < 50000) {
			if (pgc_queue_enqueue_many(q, "soak", 1000, p, NULL, NULL, NULL, NULL, NULL, &e) != PGC_OK)
				die("enqueue", &e);
			enq += 1000;
		} else {
			usleep(1000);
		}
	}
	t_end = bench_now();
	stop_all(w, n_workers);
	double first = window / (t_first - t0), last = window / (t_end - t_last_start);
	printf("%-50s %10.0f  first %ld: %.0f/s, last %ld: %.0f/s, ratio %.2f\n", "pgcoord soak",
	       soak / (t_end - t0), window, first, window, last, last / first);
	emit("{\"bench\":\"queue\",\"case\":\"soak\",\"jobs\":%ld,\"first_per_s\":%.0f,\"last_per_s\":%.0f,"
	     "\"ratio\":%.3f}", soak, first, last, last / first);
}

int main(int argc, char **argv)
{
	enum { O_JOBS = 256, O_WORKERS, O_CLIENTS, O_RATE, O_SOAK, O_ONLY, O_JSON, O_SECONDS, O_VACUUM };
	static const struct option longopts[] = {
		{ "jobs", required_argument, NULL, O_JOBS },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "workers", required_argument, NULL, O_WORKERS },
		{ "clients", required_argument, NULL, O_CLIENTS },
		{ "rate", required_argument, NULL, O_RATE },
		{ "seconds", required_argument, NULL, O_SECONDS },
		{ "soak", optional_argument, NULL, O_SOAK },
		{ "only", required_argument, NULL, O_ONLY },
		{ "json", no_argument, NULL, O_JSON },
		{ "vacuum", required_argument, NULL, O_VACUUM },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
		switch (ch) {
		case O_JOBS: n_jobs = atol(optarg); break;
		case 'c': only_k = atoi(optarg); break;
		case O_WORKERS: n_workers = atoi(optarg); break;
		case O_CLIENTS: clients = atoi(optarg); break;
		case O_RATE: rate = atoi(optarg); break;
		case O_SECONDS: seconds = atoi(optarg); break;
		case O_SOAK: soak = optarg ? atol(optarg) : 1000000; break;
		case O_ONLY: only = optarg; break;
		case O_JSON: json_stdout = true; break;
		case O_VACUUM: vacuum_threshold = atol(optarg); break;
		case 'h':
			puts("Usage: bench_queue [SECONDS] [--jobs N] [--concurrency K] [--workers W]\n"
			     "                   [--clients C] [--rate R] [--soak[=N]] [--only LIST] [--json]\n"
			     "                   [--vacuum N]\n"
			     "  SECONDS, --seconds  length of each pgbench reference and latency run (5)\n"
			     "  --jobs N            jobs per enqueue/drain/end-to-end run (100000)\n"
			     "  --concurrency K     drain with this K only (default: 1, 4 and 16)\n"
			     "  --workers W         worker instances for the multi-worker rows (2)\n"
			     "  --clients C         pgbench clients for the references (4)\n"
			     "  --rate R            jobs/s for the wake-up latency run (200)\n"
			     "  --soak[=N]          also run the soak with N jobs (1000000)\n"
			     "  --only LIST         comma list of: seed_batch1,seed_batch100,lightest,enqueue,\n"
			     "                      drain,e2e,latency,starvation,rss\n"
			     "  --json              also print the JSON lines on stdout\n"
			     "  --vacuum N          the workers' vacuum threshold in dead tuples (20000;\n"
			     "                      0: autovacuum only)\n"
			     "Needs PGCOORD_TEST_DSN. JSON lines are appended to $BENCH_JSON.");
			return 0;
		default:
			return 64;
		}
	}
	if (optind < argc)
		seconds = atoi(argv[optind]);
	if (seconds < 1 || n_jobs < 1 || n_workers < 1 || n_workers > 64 || clients < 1 || rate < 1)
		return 64;
	const char *jp = getenv("BENCH_JSON");
	if (jp && *jp)
		json_out = fopen(jp, "a");

	pgc_conn *c = connect_or_die();
	exec_or_die(c, "SET client_min_messages = warning");
	exec_or_die(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE");
	pgc_error e;
	if (pgc_schema_init(c, SCHEMA, NULL, NULL, &e) != PGC_OK)
		die("init", &e);
	pgc_queue *q = open_q(c);

	printf("%-50s %10s %8s %8s %9s\n", "queue (one server, same machine)", "jobs/s", "/ceiling",
	       "/seed b1", "/seed b100");
	references(c);
	if (want("enqueue"))
		bench_enqueue(c, q);
	if (want("drain")) {
		int ks[] = { 1, 4, 16 };
		for (size_t i = 0; i < 3; i++)
			if (only_k == 0 || only_k == ks[i])
				bench_drain(c, q, 1, ks[i], true);
		if (only_k != 0 && only_k != 1 && only_k != 4 && only_k != 16)
			bench_drain(c, q, 1, only_k, true);
		bench_drain(c, q, n_workers, only_k ? only_k : 16, true);
		bench_drain(c, q, n_workers, only_k ? only_k : 16, false);
		later_jobs = 100000;
		bench_drain(c, q, 1, only_k ? only_k : 16, true);
		later_jobs = 0;
	}
	if (want("e2e"))
		bench_e2e(c, n_workers, only_k ? only_k : 8);
	if (want("latency"))
		bench_latency(c, q);
	if (want("starvation"))
		bench_starvation(c, q);
	if (want("rss"))
		bench_rss(c, q);
	if (soak > 0)
		bench_soak(c, q);
	pgc_queue_close(q);
	exec_or_die(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE");
	pgc_conn_close(c);
	if (json_out)
		fclose(json_out);
	return 0;
}
