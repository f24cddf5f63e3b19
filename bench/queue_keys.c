/* queue_keys.c - flow control of the queue beside the unconstrained queue, in one run
 *
 * 1. Drain: the same jobs with no keys (the plain claim), then spread over 1,000 keys each
 *    limited to 1 (claim_flow), with no-op handlers; the ratio of the two throughputs.
 * 2. A noisy neighbour: one key with 100,000 pending jobs (limited to 4 at once) and a second
 *    key whose jobs arrive at a steady rate; the second key's wait (enqueue commit -> handler
 *    start) p50/p99, against the same arrivals on an empty queue.
 *
 * Both drains start after an ANALYZE of the tables, as autovacuum would have run after so many
 * new rows (BENCH_NO_ANALYZE=1: without, as right after a load).
 *
 * --rounds N runs the pair of drains N times, taking turns, and reports each round and the
 * median ratio (this machine's noise swings a single round by a quarter); --drain-only leaves
 * out the noisy neighbour. Where the database has pg_stat_statements (and the role may reset
 * it), each drain also reports the server time per job of its costliest statements, read as
 * soon as the drain ends: the claim's cost apart from the client's. Each drain resets the
 * server's statement statistics: run it on a server of its own.
 *
 * --hold MS makes every handler take MS ms and shows the most jobs of one key that ran at once.
 * --spread gives keyed job s the key s mod N (each key's jobs are otherwise enqueued together).
 * --workers W and --concurrency K set the drains' workers and the handler threads of each (2 and
 * 16; each worker prefetches 64 jobs beyond them), so that bench/peers can run the same total
 * concurrency as its other systems.
 *
 * Usage: bench_queue_keys [SECONDS] [--jobs N] [--keys N] [--big N] [--rounds N] [--drain-only]
 *                         [--workers W] [--concurrency K] [--hold MS] [--spread] [--json]
 * Prints a table; appends one JSON line per figure to $BENCH_JSON (and stdout with --json).
 * Needs PGCOORD_TEST_DSN. */
#include <getopt.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <pgcoord.h>

#include "bench.h"

#define SCHEMA "pgc_bench_keys"

static int seconds = 5;
static long n_jobs = 50000;
static int n_keys = 1000;
static long n_big = 100000;
#define MAX_ROUNDS 100
static int rounds = 1;
#define MAX_WORKERS 16
static int n_workers = 2;
static int concurrency = 16;
static bool drain_only = false;
static bool json_stdout = false;
static FILE *json_out;

static void die(const char *what, const pgc_error *e)
{
	fprintf(stderr, "bench_queue_keys: %s: %s\n", what, e ? e->message : "");
	exit(1);
}

static void emit(const char *fmt, ...) PGC_PRINTF(1, 2);
static void emit(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (json_out != NULL)
		fprintf(json_out, "%s\n", line);
	if (json_stdout)
		printf("%s\n", line);
}

static void exec_or_die(pgc_conn *c, const char *sql)
{
	pgc_error e;
	if (pgc_exec(c, sql, &e) != PGC_OK)
		die(sql, &e);
}

static atomic_long handled;

/* --hold MS: each handler of both drains takes that long, and the jobs of each key running at
 * once are counted (both drains' workers are threads of this process), the most of any key
 * kept. Keys are "tenant-N", N below n_keys. */
static int hold_ms = 0;
static bool spread = false;
#define MAX_KEYS 1000000
static atomic_int *key_running;
static atomic_int most_per_key;

static void noop(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	atomic_fetch_add(&handled, 1);
	if (hold_ms == 0)
		return;
	static const char prefix[] = "tenant-";
	long k = job->key != NULL && strncmp(job->key, prefix, sizeof prefix - 1) == 0
	             ? atol(job->key + sizeof prefix - 1) : -1;
	if (k >= 0 && k < n_keys) {
		int now = atomic_fetch_add(&key_running[k], 1) + 1;
		for (int m = atomic_load(&most_per_key); now > m;)
			if (atomic_compare_exchange_weak(&most_per_key, &m, now))
				break;
	}
	usleep((useconds_t)hold_ms * 1000);
	if (k >= 0 && k < n_keys)
		atomic_fetch_sub(&key_running[k], 1);
}

