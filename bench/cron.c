/* cron.c - the cron scheduler's cost per tick and its delay, beside plain enqueues
 *
 * 10,000 every-minute schedules ("* * * * *") on one server, fired by one scheduler loop in
 * this process (pgc_cron_fire_due with cron run's batch of 100 and its sleep rule) across
 * BENCH_CRON_MINUTES minute boundaries (default 3). Per boundary: the delay from the tick to
 * its job's commit (p50/p99; the scheduler's commit time by this host's clock, which is the
 * server's: same machine), the wall time to fire all 10,000, and the CPU seconds of the
 * scheduler (getrusage) and of its server backend (/proc/PID/stat). The reference, in the same
 * run: the same number of pgc_queue_enqueue calls, 100 per transaction (the scheduler's batch),
 * with the same payload: the raw limit of putting those jobs into the queue. Statements per
 * job are counted from libpq's protocol trace on a sample of 200 of each. Then 100 schedules
 * "* * * * * *" (with a seconds field) for BENCH_CRON_SECONDS (default 20) seconds, alone:
 * their delay p50/p99, whether seconds schedules keep their seconds.
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

/* Fires until `ticks` ticks are enqueued or until `until` (wall clock), as cron run loops;
 * each commit's delay after tick_of_batch (0: the tick is now's whole second) goes to d. */
