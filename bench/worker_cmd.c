/* worker_cmd.c - pgcoord worker running a no-op command per job, beside xargs -P
 *
 * BENCH_WORKER_JOBS jobs (default 20,000) with the payload {} are enqueued, then drained by
 * `pgcoord worker -c K --once -- true` (the built tool, K = BENCH_WORKER_CONCURRENCY, default
 * 8): the time from its start to its exit, which includes connecting and the last claim that
 * finds the queue empty. The reference, in the same run and on the same machine: `xargs -P K
 * -n 1 true` over as many input lines, the fastest way a shell user has to start that many
 * commands K at a time; and, since the worker looks COMMAND up in PATH once where xargs looks
 * at every start, xargs given true's full path too. They alternate for BENCH_WORKER_ROUNDS
 * rounds (default 2); the table shows every round and the best of each, and the ratios
 * worker / xargs of the throughputs (1.0: as fast as xargs). CPU is the user + system time of each process tree
 * (wait4), the server's backends excluded.
 *
 *   bench_worker_cmd [SECONDS]   (SECONDS is ignored; see the variables above) */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pgcoord.h>

#include "bench.h"

#define SCHEMA "pgc_bench_wcmd"
#define QUEUE "bench"
#define CHUNK 1000

static void die(const char *what, const pgc_error *e)
{
	fprintf(stderr, "bench_worker_cmd: %s: %s\n", what, e != NULL ? e->message : strerror(errno));
	exit(1);
}

static int env_int(const char *name, int def, int lo, int hi)
{
	const char *v = getenv(name);
	int n = v != NULL && *v ? atoi(v) : def;
	if (n < lo || n > hi) {
		fprintf(stderr, "bench_worker_cmd: %s must be %d..%d\n", name, lo, hi);
		exit(64);
	}
	return n;
}

/* Runs argv with stdin from in_fd (-1: /dev/null) and its output discarded; returns the
 * wall seconds, and the CPU seconds of its process tree in *cpu. Exits when it fails. */
static double timed_run(char *const argv[], int in_fd, double *cpu)
{
	double t0 = bench_now();
	pid_t pid = fork();
	if (pid < 0)
		die("fork", NULL);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(in_fd >= 0 ? in_fd : null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		execvp(argv[0], argv);
		_exit(127);
	}
	int st;
	struct rusage ru;
	while (wait4(pid, &st, 0, &ru) < 0)
		if (errno != EINTR)
			die("wait4", NULL);
	double wall = bench_now() - t0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "bench_worker_cmd: %s exited with status %d\n", argv[0],
		        WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
		exit(1);
	}
	*cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	return wall;
}

static void enqueue(pgc_queue *q, int jobs)
{
	const char *payloads[CHUNK];
	for (int i = 0; i < CHUNK; i++)
		payloads[i] = "{}";
	pgc_error e;
	for (int done = 0; done < jobs; done += CHUNK) {
		size_t n = (size_t)(jobs - done < CHUNK ? jobs - done : CHUNK);
		if (pgc_queue_enqueue_many(q, QUEUE, n, payloads, NULL, NULL, NULL, NULL, NULL, &e) != PGC_OK)
			die("enqueue", &e);
	}
}