static pgc_worker *start_worker(const char *queue, int k, int prefetch, pgc_job_handler h)
{
	const char *qs[1] = { queue };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = bench_dsn();
	o.schema = SCHEMA;
	o.queues = qs;
	o.n_queues = 1;
	o.concurrency = k;
	o.prefetch = prefetch;
	pgc_worker *w;
	pgc_error e;
	if (pgc_worker_new(&o, h, NULL, &w, &e) != PGC_OK || pgc_worker_start(w, &e) != PGC_OK)
		die("worker", &e);
	return w;
}

static void stop_all(pgc_worker **w, int n)
{
	for (int i = 0; i < n; i++)
		pgc_worker_stop(w[i], 1000);
	for (int i = 0; i < n; i++) {
		pgc_error e;
		if (pgc_worker_wait(w[i], &e) != PGC_OK)
			fprintf(stderr, "bench_queue_keys: worker: %s\n", e.message);
		pgc_worker_free(w[i]);
	}
}

static pgc_conn *bench_conn;

/* Enqueues n jobs to queue: each key's jobs together, 1000 per call (keys 0: no key); with
 * --spread, job s gets key s mod keys, in one statement of the SQL enqueue function per job. */
static void enqueue_spread(pgc_queue *q, const char *queue, long n, int keys)
{
	if (keys > 0 && spread) {
		char sql[512];
		snprintf(sql, sizeof sql,
		         "SELECT count(*) FROM generate_series(0, %ld) s, LATERAL " SCHEMA ".enqueue("
		         "'keyed', ARRAY['{}'], NULL, NULL, NULL, NULL, p_key => 'tenant-' || (s %% %d))",
		         n - 1, keys);
		exec_or_die(bench_conn, sql);
		return;
	}
	static const char *p[1000];
	for (int i = 0; i < 1000; i++)
		p[i] = "{}";
	pgc_error e;
	if (keys == 0) {
		for (long done = 0; done < n; done += 1000) {
			size_t chunk = n - done < 1000 ? (size_t)(n - done) : 1000;
			if (pgc_queue_enqueue_many(q, queue, chunk, p, NULL, NULL, NULL, NULL, NULL, &e) != PGC_OK)
				die("enqueue", &e);
		}
		return;
	}
	long per = n / keys;
	for (int k = 0; k < keys; k++) {
		char key[32];
		snprintf(key, sizeof key, "tenant-%d", k);
		pgc_job_options o = PGC_JOB_OPTIONS_INIT;
		o.key = key;
		for (long done = 0; done < per; done += 1000) {
			size_t chunk = per - done < 1000 ? (size_t)(per - done) : 1000;
			if (pgc_queue_enqueue_many(q, queue, chunk, p, NULL, &o, NULL, NULL, NULL, &e) != PGC_OK)
				die("enqueue", &e);
		}
	}
}

/* The statistics autovacuum would have gathered on a table that many rows came into. */
static void analyze(pgc_queue *q)
{
	(void)q;
	exec_or_die(bench_conn, "ANALYZE " SCHEMA ".jobs, " SCHEMA ".job_keys");
}

/* Whether pg_stat_statements can be read and reset here: the extension is in this database
 * and the role may call its reset. */
static bool pgss;

static void pgss_probe(void)
{
	PGconn *pg = pgc_conn_pg(bench_conn);
	PGresult *r = PQexec(pg, "SELECT pg_stat_statements_reset() "
	                         "FROM pg_extension WHERE extname = 'pg_stat_statements'");
	pgss = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	PQclear(r);
	if (!pgss)
		printf("(no pg_stat_statements here: the drains' statement costs are left out)\n");
}

static void pgss_reset(void)
{
	if (!pgss)
		return;
	PGresult *r = PQexec(pgc_conn_pg(bench_conn), "SELECT pg_stat_statements_reset()");
	PQclear(r);
}

/* Prints the server time per job (planning and execution, in µs) of the five costliest
 * statements since the last reset, this benchmark's own queries left out. With
 * pg_stat_statements.track = all, a function's statements are there beside its call. */
