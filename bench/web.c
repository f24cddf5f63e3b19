/* web.c - pgcoord web under a long history: each API path's latency (p50, p99) with a million
 * finished jobs and a hundred thousand pending ones, the history rows each path reads, and the
 * workers' drain rate with and without the dashboard polling at its default refresh, side by
 * side in one run, as a ratio.
 *
 * Usage: bench_web [SECONDS] [--history N] [--pending N] [--requests N]
 * It runs the built tool (pgcoord web) on a free port of 127.0.0.1 and talks HTTP to it. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pgcoord.h"
#include "bench.h"
#include <libpq-fe.h>

#define SCHEMA "pgc_bench_web"

static long n_history = 1000000, n_pending = 100000, n_requests = 40;
static int seconds = 5;
static unsigned web_port;

static void die(const char *what, const pgc_error *e)
{
	fprintf(stderr, "bench_web: %s: %s\n", what, e ? e->message : "failed");
	exit(1);
}

static void sql(pgc_conn *c, const char *text)
{
	pgc_exec_options o = PGC_EXEC_OPTIONS_INIT;
	o.timeout_ms = 600000;
	pgc_error e;
	if (pgc_exec_ex(c, text, &o, &e) != PGC_OK)
		die(text, &e);
}

static long long sql_int(pgc_conn *c, const char *text)
{
	PGresult *r = PQexec(pgc_conn_pg(c), text);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
		fprintf(stderr, "bench_web: %s: %s\n", text, PQresultErrorMessage(r));
		exit(1);
	}
	long long v = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

/* One GET over a fresh connection; returns the seconds it took, or -1 (status in *status). */
static double http_get(const char *path, int *status)
{
	double t0 = bench_now();
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { 0 };
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)web_port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char req[1024];
	int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n", path,
	                 web_port);
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	char buf[65536];
	ssize_t got, total = 0;
	*status = 0;
	while ((got = read(fd, buf, sizeof buf)) > 0) {
		if (total == 0 && got > 12)
			*status = atoi(buf + 9);
		total += got;
	}
	close(fd);
	return bench_now() - t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	int i = (int)ceil(p * n) - 1;
	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* History rows read (index fetches and sequential reads) and sequential scans of the history
 * and of the live jobs so far. */
static void history_reads(pgc_conn *c, long long *rows, long long *scans, long long *live_scans)
{
	sql(c, "SELECT pg_stat_clear_snapshot()");
	*rows = sql_int(c, "SELECT coalesce(idx_tup_fetch, 0) + seq_tup_read FROM pg_stat_user_tables"
	                   " WHERE schemaname = '" SCHEMA "' AND relname = 'job_history'");
	*scans = sql_int(c, "SELECT seq_scan FROM pg_stat_user_tables WHERE schemaname = '" SCHEMA "'"
	                    " AND relname = 'job_history'");
	*live_scans = sql_int(c, "SELECT seq_scan FROM pg_stat_user_tables WHERE schemaname = '" SCHEMA "'"
	                         " AND relname = 'jobs'");
}

/* ---- the drain, with and without the dashboard ---- */

static atomic_long handled;
static atomic_bool polling, poll_stop;
static atomic_long polls;

static void noop(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)job;
	(void)res;
	(void)arg;
	atomic_fetch_add(&handled, 1);
}

/* What an open overview page asks every refresh (2 s). */
static void *poller(void *arg)
{
	(void)arg;
	static const char *const paths[] = { "/api/queues", "/api/workers", "/api/blockers", "/api/schedules",
	                                     "/api/doctor" };
	while (!atomic_load(&poll_stop)) {
		if (atomic_load(&polling)) {
			for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
				int st;
				http_get(paths[i], &st);
			}
			atomic_fetch_add(&polls, 1);
		}
		for (int i = 0; i < 20 && !atomic_load(&poll_stop); i++)
			usleep(100000);
	}
	return NULL;
}

/* CPU seconds (user + system) process pid has used, or 0 when it is gone. */
static double cpu_s(long pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* After the command's closing parenthesis: state is field 3, utime 14, stime 15. */
	char *p = strrchr(buf, ')');
	unsigned long long ut = 0, st = 0;
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The dashboard's processes: pgcoord web and its server sessions (application_name
 * pgcoord/web), as pids, at most max. */