static long fire_loop(pgc_conn *c, long ticks, double until, double minute_tick, delays *d)
{
	long done = 0;
	while (done < ticks && wall_now() < until) {
		pgc_cron_fire_result r;
		pgc_error e;
		if (pgc_cron_fire_due(c, SCHEMA, "bench", BATCH, &r, &e) != PGC_OK)
			die("fire", &e);
		double t = wall_now();
		if (r.enqueued > 0 && d != NULL)
			delays_add(d, t - minute_tick, r.enqueued);
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
		if (pgc_cron_fire_due(c, SCHEMA, "bench", BATCH, &r, &e) != PGC_OK)
			die("fire", &e);
		fired += r.enqueued;
		if (r.schedules == 0)
			break;
	}
	double st_sched = (double)trace_off(c) / (double)(fired > 0 ? fired : 1);
	const char *payload = "{\"cron\": {\"schedule\": \"s00001\", \"tick\": \"2026-01-01T00:00:00+00:00\"}}";
	trace_on(c);
	for (int i = 0; i < SAMPLE; i++) {
		if (i % BATCH == 0)
			exec_or_die(c, "BEGIN");
		if (pgc_queue_enqueue(q, "bench_ref", payload, NULL, NULL, &e) != PGC_OK)
			die("enqueue", &e);
		if (i % BATCH == BATCH - 1)
			exec_or_die(c, "COMMIT");
	}
	double st_ref = (double)trace_off(c) / SAMPLE;
	exec_or_die(c, "DELETE FROM " SCHEMA ".cron_schedules");
	exec_or_die(c, "DELETE FROM " SCHEMA ".jobs");

	/* The reference: SCHEDULES enqueues, BATCH per transaction. */
	double w0 = bench_now(), c0 = cpu_self(), s0 = cpu_backend(c);
	for (int i = 0; i < SCHEDULES; i++) {
		if (i % BATCH == 0)
			exec_or_die(c, "BEGIN");
		if (pgc_queue_enqueue(q, "bench_ref", payload, NULL, NULL, &e) != PGC_OK)
			die("enqueue", &e);
		if (i % BATCH == BATCH - 1)
			exec_or_die(c, "COMMIT");
	}
	double ref_wall = bench_now() - w0, ref_cpu = cpu_self() - c0, ref_srv = cpu_backend(c) - s0;
	exec_or_die(c, "DELETE FROM " SCHEMA ".jobs");
	exec_or_die(c, "VACUUM " SCHEMA ".jobs");

	/* The schedules, then the minute boundaries. */
	add_schedules(c, "s", SCHEDULES, "* * * * *");
	delays all = { 0 };
	double sched_wall = 0, sched_cpu = 0, sched_srv = 0;
	long total = 0;
	for (int m = 0; m < minutes; m++) {
		/* Sleep to just before the next minute, then loop as cron run does. */
		double now = wall_now(), boundary = floor(now / 60) * 60 + 60;
		if (boundary - now > 1)
			usleep((useconds_t)((boundary - now - 0.5) * 1e6));
		delays d = { 0 };
		double ws = 0, cs = cpu_self(), ss = cpu_backend(c);
		/* The wall time counts from the tick (the scheduler's sleep before it is not work). */
		long n = fire_loop(c, SCHEDULES, boundary + 50, boundary, &d);
		ws = wall_now() - boundary;
		double cpu = cpu_self() - cs, srv = cpu_backend(c) - ss;
		sched_wall += ws;
		sched_cpu += cpu;
		sched_srv += srv;
		total += n;
		printf("minute %d: %ld ticks fired in %.2f s, delay p50 %.3f s, p99 %.3f s; scheduler %.2f CPU s, server %.2f CPU s\n",
		       m + 1, n, ws, pct(&d, 0.5), pct(&d, 0.99), cpu, srv);
		for (size_t i = 0; i < d.n; i++)
			delays_add(&all, d.v[i], 1);
		free(d.v);
		if (n < SCHEDULES)
			fprintf(stderr, "bench_cron: only %ld of %d ticks fired within 50 s\n", n, SCHEDULES);
		exec_or_die(c, "DELETE FROM " SCHEMA ".jobs");
	}
	double per = (double)SCHEDULES / (double)(total > 0 ? total : 1);
	double p50 = pct(&all, 0.5), p99 = pct(&all, 0.99);
	printf("\n%-52s %12s %12s %8s\n", "cron, 10,000 every-minute schedules (same machine)", "scheduler", "enqueue x100", "ratio");
	printf("%-52s %12.2f %12.2f %8.2f\n", "statements per job", st_sched, st_ref, st_sched / st_ref);
	printf("%-52s %12.2f %12.2f %8.2f\n", "wall seconds per 10,000 jobs", sched_wall * per, ref_wall, sched_wall * per / ref_wall);
	printf("%-52s %12.2f %12.2f %8.2f\n", "client CPU seconds per 10,000 jobs", sched_cpu * per, ref_cpu,
	       sched_cpu * per / ref_cpu);
	printf("%-52s %12.2f %12.2f %8.2f\n", "server CPU seconds per 10,000 jobs", sched_srv * per, ref_srv,
	       ref_srv > 0 ? sched_srv * per / ref_srv : NAN);
	printf("%-52s %12s  p50 %.3f s, p99 %.3f s over %d minute boundaries (%ld ticks)\n",
	       "delay from tick to committed job", "", p50, p99, minutes, total);
	fprintf(json, "{\"bench\":\"cron\",\"schedules\":%d,\"minutes\":%d,\"ticks\":%ld,\"statements_per_job\":%.2f,"
	        "\"ref_statements_per_job\":%.2f,\"wall_s_per_10k\":%.3f,\"ref_wall_s_per_10k\":%.3f,"
	        "\"cpu_s_per_10k\":%.3f,\"ref_cpu_s_per_10k\":%.3f,\"server_cpu_s_per_10k\":%.3f,"
	        "\"ref_server_cpu_s_per_10k\":%.3f,\"delay_p50_s\":%.4f,\"delay_p99_s\":%.4f}\n",
	        SCHEDULES, minutes, total, st_sched, st_ref, sched_wall * per, ref_wall, sched_cpu * per, ref_cpu,
	        sched_srv * per, ref_srv, p50, p99);
	free(all.v);

	/* Seconds: SECOND_SCHEDULES schedules with a seconds field, alone. */
	exec_or_die(c, "DELETE FROM " SCHEMA ".cron_schedules");
	add_schedules(c, "x", SECOND_SCHEDULES, "* * * * * *");
	long n = fire_loop(c, LONG_MAX, wall_now() + second_s, 0, NULL);
	/* Each tick against its job's insert (clock_timestamp() in the scheduler's transaction,
	 * which commits a few milliseconds later), by the server's clock. */
	double sp50 = NAN, sp99 = NAN;
	long missed = -1, ticks = 0;
	PGresult *r = PQexec(pgc_conn_pg(c),
		"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM j.created_at - t.tick_at)),"
		" percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM j.created_at - t.tick_at)), count(*),"
		" (SELECT sum(missed) FROM " SCHEMA ".cron_schedules)"
		" FROM " SCHEMA ".cron_ticks t JOIN " SCHEMA ".jobs j ON j.id = t.job_id WHERE t.outcome = 'enqueued'");
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
		sp50 = atof(PQgetvalue(r, 0, 0));
		sp99 = atof(PQgetvalue(r, 0, 1));
		ticks = atol(PQgetvalue(r, 0, 2));
		missed = atol(PQgetvalue(r, 0, 3));
	}
	PQclear(r);
	printf("%-52s %12s  p50 %.3f s, p99 %.3f s (%ld ticks in %d s, %ld missed)\n",
	       "delay, 100 schedules \"* * * * * *\"", "", sp50, sp99, ticks, second_s, missed);
	fprintf(json, "{\"bench\":\"cron_seconds\",\"schedules\":%d,\"seconds\":%d,\"ticks\":%ld,\"missed\":%ld,"
	        "\"delay_p50_s\":%.4f,\"delay_p99_s\":%.4f}\n", SECOND_SCHEDULES, second_s, ticks, missed, sp50, sp99);
	(void)n;
	pgc_queue_close(q);
	exec_or_die(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE");
	pgc_conn_close(c);
	fclose(json);
	return 0;
}