static void pgss_report(const char *queue, long jobs)
{
	if (!pgss || jobs < 1)
		return;
	char n[32];
	snprintf(n, sizeof n, "%ld", jobs);
	const char *params[1] = { n };
	PGresult *r = PQexecParams(
	    pgc_conn_pg(bench_conn),
	    "SELECT left(regexp_replace(s.query, '\\s+', ' ', 'g'), 40), s.calls,"
	    "       (s.total_exec_time + s.total_plan_time) * 1000 / $1::float8, s.plans,"
	    "       s.total_plan_time * 1000 / $1::float8"
	    "  FROM pg_stat_statements s"
	    " WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
	    "   AND s.query NOT LIKE '%pg_stat_statements%' AND s.query NOT LIKE 'ANALYZE%'"
	    " ORDER BY s.total_exec_time + s.total_plan_time DESC LIMIT 5",
	    1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) == PGRES_TUPLES_OK)
		for (int i = 0; i < PQntuples(r); i++) {
			printf("  %-6s %-40s %5s calls %6.1f us/job (%5s plans %5.1f)\n", queue,
			       PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), atof(PQgetvalue(r, i, 2)),
			       PQgetvalue(r, i, 3), atof(PQgetvalue(r, i, 4)));
			emit("{\"bench\":\"queue_keys\",\"case\":\"statement\",\"queue\":\"%s\","
			     "\"rank\":%d,\"calls\":%s,\"server_us_per_job\":%.2f,\"plans\":%s,"
			     "\"plan_us_per_job\":%.2f}",
			     queue, i + 1, PQgetvalue(r, i, 1), atof(PQgetvalue(r, i, 2)), PQgetvalue(r, i, 3),
			     atof(PQgetvalue(r, i, 4)));
		}
	PQclear(r);
}

/* Drains queue with n_workers workers of concurrency handler threads; jobs per second, and in
 * *done the jobs that ran within the bound. */
static double drain(long n, const char *queue, long *done)
{
	atomic_store(&handled, 0);
	pgss_reset();
	pgc_worker *w[MAX_WORKERS];
	double t0 = bench_now();
	for (int i = 0; i < n_workers; i++)
		w[i] = start_worker(queue, concurrency, 64, noop);
	double deadline = t0 + 30.0 * seconds;
	while (atomic_load(&handled) < n && bench_now() < deadline)
		usleep(1000);
	double dt = bench_now() - t0;
	long got = atomic_load(&handled);
	stop_all(w, n_workers);
	if (got < n)
		fprintf(stderr, "bench_queue_keys: %s: %ld of %ld jobs within the bound\n", queue, got, n);
	*done = got;
	return got / dt;
}

/* One round: the plain drain, then the keyed one, each with its statements' cost; returns
 * their ratio. */
static double drain_round(pgc_queue *q, int round)
{
	long n = n_jobs - n_jobs % n_keys;
	if (rounds > 1)
		printf("round %d of %d\n", round, rounds);
	enqueue_spread(q, "plain", n, 0);
	if (getenv("BENCH_NO_ANALYZE") == NULL)
		analyze(q);
	long plain_done, keyed_done;
	double plain = drain(n, "plain", &plain_done);
	char label[96];
	snprintf(label, sizeof label, "drain, no keys (plain claim), %d workers x K=%d", n_workers, concurrency);
	printf("%-58s %10.0f jobs/s\n", label, plain);
	pgss_report("plain", n);
	enqueue_spread(q, "keyed", n, n_keys);
	if (getenv("BENCH_NO_ANALYZE") == NULL)
		analyze(q);
	atomic_store(&most_per_key, 0);
	double keyed = drain(n, "keyed", &keyed_done);
	snprintf(label, sizeof label, "drain, %d keys limited to 1 each (claim_flow)", n_keys);
	printf("%-58s %10.0f jobs/s   ratio %.2f\n", label, keyed, keyed / plain);
	if (hold_ms > 0)
		printf("%-58s %10d\n", "most jobs of one key running at once", atomic_load(&most_per_key));
	pgss_report("keyed", n);
	emit("{\"bench\":\"queue_keys\",\"case\":\"drain\",\"round\":%d,\"jobs\":%ld,\"keys\":%d,"
	     "\"key_limit\":1,\"workers\":%d,\"k\":%d,\"prefetch\":64,\"plain_done\":%ld,"
	     "\"keyed_done\":%ld,\"hold_ms\":%d,\"most_per_key\":%d,\"plain_jobs_per_s\":%.0f,"
	     "\"keyed_jobs_per_s\":%.0f,\"ratio\":%.3f}",
	     round, n, n_keys, n_workers, concurrency, plain_done, keyed_done, hold_ms,
	     hold_ms > 0 ? atomic_load(&most_per_key) : -1, plain, keyed, keyed / plain);
	fflush(stdout);
	return keyed / plain;
}

