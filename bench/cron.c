/* cron.c - the cron scheduler's cost per tick and its delay, beside plain enqueues
 *
 * 10,000 every-minute schedules ("* * * * *") on one server, fired by one scheduler loop in
 * this process (pgc_cron_fire_due with cron run's batch of 100 and its sleep rule) across
 * BENCH_CRON_MINUTES minute boundaries (default 3) twice: fired at the tick (lookahead 0), and
 * as cron run does by default (PGC_CRON_LOOKAHEAD_MS: ticks fired up to 5 s ahead, their jobs
 * runnable from the tick). Per boundary: the delay from the tick until its job can run
 * (p50/p99: the scheduler's commit time by this host's clock, which is the server's: same
 * machine; 0 for a job committed before its tick), how long before the tick the last commit
 * came, the wall time to fire all 10,000, and the CPU seconds of the scheduler (getrusage) and
 * of its server backend (/proc/PID/stat). The reference, in the same run: the same number of
 * pgc_queue_enqueue calls, 100 per transaction (the scheduler's batch), with the same payload:
 * the raw limit of putting those jobs into the queue one by one. Statements per job are
 * counted from libpq's protocol trace on a sample of 200 of each. Then 100 schedules
 * "* * * * * *" (with a seconds field) for BENCH_CRON_SECONDS (default 20) seconds, alone,
 * fired at the tick and then ahead, their jobs run by a worker in this process: the delay
 * from each tick to its job's start (p50/p99), whether a job fired ahead waited for its tick
 * (run_at = the tick), none missed.
 *
 *   bench_cron [SECONDS]   (SECONDS is ignored; see the variables above) */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <sys/resource.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <pgcoord.h>

#include "bench.h"

#define SCHEMA "pgc_bench_cron"
#define SCHEDULES 10000
#define BATCH 100
#define SAMPLE 200
#define SECOND_SCHEDULES 100

static void die(const char *what, const pgc_error *e)
{
	fprintf(stderr, "bench_cron: %s: %s\n", what, e != NULL ? e->message : "");
	exit(1);
}

static void exec_or_die(pgc_conn *c, const char *sql)
{
	pgc_error e;
	if (pgc_exec(c, sql, &e) != PGC_OK)
		die(sql, &e);
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_self(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* CPU seconds of a backend (same machine), from /proc; -1 when it cannot be read. */
static double cpu_backend(pgc_conn *c)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", PQbackendPID(pgc_conn_pg(c)));
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')'); /* the command may hold blanks */
	unsigned long long ut = 0, st = 0;
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Statements sent while the trace was on: the protocol's Query and Execute messages. */
static FILE *trace;
static char trace_path[] = "/tmp/pgc-bench-cron-XXXXXX";

static void trace_on(pgc_conn *c)
{
	int fd = mkstemp(trace_path);
	if (fd < 0 || (trace = fdopen(fd, "w+")) == NULL) {
		perror("bench_cron: trace");
		exit(1);
	}
	PQtrace(pgc_conn_pg(c), trace);
}

static long trace_off(pgc_conn *c)
{
	PQuntrace(pgc_conn_pg(c));
	fflush(trace);
	rewind(trace);
	char line[4096];
	long n = 0;
	while (fgets(line, sizeof line, trace) != NULL)
		if (strstr(line, "\tF\t") != NULL && (strstr(line, "\tExecute\t") != NULL || strstr(line, "\tQuery\t") != NULL))
			n++;
	fclose(trace);
	unlink(trace_path);
	strcpy(trace_path, "/tmp/pgc-bench-cron-XXXXXX");
	return n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The reference: n plain enqueues of payload, BATCH per transaction (n a multiple of it). */
static void enqueue_ref(pgc_conn *c, pgc_queue *q, int n, const char *payload)
{
	pgc_error e;
	for (int i = 0; i < n; i++) {
		if (i % BATCH == 0)
			exec_or_die(c, "BEGIN");
		if (pgc_queue_enqueue(q, "bench_ref", payload, NULL, NULL, &e) != PGC_OK)
			die("enqueue", &e);
		if (i % BATCH == BATCH - 1)
			exec_or_die(c, "COMMIT");
	}
}

static void noop_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)job;
	(void)res;
	(void)arg;
}