static int dashboard_pids(pgc_conn *c, pid_t web, long *pids, int max)
{
	int n = 0;
	pids[n++] = web;
	PGresult *r = PQexec(pgc_conn_pg(c), "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgcoord/web'");
	for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r) && n < max; i++)
		pids[n++] = atol(PQgetvalue(r, i, 0));
	PQclear(r);
	return n;
}

static double drain(pgc_conn *c, pgc_queue *q, long jobs)
{
	pgc_error e;
	const char *p[5000];
	for (int i = 0; i < 5000; i++)
		p[i] = "{\"n\":1}";
	for (long done = 0; done < jobs; done += 5000)
		if (pgc_queue_enqueue_many(q, "drain", 5000, p, NULL, NULL, NULL, NULL, NULL, &e) != PGC_OK)
			die("enqueue", &e);
	(void)c;
	const char *qs[1] = { "drain" };
	pgc_worker *w[2];
	atomic_store(&handled, 0);
	double t0 = bench_now();
	for (int i = 0; i < 2; i++) {
		pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
		o.dsn = bench_dsn();
		o.schema = SCHEMA;
		o.queues = qs;
		o.n_queues = 1;
		o.concurrency = 4;
		o.prefetch = 16;
		if (pgc_worker_new(&o, noop, NULL, &w[i], &e) != PGC_OK || pgc_worker_start(w[i], &e) != PGC_OK)
			die("worker", &e);
	}
	double deadline = t0 + 120;
	while (atomic_load(&handled) < jobs && bench_now() < deadline)
		usleep(2000);
	double t = bench_now() - t0;
	long n = atomic_load(&handled);
	for (int i = 0; i < 2; i++) {
		pgc_worker_stop(w[i], 1000);
		(void)!pgc_worker_wait(w[i], &e);
		pgc_worker_free(w[i]);
	}
	return n / t;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--history") == 0 && i + 1 < argc)
			n_history = atol(argv[++i]);
		else if (strcmp(argv[i], "--pending") == 0 && i + 1 < argc)
			n_pending = atol(argv[++i]);
		else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc)
			n_requests = atol(argv[++i]);
		else
			seconds = atoi(argv[i]);
	}
	if (seconds < 1)
		seconds = 1;
	pgc_conn *c;
	pgc_error e;
	if (pgc_connect(bench_dsn(), NULL, &c, &e) != PGC_OK)
		die("connect", &e);
	sql(c, "SET client_min_messages = warning");
	sql(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE");
	if (pgc_schema_init(c, SCHEMA, NULL, NULL, &e) != PGC_OK)
		die("init", &e);
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = SCHEMA;
	pgc_queue *q;
	if (pgc_queue_open(c, &qo, &q, &e) != PGC_OK)
		die("open", &e);
	/* Keep the history: the workers' reaper would trim what is past retention. */
	pgc_queue_config cfg = { -1, 30LL * 86400000, 30LL * 86400000, -1 };
	if (pgc_queue_config_set(q, &cfg, &e) != PGC_OK)
		die("config", &e);

	double t0 = bench_now();
	char buf[2048];
	snprintf(buf, sizeof buf,
	         "INSERT INTO " SCHEMA ".queues (name) VALUES ('bench'), ('drain') ON CONFLICT DO NOTHING;"
	         "INSERT INTO " SCHEMA ".job_history (id, queue, status, priority, run_at, attempts, max_attempts,"
	         " last_error, errors, created_at, started_at, finished_at, payload)"
	         " SELECT i, 'bench', CASE WHEN i %% 100 = 0 THEN 'failed' ELSE 'succeeded' END, 0,"
	         "  now() - interval '12 hours' + i * interval '40 ms', 1, 25,"
	         "  CASE WHEN i %% 100 = 0 THEN 'handler failed: ' || md5(i::text) END, NULL,"
	         "  now() - interval '12 hours' + i * interval '40 ms', now() - interval '12 hours' + i * interval '40 ms',"
	         "  now() - interval '12 hours' + i * interval '40 ms',"
	         "  jsonb_build_object('n', i, 'tag', md5(i::text)) FROM generate_series(1, %ld) i;"
	         "INSERT INTO " SCHEMA ".jobs (id, queue, status, payload)"
	         " SELECT i, 'bench', 'pending', jsonb_build_object('n', i, 'tag', md5(i::text))"
	         " FROM generate_series(%ld, %ld) i;"
	         "SELECT setval('" SCHEMA ".job_id_seq', %ld);",
	         n_history, n_history + 1, n_history + n_pending, n_history + n_pending);
	sql(c, buf);
	sql(c, "VACUUM ANALYZE " SCHEMA ".jobs");
	sql(c, "VACUUM ANALYZE " SCHEMA ".job_history");
	printf("filled %ld finished jobs and %ld pending in %.1f s\n", n_history, n_pending, bench_now() - t0);

	/* pgcoord web on a free port; its first line names it. */
	int pipefd[2];
	if (pipe(pipefd) != 0)
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 2);
		close(pipefd[0]);
		execl(PGC_BENCH_PGCOORD, PGC_BENCH_PGCOORD, "-d", bench_dsn(), "web", "--schema", SCHEMA, "--listen",
		      "127.0.0.1:0", (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	FILE *err = fdopen(pipefd[0], "r");
	char line[512];
	while (web_port == 0 && fgets(line, sizeof line, err) != NULL) {
		const char *p = strstr(line, "http://127.0.0.1:");
		if (p != NULL)
			web_port = (unsigned)atoi(p + strlen("http://127.0.0.1:"));
	}
	if (web_port == 0) {
		fprintf(stderr, "bench_web: pgcoord web did not start\n");
		return 1;
	}

	long long mid = n_history / 2, pend = n_history + n_pending / 2, fin = n_history / 3;
	char p_after[64], p_job_live[64], p_job_hist[64];
	snprintf(p_after, sizeof p_after, "/api/jobs?after=%lld", mid);
	snprintf(p_job_live, sizeof p_job_live, "/api/jobs/%lld", pend);
	snprintf(p_job_hist, sizeof p_job_hist, "/api/jobs/%lld", fin);
	struct { const char *label, *path; } paths[] = {
		{ "page (HTML)", "/" },
		{ "queues", "/api/queues" },
		{ "workers", "/api/workers" },
		{ "jobs (newest)", "/api/jobs" },
		{ "jobs status=failed", "/api/jobs?status=failed" },
		{ "jobs queue+pending", "/api/jobs?queue=bench&status=pending" },
		{ "jobs q=text", "/api/jobs?q=ffff" },
		{ "jobs key_prefix=", "/api/jobs?key_prefix=none" },
		{ "jobs key=", "/api/jobs?key=none" },
		{ "jobs after=cursor", p_after },
		{ "job (pending)", p_job_live },
		{ "job (history)", p_job_hist },
		{ "schedules", "/api/schedules" },
		{ "leases", "/api/leases" },
		{ "locks", "/api/locks" },
		{ "blockers", "/api/blockers" },
		{ "doctor", "/api/doctor" },
		{ "metrics", "/metrics" },
	};
	size_t np = sizeof paths / sizeof paths[0];
	FILE *j = fopen(getenv("BENCH_JSON") ? getenv("BENCH_JSON") : "/dev/null", "a");
	printf("\n%-22s %9s %9s %9s %16s %12s\n", "path", "p50 ms", "p99 ms", "max ms", "history rows/req",
	       "seqscans h/j");
	double worst_p99 = 0, poll_ms = 0;
	double *t = calloc((size_t)n_requests, sizeof *t);
	for (size_t i = 0; i < np; i++) {
		int st = 0;
		for (int w = 0; w < 3; w++)
			http_get(paths[i].path, &st);
		if (st != 200) {
			fprintf(stderr, "bench_web: %s answered %d\n", paths[i].path, st);
			return 1;
		}
		usleep(1200000);
		long long r0, s0, l0, r1, s1, l1;
		history_reads(c, &r0, &s0, &l0);
		for (long k = 0; k < n_requests; k++)
			t[k] = http_get(paths[i].path, &st);
		usleep(1200000); /* the server's statistics are flushed at most once a second */
		history_reads(c, &r1, &s1, &l1);
		qsort(t, (size_t)n_requests, sizeof *t, cmp_double);
		double p50 = pct(t, (int)n_requests, 0.5) * 1000, p99 = pct(t, (int)n_requests, 0.99) * 1000;
		if (p99 > worst_p99)
			worst_p99 = p99;
		/* What an open overview asks for each refresh. */
		static const char *const overview[] = { "/api/queues", "/api/workers", "/api/blockers",
		                                        "/api/schedules", "/api/doctor" };
		for (size_t k = 0; k < sizeof overview / sizeof overview[0]; k++)
			if (strcmp(paths[i].path, overview[k]) == 0)
				poll_ms += p50;
		printf("%-22s %9.2f %9.2f %9.2f %16.0f %6lld/%-5lld\n", paths[i].label, p50, p99, t[n_requests - 1] * 1000,
		       (double)(r1 - r0) / n_requests, s1 - s0, l1 - l0);
		if (j != NULL)
			fprintf(j, "{\"bench\":\"web_path\",\"path\":\"%s\",\"history\":%ld,\"pending\":%ld,\"p50_ms\":%.2f,"
			        "\"p99_ms\":%.2f,\"history_rows_per_request\":%.0f,\"history_seq_scans\":%lld,"
			        "\"jobs_seq_scans\":%lld}\n",
			        paths[i].path, n_history, n_pending, p50, p99, (double)(r1 - r0) / n_requests, s1 - s0, l1 - l0);
	}
	printf("worst p99: %.1f ms (goal: under 200 ms)\n", worst_p99);
	printf("an overview poll: %.1f ms of requests every 2 s, at most %.2f%% of one core\n", poll_ms, poll_ms / 20);

	/* Drains side by side: without the dashboard, with an overview page polling every 2 s,
	 * alternated five times; the medians are compared. */
	pthread_t th;
	pthread_create(&th, NULL, poller, NULL);
	long jobs = 20000L * seconds;
	double off[5], on[5], dash_cpu = 0, on_wall = 0;
	for (int r = 0; r < 5; r++) {
		atomic_store(&polling, false);
		off[r] = drain(c, q, jobs);
		/* What the dashboard's processes spend while it polls: the CPU the workers lose to it
		 * at most, on a machine the drain keeps busy. */
		long dp[64];
		int nd = dashboard_pids(c, pid, dp, 64);
		double before[64];
		for (int k = 0; k < nd; k++)
			before[k] = cpu_s(dp[k]);
		atomic_store(&polling, true);
		on[r] = drain(c, q, jobs);
		atomic_store(&polling, false);
		on_wall += (double)jobs / on[r];
		for (int k = 0; k < nd; k++) {
			double after = cpu_s(dp[k]);
			if (after >= before[k])
				dash_cpu += after - before[k];
		}
	}
	atomic_store(&poll_stop, true);
	pthread_join(th, NULL);
	qsort(off, 5, sizeof off[0], cmp_double);
	qsort(on, 5, sizeof on[0], cmp_double);
	printf("\ndrain of %ld no-op jobs, 2 workers x K=4 (median of 5 alternated runs):\n", jobs);
	printf("  without the dashboard   %9.0f jobs/s\n", off[2]);
	printf("  overview polling at 2 s %9.0f jobs/s  (%ld polls)\n", on[2], atomic_load(&polls));
	printf("  ratio with/without      %9.3f (goal: above 0.98)\n", on[2] / off[2]);
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	double share = on_wall > 0 ? dash_cpu / (on_wall * (double)(cores > 0 ? cores : 1)) : 0;
	printf("  the dashboard's CPU     %9.3f s in %.1f s of polling drains: %.2f%% of %ld cores,\n"
	       "                          the most the workers can lose to it\n", dash_cpu, on_wall, share * 100, cores);
	if (j != NULL) {
		fprintf(j, "{\"bench\":\"web_drain\",\"jobs\":%ld,\"without_jobs_per_s\":%.0f,\"with_jobs_per_s\":%.0f,"
		        "\"ratio\":%.3f,\"worst_p99_ms\":%.1f,\"overview_poll_ms\":%.1f,\"dashboard_cpu_share\":%.4f}\n", jobs,
		        off[2], on[2], on[2] / off[2], worst_p99, poll_ms, share);
		fclose(j);
	}
	kill(pid, SIGTERM);
	int status;
	waitpid(pid, &status, 0);
	free(t);
	pgc_queue_close(q);
	sql(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE");
	pgc_conn_close(c);
	return 0;
}