static void bench_drain(pgc_queue *q)
{
	pgc_queue_flow f = PGC_QUEUE_FLOW_UNCHANGED;
	f.key_limit = 1;
	pgc_error e;
	if (pgc_queue_flow_set(q, "keyed", &f, &e) != PGC_OK)
		die("flow", &e);
	pgss_probe();
	double ratio[MAX_ROUNDS];
	for (int i = 0; i < rounds; i++)
		ratio[i] = drain_round(q, i + 1);
	if (rounds > 1) {
		double med = bench_median(ratio, rounds);
		printf("%-58s %10s   median %.2f (%.2f to %.2f)\n", "keyed over plain, all rounds", "", med,
		       ratio[0], ratio[rounds - 1]);
		emit("{\"bench\":\"queue_keys\",\"case\":\"drain_median\",\"rounds\":%d,"
		     "\"ratio_median\":%.3f,\"ratio_min\":%.3f,\"ratio_max\":%.3f}",
		     rounds, med, ratio[0], ratio[rounds - 1]);
	}
}

/* ---- a noisy neighbour ------------------------------------------------------------------- */

#define ARRIVALS 100
static double arrive_commit[ARRIVALS], arrive_start[ARRIVALS];

static void stamp(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)res;
	(void)arg;
	double now = bench_now();
	const char *p = strstr(job->payload, "\"i\":");
	if (p != NULL) {
		long i = atol(p + 4);
		if (i >= 0 && i < ARRIVALS)
			arrive_start[i] = now;
	} else {
		usleep(2000); /* the big key's jobs take 2 ms */
	}
}

/* The small key's jobs arrive at 50/s; returns p50 and p99 of their wait in ms. */
static void arrivals(pgc_queue *q, const char *queue, double *p50, double *p99)
{
	memset(arrive_start, 0, sizeof arrive_start);
	pgc_worker *w = start_worker(queue, 8, 0, stamp);
	usleep(300000);
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.key = "small";
	pgc_error e;
	double t0 = bench_now(), step = 1.0 / 50;
	for (int i = 0; i < ARRIVALS; i++) {
		double at = t0 + i * step, now = bench_now();
		if (at > now)
			usleep((useconds_t)((at - now) * 1e6));
		char payload[32];
		snprintf(payload, sizeof payload, "{\"i\":%d}", i);
		if (pgc_queue_enqueue(q, queue, payload, &o, NULL, &e) != PGC_OK)
			die("enqueue", &e);
		arrive_commit[i] = bench_now();
	}
	double deadline = bench_now() + 10;
	for (;;) {
		int seen = 0;
		for (int i = 0; i < ARRIVALS; i++)
			seen += arrive_start[i] > 0;
		if (seen == ARRIVALS || bench_now() > deadline)
			break;
		usleep(1000);
	}
	stop_all(&w, 1);
	double d[ARRIVALS];
	int k = 0;
	for (int i = 0; i < ARRIVALS; i++)
		if (arrive_start[i] > 0) {
			double v = (arrive_start[i] - arrive_commit[i]) * 1000;
			d[k++] = v < 0 ? 0 : v;
		}
	qsort(d, (size_t)k, sizeof *d, bench_cmp_double);
	*p50 = k ? d[k / 2] : -1;
	*p99 = k ? d[(int)(k * 0.99)] : -1;
	if (k < ARRIVALS)
		fprintf(stderr, "bench_queue_keys: %s: %d of %d arrivals started\n", queue, k, ARRIVALS);
}