/* Delays: one per tick, many ticks share a commit. */
typedef struct delays {
	double *v;
	size_t n, cap;
} delays;

static void delays_add(delays *d, double value, long count)
{
	for (long i = 0; i < count; i++) {
		if (d->n == d->cap) {
			d->cap = d->cap ? d->cap * 2 : 4096;
			d->v = realloc(d->v, d->cap * sizeof *d->v);
			if (d->v == NULL) {
				perror("bench_cron");
				exit(1);
			}
		}
		d->v[d->n++] = value;
	}
}

static double pct(delays *d, double p)
{
	if (d->n == 0)
		return NAN;
	qsort(d->v, d->n, sizeof *d->v, cmp_double);
	size_t i = (size_t)ceil(p * (double)d->n) - 1;
	return d->v[i < d->n ? i : d->n - 1];
}

static pgc_conn *connect_or_die(void)
{
	pgc_conn *c;
	pgc_error e;
	pgc_conn_options o = PGC_CONN_OPTIONS_INIT;
	o.application_name = "pgcoord/bench-cron";
	if (pgc_connect(bench_dsn(), &o, &c, &e) != PGC_OK)
		die("connect", &e);
	return c;
}

static void add_schedules(pgc_conn *c, const char *prefix, int n, const char *expr)
{
	pgc_error e;
	exec_or_die(c, "BEGIN");
	for (int i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof name, "%s%05d", prefix, i);
		pgc_cron_schedule d = PGC_CRON_SCHEDULE_INIT;
		d.expr = expr;
		d.queue = "bench_cron";
		if (pgc_cron_add(c, SCHEMA, name, &d, 0, NULL, &e) != PGC_OK)
			die("cron add", &e);
	}
	exec_or_die(c, "COMMIT");
}

/* Fires until `ticks` ticks are enqueued or until `until` (wall clock), as cron run loops,
 * with the given lookahead. Each commit's delay after `tick` goes to d: the time from the tick
 * until the job can run, which is 0 for a job committed before its tick (it runs from its
 * tick on); *lead gets the smallest margin by which a commit came before the tick (negative:
 * after). *first is when the first call that enqueued began. */
static long fire_loop(pgc_conn *c, long ticks, double until, double tick, int64_t lookahead_ms, delays *d,
                      double *lead, double *first)
{
	long done = 0;
	if (lead != NULL)
		*lead = INFINITY;
	if (first != NULL)
		*first = NAN;
	while (done < ticks && wall_now() < until) {
		pgc_cron_fire_result r;
		pgc_error e;
		double t0 = wall_now();
		if (pgc_cron_fire_due(c, SCHEMA, "bench", BATCH, lookahead_ms, &r, &e) != PGC_OK)
			die("fire", &e);
		double t = wall_now();
		if (r.enqueued > 0 && first != NULL && isnan(*first))
			*first = t0;
		if (r.enqueued > 0 && d != NULL)
			delays_add(d, t > tick ? t - tick : 0, r.enqueued);
		if (r.enqueued > 0 && lead != NULL && tick - t < *lead)
			*lead = tick - t;
		done += r.enqueued;
		if (r.schedules >= BATCH)
			continue;
		int64_t ms = r.next_due_ms < 0 || r.next_due_ms > 1000 ? 1000 : r.next_due_ms;
		if (ms < 20)
			ms = 20;
		usleep((useconds_t)ms * 1000);
	}
	return done;
}

/* One mode of the minute boundaries: the figures of `minutes` boundaries fired with lookahead. */
typedef struct mode_result {
	double p50, p99, lead, wall, cpu, srv;
	long total;
} mode_result;