/* The jobs of the queue still live (pending or running) and those that succeeded. */
static void counts(pgc_queue *q, long *live, long *succeeded)
{
	pgc_queue_stat *st = NULL;
	size_t n = 0;
	pgc_error e;
	if (pgc_queue_stats(q, QUEUE, &st, &n, NULL, &e) != PGC_OK || n != 1)
		die("stats", &e);
	*live = st[0].pending + st[0].scheduled + st[0].running;
	*succeeded = st[0].succeeded;
	pgc_free(st);
}

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	int jobs = env_int("BENCH_WORKER_JOBS", 20000, 100, 10000000);
	int k = env_int("BENCH_WORKER_CONCURRENCY", 8, 1, 1024);
	int rounds = env_int("BENCH_WORKER_ROUNDS", 2, 1, 100);
	FILE *json = fopen(getenv("BENCH_JSON") && *getenv("BENCH_JSON") ? getenv("BENCH_JSON") : "/dev/null", "a");
	pgc_conn *c;
	pgc_error e;
	pgc_conn_options co = PGC_CONN_OPTIONS_INIT;
	co.application_name = "pgcoord/bench-worker-cmd";
	if (pgc_connect(bench_dsn(), &co, &c, &e) != PGC_OK)
		die("connect", &e);
	if (pgc_exec(c, "SET client_min_messages = warning", &e) != PGC_OK ||
	    pgc_exec(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE", &e) != PGC_OK)
		die("drop schema", &e);
	if (pgc_schema_init(c, SCHEMA, NULL, NULL, &e) != PGC_OK)
		die("init", &e);
	pgc_queue *q;
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = SCHEMA;
	if (pgc_queue_open(c, &qo, &q, &e) != PGC_OK)
		die("queue", &e);

	/* xargs reads its arguments from a file of jobs lines. */
	char lines[] = "/tmp/pgc-bench-wcmd-XXXXXX";
	int lf = mkstemp(lines);
	if (lf < 0)
		die("mkstemp", NULL);
	FILE *lfp = fdopen(lf, "w");
	for (int i = 1; i <= jobs; i++)
		fprintf(lfp, "%d\n", i);
	fflush(lfp);

	char ks[16];
	snprintf(ks, sizeof ks, "%d", k);
	const char *dsn = bench_dsn();
	char *worker[] = { PGC_BENCH_PGCOORD, "-q", "-d", (char *)dsn, "worker", "--schema", SCHEMA, "-q", QUEUE,
	                   "-c", ks, "--once", "--", "true", NULL };
	char *xargs[] = { "xargs", "-P", ks, "-n", "1", "true", NULL };
	char true_path[4096] = "";
	FILE *tp = popen("command -v true 2>/dev/null || echo /bin/true", "r");
	if (tp == NULL || fgets(true_path, sizeof true_path, tp) == NULL)
		snprintf(true_path, sizeof true_path, "/bin/true");
	if (tp != NULL)
		pclose(tp);
	true_path[strcspn(true_path, "\n")] = '\0';
	/* "command -v" of a shell builtin names it without a path. */
	if (true_path[0] != '/')
		snprintf(true_path, sizeof true_path, "%s", access("/usr/bin/true", X_OK) == 0 ? "/usr/bin/true" : "/bin/true");
	char *xargs_full[] = { "xargs", "-P", ks, "-n", "1", true_path, NULL };

	printf("%d no-op commands (true), %d at a time\n\n", jobs, k);
	printf("%-6s %-22s %9s %11s %9s\n", "round", "runner", "wall s", "commands/s", "cpu s");
	double best_w = 0, best_x = 0, best_f = 0, cpu_w = 0, cpu_x = 0;
	for (int r = 1; r <= rounds; r++) {
		double cpu;
		lseek(lf, 0, SEEK_SET);
		double xw = timed_run(xargs, lf, &cpu);
		double xr = jobs / xw;
		printf("%-6d %-22s %9.2f %11.0f %9.2f\n", r, "xargs -P (reference)", xw, xr, cpu);
		if (xr > best_x) {
			best_x = xr;
			cpu_x = cpu;
		}
		lseek(lf, 0, SEEK_SET);
		double fw = timed_run(xargs_full, lf, &cpu);
		double fr = jobs / fw;
		printf("%-6d %-22s %9.2f %11.0f %9.2f\n", r, "xargs -P, full path", fw, fr, cpu);
		if (fr > best_f)
			best_f = fr;
		enqueue(q, jobs);
		double ww = timed_run(worker, -1, &cpu);
		long live, ok;
		counts(q, &live, &ok);
		if (live != 0 || ok != (long)jobs * r) {
			fprintf(stderr, "bench_worker_cmd: after round %d: %ld jobs left, %ld succeeded (expected %ld)\n",
			        r, live, ok, (long)jobs * r);
			return 1;
		}
		double wr = jobs / ww;
		printf("%-6d %-22s %9.2f %11.0f %9.2f\n", r, "pgcoord worker", ww, wr, cpu);
		if (wr > best_w) {
			best_w = wr;
			cpu_w = cpu;
		}
		fprintf(json, "{\"bench\":\"worker_cmd\",\"round\":%d,\"jobs\":%d,\"concurrency\":%d,"
		        "\"worker_per_s\":%.1f,\"xargs_per_s\":%.1f,\"xargs_full_path_per_s\":%.1f,\"ratio\":%.3f}\n",
		        r, jobs, k, wr, xr, fr, wr / xr);
	}
	printf("\nbest: pgcoord worker %.0f/s (%.0f us CPU per command), xargs -P %.0f/s (%.0f us):"
	       " ratio %.2f; xargs -P with %s: %.0f/s, ratio %.2f\n", best_w, cpu_w / jobs * 1e6, best_x,
	       cpu_x / jobs * 1e6, best_w / best_x, true_path, best_f, best_w / best_f);
	fprintf(json, "{\"bench\":\"worker_cmd_best\",\"jobs\":%d,\"concurrency\":%d,\"worker_per_s\":%.1f,"
	        "\"xargs_per_s\":%.1f,\"xargs_full_path_per_s\":%.1f,\"ratio\":%.3f,\"ratio_full_path\":%.3f}\n",
	        jobs, k, best_w, best_x, best_f, best_w / best_x, best_w / best_f);
	fclose(lfp);
	unlink(lines);
	if (pgc_exec(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE", &e) != PGC_OK)
		die("drop schema", &e);
	pgc_queue_close(q);
	pgc_conn_close(c);
	fclose(json);
	return 0;
}
