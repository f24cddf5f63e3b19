/* worker.c - the C reference of bench/clients/run: libpgcoord's in-process worker (and its
 * batch enqueue) under the bench worker contract that every client's bench program follows
 * (bench/clients/README.md):
 *
 *   PGCOORD_BENCH_DSN, PGCOORD_BENCH_SCHEMA, PGCOORD_BENCH_QUEUE, PGCOORD_BENCH_MODE=work|enqueue
 *   work:    PGCOORD_BENCH_CONCURRENCY handlers, PGCOORD_BENCH_STOP_AFTER jobs then a graceful
 *            stop, PGCOORD_BENCH_HANDLER noop|sleep:MS|latency, PGCOORD_BENCH_LISTEN=0 to poll;
 *            prints "ready" before the worker starts and {"handled": N} at exit.
 *   enqueue: PGCOORD_BENCH_JOBS jobs {"i": k} in one pgc_queue_enqueue_many call; prints
 *            {"enqueued": N, "seconds": S}.
 *
 * The worker runs with the library's defaults (prefetch 0, lease 30 s, LISTEN), as a program
 * linking libpgcoord gets them; PGCOORD_BENCH_PREFETCH overrides the prefetch. */
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/time.h>
#include <unistd.h>

#include <pgcoord.h>

#include "../../bench.h"

static const char *need(const char *name)
{
	const char *v = getenv(name);
	if (v == NULL || *v == '\0') {
		fprintf(stderr, "bench_client_c: %s is not set\n", name);
		exit(64);
	}
	return v;
}

static long num(const char *name, long def, long lo, long hi)
{
	const char *v = getenv(name);
	if (v == NULL || *v == '\0')
		return def;
	char *end;
	long n = strtol(v, &end, 10);
	if (*end != '\0' || n < lo || n > hi) {
		fprintf(stderr, "bench_client_c: %s=%s is not a number in %ld..%ld\n", name, v, lo, hi);
		exit(64);
	}
	return n;
}

static void die(const char *what, const pgc_error *e)
{
	fprintf(stderr, "bench_client_c: %s: %s\n", what, e->message);
	exit(1);
}

enum handler_kind { H_NOOP, H_SLEEP, H_LATENCY };
static enum handler_kind kind = H_NOOP;
static long sleep_ms;
static atomic_long handled;

static int64_t unix_us(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

static void handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	if (kind == H_SLEEP) {
		struct timespec ts = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	} else if (kind == H_LATENCY) {
		int64_t now = unix_us();
		const char *t = strstr(job->payload, "\"t_us\"");
		long long sent;
		if (t != NULL && sscanf(strchr(t, ':') + 1, " %lld", &sent) == 1) {
			printf("lat_us %" PRId64 "\n", now - (int64_t)sent);
			fflush(stdout);
		}
	}
	atomic_fetch_add(&handled, 1);
}

static volatile sig_atomic_t terminated;

static void on_term(int sig)
{
	(void)sig;
	terminated = 1;
}

static int work(const char *dsn, const char *schema, const char *queue)
{
	/* 0: until SIGTERM, which stops it gracefully too. */
	long stop_after = num("PGCOORD_BENCH_STOP_AFTER", 0, 0, 100000000);
	struct sigaction sa = { 0 };
	sa.sa_handler = on_term;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	const char *h = getenv("PGCOORD_BENCH_HANDLER");
	if (h == NULL || *h == '\0' || strcmp(h, "noop") == 0)
		kind = H_NOOP;
	else if (strcmp(h, "latency") == 0)
		kind = H_LATENCY;
	else if (strncmp(h, "sleep:", 6) == 0 && (sleep_ms = atol(h + 6)) > 0)
		kind = H_SLEEP;
	else {
		fprintf(stderr, "bench_client_c: PGCOORD_BENCH_HANDLER=%s: noop, sleep:MS or latency\n", h);
		return 64;
	}
	const char *queues[1] = { queue };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = dsn;
	o.schema = schema;
	o.queues = queues;
	o.n_queues = 1;
	o.concurrency = (int)num("PGCOORD_BENCH_CONCURRENCY", 16, 1, 1024);
	o.prefetch = (int)num("PGCOORD_BENCH_PREFETCH", 0, 0, 100000);
	o.listen = num("PGCOORD_BENCH_LISTEN", 1, 0, 1) == 1;
	o.lease_ms = num("PGCOORD_BENCH_LEASE_MS", 30000, 1000, 3600000);
	o.application_name = "pgcoord/bench-c";
	pgc_worker *w;
	pgc_error e;
	if (pgc_worker_new(&o, handler, NULL, &w, &e) != PGC_OK)
		die("worker", &e);
	printf("ready\n");
	fflush(stdout);
	if (pgc_worker_start(w, &e) != PGC_OK)
		die("worker start", &e);
	/* Counted as completed (recorded in the database), the contract's "handled". */
	for (;;) {
		pgc_worker_stats st;
		pgc_worker_get_stats(w, &st);
		if ((stop_after > 0 && st.completed >= stop_after) || terminated)
			break;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	pgc_worker_stop(w, 5000);
	int rc = pgc_worker_wait(w, &e);
	pgc_worker_stats st;
	pgc_worker_get_stats(w, &st);
	pgc_worker_free(w);
	if (rc != PGC_OK)
		die("worker", &e);
	printf("{\"handled\": %ld}\n", st.completed);
	return 0;
}

static int enqueue(const char *dsn, const char *schema, const char *queue)
{
	long n = num("PGCOORD_BENCH_JOBS", 10000, 1, 10000000);
	char **p = malloc((size_t)n * sizeof *p);
	for (long i = 0; i < n; i++) {
		char buf[40];
		snprintf(buf, sizeof buf, "{\"i\": %ld}", i);
		p[i] = strdup(buf);
	}
	pgc_conn *c;
	pgc_queue *q;
	pgc_error e;
	if (pgc_connect(dsn, NULL, &c, &e) != PGC_OK)
		die("connect", &e);
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	if (pgc_queue_open(c, &qo, &q, &e) != PGC_OK)
		die("queue open", &e);
	size_t inserted = 0;
	double t0 = bench_now();
	if (pgc_queue_enqueue_many(q, queue, (size_t)n, (const char *const *)p, NULL, NULL, NULL,
	                           &inserted, NULL, &e) != PGC_OK)
		die("enqueue", &e);
	double s = bench_now() - t0;
	printf("{\"enqueued\": %zu, \"seconds\": %.6f}\n", inserted, s);
	pgc_queue_close(q);
	pgc_conn_close(c);
	for (long i = 0; i < n; i++)
		free(p[i]);
	free(p);
	return 0;
}

int main(void)
{
	const char *dsn = need("PGCOORD_BENCH_DSN");
	const char *schema = need("PGCOORD_BENCH_SCHEMA");
	const char *queue = need("PGCOORD_BENCH_QUEUE");
	const char *mode = need("PGCOORD_BENCH_MODE");
	if (strcmp(mode, "work") == 0)
		return work(dsn, schema, queue);
	if (strcmp(mode, "enqueue") == 0)
		return enqueue(dsn, schema, queue);
	fprintf(stderr, "bench_client_c: PGCOORD_BENCH_MODE=%s: work or enqueue\n", mode);
	return 64;
}
