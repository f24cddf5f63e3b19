/* locks.c - advisory try-lock + unlock pairs per second through the library, beside pgbench
 * running the same two statements prepared, on the same server in the same run; and the
 * whole-process time of `pgcoord run -n NAME true`
 *
 * Each client (a library thread with its own pgc_conn, or a pgbench client) locks and unlocks
 * its own key, so the figure is the cost of the calls, not of contention. The two sides run in
 * alternating one-second slices. */
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pgcoord.h>

#include "bench.h"

typedef struct worker {
	int id;
	double seconds;
	long pairs;
	int failed;
	pthread_barrier_t *start;
} worker;

static void *run_worker(void *arg)
{
	worker *w = arg;
	pgc_conn *c;
	pgc_error err;
	pgc_conn_options o = PGC_CONN_OPTIONS_INIT;
	o.application_name = "pgcoord/bench-locks";
	if (pgc_connect(bench_dsn(), &o, &c, &err) != PGC_OK) {
		fprintf(stderr, "bench: %s\n", err.message);
		w->failed = 1;
		pthread_barrier_wait(w->start);
		return NULL;
	}
	pgc_key k = pgc_key_int64(INT64_C(0x62656e6368000000) + w->id);
	/* One warm-up pair prepares the statements. */
	pgc_lock *l;
	if (pgc_lock_acquire(c, &k, PGC_LOCK_TRY, 0, &l, &err) != PGC_OK || pgc_lock_release(l, &err) != PGC_OK) {
		fprintf(stderr, "bench: %s\n", err.message);
		w->failed = 1;
	}
	pthread_barrier_wait(w->start);
	double t0 = bench_now();
	long n = 0;
	while (!w->failed) {
		for (int i = 0; i < 50; i++) {
			if (pgc_lock_acquire(c, &k, PGC_LOCK_TRY, 0, &l, &err) != PGC_OK ||
			    pgc_lock_release(l, &err) != PGC_OK) {
				fprintf(stderr, "bench: %s\n", err.message);
				w->failed = 1;
				break;
			}
		}
		n += 50;
		if (bench_now() - t0 >= w->seconds)
			break;
	}
	w->seconds = bench_now() - t0;
	w->pairs = n;
	pgc_conn_close(c);
	return NULL;
}

static double library_rate(int clients, int seconds)
{
	worker w[64];
	pthread_t th[64];
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)clients);
	for (int i = 0; i < clients; i++) {
		w[i] = (worker){ i, seconds, 0, 0, &start };
		pthread_create(&th[i], NULL, run_worker, &w[i]);
	}
	double rate = 0;
	int failed = 0;
	for (int i = 0; i < clients; i++) {
		pthread_join(th[i], NULL);
		failed |= w[i].failed;
		rate += w[i].pairs / w[i].seconds;
	}
	pthread_barrier_destroy(&start);
	return failed ? -1 : rate;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Median wall time, in ms, of `pgcoord -d DSN run -n NAME true`, over runs runs. */
static double run_median_ms(const char *pgcoord, int runs)
{
	double t[200];
	if (runs > 200)
		runs = 200;
	for (int i = 0; i < runs; i++) {
		double t0 = bench_now();
		pid_t pid = fork();
		if (pid == 0) {
			execl(pgcoord, pgcoord, "-d", bench_dsn(), "run", "-n", "bench-locks-run", "--", "true", (char *)NULL);
			_exit(127);
		}
		int st;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "bench: %s run -n bench-locks-run -- true failed\n", pgcoord);
			return -1;
		}
		t[i] = (bench_now() - t0) * 1000;
	}
	qsort(t, (size_t)runs, sizeof t[0], cmp_double);
	return runs % 2 ? t[runs / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2;
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 5;
	if (seconds <= 0)
		seconds = 5;
	static const char script[] =
		"\\set k 7233184657000000 + :client_id\n"
		"SELECT pg_try_advisory_lock(:k);\n"
		"SELECT pg_advisory_unlock(:k);\n";
	FILE *j = fopen(getenv("BENCH_JSON") ? getenv("BENCH_JSON") : "/dev/null", "a");
	printf("%-40s %12s %12s %8s\n", "advisory try-lock + unlock", "pgcoord/s", "pgbench/s", "ratio");
	int counts[2] = { 1, 8 };
	for (int i = 0; i < 2; i++) {
		int c = counts[i];
		/* Alternate one-second slices of each, so that a change in the machine's load
		 * (it is shared) falls on both sides alike; report the mean rate of each. */
		double ours = 0, ref = 0;
		for (int s = 0; s < seconds; s++) {
			double a = library_rate(c, 1), b = bench_pgbench(script, c, 1);
			if (a < 0 || b < 0) {
				ours = a < 0 ? -1 : ours;
				ref = b < 0 ? -1 : ref;
				break;
			}
			ours += a / seconds;
			ref += b / seconds;
		}
		char label[64];
		snprintf(label, sizeof label, "pairs/s, %d connection%s", c, c > 1 ? "s" : "");
		printf("%-40s %12.0f %12.0f %8.2f\n", label, ours, ref, ref > 0 && ours > 0 ? ours / ref : 0);
		if (j != NULL)
			fprintf(j, "{\"bench\":\"locks_try_unlock\",\"clients\":%d,\"seconds\":%d,\"pgcoord_per_s\":%.0f,"
			           "\"pgbench_per_s\":%.0f,\"ratio\":%.3f}\n",
			        c, seconds, ours, ref, ref > 0 && ours > 0 ? ours / ref : 0);
	}
	/* The tool sits next to the bench directory in the build tree, unless told otherwise. */
	char path[PATH_MAX];
	const char *bin = getenv("PGCOORD_BIN");
	if (bin == NULL) {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		self[n > 0 ? n : 0] = '\0';
		snprintf(path, sizeof path, "%s/../pgcoord", dirname(self));
		bin = path;
	}
	int runs = 10 * seconds + 1;
	double med = run_median_ms(bin, runs);
	printf("%-40s %9.1f ms (median of %d; target < 10 ms)\n", "pgcoord run -n NAME true, whole process", med, runs);
	if (j != NULL) {
		fprintf(j, "{\"bench\":\"locks_run_process\",\"runs\":%d,\"median_ms\":%.2f}\n", runs, med);
		fclose(j);
	}
	return med < 0 ? 1 : 0;
}