static mode_result run_minutes(pgc_conn *c, int minutes, int64_t lookahead_ms)
{
	mode_result m = { 0 };
	delays all = { 0 };
	m.lead = INFINITY;
	for (int i = 0; i < minutes; i++) {
		/* Sleep to just before the schedules become due (the lookahead before the minute),
		 * then loop as cron run does. */
		double now = wall_now(), boundary = floor(now / 60) * 60 + 60;
		double start = boundary - (double)lookahead_ms / 1000 - 0.5;
		if (start < now + 0.1) {
			boundary += 60;
			start += 60;
		}
		usleep((useconds_t)((start - now) * 1e6));
		delays d = { 0 };
		double cs = cpu_self(), ss = cpu_backend(c), lead = 0, first = 0;
		long n = fire_loop(c, SCHEDULES, boundary + 50, boundary, lookahead_ms, &d, &lead, &first);
		/* The wall time counts from the first call that fired (the sleep before is not work). */
		double ws = wall_now() - first;
		double cpu = cpu_self() - cs, srv = cpu_backend(c) - ss;
		m.wall += ws;
		m.cpu += cpu;
		m.srv += srv;
		m.total += n;
		if (lead < m.lead)
			m.lead = lead;
		printf("lookahead %lld ms, minute %d: %ld ticks fired in %.2f s, delay p50 %.3f s, p99 %.3f s,"
		       " last commit %.3f s %s the tick; scheduler %.2f CPU s, server %.2f CPU s\n",
		       (long long)lookahead_ms, i + 1, n, ws, pct(&d, 0.5), pct(&d, 0.99), fabs(lead),
		       lead >= 0 ? "before" : "after", cpu, srv);
		for (size_t k = 0; k < d.n; k++)
			delays_add(&all, d.v[k], 1);
		free(d.v);
		if (n < SCHEDULES)
			fprintf(stderr, "bench_cron: only %ld of %d ticks fired within 50 s\n", n, SCHEDULES);
		exec_or_die(c, "DELETE FROM " SCHEMA ".jobs");
	}
	m.p50 = pct(&all, 0.5);
	m.p99 = pct(&all, 0.99);
	free(all.v);
	return m;
}

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	int minutes = getenv("BENCH_CRON_MINUTES") ? atoi(getenv("BENCH_CRON_MINUTES")) : 3;
	int second_s = getenv("BENCH_CRON_SECONDS") ? atoi(getenv("BENCH_CRON_SECONDS")) : 20;
	if (minutes < 1 || second_s < 2)
		return 64;
	FILE *json = fopen(getenv("BENCH_JSON") && *getenv("BENCH_JSON") ? getenv("BENCH_JSON") : "/dev/null", "a");
	pgc_conn *c = connect_or_die();
	pgc_error e;
	exec_or_die(c, "SET client_min_messages = warning");
	exec_or_die(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE");
	if (pgc_schema_init(c, SCHEMA, NULL, NULL, &e) != PGC_OK)
		die("init", &e);
	pgc_queue *q;
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = SCHEMA;
	if (pgc_queue_open(c, &qo, &q, &e) != PGC_OK)
		die("queue", &e);

	/* Statements per job: SAMPLE schedules made due now and fired, SAMPLE enqueues. */
	add_schedules(c, "t", SAMPLE, "0 0 1 1 *");
	exec_or_die(c, "UPDATE " SCHEMA ".cron_schedules SET next_tick = date_trunc('second', now())");
	trace_on(c);
	long fired = 0;
	while (fired < SAMPLE) {
		pgc_cron_fire_result r;
		if (pgc_cron_fire_due(c, SCHEMA, "bench", BATCH, 0, &r, &e) != PGC_OK)
			die("fire", &e);
		fired += r.enqueued;
		if (r.schedules == 0)
			break;
	}
	double st_sched = (double)trace_off(c) / (double)(fired > 0 ? fired : 1);
	const char *payload = "{\"cron\": {\"schedule\": \"s00001\", \"tick\": \"2026-01-01T00:00:00+00:00\"}}";
	trace_on(c);
	enqueue_ref(c, q, SAMPLE, payload);
	double st_ref = (double)trace_off(c) / SAMPLE;
	exec_or_die(c, "DELETE FROM " SCHEMA ".cron_schedules");
	exec_or_die(c, "DELETE FROM " SCHEMA ".jobs");

	/* The reference: SCHEDULES enqueues, BATCH per transaction. */
	double w0 = bench_now(), c0 = cpu_self(), s0 = cpu_backend(c);
	enqueue_ref(c, q, SCHEDULES, payload);
	double ref_wall = bench_now() - w0, ref_cpu = cpu_self() - c0, ref_srv = cpu_backend(c) - s0;
	exec_or_die(c, "DELETE FROM " SCHEMA ".jobs");
	exec_or_die(c, "VACUUM " SCHEMA ".jobs");

	/* The schedules, then the minute boundaries: fired at their tick (lookahead 0), then as
	 * cron run does by default (PGC_CRON_LOOKAHEAD_MS). */
	add_schedules(c, "s", SCHEDULES, "* * * * *");
	mode_result at = run_minutes(c, minutes, 0);
	mode_result ahead = run_minutes(c, minutes, PGC_CRON_LOOKAHEAD_MS);
	double per_at = (double)SCHEDULES * minutes / (double)(at.total > 0 ? at.total : 1);
	double per_ah = (double)SCHEDULES * minutes / (double)(ahead.total > 0 ? ahead.total : 1);
	printf("\n%-44s %12s %12s %12s %8s\n", "cron, 10,000 every-minute schedules", "at the tick", "ahead 5s",
	       "enqueue x100", "ratio");
	printf("%-44s %12.3f %12s %12.2f %8.3f\n", "statements per job", st_sched, "same", st_ref, st_sched / st_ref);
	printf("%-44s %12.2f %12.2f %12.2f %8.2f\n", "wall seconds per 10,000 jobs", at.wall / minutes * per_at,
	       ahead.wall / minutes * per_ah, ref_wall, at.wall / minutes * per_at / ref_wall);
	printf("%-44s %12.2f %12.2f %12.2f %8.2f\n", "client CPU seconds per 10,000 jobs", at.cpu / minutes * per_at,
	       ahead.cpu / minutes * per_ah, ref_cpu, at.cpu / minutes * per_at / ref_cpu);
	printf("%-44s %12.2f %12.2f %12.2f %8.2f\n", "server CPU seconds per 10,000 jobs", at.srv / minutes * per_at,
	       ahead.srv / minutes * per_ah, ref_srv, ref_srv > 0 ? at.srv / minutes * per_at / ref_srv : NAN);
	printf("%-44s %12.3f %12.3f %12s\n", "delay, tick to runnable job: p50 (s)", at.p50, ahead.p50, "");
	printf("%-44s %12.3f %12.3f %12s\n", "delay, tick to runnable job: p99 (s)", at.p99, ahead.p99, "");
	printf("%-44s %12s %12.3f %12s  (%d minute boundaries each)\n", "last commit before the tick (s)", "-",
	       ahead.lead, "", minutes);
	fprintf(json, "{\"bench\":\"cron\",\"schedules\":%d,\"minutes\":%d,\"ticks\":%ld,\"statements_per_job\":%.3f,"
	        "\"ref_statements_per_job\":%.2f,\"wall_s_per_10k\":%.3f,\"ref_wall_s_per_10k\":%.3f,"
	        "\"cpu_s_per_10k\":%.3f,\"ref_cpu_s_per_10k\":%.3f,\"server_cpu_s_per_10k\":%.3f,"
	        "\"ref_server_cpu_s_per_10k\":%.3f,\"delay_p50_s\":%.4f,\"delay_p99_s\":%.4f,"
	        "\"lookahead_ms\":%d,\"ahead_delay_p50_s\":%.4f,\"ahead_delay_p99_s\":%.4f,\"ahead_lead_s\":%.3f}\n",
	        SCHEDULES, minutes, at.total, st_sched, st_ref, at.wall / minutes * per_at, ref_wall,
	        at.cpu / minutes * per_at, ref_cpu, at.srv / minutes * per_at, ref_srv, at.p50, at.p99,
	        PGC_CRON_LOOKAHEAD_MS, ahead.p50, ahead.p99, ahead.lead);

	/* Seconds: SECOND_SCHEDULES schedules with a seconds field, alone, at the tick and ahead,
	 * with a worker of this process running their jobs: from the tick to the job's start. */
	exec_or_die(c, "DELETE FROM " SCHEMA ".cron_schedules");
	exec_or_die(c, "DELETE FROM " SCHEMA ".jobs");
	add_schedules(c, "x", SECOND_SCHEDULES, "* * * * * *");
	int64_t las[2] = { 0, PGC_CRON_LOOKAHEAD_MS };
	for (int m = 0; m < 2; m++) {
		exec_or_die(c, "DELETE FROM " SCHEMA ".job_history");
		exec_or_die(c, "UPDATE " SCHEMA ".cron_schedules SET next_tick = date_trunc('second', now()) + interval '1 second'");
		const char *queues[] = { "bench_cron" };
		pgc_worker_options wo = PGC_WORKER_OPTIONS_INIT;
		wo.dsn = bench_dsn();
		wo.schema = SCHEMA;
		wo.queues = queues;
		wo.n_queues = 1;
		wo.concurrency = 8;
		pgc_worker *w;
		if (pgc_worker_new(&wo, noop_handler, NULL, &w, &e) != PGC_OK || pgc_worker_start(w, &e) != PGC_OK)
			die("worker", &e);
		fire_loop(c, LONG_MAX, wall_now() + second_s, 0, las[m], NULL, NULL, NULL);
		usleep(1500000); /* the last ticks' jobs run */
		pgc_worker_stop(w, 5000);
		if (pgc_worker_wait(w, &e) != PGC_OK)
			die("worker", &e);
		pgc_worker_free(w);
		/* Each tick against its job's start (started_at, the claim's clock_timestamp()), by
		 * the server's clock; a job fired ahead must have run_at = its tick. */
		double sp50 = NAN, sp99 = NAN;
		long missed = -1, ticks = 0, off = -1;
		PGresult *r = PQexec(pgc_conn_pg(c),
			"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM h.started_at - t.tick_at)),"
			" percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM h.started_at - t.tick_at)),"
			" count(*), (SELECT sum(missed) FROM " SCHEMA ".cron_schedules),"
			" count(*) FILTER (WHERE h.created_at < t.tick_at AND h.run_at <> t.tick_at)"
			" FROM " SCHEMA ".cron_ticks t JOIN " SCHEMA ".job_history h ON h.id = t.job_id"
			" WHERE t.outcome = 'enqueued'");
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
			sp50 = atof(PQgetvalue(r, 0, 0));
			sp99 = atof(PQgetvalue(r, 0, 1));
			ticks = atol(PQgetvalue(r, 0, 2));
			missed = atol(PQgetvalue(r, 0, 3));
			off = atol(PQgetvalue(r, 0, 4));
		}
		PQclear(r);
		char label[64];
		snprintf(label, sizeof label, "tick to job start, lookahead %lld ms", (long long)las[m]);
		printf("%-44s  p50 %.3f s, p99 %.3f s (100 \"* * * * * *\": %ld jobs in %d s, %ld missed,"
		       " %ld with run_at off the tick)\n", label, sp50, sp99, ticks, second_s, missed, off);
		fprintf(json, "{\"bench\":\"cron_seconds\",\"lookahead_ms\":%lld,\"schedules\":%d,\"seconds\":%d,"
		        "\"ticks\":%ld,\"missed\":%ld,\"start_delay_p50_s\":%.4f,\"start_delay_p99_s\":%.4f,"
		        "\"run_at_off\":%ld}\n", (long long)las[m], SECOND_SCHEDULES, second_s, ticks, missed, sp50, sp99, off);
		exec_or_die(c, "DELETE FROM " SCHEMA ".cron_ticks");
		exec_or_die(c, "UPDATE " SCHEMA ".cron_schedules SET fired = 0, missed = 0, skipped = 0");
	}
	pgc_queue_close(q);
	exec_or_die(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE");
	pgc_conn_close(c);
	fclose(json);
	return 0;
}