static void bench_neighbour(pgc_queue *q)
{
	pgc_queue_flow f = PGC_QUEUE_FLOW_UNCHANGED;
	f.key_limit = 4;
	pgc_error e;
	if (pgc_queue_flow_set(q, "alone", &f, &e) != PGC_OK || pgc_queue_flow_set(q, "noisy", &f, &e) != PGC_OK)
		die("flow", &e);
	double a50, a99, n50, n99;
	arrivals(q, "alone", &a50, &a99);
	static const char *p[1000];
	for (int i = 0; i < 1000; i++)
		p[i] = "{}";
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.key = "big";
	for (long done = 0; done < n_big; done += 1000)
		if (pgc_queue_enqueue_many(q, "noisy", 1000, p, NULL, &o, NULL, NULL, NULL, &e) != PGC_OK)
			die("enqueue", &e);
	arrivals(q, "noisy", &n50, &n99);
	printf("%-58s %10s   p50 %.2f ms, p99 %.2f ms\n", "second key's wait, queue otherwise empty", "", a50, a99);
	char label[96];
	snprintf(label, sizeof label, "second key's wait beside %ld pending of a key (limit 4)", n_big);
	printf("%-58s %10s   p50 %.2f ms, p99 %.2f ms   p99 ratio %.2f\n", label, "", n50, n99,
	       a99 > 0 ? n99 / a99 : 0);
	emit("{\"bench\":\"queue_keys\",\"case\":\"noisy_neighbour\",\"big_pending\":%ld,\"arrivals\":%d,"
	     "\"alone_p50_ms\":%.3f,\"alone_p99_ms\":%.3f,\"noisy_p50_ms\":%.3f,\"noisy_p99_ms\":%.3f,"
	     "\"p99_ratio\":%.3f}", n_big, ARRIVALS, a50, a99, n50, n99, a99 > 0 ? n99 / a99 : 0);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "jobs", required_argument, NULL, 'n' },
		{ "keys", required_argument, NULL, 'k' },
		{ "big", required_argument, NULL, 'b' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "drain-only", no_argument, NULL, 'd' },
		{ "workers", required_argument, NULL, 'w' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "hold", required_argument, NULL, 'H' },
		{ "spread", no_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'n': n_jobs = atol(optarg); break;
		case 'k': n_keys = atoi(optarg); break;
		case 'b': n_big = atol(optarg); break;
		case 'r': rounds = atoi(optarg); break;
		case 'd': drain_only = true; break;
		case 'w': n_workers = atoi(optarg); break;
		case 'c': concurrency = atoi(optarg); break;
		case 'H': hold_ms = atoi(optarg); break;
		case 's': spread = true; break;
		case 'j': json_stdout = true; break;
		default:
			fprintf(ch == 'h' ? stdout : stderr,
			        "Usage: bench_queue_keys [SECONDS] [--jobs N] [--keys N] [--big N] [--rounds N]\n"
			        "                        [--drain-only] [--workers W] [--concurrency K] [--hold MS]\n"
			        "                        [--spread] [--json]\n"
			        "  --jobs N           jobs of each drain (50000)\n"
			        "  --keys N           keys of the keyed drain, each limited to 1 (1000)\n"
			        "  --big N            pending jobs of the noisy key (100000)\n"
			        "  --rounds N         plain and keyed drains N times, taking turns, and the median ratio (1)\n"
			        "  --drain-only       leave out the noisy neighbour\n"
			        "  --workers W        workers of each drain (2, at most 16)\n"
			        "  --concurrency K    handler threads of each worker (16)\n"
			        "  --hold MS          each handler takes MS ms, and the most jobs of one key\n"
			        "                     running at once is shown (0: no-op handlers)\n"
			        "  --spread           keyed job s gets key s mod N (default: each key's jobs together)\n");
			return ch == 'h' ? 0 : 2;
		}
	}
	if (optind < argc)
		seconds = atoi(argv[optind]);
	if (seconds < 1 || n_jobs < 1 || n_keys < 1 || n_big < 1000 || rounds < 1 || rounds > MAX_ROUNDS ||
	    n_workers < 1 || n_workers > MAX_WORKERS || concurrency < 1 || concurrency > 1024 ||
	    n_keys > MAX_KEYS || hold_ms < 0 || hold_ms > 10000) {
		fprintf(stderr, "bench_queue_keys: bad arguments\n");
		return 2;
	}
	key_running = calloc((size_t)n_keys, sizeof *key_running);
	if (key_running == NULL)
		die("out of memory", NULL);
	const char *jp = getenv("BENCH_JSON");
	if (jp != NULL && *jp)
		json_out = fopen(jp, "a");
	pgc_conn *c;
	pgc_error e;
	if (pgc_connect(bench_dsn(), NULL, &c, &e) != PGC_OK)
		die("connect", &e);
	bench_conn = c;
	exec_or_die(c, "SET client_min_messages = warning");
	exec_or_die(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE");
	if (pgc_schema_init(c, SCHEMA, NULL, NULL, &e) != PGC_OK)
		die("init", &e);
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = SCHEMA;
	pgc_queue *q;
	if (pgc_queue_open(c, &qo, &q, &e) != PGC_OK)
		die("open", &e);
	printf("%-58s %10s\n", "queue flow control", "");
	bench_drain(q);
	if (!drain_only)
		bench_neighbour(q);
	pgc_queue_close(q);
	exec_or_die(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE");
	pgc_conn_close(c);
	if (json_out != NULL)
		fclose(json_out);
	free(key_running);
	return 0;
}
